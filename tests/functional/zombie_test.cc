// The zombie: a gateway SIGSTOPped while its upstream call is held at the sink, past its lease.
// Another gateway takes the redelivered message over with a higher fence and completes it;
// then the zombie is continued (SIGCONT). Where the zombie's write lands decides what fences
// it out, so both are played:
//   - its write lands late, after the takeover's: the sink refuses its stale fence (409), the
//     zombie nacks, and the message stays done once, by the takeover;
//   - its write had landed before the zombie stopped (the crash window, with a pause instead
//     of a death): both effects are accepted, fences rising, and the zombie's completion is
//     fenced out at the store, logged `fenced_out`.
// One call cannot show both: the gateway completes only after a 2xx, and the sink's refusal is
// a 409. In neither does the zombie's log name the raw key.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gateway/gateway_client.h"
#include "idempotency/key.h"
#include "storm_analysis.h"
#include "support/child_process.h"
#include "support/temp_dir.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

class Zombie : public ::testing::Test {
 protected:
  void SetUp() override {
    sink_ = std::make_unique<ChildProcess>(STORM_SINK_PATH, std::vector<std::string>{},
                                           std::vector<std::pair<std::string, std::string>>{});
    zombie_ = start_gateway("zombie", dir_.file("zombie.log"));
    rescuer_ = start_gateway("rescuer", dir_.file("rescuer.log"));
  }

  void TearDown() override {
    if (zombie_ && zombie_->pid() > 0) kill(zombie_->pid(), SIGCONT);
  }

  std::unique_ptr<ChildProcess> start_gateway(const std::string& name, const std::string& log) {
    const std::string upstream =
        "http://127.0.0.1:" + std::to_string(sink_->port()) + "/effect/" + name;
    return std::make_unique<ChildProcess>(
        STORM_GATEWAY_PATH,
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--upstream", upstream, "--backend",
                                 "sqlite://" + dir_.file("idem.db"), "--key-prefix", prefix_,
                                 "--lease", "1s"},
        std::vector<std::pair<std::string, std::string>>{}, log);
  }

  // Holds the next effect for kId at the sink; `decide` is "before" (it lands, its answer
  // waits) or "after" (the write itself waits).
  void hold(const std::string& decide) const {
    ASSERT_EQ(send(sink_->port(), "POST", "/hold?key=" + kId + "&decide=" + decide).status, 204);
  }
  void release() const {
    ASSERT_EQ(send(sink_->port(), "POST", "/release?key=" + kId).status, 204);
  }

  // Waits (bounded) until the sink holds the zombie's call for kId.
  void wait_until_held() const {
    for (int i = 0; i < 5000 && send(sink_->port(), "GET", "/held?key=" + kId).body != "1"; ++i) {
      std::this_thread::sleep_for(milliseconds(2));
    }
    ASSERT_EQ(send(sink_->port(), "GET", "/held?key=" + kId).body, "1");
  }

  // Redelivers the message to `gateway` until it is answered other than 503, for at most 20 s.
  // A 503 is the key held elsewhere: by the zombie until its lease lapses, or by the rescuer
  // from its ack until its complete lands (the ack goes first).
  [[nodiscard]] int redeliver(const ChildProcess& gateway) const {
    return redeliver_until_not_503(gateway.port(), envelope(kId),
                                   steady_clock::now() + std::chrono::seconds(20));
  }

  [[nodiscard]] std::vector<EffectRecord> effects() const {
    return parse_effects(send(sink_->port(), "GET", "/effects").body);
  }

  // The zombie's log (its stderr), once it has written `event` (bounded wait).
  [[nodiscard]] std::string zombie_log_once(const std::string& event) const {
    std::string text;
    for (int i = 0; i < 500; ++i) {
      std::ifstream in(dir_.file("zombie.log"));
      std::stringstream all;
      all << in.rdbuf();
      text = all.str();
      if (text.find("\"" + event + "\"") != std::string::npos) break;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return text;
  }

  // The zombie's call reaches the sink, which holds it and judges its fence `when`: "before"
  // or "after" the hold. The zombie is frozen past its lease while the rescuer takes the
  // redelivery over, then thawed. Returns the status the zombie answered its push with.
  int freeze_past_a_takeover(const char* when) {
    hold(when);
    int zombie_status = 0;
    std::thread zombie_call([&] { zombie_status = post(zombie_->port(), envelope(kId)); });
    wait_until_held();
    EXPECT_EQ(kill(zombie_->pid(), SIGSTOP), 0);
    EXPECT_EQ(redeliver(*rescuer_), 200) << "the lease lapsed: the rescuer took the key over";
    release();
    EXPECT_EQ(kill(zombie_->pid(), SIGCONT), 0);
    zombie_call.join();
    return zombie_status;
  }

  const std::string kId = "po-zombie-7";  // the message id, and the sink's key
  TempDir dir_;
  std::string prefix_ = unique_name("zombie") + ":";
  std::unique_ptr<ChildProcess> sink_;
  std::unique_ptr<ChildProcess> zombie_;
  std::unique_ptr<ChildProcess> rescuer_;
};

TEST_F(Zombie, AZombieWhoseWriteLandsLateIsRefusedByTheSinkAndTheMessageStaysDoneOnce) {
  const int zombie_status = freeze_past_a_takeover("after");

  EXPECT_EQ(zombie_status, 500) << "the sink refused the zombie's write: nacked, never acked";
  const auto all = effects();
  ASSERT_EQ(all.size(), 2U);
  const EffectRecord& rescuer = all[0];  // the sink's decision order
  const EffectRecord& zombie = all[1];
  EXPECT_EQ(rescuer.sender, "rescuer");
  EXPECT_TRUE(rescuer.accepted);
  EXPECT_EQ(zombie.sender, "zombie");
  EXPECT_FALSE(zombie.accepted) << "its stale fence is refused";
  EXPECT_LT(zombie.fence, rescuer.fence);
  EXPECT_EQ(redeliver(*zombie_), 204) << "done once, by the rescuer";
  EXPECT_EQ(effects().size(), 2U) << "the redelivery did not run the work again";

  const std::string log = zombie_log_once("handler_nacked");
  EXPECT_NE(log.find("\"handler_nacked\""), std::string::npos) << "not logged:\n" << log;
  EXPECT_EQ(log.find(kId), std::string::npos) << "a raw key in the log:\n" << log;
}

TEST_F(Zombie, AZombieWhoseWriteLandedIsFencedOutAtCompleteAndLogsIt) {
  const int zombie_status = freeze_past_a_takeover("before");

  EXPECT_EQ(zombie_status, 200) << "its work ran: acked, not redelivered to run again";
  const auto all = effects();
  ASSERT_EQ(all.size(), 2U);
  EXPECT_EQ(all[0].sender, "zombie");
  EXPECT_EQ(all[1].sender, "rescuer");
  EXPECT_TRUE(all[0].accepted && all[1].accepted) << "the crash window: both effects landed";
  EXPECT_LT(all[0].fence, all[1].fence) << "accepted fences rise";
  EXPECT_EQ(redeliver(*zombie_), 204) << "done, by the rescuer's fence";
  EXPECT_EQ(effects().size(), 2U) << "the redelivery did not run the work again";

  const std::string log = zombie_log_once("fenced_out");
  EXPECT_NE(log.find("\"fenced_out\""), std::string::npos) << log;
  EXPECT_NE(log.find(key_fingerprint(prefix_ + kId)), std::string::npos)
      << "the line names the key by its fingerprint:\n"
      << log;
  EXPECT_EQ(log.find(kId), std::string::npos) << "a raw key in the log:\n" << log;
}

}  // namespace
}  // namespace idempotency::testing
