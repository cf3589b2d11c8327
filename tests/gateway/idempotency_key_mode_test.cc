// The idempotency-key mode in process, in front of the end-to-end tests' upstream, on a store
// whose completes can be held: what happens to the key between the upstream's 2xx and the
// moment its response is stored.
#include "idempotency_key_mode.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <variant>

#include "idempotency/forwarding_backend.h"
#include "idempotency/memory_lock.h"
#include "idempotency/pubsub/message.h"
#include "metrics.h"
#include "support/child_process.h"
#include "support/eventually.h"
#include "support/faulty_backend.h"
#include "upstream_pool.h"

namespace idempotency::gateway {
namespace {

using namespace std::chrono_literals;
using pubsub::PushRequest;
using pubsub::PushResponse;

PushRequest charge(const std::string& key) {
  PushRequest request;
  request.method = "POST";
  request.path = "/v1/charges";
  request.headers = {{"Content-Type", "application/json"}, {"Idempotency-Key", key}};
  request.body = R"({"amount":100})";
  return request;
}

// The mode's handler on `backend`, in front of the upstream listening on `port`.
http::Handler key_mode_handler(const Config& config, std::shared_ptr<LockBackend> backend,
                               int port) {
  return make_idempotency_key_handler(
      config, GatewayDeps{.backend = std::move(backend),
                          .upstream = std::make_shared<const UpstreamPool>(
                              parse_upstream_url("http://127.0.0.1:" + std::to_string(port)),
                              UpstreamOptions{}),
                          .metrics = std::make_shared<Metrics>()});
}

TEST(IdempotencyKeyMode, TheKeyStaysHeldWhileASlowStoreStoresTheResponse) {
  testing::ChildProcess upstream(GATEWAY_UPSTREAM_PATH, {}, {});
  auto store = std::make_shared<InMemoryLock>();
  auto backend = std::make_shared<testing::FaultyBackend>(*store);
  Config config;
  config.mode = Mode::kIdempotencyKey;
  config.lease = 2s;
  config.heartbeat = 250ms;
  const http::Handler handle = key_mode_handler(config, backend, upstream.port());

  backend->hold_completes();
  auto first = std::async(std::launch::async, [&] { return handle(charge("charge-1")); });
  // Declared after the future, so destroyed before it: a failed assertion below lets the held
  // complete go instead of waiting on it for ever.
  struct LetGo {
    testing::FaultyBackend& backend;
    ~LetGo() { backend.let_completes_go(); }
  } let_go{*backend};
  ASSERT_TRUE(testing::eventually([&] { return backend->completes_held.load() == 1; }))
      << "the upstream's answer never reached the complete";
  // Past the claim's lease: only renewals keep the key from another instance now.
  std::this_thread::sleep_for(config.lease + 500ms);
  const ClaimResult other = store->claim("charge-1", config.lease);
  EXPECT_TRUE(std::holds_alternative<HeldByOther>(other))
      << "the key lapsed while its response was being stored: a retry would run it again";

  backend->let_completes_go();
  const PushResponse answered = first.get();
  EXPECT_EQ(answered.status, 201);
  const PushResponse replayed = handle(charge("charge-1"));
  EXPECT_EQ(replayed.status, 201);
  EXPECT_EQ(replayed.body, answered.body) << "the retry replays the stored response";
  EXPECT_EQ(pubsub::find_header(replayed.headers, "Idempotency-Replayed"),
            std::optional<std::string_view>("true"));
}

// Method names are case-sensitive (RFC 9110 §9.1), so `post` is no POST to the gateway, but
// Flask, Django and others upper-case them: passed through unguarded, a `post` would run there
// as a POST, without the key it needs and as often as it is sent.
TEST(IdempotencyKeyMode, APostOrPatchInAnotherCaseIsRefusedNotPassedThrough) {
  testing::ChildProcess upstream(GATEWAY_UPSTREAM_PATH, {}, {});
  auto store = std::make_shared<InMemoryLock>();
  Config config;
  config.mode = Mode::kIdempotencyKey;
  const http::Handler handle = key_mode_handler(config, store, upstream.port());

  for (const char* method : {"post", "Post", "patch", "pAtCh"}) {
    SCOPED_TRACE(method);
    PushRequest request = charge("charge-case");
    request.method = method;
    const PushResponse answered = handle(request);
    EXPECT_EQ(answered.status, 400);
    EXPECT_NE(answered.body.find("case-sensitive"), std::string::npos) << answered.body;
  }
  EXPECT_TRUE(std::holds_alternative<Won>(store->claim("charge-case", 1s)))
      << "the key was never claimed";
  PushRequest get = charge("");
  get.method = "GET";  // other methods pass through
  EXPECT_EQ(handle(get).status, 201);
}

// A store that keeps results of at most kLimit bytes, as Datastore keeps about 1 MiB.
class SmallResults final : public ForwardingBackend {
 public:
  static constexpr std::size_t kLimit = 4096;
  explicit SmallResults(LockBackend& inner) : ForwardingBackend(inner) {}

 protected:
  [[nodiscard]] std::size_t do_max_result_bytes() const noexcept override { return kLimit; }
};

TEST(IdempotencyKeyMode, AResponseTheStoreCannotKeepIsAnsweredWholeAndReplayedWithoutItsBody) {
  testing::ChildProcess upstream(GATEWAY_UPSTREAM_PATH, {}, {});
  InMemoryLock store;
  auto backend = std::make_shared<SmallResults>(store);
  Config config;
  config.mode = Mode::kIdempotencyKey;
  const http::Handler handle = key_mode_handler(config, backend, upstream.port());
  PushRequest request = charge("charge-big");
  request.headers.push_back({"X-Test-Behavior", "sized"});
  request.headers.push_back({"X-Test-Body-Bytes", "10000"});  // under --max-response's 1 MiB

  const PushResponse first = handle(request);
  EXPECT_EQ(first.status, 201);
  EXPECT_EQ(first.body, std::string(10000, 'b')) << "the caller gets the answer whole";
  EXPECT_EQ(pubsub::find_header(first.headers, "Idempotency-Response-Omitted"), std::nullopt);

  const PushResponse replayed = handle(request);
  EXPECT_EQ(replayed.status, 201);
  EXPECT_EQ(replayed.body, "");
  EXPECT_EQ(pubsub::find_header(replayed.headers, "Idempotency-Response-Omitted"),
            std::optional<std::string_view>("too-large"));
  EXPECT_EQ(pubsub::find_header(replayed.headers, "Idempotency-Replayed"),
            std::optional<std::string_view>("true"));
  ASSERT_TRUE(store.inspect("charge-big")->result.has_value())
      << "the status and headers are kept, not dropped with the body";
  EXPECT_LE(store.inspect("charge-big")->result->size(), SmallResults::kLimit);
}

}  // namespace
}  // namespace idempotency::gateway
