// End to end: pubsub-idempotency-gateway and a tiny upstream (gateway_test_upstream) as real
// processes over real HTTP, on the backend GATEWAY_BACKEND names (sqlite, redis, postgres).
// Pub/Sub's part (redelivery, concurrent duplicates, retries after a nack) is played by the
// test. Tests wait on observable state (the upstream's call count), never on sleeps.
#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#ifdef GATEWAY_SQLITE_STORE_TESTS
#include <sqlite3.h>

#include "idempotency/open_backend.h"
#endif

#include "gateway_client.h"
#include "idempotency/key.h"
#include "support/child_process.h"
#include "support/eventually.h"
#include "support/temp_dir.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

constexpr std::string_view kBackend = GATEWAY_BACKEND;

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kBackend == "sqlite") {
      backend_url_ = "sqlite://" + dir_.file("idem.db");
    } else if (kBackend == "redis") {
      backend_url_ = redis_url();
    } else {
      backend_url_ = postgres_url();
    }
    if (backend_url_.empty()) {
      // NOLINTNEXTLINE(concurrency-mt-unsafe): read before any thread starts
      if (std::getenv("CI") != nullptr)
        GTEST_FAIL() << "CI is set but no " << kBackend << " server";
      GTEST_SKIP() << "no " << kBackend << " test server";
    }
    upstream_ = std::make_unique<ChildProcess>(GATEWAY_UPSTREAM_PATH, std::vector<std::string>{},
                                               std::vector<std::pair<std::string, std::string>>{});
  }

  // Keys are namespaced per test, so tests sharing one Redis or PostgreSQL never meet.
  std::unique_ptr<ChildProcess> start_gateway(std::vector<std::string> extra = {},
                                              std::string upstream = {},
                                              const std::string& stderr_file = {}) {
    if (upstream.empty()) upstream = "http://127.0.0.1:" + std::to_string(upstream_->port());
    std::vector<std::string> args{
        "--listen",   "127.0.0.1:0",  "--upstream", upstream,    "--backend",
        backend_url_, "--key-prefix", prefix_,      "--workers", "8"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(GATEWAY_PATH, std::move(args),
                                          std::vector<std::pair<std::string, std::string>>{},
                                          stderr_file);
  }

#ifdef GATEWAY_SQLITE_STORE_TESTS
  // The record the gateway left for message `id`, read from its store (after it exited).
  [[nodiscard]] std::optional<Record> stored(const std::string& id) const {
    return open_backend(backend_url_, {})->inspect(prefix_ + id);
  }
#endif

  [[nodiscard]] int calls(const std::string& id) const {
    return std::stoi(send(upstream_->port(), "GET", "/count?id=" + id).body);
  }

  // Waits until the upstream has seen `n` calls for `id`: the request is in flight. The bound
  // is a hang guard only, generous for a loaded CI box (ASan, two cores).
  void wait_for_calls(const std::string& id, int n) const {
    (void)eventually([&] { return calls(id) >= n; }, std::chrono::seconds(20));
    ASSERT_GE(calls(id), n);
  }

  // Two instances on one store with a 2 s lease renewed every `heartbeat` ("0": never), for
  // the renewal tests. With 200 ms a renewal has 1.8 s to land, ample between two ASan
  // processes on a loaded box.
  std::pair<std::unique_ptr<ChildProcess>, std::unique_ptr<ChildProcess>> two_instances(
      const std::string& heartbeat) {
    const std::vector<std::string> flags{
        "--lease", "2s", "--heartbeat", heartbeat, "--upstream-timeout", "30s"};
    return {start_gateway(flags), start_gateway(flags)};
  }

  // A push whose upstream call takes 6 s: three of those leases.
  static std::string long_work(const std::string& id) {
    return envelope(id, {{"test_behavior", "slow"}, {"test_sleep_ms", "6000"}});
  }

  // How long a "slow" upstream call stays in flight when a test sends a duplicate meanwhile:
  // far longer than the duplicate can take to arrive, even on a loaded CI box.
  static constexpr const char* kInFlightMs = "5000";

  TempDir dir_;
  std::string prefix_ = unique_name("gw") + ":";
  std::string backend_url_;
  std::unique_ptr<ChildProcess> upstream_;
};

// --- pubsub mode ------------------------------------------------------------------------

// Suite names carry the backend (gateway_sqlite_pubsub, ...), so the three programs register
// distinct CTest names and `ctest -R gateway` selects them all.
class GATEWAY_PUBSUB_SUITE : public GatewayTest {};

// Cloud Run gives a container 10 s from SIGTERM; the upstream connection left idle by the last
// push (its deadline 30 s away by default) must not hold the gateway's shutdown.
TEST_F(GATEWAY_PUBSUB_SUITE, StopsPromptlyOnSigtermAfterForwarding) {
  auto gateway = start_gateway({"--upstream-timeout", "30s", "--upstream-connect-timeout", "30s"});
  ASSERT_EQ(post(gateway->port(), envelope("m-stop")), 201);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(gateway->terminate(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(GATEWAY_PUBSUB_SUITE, ADuplicateIsForwardedOnceAndAcked204) {
  auto gateway = start_gateway();
  const auto first = send(gateway->port(), "POST", "/push", envelope("m-1"));
  EXPECT_EQ(first.status, 201) << "the upstream's own status is answered";
  EXPECT_EQ(first.body, "") << "Pub/Sub reads only the status: only that is answered";
  EXPECT_EQ(post(gateway->port(), envelope("m-1")), 204);
  EXPECT_EQ(calls("m-1"), 1);
  EXPECT_EQ(gateway->terminate(), 0);
}

TEST_F(GATEWAY_PUBSUB_SUITE, TheUpstreamGetsTheFencingToken) {
  auto gateway = start_gateway();
  ASSERT_EQ(post(gateway->port(), envelope("m-fence")), 201);
  const std::string fence = send(upstream_->port(), "GET", "/fence?id=m-fence").body;
  ASSERT_FALSE(fence.empty());
  EXPECT_GE(std::stoll(fence), 1);
}

TEST_F(GATEWAY_PUBSUB_SUITE, AnUpstream500IsNackedReleasedAndTheRedeliverySucceedsOnce) {
  auto gateway = start_gateway();
  const auto body = envelope("m-500", {{"test_behavior", "fail_first"}});
  EXPECT_EQ(post(gateway->port(), body), 500) << "never ack what the upstream failed";
  EXPECT_EQ(post(gateway->port(), body), 201) << "the key was released: redelivery runs";
  EXPECT_EQ(post(gateway->port(), body), 204);
  EXPECT_EQ(calls("m-500"), 2);
}

// Sent, then silent: the upstream may still be acting, so the key stays held (a redelivery is
// nacked without calling it) until the lease lapses; then a redelivery takes it over, fenced.
// The timeout is also the deadline of the takeover's call, which must succeed: 2 s, with the
// hang five times that (and the lease past the timeout) so each outcome stays unambiguous.
TEST_F(GATEWAY_PUBSUB_SUITE, AnUpstreamHangingPastTheTimeoutIsNacked503AndHeldUntilTheLeaseLapses) {
  auto gateway = start_gateway({"--upstream-timeout", "2s", "--lease", "5s"});
  const auto body =
      envelope("m-hang", {{"test_behavior", "hang_first"}, {"test_sleep_ms", "10000"}});
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(post(gateway->port(), body), 503);
  EXPECT_EQ(post(gateway->port(), body), 503) << "still held: the hung call may be acting";
  EXPECT_EQ(calls("m-hang"), 1);
  EXPECT_EQ(redeliver_until_not_503(gateway->port(), body, start + std::chrono::seconds(25)), 201);
  EXPECT_EQ(post(gateway->port(), body), 204);
  EXPECT_EQ(calls("m-hang"), 2);
}

// Lease renewal across two real processes: the upstream works for three leases while the other
// instance gets the same message redelivered every 200 ms. With the heartbeat it never takes
// the key over; without it (pinned below) it reclaims the key and calls the upstream again.
TEST_F(GATEWAY_PUBSUB_SUITE,
       WithAHeartbeatTheHolderKeepsTheKeyForThreeLeasesAgainstAnotherInstance) {
  auto [one, two] = two_instances("200ms");
  const auto body = long_work("m-long");
  std::atomic<int> first = 0;
  std::thread holder([&] { first = post(one->port(), body); });
  wait_for_calls("m-long", 1);
  int redeliveries = 0;
  while (first == 0) {
    const int status = post(two->port(), body);
    if (first != 0) break;  // the holder finished while this redelivery was in flight
    EXPECT_EQ(status, 503) << "the other instance took a key whose holder was alive";
    ++redeliveries;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  holder.join();
  EXPECT_EQ(first, 201);
  EXPECT_GT(redeliveries, 5);
  // The ack does not wait for the complete: until it lands the key is held there.
  EXPECT_EQ(redeliver_until_not_503(two->port(), body,
                                    std::chrono::steady_clock::now() + std::chrono::seconds(20)),
            204);
  EXPECT_EQ(calls("m-long"), 1);
}

TEST_F(GATEWAY_PUBSUB_SUITE, WithoutAHeartbeatTheSameRunIsReclaimedByTheOtherInstance) {
  auto [one, two] = two_instances("0");
  const auto body = long_work("m-long");
  std::atomic<int> first = 0;
  std::thread holder([&] { first = post(one->port(), body); });
  wait_for_calls("m-long", 1);
  const int second = redeliver_until_not_503(
      two->port(), body, std::chrono::steady_clock::now() + std::chrono::seconds(20));
  holder.join();
  EXPECT_EQ(second, 201) << "the lapsed lease was reclaimed";
  EXPECT_EQ(calls("m-long"), 2) << "the existing behaviour: a lease shorter than the work";
  EXPECT_EQ(first, 201) << "the holder still acks: its work ran (its completion is fenced out)";
}

// A holder SIGKILLed mid-work stops renewing: its message is processed elsewhere about one
// lease later, not after a long lease meant to outlast the work.
TEST_F(GATEWAY_PUBSUB_SUITE, AHolderKilledMidWorkIsRetriedWithinALease) {
  const std::vector<std::string> flags{"--lease", "2s", "--upstream-timeout", "60s"};
  auto one = start_gateway(flags);  // --heartbeat auto: a third of the lease
  auto two = start_gateway(flags);
  const auto body =
      envelope("m-killed", {{"test_behavior", "hang_first"}, {"test_sleep_ms", "60000"}});
  std::thread holder([&] { (void)post(one->port(), body); });
  wait_for_calls("m-killed", 1);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // renewed past its first lease
  one->crash();
  const auto killed = std::chrono::steady_clock::now();
  const int status = redeliver_until_not_503(two->port(), body, killed + std::chrono::seconds(20));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - killed);
  holder.join();
  std::cout << "[ info ] the killed holder's message was processed " << took.count()
            << " ms after the kill (lease 2000 ms, redelivered every 100 ms)\n";
  EXPECT_EQ(status, 201);
  // A lease and a retry, with room for a slow push on a loaded box; a lease sized to the
  // upstream's timeout (60 s) would still hold the key at the 20 s deadline above.
  EXPECT_LT(took, std::chrono::seconds(6)) << "far more than a lease and a retry";
  EXPECT_EQ(calls("m-killed"), 2);
}

TEST_F(GATEWAY_PUBSUB_SUITE, AnUnreachableUpstreamIsNacked503) {
  auto closed = std::make_unique<ChildProcess>(GATEWAY_UPSTREAM_PATH, std::vector<std::string>{},
                                               std::vector<std::pair<std::string, std::string>>{});
  const std::string url = "http://127.0.0.1:" + std::to_string(closed->port());
  EXPECT_EQ(closed->terminate(), 0);  // nothing listens there any more
  auto gateway = start_gateway({}, url);
  EXPECT_EQ(post(gateway->port(), envelope("m-down")), 503);
  // Released at once: the redelivery claims the key again (and finds the upstream still down)
  // instead of meeting a held key.
  EXPECT_EQ(post(gateway->port(), envelope("m-down")), 503);
  const auto metrics = send(gateway->port(), "GET", "/metrics").body;
  EXPECT_NE(
      metrics.find("idempotency_gateway_requests_total{outcome=\"nack_upstream_unreachable\"} 2"),
      std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("idempotency_gateway_requests_total{outcome=\"contention\"} 0\n"),
            std::string::npos)
      << metrics;
}

TEST_F(GATEWAY_PUBSUB_SUITE, ConcurrentDuplicatesOnOneInstanceCallTheUpstreamOnce) {
  auto gateway = start_gateway();
  const auto body = envelope("m-join", {{"test_behavior", "slow"}, {"test_sleep_ms", "600"}});
  int a = 0;
  int b = 0;
  {
    std::jthread first([&] { a = post(gateway->port(), body); });
    wait_for_calls("m-join", 1);
    std::jthread second([&] { b = post(gateway->port(), body); });
  }
  EXPECT_EQ(a, 201);
  EXPECT_TRUE(b == 201 || b == 204) << "joined the first, or came after it: " << b;
  EXPECT_EQ(calls("m-join"), 1);
}

TEST_F(GATEWAY_PUBSUB_SUITE, ConcurrentDuplicatesOnTwoInstancesCallTheUpstreamOnce) {
  auto one = start_gateway();
  auto two = start_gateway();
  const auto body = envelope("m-two", {{"test_behavior", "slow"}, {"test_sleep_ms", kInFlightMs}});
  int a = 0;
  Reply b;
  {
    std::jthread first([&] { a = post(one->port(), body); });
    wait_for_calls("m-two", 1);
    b = send(two->port(), "POST", "/push", body);
  }
  EXPECT_EQ(a, 201);
  EXPECT_EQ(b.status, 503) << "held elsewhere: nack so Pub/Sub retries";
  EXPECT_FALSE(b.header("Retry-After").empty());
  // The ack does not wait for the complete: until it lands, a retry there is still a 503.
  EXPECT_EQ(redeliver_until_not_503(two->port(), body,
                                    std::chrono::steady_clock::now() + std::chrono::seconds(20)),
            204)
      << "the retry finds it done";
  EXPECT_EQ(calls("m-two"), 1);
}

TEST_F(GATEWAY_PUBSUB_SUITE, AKeyFromAnAttributeDeduplicatesDifferentMessages) {
  auto gateway = start_gateway({"--key", "attribute:po_id"});
  EXPECT_EQ(post(gateway->port(), envelope("m-a", {{"po_id", "po-7"}})), 201);
  EXPECT_EQ(post(gateway->port(), envelope("m-b", {{"po_id", "po-7"}})), 204);
  EXPECT_EQ(post(gateway->port(), envelope("m-c")), 400) << "no attribute: fail closed";
  EXPECT_EQ(calls("m-a") + calls("m-b") + calls("m-c"), 1);
}

TEST_F(GATEWAY_PUBSUB_SUITE, AMalformedPushIsA400AndNeverForwarded) {
  auto gateway = start_gateway();
  EXPECT_EQ(post(gateway->port(), "{not json"), 400);
  EXPECT_EQ(calls("?"), 0);
}

TEST_F(GATEWAY_PUBSUB_SUITE, WithOidcOnAnUnsignedPushIs401AndNeverForwarded) {
  std::ofstream(dir_.file("jwks.json")) << R"({"keys":[]})";
  auto gateway =
      start_gateway({"--oidc-audience", "https://gw.example/push", "--oidc-email",
                     "push@p.iam.gserviceaccount.com", "--jwks", dir_.file("jwks.json")});
  EXPECT_EQ(post(gateway->port(), envelope("m-oidc")), 401);
  EXPECT_EQ(calls("m-oidc"), 0);
}

TEST_F(GATEWAY_PUBSUB_SUITE, SigtermLetsTheRequestInFlightCompleteAndExitsZero) {
  auto gateway = start_gateway();
  int status = 0;
  std::jthread in_flight([&] {
    status = post(gateway->port(),
                  envelope("m-term", {{"test_behavior", "slow"}, {"test_sleep_ms", "700"}}));
  });
  wait_for_calls("m-term", 1);
  EXPECT_EQ(gateway->terminate(), 0);
  in_flight.join();
  EXPECT_EQ(status, 201);
}

// The gateway deletes expired records as it runs (--purge-interval), so its store holds what
// the traffic needs instead of every key it ever saw; /metrics shows the passes.
TEST_F(GATEWAY_PUBSUB_SUITE, ExpiredRecordsArePurgedInTheBackground) {
  auto gateway = start_gateway({"--lease", "1s", "--ttl", "1s", "--purge-interval", "100ms"});
  constexpr int kMessages = 20;
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(post(gateway->port(), envelope("m-purge-" + std::to_string(i))), 201);
  }
  const std::string purged_line = "idempotency_gateway_purged_records_total " +
                                  std::to_string(kBackend == "redis" ? 0 : kMessages) + "\n";
  std::string metrics;
  for (int i = 0; i < 200; ++i) {  // a hang guard, not a timing assertion
    metrics = send(gateway->port(), "GET", "/metrics").body;
    const bool some_passes =
        metrics.find("idempotency_gateway_purge_passes_total 0\n") == std::string::npos;
    if (some_passes && metrics.find(purged_line) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Redis deletes each record itself at its expires_at (PEXPIREAT): nothing is left to purge.
  EXPECT_NE(metrics.find(purged_line), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("idempotency_gateway_purge_failures_total 0\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("# TYPE idempotency_gateway_purge_last_duration_seconds gauge"),
            std::string::npos);
  // Only the stores that can count cheaply and exactly report what they hold: on SQLite none
  // of the 20 messages, at most the start-up probe's released record.
  const std::string gauge = "\nidempotency_gateway_stored_records ";
  const auto at = metrics.find(gauge);
  ASSERT_EQ(at != std::string::npos, kBackend == "sqlite") << metrics;
  if (at != std::string::npos) {
    EXPECT_LE(std::stoi(metrics.substr(at + gauge.size())), 1);
  }
  // A purged key is simply new again: after its ttl a redelivery runs, as it would have (on
  // Redis, once the ttl has passed: its passes have nothing to wait for).
  int status = post(gateway->port(), envelope("m-purge-0"));
  for (int i = 0; i < 100 && status == 204; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    status = post(gateway->port(), envelope("m-purge-0"));
  }
  EXPECT_EQ(status, 201);
  EXPECT_EQ(calls("m-purge-0"), 2);
}

#ifdef GATEWAY_SQLITE_STORE_TESTS
TEST_F(GATEWAY_PUBSUB_SUITE, AFloodOfReadinessProbesCostsTheStoreAFewWrites) {
  // /readyz needs no credentials; each probe is a claim and a release of the probe key (each
  // release advances its fence), queued where the pushes' store calls are.
  auto gateway = start_gateway();
  const std::string probe_key = "pubsub-idempotency-gateway/readyz-probe";  // router.h
  const auto fence = [&] {
    const auto record = open_backend(backend_url_, {})->inspect(probe_key);
    return record ? record->fence : 0;
  };
  const std::int64_t before = fence();
  for (int i = 0; i < 40; ++i) ASSERT_EQ(send(gateway->port(), "GET", "/readyz").status, 200);
  // One probe a second at most (a few more if other tests on this store probe meanwhile);
  // answered one by one, the 40 were 80 writes.
  EXPECT_LE(fence() - before, 12);
}
#endif

TEST_F(GATEWAY_PUBSUB_SUITE, HealthReadinessAndMetricsAreServed) {
  auto gateway = start_gateway();
  EXPECT_EQ(send(gateway->port(), "GET", "/healthz").status, 200);
  EXPECT_EQ(send(gateway->port(), "GET", "/readyz").status, 200);
  ASSERT_EQ(post(gateway->port(), envelope("m-metrics")), 201);
  // The ack goes out before the complete; once the complete has landed, the duplicate is
  // answered from the store (a second claim) rather than from this process's flight.
  const std::string completed =
      R"(idempotency_gateway_backend_duration_seconds_bucket{operation="complete",le="+Inf"} 1)";
  ASSERT_TRUE(eventually([&] {
    return send(gateway->port(), "GET", "/metrics").body.find(completed) != std::string::npos;
  }));
  ASSERT_EQ(post(gateway->port(), envelope("m-metrics")), 204);
  const auto metrics = send(gateway->port(), "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.header("Content-Type").find("text/plain"), std::string::npos);
  for (const char* line : {
           "# TYPE idempotency_gateway_requests_total counter",
           "idempotency_gateway_requests_total{outcome=\"handled\"} 1\n",
           "idempotency_gateway_requests_total{outcome=\"duplicate\"} 1\n",
           "# TYPE idempotency_gateway_upstream_duration_seconds histogram",
           "idempotency_gateway_upstream_duration_seconds_count 1\n",
           "idempotency_gateway_request_duration_seconds_count 2\n",
           R"(idempotency_gateway_backend_duration_seconds_bucket{operation="claim",le="+Inf"} 2)",
           "idempotency_gateway_backend_errors_total{operation=\"claim\"} 0\n",
       }) {
    EXPECT_NE(metrics.body.find(line), std::string::npos) << line << "\n" << metrics.body;
  }
  EXPECT_EQ(metrics.body.find("m-metrics"), std::string::npos) << "no key in a metric";
  EXPECT_EQ(calls("/healthz"), 0);
}

// --- idempotency-key mode ---------------------------------------------------------------

class GATEWAY_KEY_SUITE : public GatewayTest {
 protected:
  std::unique_ptr<ChildProcess> start() { return start_gateway({"--mode", "idempotency-key"}); }
  static Reply post_key(int port, const std::string& key, const std::string& body,
                        httplib::Headers extra = {}) {
    extra.emplace("Idempotency-Key", key);
    return send(port, "POST", "/v1/charges", body, extra);
  }
};

TEST_F(GATEWAY_KEY_SUITE, AMissingKeyIs400AndOtherMethodsPassThrough) {
  auto gateway = start();
  EXPECT_EQ(send(gateway->port(), "POST", "/v1/charges", R"({"amount":1})").status, 400);
  EXPECT_EQ(send(gateway->port(), "PATCH", "/v1/charges/1", R"({"amount":1})").status, 400);
  const auto get = send(gateway->port(), "GET", "/v1/charges/1", {}, {{"X-Test-Id", "get-1"}});
  EXPECT_EQ(get.status, 201);
  EXPECT_EQ(send(gateway->port(), "GET", "/v1/charges/1", {}, {{"X-Test-Id", "get-1"}}).status,
            201);
  EXPECT_EQ(calls("get-1"), 2) << "GET is not deduplicated";
  EXPECT_EQ(send(upstream_->port(), "GET", "/fence?id=get-1").body, "") << "no fence unclaimed";
}

// One request, one key: an app reading the second (the last, or `Idempotency_Key` to a
// CGI-style server) would act under a key the gateway never claimed.
TEST_F(GATEWAY_KEY_SUITE, TwoKeysAre400AndNeverForwarded) {
  auto gateway = start();
  for (const char* second : {"Idempotency-Key", "idempotency_key"}) {
    SCOPED_TRACE(second);
    const auto reply = post_key(gateway->port(), "k-two-a", R"({"amount":1})",
                                {{second, "k-two-b"}, {"X-Test-Id", "two-keys"}});
    EXPECT_EQ(reply.status, 400);
    EXPECT_NE(reply.body.find("more than one Idempotency-Key"), std::string::npos) << reply.body;
  }
  EXPECT_EQ(calls("two-keys"), 0);
  // Neither key was claimed: each alone goes through.
  EXPECT_EQ(
      post_key(gateway->port(), "k-two-b", R"({"amount":1})", {{"X-Test-Id", "one-key"}}).status,
      201);
  EXPECT_EQ(calls("one-key"), 1);
}

// Keys are customer data: the Idempotency-Key's value is in none of the gateway's log lines,
// answers or metrics, whichever way a request goes (a log line about it carries its
// fingerprint).
TEST_F(GATEWAY_KEY_SUITE, TheKeyIsInNoLogLineAnswerOrMetric) {
  TempDir dir;
  const std::string log_file = dir.file("gateway.log");
  const std::string key = "k-private-7f3a91";
  std::vector<Reply> replies;
  {
    auto gateway = start_gateway({"--mode", "idempotency-key"}, {}, log_file);
    const int port = gateway->port();
    replies.push_back(post_key(port, key, R"({"a":1})", {{"X-Test-Behavior", "fail_first"}}));
    EXPECT_EQ(replies.back().status, 500);
    replies.push_back(post_key(port, key, R"({"a":1})"));
    EXPECT_EQ(replies.back().status, 201);
    replies.push_back(post_key(port, key, R"({"a":1})"));
    EXPECT_EQ(replies.back().header("Idempotency-Replayed"), "true");
    replies.push_back(post_key(port, key, R"({"a":2})"));
    EXPECT_EQ(replies.back().status, 422);
    replies.push_back(post_key(port, key, R"({"a":1})", {{"idempotency_key", key + "-b"}}));
    EXPECT_EQ(replies.back().status, 400);
    replies.push_back(send(port, "GET", "/metrics"));
    EXPECT_EQ(gateway->terminate(), 0);
  }
  for (const Reply& r : replies) {
    EXPECT_EQ(r.body.find(key), std::string::npos) << r.body;
    for (const auto& [name, value] : r.headers) EXPECT_EQ(value.find(key), std::string::npos);
  }
  std::ifstream in(log_file);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("idempotency_key_reused"), std::string::npos) << "the 422 was logged";
  EXPECT_NE(log.find(key_fingerprint(prefix_ + key)), std::string::npos) << log;
  EXPECT_EQ(log.find(key), std::string::npos) << log;
}

TEST_F(GATEWAY_KEY_SUITE, ARetryReplaysTheStoredResponseByteForByte) {
  auto gateway = start();
  const auto first = post_key(gateway->port(), "k-1", R"({"amount":100})");
  ASSERT_EQ(first.status, 201);
  EXPECT_TRUE(first.header("Idempotency-Replayed").empty());
  const auto again = post_key(gateway->port(), "k-1", R"({"amount":100})");
  EXPECT_EQ(again.status, 201);
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(again.header("X-Upstream-Call"), "1");
  EXPECT_EQ(again.header("Content-Type"), first.header("Content-Type"));
  EXPECT_EQ(again.header("Idempotency-Replayed"), "true");
  EXPECT_EQ(calls("k-1"), 1);
}

TEST_F(GATEWAY_KEY_SUITE, TheSameKeyWithAnotherBodyIs422) {
  auto gateway = start();
  ASSERT_EQ(post_key(gateway->port(), "k-2", R"({"amount":100})").status, 201);
  EXPECT_EQ(post_key(gateway->port(), "k-2", R"({"amount":999})").status, 422);
  EXPECT_EQ(calls("k-2"), 1);
}

TEST_F(GATEWAY_KEY_SUITE, TheSameKeyWhileTheFirstIsInFlightIs409) {
  auto gateway = start();
  int first = 0;
  Reply second;
  {
    std::jthread one([&] {
      first = post_key(gateway->port(), "k-3", "{}",
                       {{"X-Test-Behavior", "slow"}, {"X-Test-Sleep-Ms", kInFlightMs}})
                  .status;
    });
    wait_for_calls("k-3", 1);
    second = post_key(gateway->port(), "k-3", "{}",
                      {{"X-Test-Behavior", "slow"}, {"X-Test-Sleep-Ms", kInFlightMs}});
  }
  EXPECT_EQ(first, 201);
  EXPECT_EQ(second.status, 409);
  EXPECT_FALSE(second.header("Retry-After").empty());
  EXPECT_EQ(calls("k-3"), 1);
}

TEST_F(GATEWAY_KEY_SUITE, FailuresAreNotStored) {
  auto gateway = start();
  EXPECT_EQ(post_key(gateway->port(), "k-4", "{}", {{"X-Test-Behavior", "fail_first"}}).status, 500)
      << "the upstream's own failure is passed through";
  EXPECT_EQ(post_key(gateway->port(), "k-4", "{}", {{"X-Test-Behavior", "fail_first"}}).status,
            201);
  EXPECT_EQ(calls("k-4"), 2);
}

// RFC 9110 §15: a status outside 100..599 is read as a server error: 502, not stored, the key
// released so that a retry runs (where it was passed on as it came, no server could frame it:
// the caller got a 500 blaming the gateway).
TEST_F(GATEWAY_KEY_SUITE, AnInvalidUpstreamStatusIs502AndTheKeyIsReleased) {
  auto gateway = start();
  for (int attempt = 1; attempt <= 2; ++attempt) {
    const auto reply =
        post_key(gateway->port(), "k-999", "{}", {{"X-Test-Behavior", "invalid_status"}});
    EXPECT_EQ(reply.status, 502) << attempt;
    EXPECT_EQ(reply.body, "the upstream answered with an invalid status code\n");
  }
  EXPECT_EQ(calls("k-999"), 2);
}

// A 2xx whose body broke off was applied: completed, and answered (now and on replay) with its
// status and headers, the body said to be incomplete (it was labelled too-large before).
TEST_F(GATEWAY_KEY_SUITE, A2xxWhoseBodyBrokeOffIsCompletedAndSaidIncomplete) {
  auto gateway = start();
  const httplib::Headers breaks_off{{"X-Test-Behavior", "breaks_off"}};
  const auto first = post_key(gateway->port(), "k-broke", "{}", breaks_off);
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "");
  EXPECT_EQ(first.header("Idempotency-Response-Omitted"), "incomplete");
  EXPECT_EQ(first.header("X-Upstream-Call"), "1");
  const auto again = post_key(gateway->port(), "k-broke", "{}", breaks_off);
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(again.header("Idempotency-Response-Omitted"), "incomplete");
  EXPECT_EQ(again.header("Idempotency-Replayed"), "true");
  EXPECT_EQ(calls("k-broke"), 1);
}

TEST_F(GATEWAY_KEY_SUITE, TheReplayMarkersAreTheGatewaysOwn) {
  auto gateway = start();
  const httplib::Headers says_replayed{{"X-Test-Behavior", "says_replayed"}};
  const auto first = post_key(gateway->port(), "k-marks", "{}", says_replayed);
  ASSERT_EQ(first.status, 201);
  EXPECT_FALSE(first.has_header("Idempotency-Replayed")) << "a first answer is no replay";
  EXPECT_FALSE(first.has_header("Idempotency-Response-Omitted")) << "its body is all there";
  EXPECT_EQ(first.body, "processed call 1\n");
  const auto again = post_key(gateway->port(), "k-marks", "{}", says_replayed);
  EXPECT_EQ(again.status, 201);
  EXPECT_EQ(again.header("Idempotency-Replayed"), "true");
  EXPECT_EQ(again.headers.count("Idempotency-Replayed"), 1U);
  EXPECT_FALSE(again.has_header("Idempotency-Response-Omitted"));
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(calls("k-marks"), 1);
}

// Sent, then silent: 504, not stored, and the key stays held (a retry gets 409) until the
// lease lapses, since the upstream may still be acting on it. The timeout is also the deadline
// of the takeover's call, which must succeed: 2 s, with the hang five times that.
TEST_F(GATEWAY_KEY_SUITE, AHungUpstreamIs504AndTheKeyIsHeldUntilTheLeaseLapses) {
  auto gateway =
      start_gateway({"--mode", "idempotency-key", "--upstream-timeout", "2s", "--lease", "5s"});
  const httplib::Headers hang{{"X-Test-Behavior", "hang_first"}, {"X-Test-Sleep-Ms", "10000"}};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(post_key(gateway->port(), "k-5", "{}", hang).status, 504);
  const auto meanwhile = post_key(gateway->port(), "k-5", "{}", hang);
  EXPECT_EQ(meanwhile.status, 409);
  EXPECT_FALSE(meanwhile.header("Retry-After").empty());
  EXPECT_EQ(calls("k-5"), 1);
  int status = 409;
  while (status == 409 && std::chrono::steady_clock::now() < start + std::chrono::seconds(25)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    status = post_key(gateway->port(), "k-5", "{}", hang).status;
  }
  EXPECT_EQ(status, 201) << "the lease lapsed: the retry takes the key over";
  EXPECT_EQ(calls("k-5"), 2);
}

// Provably not acted on: 502, and the key is released at once (a retry is tried again, not 409).
TEST_F(GATEWAY_KEY_SUITE, AnUnreachableUpstreamIs502AndTheKeyIsReleased) {
  auto closed = std::make_unique<ChildProcess>(GATEWAY_UPSTREAM_PATH, std::vector<std::string>{},
                                               std::vector<std::pair<std::string, std::string>>{});
  const int port = closed->port();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(closed->terminate(), 0);  // nothing listens there any more
  auto gateway = start_gateway({"--mode", "idempotency-key"}, url);
  EXPECT_EQ(post_key(gateway->port(), "k-6", "{}").status, 502);
  const Reply again = post_key(gateway->port(), "k-6", "{}");
  EXPECT_EQ(again.status, 502);
  EXPECT_TRUE(again.header("Idempotency-Replayed").empty()) << "the 502 was stored and replayed";
  // Once the app is back, the key runs: it was neither held nor completed with the 502.
  const ChildProcess back(GATEWAY_UPSTREAM_PATH, {"--port", std::to_string(port)}, {});
  ASSERT_EQ(back.port(), port);
  EXPECT_EQ(post_key(gateway->port(), "k-6", "{}").status, 201);
}

// --- start-up checks: backend-independent, built into the SQLite program only -----------

#ifdef GATEWAY_SQLITE_STORE_TESTS

// The ack waits on no store write, and SIGTERM does not end the gateway before the completes
// of the pushes it acked. The test holds SQLite's write lock from outside while the upstream
// works, so the push's complete cannot land until the test lets go.
TEST_F(GATEWAY_PUBSUB_SUITE, AnAckedPushsCompleteLandsBeforeTheGatewayExits) {
  auto gateway = start_gateway();
  ASSERT_EQ(post(gateway->port(), envelope("m-warm")), 201);  // the schema is in place
  // The upstream works 2 s: ample for the test to take the lock first on a loaded box.
  const auto body = envelope("m-drain", {{"test_behavior", "slow"}, {"test_sleep_ms", "2000"}});
  std::atomic<int> status = 0;
  std::thread pusher([&] { status = post(gateway->port(), body); });
  wait_for_calls("m-drain", 1);  // claimed, the upstream at work
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.file("idem.db").c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 10'000);  // a write of the gateway's may be landing
  ASSERT_EQ(sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  pusher.join();
  EXPECT_EQ(status, 201) << "acked while no store write can land";

  ASSERT_EQ(::kill(gateway->pid(), SIGTERM), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(gateway->running()) << "it exited before the acked push's complete landed";
  ASSERT_EQ(sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  EXPECT_EQ(gateway->terminate(), 0);

  const auto record = stored("m-drain");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, RecordState::kDone) << "the key would stay held for its lease";
}

// SIGTERM while a push is at the upstream for longer than the server's shutdown grace (9 s):
// the server stops waiting for it, but the gateway does not exit under it. The push is
// answered when the upstream is, and its complete lands before the exit, instead of the
// workers and the store going while the push still needs them.
TEST_F(GATEWAY_PUBSUB_SUITE, APushAtTheUpstreamPastTheShutdownGraceIsFinishedBeforeTheExit) {
  auto gateway = start_gateway();
  const auto body = envelope("m-grace", {{"test_behavior", "slow"}, {"test_sleep_ms", "10500"}});
  std::atomic<int> status = 0;
  std::thread pusher([&] { status = post(gateway->port(), body); });
  wait_for_calls("m-grace", 1);
  ASSERT_EQ(::kill(gateway->pid(), SIGTERM), 0);
  pusher.join();
  EXPECT_EQ(status, 201) << "answered when the upstream answered";
  EXPECT_EQ(gateway->terminate(), 0);
  const auto record = stored("m-grace");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->state, RecordState::kDone) << "the key would stay held for its lease";
}
#endif  // GATEWAY_SQLITE_STORE_TESTS

#ifdef GATEWAY_FLAG_TESTS
// Runs a program to its exit (bounded), returning its exit code and what it wrote to stderr.
std::pair<int, std::string> run_to_exit(const std::string& program, std::vector<std::string> args) {
  int err[2];
  if (pipe(err) != 0) return {-1, "pipe failed"};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(err[1], STDERR_FILENO);
    close(err[0]);
    close(err[1]);
    unsetenv("PORT");  // NOLINT(concurrency-mt-unsafe): the forked child is single-threaded
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  close(err[1]);
  std::string text;
  bool closed = false;  // stderr closed: the program is exiting
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!closed && std::chrono::steady_clock::now() < deadline) {
    pollfd p{err[0], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[512];
    const ssize_t n = read(err[0], buf, sizeof buf);
    if (n <= 0) {
      closed = true;
    } else {
      text.append(buf, static_cast<std::size_t>(n));
    }
  }
  close(err[0]);
  int status = 0;
  if (!closed) {
    kill(pid, SIGKILL);  // still running: it served instead of refusing the flags
    waitpid(pid, &status, 0);
    return {-2, text};
  }
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

class gateway_flags : public ::testing::Test {
 protected:
  static std::pair<int, std::string> run(std::vector<std::string> args) {
    return run_to_exit(GATEWAY_PATH, std::move(args));
  }
  static void expect_refused(std::vector<std::string> args, const std::string& reason,
                             int code = 2) {
    args.insert(args.begin(), {"--listen", "127.0.0.1:0"});
    const auto [exit_code, err] = run(args);
    EXPECT_EQ(exit_code, code) << err;
    EXPECT_NE(err.find(reason), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "one line: " << err;
  }
};

TEST_F(gateway_flags, BadFlagsExit2WithOneLineSayingWhichAndWhy) {
  TempDir dir;
  const std::string backend = "sqlite://" + dir.file("idem.db");
  const std::vector<std::string> ok{"--upstream", "http://127.0.0.1:1", "--backend", backend};
  auto with = [&](std::vector<std::string> extra) {
    auto args = ok;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  expect_refused({"--backend", backend}, "--upstream");
  expect_refused(with({"--lease", "15x"}), "--lease: '15x' is not a duration");
  expect_refused(with({"--ttl", "soon"}), "--ttl");
  expect_refused(with({"--upstream-timeout", "0s"}), "--upstream-timeout: must be above zero");
  expect_refused(with({"--purge-interval", "often"}),
                 "--purge-interval: 'often' is not a duration");
  expect_refused(with({"--purge-interval", "3000000h"}), "--purge-interval: at most 366 days");
  expect_refused(with({"--key", "body:id"}), "--key: 'body:id'");
  expect_refused(with({"--key", "attribute:"}), "--key");
  expect_refused(with({"--mode", "exactly-once"}), "--mode");
  // Flags idempotency-key mode does not read are refused there, not silently ignored.
  expect_refused(with({"--mode", "idempotency-key", "--key", "header:X-Request-Id"}),
                 "--key: pubsub mode only");
  expect_refused(with({"--mode", "idempotency-key", "--wait-for", "5s"}),
                 "--wait-for: pubsub mode only");
  expect_refused(with({"--max-body", "lots"}), "--max-body");
  expect_refused({"--upstream", "ftp://x", "--backend", backend}, "--upstream");
  // Past the scheme, path and port checks, but not a host every request could connect to.
  for (const char* url : {"http://app?x", "http://app#f", "http://a b", "http://[::1"}) {
    expect_refused({"--upstream", url, "--backend", backend}, "--upstream");
  }
  expect_refused({"--upstream", "http://127.0.0.1:1", "--backend", "nosuch://x"}, "--backend");
  expect_refused({"--upstream", "http://127.0.0.1:1", "--backend", "not a url"}, "--backend");
  expect_refused(with({"--oidc-audience", "https://a"}), "--oidc-audience");
  expect_refused(with({"--no-such-flag"}), "no-such-flag");
}

TEST_F(gateway_flags, APurgeIntervalOfZeroTurnsTheReclaimerOff) {
  TempDir dir;
  ChildProcess gateway(GATEWAY_PATH,
                       {"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--backend",
                        "sqlite://" + dir.file("idem.db"), "--purge-interval", "0"},
                       {});
  const std::string metrics = send(gateway.port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("idempotency_gateway_purge_passes_total 0\n"), std::string::npos)
      << metrics;
  EXPECT_EQ(gateway.terminate(), 0);
}

TEST_F(gateway_flags, NoHeartbeatWithALeaseWithinTheUpstreamTimeoutIsWarnedOfAtStart) {
  TempDir dir;
  // Whether the gateway, started with these flags, warns that a call can outlast the lease.
  auto warns = [&](const std::string& lease) {
    const std::string log_file = dir.file("gateway-" + lease + ".log");
    {
      ChildProcess gateway(GATEWAY_PATH,
                           {"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1",
                            "--backend", "sqlite://" + dir.file("idem.db"), "--heartbeat", "0",
                            "--lease", lease, "--upstream-timeout", "30s"},
                           {}, log_file);
      EXPECT_EQ(gateway.terminate(), 0);
    }
    std::ifstream in(log_file);
    const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return log.find("lease_shorter_than_upstream_timeout") != std::string::npos;
  };
  EXPECT_TRUE(warns("30s")) << "a call may run for the whole 30 s, past a 30 s lease";
  EXPECT_FALSE(warns("31s"));
}

// The log a gateway started with `flags` (and the inherited environment) writes, then stopped.
std::string start_up_log(TempDir& dir, const std::string& name, std::vector<std::string> flags) {
  const std::string log_file = dir.file(name + ".log");
  std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"};
  args.insert(args.end(), flags.begin(), flags.end());
  {
    ChildProcess gateway(GATEWAY_PATH, args, {}, log_file);
    EXPECT_EQ(gateway.terminate(), 0);
  }
  std::ifstream in(log_file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A --jwks file is read when the first token comes, so one missing at start is allowed (it may
// be written later) but warned of: still missing then, every push is refused. A URL's scheme
// is taken in any case, as the verifier takes it, not read as a file name.
TEST_F(gateway_flags, AJwksFileThatCannotBeReadIsWarnedOfAtStartAndAUrlIsNotAFile) {
  TempDir dir;
  const std::string backend = "sqlite://" + dir.file("idem.db");
  std::ofstream(dir.file("jwks.json")) << R"({"keys":[]})";
  const auto warns = [&](const std::string& name, const std::string& jwks) {
    return start_up_log(dir, name,
                        {"--backend", backend, "--oidc-audience", "https://a", "--oidc-email",
                         "e@x", "--jwks", jwks})
               .find("jwks_file_unreadable") != std::string::npos;
  };
  EXPECT_TRUE(warns("missing", dir.file("no-such-jwks.json")));
  EXPECT_FALSE(warns("present", dir.file("jwks.json")));
  EXPECT_FALSE(warns("url", "https://127.0.0.1:1/certs"));
  EXPECT_FALSE(warns("url-in-capitals", "HTTPS://127.0.0.1:1/certs"));
}

TEST_F(gateway_flags, KeyingByTheOrderingKeyIsWarnedOfAtStart) {
  TempDir dir;
  const std::string backend = "sqlite://" + dir.file("idem.db");
  const auto warns = [&](const std::string& name, std::vector<std::string> flags) {
    return start_up_log(dir, name, std::move(flags)).find("key_is_ordering_key") !=
           std::string::npos;
  };
  EXPECT_TRUE(warns("ordering", {"--backend", backend, "--key", "ordering-key"}))
      << "a completed ordering key acks every later message of its stream as a duplicate";
  EXPECT_FALSE(warns("message-id", {"--backend", backend}));
}

TEST_F(gateway_flags, AStoreLocalToTheInstanceOnCloudRunIsWarnedOfAtStart) {
  TempDir dir;
  const std::string sqlite = "sqlite://" + dir.file("idem.db");
  const auto warns = [&](const std::string& name, const std::string& backend) {
    return start_up_log(dir, name, {"--backend", backend}).find("local_store_on_cloud_run") !=
           std::string::npos;
  };
  EXPECT_FALSE(warns("not-cloud-run", sqlite));
  ::setenv("K_SERVICE", "orders", 1);  // inherited by the children: Cloud Run sets it
  EXPECT_TRUE(warns("sqlite", sqlite));
  EXPECT_TRUE(warns("memory", "memory://"));
  ::unsetenv("K_SERVICE");
}

TEST_F(gateway_flags, AnInheritedIdempotencyDisabledIsRefusedUnlessAllowed) {
  TempDir dir;
  const std::string backend = "sqlite://" + dir.file("idem.db");
  ::setenv("GCP_PUBSUB_IDEMPOTENCY_DISABLED", "1", 1);  // inherited by the child
  expect_refused({"--upstream", "http://127.0.0.1:1", "--backend", backend},
                 "GCP_PUBSUB_IDEMPOTENCY_DISABLED");
  {
    ChildProcess allowed(GATEWAY_PATH,
                         {"--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1",
                          "--backend", backend, "--allow-idempotency-disabled"},
                         {});
    EXPECT_EQ(send(allowed.port(), "GET", "/healthz").status, 200);
    EXPECT_EQ(allowed.terminate(), 0);
  }
  ::unsetenv("GCP_PUBSUB_IDEMPOTENCY_DISABLED");
}

TEST_F(gateway_flags, AnUnopenableStoreExits1BeforeServing) {
  expect_refused({"--upstream", "http://127.0.0.1:1", "--backend",
                  "sqlite:///nonexistent-dir/for/sure/idem.db"},
                 "--backend", 1);
}

TEST_F(gateway_flags, FlagsCanComeFromTheEnvironment) {
  TempDir dir;
  ChildProcess gateway(GATEWAY_PATH, {},
                       {{"IDEMPOTENCY_LISTEN", "127.0.0.1:0"},
                        {"IDEMPOTENCY_UPSTREAM", "http://127.0.0.1:1"},
                        {"IDEMPOTENCY_BACKEND", "sqlite://" + dir.file("idem.db")},
                        {"IDEMPOTENCY_LEASE", "1m"}});
  EXPECT_EQ(send(gateway.port(), "GET", "/healthz").status, 200);
  EXPECT_EQ(gateway.terminate(), 0);
}

#endif  // GATEWAY_FLAG_TESTS

}  // namespace
}  // namespace idempotency::testing
