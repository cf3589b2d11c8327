// End to end: the cloud_run_worker example as real processes, real HTTP, a real SQLite file
// shared by two instances. Pub/Sub's behaviour (redelivery, concurrent duplicates, a retry
// after a nack) is played by the test.
#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "idempotency/sqlite_lock.h"
#include "support/base64.h"
#include "support/child_process.h"
#include "support/eventually.h"
#include "support/temp_dir.h"

namespace idempotency::testing {
namespace {

std::string envelope(const std::string& id,
                     const nlohmann::json& attributes = nlohmann::json::object()) {
  return nlohmann::json{
      {"message", {{"messageId", id}, {"data", base64("order " + id)}, {"attributes", attributes}}},
      {"subscription", "projects/p/subscriptions/orders"},
      {"deliveryAttempt", 1}}
      .dump();
}

class WorkerTest : public ::testing::Test {
 protected:
  TempDir dir_;
  std::string ledger_ = dir_.file("ledger.txt");

  std::unique_ptr<ChildProcess> start_worker(const std::string& wait_for_ms = "0") {
    return std::make_unique<ChildProcess>(
        IDEMPOTENCY_WORKER_PATH, std::vector<std::string>{},
        std::vector<std::pair<std::string, std::string>>{
            {"PORT", "0"},
            {"IDEMPOTENCY_BACKEND", "sqlite://" + dir_.file("idem.db")},
            {"ORDERS_LEDGER", ledger_},
            {"WAIT_FOR_MS", wait_for_ms}});
  }

  static int post(int port, const std::string& body) {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(30, 0);
    auto r = client.Post("/", body, "application/json");
    return r ? r->status : -1;
  }

  // Waits until a worker has claimed `id`: the first delivery is inside its handler. The bound
  // is a hang guard only, generous for a loaded CI box (ASan, two cores, fsync on every claim).
  void wait_until_claimed(const std::string& id) {
    SqliteLock store(dir_.file("idem.db"));
    ASSERT_TRUE(
        eventually([&] { return store.inspect(id).has_value(); }, std::chrono::seconds(20)));
  }

  // How long a racing delivery's handler runs: far longer than the second delivery can take
  // to arrive after the first was claimed, even on a loaded CI box, so it meets a live holder.
  static constexpr const char* kInFlightMs = "3000";

  // Delivers message `id` (a slow one) to `first_port`, and again to `second_port` once the
  // first delivery is inside its handler; returns both statuses.
  std::pair<int, int> race(int first_port, int second_port, const std::string& id) {
    const std::string body = envelope(id, {{"demo_sleep_ms", kInFlightMs}});
    int a = 0;
    int b = 0;
    std::jthread first([&] { a = post(first_port, body); });
    wait_until_claimed(id);
    std::jthread second([&] { b = post(second_port, body); });
    first.join();
    second.join();
    return {a, b};
  }

  int ledger_lines(const std::string& id) const {
    std::ifstream in(ledger_);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) n += line.rfind(id + " ", 0) == 0 ? 1 : 0;
    return n;
  }
};

TEST_F(WorkerTest, TheSameMessageTwiceIsHandledOnceThenAckedAsADuplicate) {
  auto worker = start_worker();
  EXPECT_EQ(post(worker->port(), envelope("m-1")), 200);
  EXPECT_EQ(post(worker->port(), envelope("m-1")), 204);
  EXPECT_EQ(ledger_lines("m-1"), 1);
  EXPECT_EQ(worker->terminate(), 0);
}

TEST_F(WorkerTest, TwoConcurrentDeliveriesToOneInstanceAreBothAckedAndRunOnce) {
  auto worker = start_worker();
  const auto [a, b] = race(worker->port(), worker->port(), "m-2");
  EXPECT_EQ(a, 200);
  EXPECT_TRUE(b == 200 || b == 204) << "the second joined the first (or came after it): " << b;
  EXPECT_EQ(ledger_lines("m-2"), 1);
}

TEST_F(WorkerTest, TwoInstancesOnOneBackendRunTheMessageOnceAndNackTheLoser) {
  auto one = start_worker();
  auto two = start_worker();
  const auto [a, b] = race(one->port(), two->port(), "m-3");
  EXPECT_EQ(a, 200);
  EXPECT_EQ(b, 503) << "live holder on the other instance: nack, Pub/Sub retries";
  EXPECT_EQ(post(two->port(), envelope("m-3", {{"demo_sleep_ms", kInFlightMs}})), 204)
      << "the retry finds it done";
  EXPECT_EQ(ledger_lines("m-3"), 1);
}

TEST_F(WorkerTest, WithWaitForTheOtherInstanceWaitsAndAcks) {
  auto one = start_worker("10000");
  auto two = start_worker("10000");
  const auto [a, b] = race(one->port(), two->port(), "m-4");
  EXPECT_EQ(a, 200);
  EXPECT_EQ(b, 204) << "waited for the holder, then acked its outcome";
  EXPECT_EQ(ledger_lines("m-4"), 1);
}

TEST_F(WorkerTest, AHandlerThatThrowsOnceIsNackedThenRunsToSuccessOnce) {
  auto worker = start_worker();
  const std::string body = envelope("m-5", {{"demo_fail_first", "true"}});
  EXPECT_EQ(post(worker->port(), body), 500);
  EXPECT_EQ(ledger_lines("m-5"), 0);
  EXPECT_EQ(post(worker->port(), body), 200);
  EXPECT_EQ(post(worker->port(), body), 204);
  EXPECT_EQ(ledger_lines("m-5"), 1);
}

TEST_F(WorkerTest, WithOidcOnAnUnsignedPushIs401AndNeverHandled) {
  std::ofstream(dir_.file("jwks.json")) << R"({"keys": []})";
  ChildProcess worker(IDEMPOTENCY_WORKER_PATH, {},
                      {{"PORT", "0"},
                       {"IDEMPOTENCY_BACKEND", "sqlite://" + dir_.file("idem.db")},
                       {"ORDERS_LEDGER", ledger_},
                       {"OIDC_AUDIENCE", "https://worker.example/push"},
                       {"OIDC_EMAIL", "push@p.iam.gserviceaccount.com"},
                       {"OIDC_JWKS_FILE", dir_.file("jwks.json")}});
  EXPECT_EQ(post(worker.port(), envelope("m-7")), 401);
  EXPECT_EQ(ledger_lines("m-7"), 0);
}

TEST_F(WorkerTest, AMalformedPushIsA400) {
  auto worker = start_worker();
  EXPECT_EQ(post(worker->port(), "{not json"), 400);
}

TEST_F(WorkerTest, SigtermLetsTheDeliveryInFlightFinishAndExitsZero) {
  auto worker = start_worker();
  int status = 0;
  std::jthread in_flight([&] {
    status = post(worker->port(), envelope("m-6", {{"demo_sleep_ms", "500"}}));
  });
  wait_until_claimed("m-6");
  EXPECT_EQ(worker->terminate(), 0);
  in_flight.join();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(ledger_lines("m-6"), 1);
}

}  // namespace
}  // namespace idempotency::testing
