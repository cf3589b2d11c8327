// The seed's functional scenarios, each through pubsub-push-sim: the simulator (a real process)
// delivers at least once, with Pub/Sub's ack/nack, back-off, deadlines and dead-lettering, to
// the real pubsub-idempotency-gateway (SQLite in a temporary directory) in front of
// gateway_test_upstream, which counts the calls it receives per messageId. A scenario holds when
// every message is settled as expected and the upstream's effect happened once.
//
// Also the simulator itself: its three delivery forms read back by the library's parser in an
// in-test endpoint, its exit code when a message is never acked, its recovery when an endpoint
// is down and comes back, and the mutex scenario on a library worker (idempotent() + mutex()),
// since the gateway has no mutex mode.
//
// No timing is asserted: back-offs and deadlines are scaled down with --time-scale, and where a
// scenario needs an overlap (a concurrent duplicate, a redelivery during a slow call) the test
// checks in the simulator's --events that the overlap happened.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "idempotency/http.h"
#include "idempotency/idempotency.h"
#include "idempotency/pubsub/idempotent.h"
#include "idempotency/pubsub/message.h"
#include "sim_process.h"
#include "support/child_process.h"
#include "support/temp_dir.h"

namespace idempotency::testing {
namespace {

using Clock = std::chrono::steady_clock;

// One line of the simulator's --events file.
struct Event {
  std::string subscription;
  std::string id;
  int attempt = 0;
  double start_ms = 0;
  double end_ms = 0;
  std::optional<int> status;
  bool acked = false;
  bool deadline_expired = false;
  bool late = false;
  bool duplicate = false;
  bool after_dead_letter = false;
};

std::vector<Event> read_events(const std::string& path) {
  std::vector<Event> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    out.push_back(
        {.subscription = j.at("subscription"),
         .id = j.at("messageId"),
         .attempt = j.at("attempt"),
         .start_ms = j.at("start_ms"),
         .end_ms = j.at("end_ms"),
         .status = j.at("status").is_null() ? std::nullopt : std::optional<int>(j.at("status")),
         .acked = j.at("acked"),
         .deadline_expired = j.at("deadline_expired"),
         .late = j.at("late"),
         .duplicate = j.at("duplicate"),
         .after_dead_letter = j.value("after_dead_letter", false)});
  }
  return out;
}

std::set<std::string> ids_of(const std::vector<Event>& events) {
  std::set<std::string> ids;
  for (const auto& e : events) ids.insert(e.id);
  return ids;
}

// The --json summary: the last line of stdout.
nlohmann::json summary_of(const SimRun& run) {
  auto end = run.out.find_last_not_of('\n');
  auto start = run.out.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  auto j = nlohmann::json::parse(run.out.substr(start, end + 1 - start), nullptr, false);
  EXPECT_TRUE(j.is_object()) << "no JSON summary in: " << run.out << run.err;
  return j;
}

bool overlap(const Event& a, const Event& b) {
  return a.start_ms < b.end_ms && b.start_ms < a.end_ms;
}

class SimThroughGateway : public ::testing::Test {
 protected:
  void SetUp() override {
    upstream_ = std::make_unique<ChildProcess>(GATEWAY_UPSTREAM_PATH, std::vector<std::string>{},
                                               std::vector<std::pair<std::string, std::string>>{});
    gateway_ = std::make_unique<ChildProcess>(
        GATEWAY_PATH,
        std::vector<std::string>{"--listen", "127.0.0.1:0", "--upstream",
                                 "http://127.0.0.1:" + std::to_string(upstream_->port()),
                                 "--backend", "sqlite://" + dir_.file("idem.db")},
        std::vector<std::pair<std::string, std::string>>{});
  }
  void TearDown() override {
    EXPECT_EQ(gateway_->terminate(), 0);
    upstream_->terminate();
  }

  [[nodiscard]] std::string push_url() const {
    return "http://127.0.0.1:" + std::to_string(gateway_->port()) + "/push";
  }

  // Calls the upstream received for messageId `id`.
  [[nodiscard]] int upstream_calls(const std::string& id) const {
    httplib::Client client("127.0.0.1", upstream_->port());
    auto r = client.Get("/count?id=" + id);
    return r ? std::stoi(r->body) : -1;
  }

  // Runs the simulator with `args` plus a fixed seed, --json and --events, with back-offs and
  // deadlines at 2% (a 10 s back-off is 200 ms) unless `args` say otherwise.
  SimRun sim(std::vector<std::string> args) {
    const std::vector<std::string> common{"--json", "--events",      events_path_, "--seed",
                                          "16",     "--run-timeout", "120s"};
    if (std::find(args.begin(), args.end(), "--time-scale") == args.end()) {
      args.insert(args.end(), {"--time-scale", "0.02", "--ack-deadline", "60s"});
    }
    args.insert(args.end(), common.begin(), common.end());
    return run_sim(args, dir_.path().string());
  }

  [[nodiscard]] std::vector<Event> events() const { return read_events(events_path_); }

  TempDir dir_;
  std::string events_path_ = dir_.file("events.jsonl");
  std::unique_ptr<ChildProcess> upstream_;
  std::unique_ptr<ChildProcess> gateway_;
};

// Transport redelivery: every message is delivered again after its ack (same messageId); the
// redelivery is acked as a duplicate and never reaches the upstream.
TEST_F(SimThroughGateway, ARedeliveredMessageIsProcessedOnce) {
  const auto run = sim({"--endpoint", push_url(), "--messages", "20", "--duplicate-rate", "1"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto summary = summary_of(run);
  EXPECT_EQ(summary["acked"], 20);
  EXPECT_EQ(summary["duplicates"], 20);
  const auto all = events();
  const auto ids = ids_of(all);
  ASSERT_EQ(ids.size(), 20U);
  for (const auto& id : ids) {
    const auto acks = std::count_if(all.begin(), all.end(),
                                    [&](const Event& e) { return e.id == id && e.acked; });
    EXPECT_GE(acks, 2) << "delivered and acked twice";
    EXPECT_EQ(upstream_calls(id), 1) << "the upstream saw the message once";
  }
}

// Concurrent duplicates: each message is sent twice at the same moment to a slow upstream;
// exactly one reaches the upstream, the other is nacked (live holder) and acked on retry.
TEST_F(SimThroughGateway, ConcurrentCopiesOfOneMessageAreProcessedOnce) {
  const auto run = sim({"--endpoint", push_url(), "--messages", "10", "--duplicate-rate", "1",
                        "--duplicate-concurrent", "--concurrency", "20", "--attribute",
                        "test_behavior=slow", "--attribute", "test_sleep_ms=300"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(summary_of(run)["acked"], 10);
  const auto all = events();
  const auto ids = ids_of(all);
  ASSERT_EQ(ids.size(), 10U);
  bool raced = false;
  for (const auto& id : ids) {
    for (const auto& a : all) {
      for (const auto& b : all) {
        raced = raced || (&a != &b && a.id == id && b.id == id && overlap(a, b));
      }
    }
    EXPECT_EQ(upstream_calls(id), 1) << "one of the concurrent copies ran";
  }
  EXPECT_TRUE(raced) << "no two copies of a message were ever in flight together";
}

// Double subscription: two subscriptions on one topic deliver the same messageIds to the same
// gateway; each subscription's copy is acked, the upstream runs once per message.
TEST_F(SimThroughGateway, TwoSubscriptionsOfOneTopicProcessEachMessageOnce) {
  const auto run = sim({"--subscription", "orders-a=" + push_url(), "--subscription",
                        "orders-b=" + push_url(), "--messages", "10", "--concurrency", "10"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(summary_of(run)["acked"], 20) << "10 messages on each of 2 subscriptions";
  const auto all = events();
  const auto ids = ids_of(all);
  ASSERT_EQ(ids.size(), 10U);
  for (const auto& id : ids) {
    std::set<std::string> acked_on;
    for (const auto& e : all) {
      if (e.id == id && e.acked) acked_on.insert(e.subscription);
    }
    EXPECT_EQ(acked_on.size(), 2U) << "acked on both subscriptions";
    EXPECT_EQ(upstream_calls(id), 1);
  }
}

// Transient failure: the upstream fails each message's first call; the gateway nacks, the
// simulator redelivers after back-off, the second call succeeds, and no third call happens.
TEST_F(SimThroughGateway, ANackedMessageIsRetriedAndThenProcessedOnce) {
  const auto run = sim(
      {"--endpoint", push_url(), "--messages", "10", "--attribute", "test_behavior=fail_first"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto summary = summary_of(run);
  EXPECT_EQ(summary["acked"], 10);
  EXPECT_GE(summary["nacked"], 10);
  const auto all = events();
  const auto ids = ids_of(all);
  ASSERT_EQ(ids.size(), 10U);
  for (const auto& id : ids) {
    for (const auto& e : all) {
      if (e.id == id && e.attempt == 1) {
        EXPECT_FALSE(e.acked) << "the failed first call was nacked";
        EXPECT_TRUE(e.status.has_value());
      }
    }
    EXPECT_EQ(upstream_calls(id), 2) << "the failure and one success, nothing more";
  }
}

// Poison: the upstream always fails; with a dead-letter policy of 5 attempts every message is
// dead-lettered after its 5th delivery and never acked.
TEST_F(SimThroughGateway, APoisonMessageIsDeadLetteredAfterTheMaximumAttempts) {
  const std::string dead = dir_.file("dead.jsonl");
  const auto run =
      sim({"--endpoint", push_url(), "--messages", "3", "--attribute", "test_behavior=fail",
           "--max-delivery-attempts", "5", "--dead-letter", dead});
  ASSERT_EQ(run.exit_code, 0) << "dead-lettered messages are settled: " << run.out << run.err;
  const auto summary = summary_of(run);
  EXPECT_EQ(summary["dead_lettered"], 3);
  EXPECT_EQ(summary["acked"], 0);
  const auto all = events();
  const auto ids = ids_of(all);
  ASSERT_EQ(ids.size(), 3U);
  for (const auto& e : all) EXPECT_FALSE(e.acked);
  for (const auto& id : ids) {
    std::set<int> attempts;
    for (const auto& e : all) {
      if (e.id == id) attempts.insert(e.attempt);
    }
    EXPECT_EQ(attempts, (std::set<int>{1, 2, 3, 4, 5}));
    EXPECT_EQ(upstream_calls(id), 5) << "each attempt reached the upstream and failed";
  }
  std::ifstream in(dead);
  std::string line;
  std::set<std::string> dead_ids;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["deliveryAttempts"], 5);
    dead_ids.insert(j["message"]["messageId"].get<std::string>());
  }
  EXPECT_EQ(dead_ids, ids);
}

// Ack deadline: the upstream takes 3 s, the deadline is 500 ms. At the deadline the simulator
// closes the request, as Pub/Sub's push request times out, counts it as a nack and redelivers
// while the gateway's first call still runs; the redelivery meets the live holder, and the
// effect still happens once. The redelivery is due a moment after the deadline (the push
// back-off's first pause, 5 ms here): the slow call outlasts it by 2.5 s, so a loaded machine
// cannot make the redelivery come after the call has ended.
TEST_F(SimThroughGateway, AnExpiredAckDeadlineRedeliversDuringTheSlowCallAndTheEffectIsOnce) {
  const auto run =
      sim({"--endpoint", push_url(), "--messages", "2", "--attribute", "test_behavior=slow",
           "--attribute", "test_sleep_ms=3000", "--time-scale", "0.05", "--ack-deadline", "10s"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto summary = summary_of(run);
  EXPECT_EQ(summary["acked"], 2);
  EXPECT_GE(summary["deadline_expired"], 2);
  const auto all = events();
  const auto ids = ids_of(all);
  ASSERT_EQ(ids.size(), 2U);
  for (const auto& id : ids) {
    const auto first = std::find_if(all.begin(), all.end(),
                                    [&](const Event& e) { return e.id == id && e.attempt == 1; });
    ASSERT_NE(first, all.end());
    EXPECT_TRUE(first->deadline_expired);
    EXPECT_FALSE(first->status.has_value()) << "closed at its deadline, before the slow answer";
    EXPECT_FALSE(first->acked) << "an expired request never acks";
    // The gateway's call began when the first request arrived and lasts 3 s.
    const bool redelivered_during = std::any_of(all.begin(), all.end(), [&](const Event& e) {
      return e.id == id && e.attempt > 1 && e.start_ms < first->start_ms + 3000;
    });
    EXPECT_TRUE(redelivered_during) << "redelivered while the first call still ran";
    EXPECT_EQ(upstream_calls(id), 1);
  }
}

// Republish: a producer publishes each of ten orders twice, the copy under a new messageId.
// Keyed on messageId the gateway could not tell them apart; keyed on the order attribute
// (`--key attribute:order`) both copies are acked and each order reaches the upstream once.
TEST_F(SimThroughGateway, ARepublishedMessageIsProcessedOnceWhenKeyedOnItsBusinessAttribute) {
  EXPECT_EQ(gateway_->terminate(), 0);
  gateway_ = std::make_unique<ChildProcess>(
      GATEWAY_PATH,
      std::vector<std::string>{"--listen", "127.0.0.1:0", "--upstream",
                               "http://127.0.0.1:" + std::to_string(upstream_->port()), "--backend",
                               "sqlite://" + dir_.file("keyed.db"), "--key", "attribute:order"},
      std::vector<std::pair<std::string, std::string>>{});
  const std::string input = dir_.file("orders.jsonl");
  {
    std::ofstream out(input);
    for (int i = 1; i <= 10; ++i) {
      out << nlohmann::json{{"data", "order " + std::to_string(i)},
                            {"attributes", {{"order", "o-" + std::to_string(i)}}}}
                 .dump()
          << "\n";
    }
  }
  const auto run = sim({"--endpoint", push_url(), "--input", input, "--republish-rate", "1"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto summary = summary_of(run);
  EXPECT_EQ(summary["published"], 20);
  EXPECT_EQ(summary["republished"], 10);
  EXPECT_EQ(summary["acked"], 20) << "the original and the copy are both acked";
  const auto ids = ids_of(events());
  ASSERT_EQ(ids.size(), 20U) << "every copy has a messageId of its own";
  int calls = 0;
  for (const auto& id : ids) {
    const int n = upstream_calls(id);
    EXPECT_LE(n, 1) << "no message reaches the upstream twice";
    calls += n;
  }
  EXPECT_EQ(calls, 10) << "one upstream call per order, not per copy";
}

// OIDC: the simulator signs its push tokens with a key of its own and writes the JWKS; the
// gateway verifying tokens against that file acks every message, and refuses (401, a nack) a
// run that sends none.
TEST(SimOidc, SignedTokensPassTheGatewaysVerifierAndMissingOnesAreRefused) {
  TempDir dir;
  const std::string jwks = dir.file("jwks.json");
  const std::string audience = "https://push.example.com/orders";
  const std::string email = "pusher@sim-project.iam.gserviceaccount.com";
  ChildProcess upstream(GATEWAY_UPSTREAM_PATH, {}, {});
  // The gateway reads the key set when the first token arrives, after the simulator wrote it.
  ChildProcess gateway(GATEWAY_PATH,
                       {"--listen", "127.0.0.1:0", "--upstream",
                        "http://127.0.0.1:" + std::to_string(upstream.port()), "--backend",
                        "sqlite://" + dir.file("idem.db"), "--oidc-audience", audience,
                        "--oidc-email", email, "--jwks", jwks},
                       {});
  const std::string url = "http://127.0.0.1:" + std::to_string(gateway.port()) + "/push";
  const auto signed_run = run_sim(
      {"--endpoint", url, "--messages", "3", "--oidc-audience", audience, "--oidc-email", email,
       "--oidc-jwks-out", jwks, "--time-scale", "0.01", "--json", "--run-timeout", "60s"},
      dir.path().string());
  ASSERT_EQ(signed_run.exit_code, 0) << signed_run.out << signed_run.err;
  EXPECT_EQ(summary_of(signed_run)["acked"], 3);
  // Never acked, so the run lasts its --run-timeout: long enough for an answer to arrive on a
  // loaded machine, with a 3 s ack deadline (also the connect timeout) rather than 100 ms.
  const auto unsigned_run = run_sim({"--endpoint", url, "--messages", "1", "--time-scale", "0.01",
                                     "--ack-deadline", "300s", "--json", "--run-timeout", "5s"},
                                    dir.path().string());
  EXPECT_EQ(unsigned_run.exit_code, 1) << unsigned_run.out << unsigned_run.err;
  EXPECT_GT(summary_of(unsigned_run)["answers"]["401"], 0);
  EXPECT_EQ(gateway.terminate(), 0);
}

// An in-test push endpoint on the library's HTTP server.
class Endpoint {
 public:
  explicit Endpoint(http::Handler handler) : server_(std::move(handler), {.workers = 32}) {
    port_ = server_.start("127.0.0.1", 0);
  }
  ~Endpoint() { server_.stop(); }
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  [[nodiscard]] std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/push";
  }

 private:
  http::Server server_;
  int port_ = 0;
};

// Per-entity serialization, on a library worker (the gateway has no mutex mode): idempotent()
// on the messageId and mutex("po:" + po) inside. Different messages for one PO all run, each
// once, and never two at a time.
TEST(SimMutexScenario, DifferentMessagesForOnePoAllRunOnceAndNeverOverlap) {
  TempDir dir;
  auto backend = std::make_shared<InMemoryLock>();
  std::mutex mutex;
  std::map<std::string, int> runs;  // per messageId
  std::map<std::string, std::vector<std::pair<Clock::time_point, Clock::time_point>>> per_po;
  Endpoint endpoint(pubsub::idempotent({.backend = backend}, [&](const pubsub::Delivery& d) {
    const std::string po = d.message.attributes.at("po");
    auto serialized = idempotency::mutex("po:" + po, *backend);
    const auto start = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const auto end = Clock::now();
    std::lock_guard lock(mutex);
    ++runs[d.message.message_id.value_or("?")];
    per_po[po].emplace_back(start, end);
  }));
  const std::string events = dir.file("events.jsonl");
  const auto run = run_sim({"--endpoint",
                            endpoint.url(),
                            "--messages",
                            "16",
                            "--key-attribute",
                            "po",
                            "--keys",
                            "2",
                            "--concurrency",
                            "16",
                            "--duplicate-rate",
                            "0.5",
                            "--retry",
                            "exponential",
                            "--max-backoff",
                            "20s",
                            "--time-scale",
                            "0.01",
                            "--seed",
                            "3",
                            "--json",
                            "--events",
                            events,
                            "--run-timeout",
                            "120s"},
                           dir.path().string());
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(summary_of(run)["acked"], 16);
  const auto ids = ids_of(read_events(events));
  ASSERT_EQ(ids.size(), 16U);
  std::lock_guard lock(mutex);
  for (const auto& id : ids) EXPECT_EQ(runs[id], 1) << "every distinct update ran, once";
  EXPECT_EQ(runs.size(), 16U);
  for (auto& [po, spans] : per_po) {
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
      EXPECT_LE(spans[i - 1].second, spans[i].first) << "two updates of " << po << " overlapped";
    }
  }
}

// What the in-test endpoint saw of one request, decoded by the library's parser.
struct Seen {
  pubsub::DeliveryForm form;
  pubsub::Message message;
};

// The simulator's three delivery forms, read by the library's push parser: messageId, data,
// attributes and ordering key arrive as the input file gave them.
TEST(SimSelfTest, EveryDeliveryFormCarriesTheMessage) {
  TempDir dir;
  const std::string input = dir.file("in.jsonl");
  std::ofstream(input) << R"({"messageId": "m-1", "data": "one", "attributes": {"a": "1"}})"
                       << "\n"
                       << R"({"messageId": "m-2", "data_base64": "AAH/", "orderingKey": "k"})"
                       << "\n";
  for (const std::string form : {"wrapped", "unwrapped", "cloudevent"}) {
    SCOPED_TRACE(form);
    std::mutex mutex;
    std::map<std::string, pubsub::Message> seen;
    Endpoint endpoint([&](const pubsub::PushRequest& request) {
      auto parsed = pubsub::parse_push(request);
      if (auto* m = std::get_if<pubsub::Message>(&parsed)) {
        std::lock_guard lock(mutex);
        seen[m->message_id.value_or("?")] = *m;
        return pubsub::PushResponse{.status = 204};
      }
      return pubsub::PushResponse{.status = 400};
    });
    const auto run = run_sim({"--endpoint", endpoint.url(), "--input", input, "--form", form,
                              "--max-delivery-attempts", "5", "--json", "--run-timeout", "60s"},
                             dir.path().string());
    ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
    EXPECT_EQ(summary_of(run)["acked"], 2);
    std::lock_guard lock(mutex);
    ASSERT_EQ(seen.size(), 2U);
    EXPECT_EQ(seen["m-1"].data, "one");
    EXPECT_EQ(seen["m-2"].data, std::string("\x00\x01\xff", 3));
    EXPECT_EQ(seen["m-2"].ordering_key, "k");
    if (form == "wrapped") {
      EXPECT_EQ(seen["m-1"].form, pubsub::DeliveryForm::kWrapped);
      EXPECT_EQ(seen["m-1"].attributes.at("a"), "1");
      EXPECT_EQ(seen["m-1"].delivery_attempt, 1);
    } else if (form == "unwrapped") {
      EXPECT_EQ(seen["m-1"].form, pubsub::DeliveryForm::kUnwrapped);
      EXPECT_EQ(seen["m-1"].header("a"), "1") << "an attribute is a header";
    } else {
      EXPECT_EQ(seen["m-1"].form, pubsub::DeliveryForm::kCloudEventBinary);
      EXPECT_EQ(seen["m-1"].cloud_event_id, "m-1");
      EXPECT_EQ(seen["m-1"].attributes.at("a"), "1");
    }
  }
}

// Message ordering: per ordering key one request is outstanding and messages are acked in
// publish order, even when one of them is nacked first (the rest of its key waits for it).
TEST(SimSelfTest, OrderingKeysDeliverOneAtATimeInPublishOrder) {
  TempDir dir;
  struct Call {
    int number;
    Clock::time_point start;
    Clock::time_point end;
    bool acked;
  };
  std::mutex mutex;
  std::map<std::string, std::vector<Call>> per_key;
  std::set<int> failed_once;
  Endpoint endpoint([&](const pubsub::PushRequest& request) {
    auto parsed = pubsub::parse_push(request);
    const auto& m = std::get<pubsub::Message>(parsed);
    const int number = std::stoi(m.data.substr(m.data.find(' ') + 1));  // "message <n>"
    const auto start = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard lock(mutex);
    const bool fail = number % 4 == 0 && failed_once.insert(number).second;
    per_key[m.ordering_key.value_or("")].push_back({number, start, Clock::now(), !fail});
    return pubsub::PushResponse{.status = fail ? 500 : 200};
  });
  const auto run = run_sim(
      {"--endpoint", endpoint.url(), "--messages", "20", "--ordering-keys", "3", "--concurrency",
       "20", "--time-scale", "0.01", "--seed", "5", "--json", "--run-timeout", "60s"},
      dir.path().string());
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(summary_of(run)["acked"], 20);
  std::lock_guard lock(mutex);
  EXPECT_FALSE(failed_once.empty());
  std::size_t acked = 0;
  for (auto& [key, calls] : per_key) {
    EXPECT_FALSE(key.empty()) << "every message has an ordering key";
    std::sort(calls.begin(), calls.end(),
              [](const Call& a, const Call& b) { return a.start < b.start; });
    int last_acked = 0;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (i > 0) {
        EXPECT_LE(calls[i - 1].end, calls[i].start) << "two outstanding on " << key;
      }
      if (calls[i].acked) {
        EXPECT_GT(calls[i].number, last_acked) << "acked out of publish order on " << key;
        last_acked = calls[i].number;
        ++acked;
      }
    }
  }
  EXPECT_EQ(acked, 20U);
}

// A message that is never acked (the endpoint answers 203, a 2xx that is not an ack code) keeps
// the simulator from succeeding: exit 1 with the count once --run-timeout passes. The run lasts
// that long whatever happens, so it is long enough for answers to arrive on a loaded machine,
// with a 3 s ack deadline (also the connect timeout) rather than 100 ms.
TEST(SimSelfTest, AMessageNeverAckedExitsNonZeroWithTheCount) {
  TempDir dir;
  Endpoint endpoint([](const pubsub::PushRequest&) { return pubsub::PushResponse{.status = 203}; });
  const auto run = run_sim({"--endpoint", endpoint.url(), "--messages", "2", "--time-scale", "0.01",
                            "--ack-deadline", "300s", "--run-timeout", "5s", "--json"},
                           dir.path().string());
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_NE(run.err.find("2 message(s) neither acked nor dead-lettered"), std::string::npos)
      << run.err;
  const auto summary = summary_of(run);
  EXPECT_EQ(summary["unsettled"], 2);
  EXPECT_EQ(summary["acked"], 0);
  EXPECT_GT(summary["answers"]["203"], 0);
}

// A bad flag is one line on stderr and exit 2, before anything is sent.
TEST(SimSelfTest, ABadFlagExitsTwoWithOneLine) {
  TempDir dir;
  const auto run =
      run_sim({"--endpoint", "http://127.0.0.1:1/", "--ack-deadline", "1s"}, dir.path().string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--ack-deadline"), std::string::npos) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
}

// An endpoint that is down (connection refused) is a nack with back-off, never a crash or a
// lost message: once it is back on the same port, every message is acked.
TEST(SimSelfTest, AnEndpointThatIsDownAndComesBackGetsEveryMessage) {
  TempDir dir;
  int port = 0;
  {
    ChildProcess first(GATEWAY_UPSTREAM_PATH, {}, {});
    port = first.port();
    first.crash();
  }
  const std::string events = dir.file("events.jsonl");
  SimProcess sim({"--endpoint", "http://127.0.0.1:" + std::to_string(port) + "/push", "--messages",
                  "5", "--time-scale", "0.01", "--retry", "exponential", "--max-backoff", "30s",
                  "--events", events, "--json", "--run-timeout", "120s"},
                 dir.path().string());
  // Wait (bounded) until a delivery was refused, then bring the endpoint back.
  for (int i = 0; i < 6000 && read_events(events).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto refused = read_events(events);
  ASSERT_FALSE(refused.empty());
  EXPECT_FALSE(refused.front().status.has_value()) << "nothing listened: a connection error";
  ChildProcess again(GATEWAY_UPSTREAM_PATH, {"--port", std::to_string(port)}, {});
  const auto run = sim.wait();
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(summary_of(run)["acked"], 5);
  EXPECT_GE(summary_of(run)["answers"]["error"], 1);
}

// Concurrent copies of one message: Pub/Sub counts delivery attempts per message as 1 + nacks +
// expired deadlines, and a duplicate is neither, so each copy's first delivery carries
// deliveryAttempt 1.
TEST(SimSelfTest, ConcurrentCopiesBothCarryDeliveryAttemptOne) {
  TempDir dir;
  std::mutex mutex;
  std::map<std::string, std::vector<int>> attempts;  // per messageId
  Endpoint endpoint([&](const pubsub::PushRequest& request) {
    auto parsed = pubsub::parse_push(request);
    const auto& m = std::get<pubsub::Message>(parsed);
    std::lock_guard lock(mutex);
    attempts[m.message_id.value_or("?")].push_back(m.delivery_attempt.value_or(-1));
    return pubsub::PushResponse{.status = 204};
  });
  const auto run = run_sim({"--endpoint", endpoint.url(), "--messages", "5", "--duplicate-rate",
                            "1", "--duplicate-concurrent", "--max-delivery-attempts", "5", "--seed",
                            "4", "--json", "--run-timeout", "60s"},
                           dir.path().string());
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(summary_of(run)["duplicates"], 5);
  std::lock_guard lock(mutex);
  ASSERT_EQ(attempts.size(), 5U);
  for (const auto& [id, seen] : attempts) {
    EXPECT_EQ(seen, (std::vector<int>{1, 1})) << id;
  }
}

// A message is settled once. Two copies go out together: the first to arrive is slow and
// acks after 2 s; the other is answered 500 each time, so its nacks spend the message's five
// delivery attempts and it is dead-lettered about half a second in. The slow copy's later 200
// settles nothing (Pub/Sub has forwarded the message): the summary counts the message
// dead-lettered, not acked, and counts that answer apart.
TEST(SimSelfTest, AMessageIsAckedOrDeadLetteredNeverBoth) {
  TempDir dir;
  std::atomic<bool> first{true};
  Endpoint endpoint([&](const pubsub::PushRequest&) {
    if (first.exchange(false)) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      return pubsub::PushResponse{.status = 200};
    }
    return pubsub::PushResponse{.status = 500};
  });
  const std::string dead = dir.file("dead.jsonl");
  const std::string events = dir.file("events.jsonl");
  // Back-off 100 ms between the nacked copy's attempts; the deadline (6 s) is the slow copy's.
  const auto run = run_sim({"--endpoint",
                            endpoint.url(),
                            "--messages",
                            "1",
                            "--duplicate-rate",
                            "1",
                            "--duplicate-concurrent",
                            "--max-delivery-attempts",
                            "5",
                            "--dead-letter",
                            dead,
                            "--retry",
                            "exponential",
                            "--min-backoff",
                            "10s",
                            "--max-backoff",
                            "10s",
                            "--ack-deadline",
                            "600s",
                            "--time-scale",
                            "0.01",
                            "--events",
                            events,
                            "--json",
                            "--run-timeout",
                            "60s"},
                           dir.path().string());
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto summary = summary_of(run);
  EXPECT_EQ(summary["dead_lettered"], 1);
  EXPECT_EQ(summary["acked"], 0) << "dead-lettered and acked at once: " << run.out;
  EXPECT_EQ(summary.value("acked_after_dead_letter", -1), 1);
  const auto all = read_events(events);
  EXPECT_EQ(std::count_if(all.begin(), all.end(),
                          [](const Event& e) { return e.after_dead_letter && !e.acked; }),
            1);
  std::ifstream in(dead);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["deliveryAttempts"], 5);
  EXPECT_EQ(j["lastStatus"], 500) << "the answer of the attempt that spent the last one";
}

// The ack deadline is also the request timeout: every attempt's handler outlives it (300 ms
// against 200 ms) and would answer 200, but the request is closed at the deadline, so no
// answer counts and the dead-letter line says the last attempt expired rather than showing
// an earlier attempt's late 200.
TEST(SimSelfTest, ADeadLetteredMessageWhoseLastAttemptExpiredSaysSo) {
  TempDir dir;
  Endpoint endpoint([](const pubsub::PushRequest&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return pubsub::PushResponse{.status = 200};
  });
  const std::string dead = dir.file("dead.jsonl");
  const auto run = run_sim({"--endpoint", endpoint.url(), "--messages", "2",
                            "--max-delivery-attempts", "5", "--dead-letter", dead, "--time-scale",
                            "0.02", "--ack-deadline", "10s", "--json", "--run-timeout", "60s"},
                           dir.path().string());
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto summary = summary_of(run);
  EXPECT_EQ(summary["dead_lettered"], 2);
  EXPECT_EQ(summary["acked"], 0);
  std::ifstream in(dead);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    const auto j = nlohmann::json::parse(line);
    EXPECT_FALSE(j.contains("lastStatus")) << line;
    EXPECT_EQ(j.value("lastError", ""), "ack deadline expired") << line;
  }
  EXPECT_EQ(lines, 2);
}

// A push endpoint on a raw socket that accepts, reads and never answers. It records when each
// connection was accepted and when the peer closed it, and the most connections open at once.
class SilentEndpoint {
 public:
  struct Connection {
    int fd = -1;
    Clock::time_point accepted;
    std::optional<Clock::time_point> closed;
  };

  SilentEndpoint() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listener_ < 0) throw std::runtime_error("socket failed");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
        ::listen(listener_, 128) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
      ::close(listener_);
      throw std::runtime_error("bind/listen failed");
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~SilentEndpoint() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (auto& c : connections_) {
      if (!c.closed) ::close(c.fd);
    }
    ::close(listener_);
  }
  SilentEndpoint(const SilentEndpoint&) = delete;
  SilentEndpoint& operator=(const SilentEndpoint&) = delete;

  [[nodiscard]] std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/push";
  }
  // Stops serving and returns what it saw.
  std::pair<std::vector<Connection>, std::size_t> finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return {connections_, max_open_};
  }

 private:
  void serve() {
    while (!stop_) {
      std::vector<pollfd> fds{{.fd = listener_, .events = POLLIN, .revents = 0}};
      std::vector<std::size_t> which;
      for (std::size_t i = 0; i < connections_.size(); ++i) {
        if (connections_[i].closed) continue;
        fds.push_back({.fd = connections_[i].fd, .events = POLLIN, .revents = 0});
        which.push_back(i);
      }
      if (::poll(fds.data(), fds.size(), 10) <= 0) continue;
      // Closes before accepts: the simulator closes a request's connection before it opens the
      // next one, so one poll that sees both must not count them open together.
      for (std::size_t k = 1; k < fds.size(); ++k) {
        if (fds[k].revents == 0) continue;
        auto& c = connections_[which[k - 1]];
        char buffer[4096];
        while (true) {
          const auto n = ::recv(c.fd, buffer, sizeof buffer, MSG_DONTWAIT);
          if (n > 0) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
          c.closed = Clock::now();  // end of stream or reset: the peer closed it
          ::close(c.fd);
          --open_;
          break;
        }
      }
      if ((fds[0].revents & POLLIN) != 0) {
        while (true) {
          const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) break;
          connections_.push_back({.fd = fd, .accepted = Clock::now(), .closed = std::nullopt});
          max_open_ = std::max(max_open_, ++open_);
        }
      }
    }
  }

  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<Connection> connections_;  // the serving thread's until finish()
  std::size_t open_ = 0;
  std::size_t max_open_ = 0;
  std::thread thread_;
};

// The ack deadline is the push request timeout: against an endpoint that never answers, each
// request's connection is closed at its deadline (200 ms here), so open connections never
// exceed --concurrency, however long the run, and every message is dead-lettered after five
// expired deadlines. Without the close, each deadline would free a slot and leave its socket
// open, and a run would pile up connections until it ended (or ran out of descriptors).
TEST(SimSelfTest, AnUnansweredRequestIsClosedAtItsDeadline) {
  TempDir dir;
  SilentEndpoint endpoint;
  const std::string dead = dir.file("dead.jsonl");
  const auto run = run_sim({"--endpoint",
                            endpoint.url(),
                            "--messages",
                            "6",
                            "--concurrency",
                            "3",
                            "--max-delivery-attempts",
                            "5",
                            "--dead-letter",
                            dead,
                            "--retry",
                            "exponential",
                            "--min-backoff",
                            "10s",
                            "--max-backoff",
                            "10s",
                            "--time-scale",
                            "0.02",
                            "--ack-deadline",
                            "10s",
                            "--json",
                            "--run-timeout",
                            "60s"},
                           dir.path().string());
  const auto exited = Clock::now();
  // The simulator's last closes reach the endpoint's poll loop a moment later.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto [connections, max_open] = endpoint.finish();
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto summary = summary_of(run);
  EXPECT_EQ(summary["dead_lettered"], 6);
  EXPECT_EQ(summary["deadline_expired"], 30);
  EXPECT_GE(connections.size(), 6U);
  EXPECT_LE(max_open, 3U) << "more connections open than --concurrency";
  for (const auto& c : connections) {
    ASSERT_TRUE(c.closed.has_value()) << "a connection outlived the simulator";
    // 1.5 s is more than seven deadlines; unclosed, the first ones would last the whole run.
    EXPECT_LT(*c.closed - c.accepted, std::chrono::milliseconds(1500))
        << "closed " << std::chrono::duration<double>(exited - *c.closed).count()
        << " s before the simulator exited";
  }
}

// --retry immediate is paced by the push back-off: a message answered 503 each time is
// redelivered after pauses of 100, 200, 400 and 800 ms (10 to 80 ms at --time-scale 0.1), never
// in a tight loop. Timers never fire early, so these are lower bounds on a loaded machine too.
TEST(SimSelfTest, ImmediateRetryIsPacedByThePushBackoff) {
  TempDir dir;
  Endpoint endpoint([](const pubsub::PushRequest&) { return pubsub::PushResponse{.status = 503}; });
  const std::string events = dir.file("events.jsonl");
  const auto run = run_sim({"--endpoint", endpoint.url(), "--messages", "1", "--retry", "immediate",
                            "--max-delivery-attempts", "5", "--time-scale", "0.1", "--events",
                            events, "--json", "--run-timeout", "60s"},
                           dir.path().string());
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(summary_of(run)["dead_lettered"], 1);
  auto all = read_events(events);
  ASSERT_EQ(all.size(), 5U);
  std::sort(all.begin(), all.end(),
            [](const Event& a, const Event& b) { return a.start_ms < b.start_ms; });
  const std::vector<double> pause_ms{10, 20, 40, 80};
  for (std::size_t i = 1; i < all.size(); ++i) {
    EXPECT_EQ(all[i].attempt, static_cast<int>(i) + 1);
    EXPECT_GE(all[i].start_ms - all[i - 1].end_ms, pause_ms[i - 1] - 0.01)
        << "attempt " << i + 1 << " came too soon after the nack of attempt " << i;
  }
}

}  // namespace
}  // namespace idempotency::testing
