// idempotent(): every row of the status table, the disabled switch, fail-closed, hooks,
// fencing, lazy backends and key privacy, over real push envelopes.
#include "idempotency/pubsub/idempotent.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <latch>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "http_text.h"
#include "idempotency/errors.h"
#include "idempotency/guard.h"
#include "idempotency/key.h"
#include "idempotency/memory_lock.h"
#include "push_envelope.h"
#include "support/faulty_backend.h"
#include "support/log_capture.h"

namespace idempotency::pubsub {
namespace {

using idempotency::testing::FaultyBackend;
using idempotency::testing::LogCapture;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::push;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class IdempotentTest : public ::testing::Test {
 protected:
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::shared_ptr<InMemoryLock> store_ =
      std::make_shared<InMemoryLock>(BackendOptions{.clock = clock_});
  LogCapture logs_;
  std::atomic<int> runs_{0};

  PushHandler wrap(IdempotentOptions options = {}) {
    if (!options.backend && !options.backend_factory) options.backend = store_;
    return idempotent(std::move(options), [this](const Delivery&) { ++runs_; });
  }
};

TEST_F(IdempotentTest, TheFirstDeliveryIsHandledAndTheRedeliveryIsADuplicate) {
  auto handle = wrap();
  EXPECT_EQ(handle(push("m-1")).status, 200);
  const PushResponse again = handle(push("m-1"));
  EXPECT_EQ(again.status, 204);
  EXPECT_TRUE(again.body.empty());
  EXPECT_TRUE(is_ack(200) && is_ack(204));
  EXPECT_EQ(runs_, 1);
}

TEST_F(IdempotentTest, EveryKeyedDeliveryFormFromGooglesDocsIsGuarded) {
  auto handle = wrap();
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(IDEMPOTENCY_PUBSUB_ENVELOPES_DIR)) {
    SCOPED_TRACE(entry.path().filename().string());
    ++files;
    const PushRequest request = testing::parse_http_text(read_file(entry.path()));
    const int first = handle(request).status;
    if (entry.path().filename() == "unwrapped_no_metadata.http") {
      EXPECT_EQ(first, 400) << "no message id without write-metadata: fail closed";
      continue;
    }
    const int before = runs_;
    EXPECT_TRUE(first == 200 || first == 204);  // some fixtures share a message id
    EXPECT_EQ(handle(request).status, 204);
    EXPECT_EQ(runs_, before);
  }
  EXPECT_EQ(files, 12);
  // The fixtures carry six message ids: each ran once, and no two messages shared a key.
  EXPECT_EQ(runs_, 6);
}

TEST_F(IdempotentTest, AConcurrentDuplicateOnThisInstanceJoinsAndIsAcked) {
  std::latch inside(1);
  std::latch finish(1);
  std::atomic<int> runs{0};
  auto handle = idempotent({.backend = store_}, [&](const Delivery&) {
    ++runs;
    inside.count_down();
    finish.wait();
  });
  int first = 0;
  int second = 0;
  std::jthread a([&] { first = handle(push("m-2")).status; });
  inside.wait();
  std::jthread b([&] { second = handle(push("m-2")).status; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  finish.count_down();
  a.join();
  b.join();
  EXPECT_EQ(first, 200);
  EXPECT_TRUE(second == 200 || second == 204) << "joined (or, if late, a duplicate): acked";
  EXPECT_EQ(runs, 1);
}

TEST_F(IdempotentTest, ALiveHolderElsewhereIs503WithRetryAfterAndOneWarningLine) {
  (void)store_->claim("m-3", std::chrono::minutes(15));  // another instance holds it
  auto handle = wrap();
  const PushResponse r = handle(push("m-3", nullptr, 4));
  EXPECT_EQ(r.status, 503);
  EXPECT_FALSE(is_ack(r.status));
  ASSERT_TRUE(find_header(r.headers, "retry-after").has_value());
  EXPECT_GE(std::stoi(std::string(*find_header(r.headers, "Retry-After"))), 1);
  ASSERT_EQ(logs_.count("contention"), 1);
  const LogRecord record = logs_.records().back();
  EXPECT_EQ(record.severity, Severity::kWarning);
  const std::string line = format_json_line(record);
  EXPECT_THAT(line, HasSubstr("\"delivery_attempt\":\"4\""));
  EXPECT_THAT(line, HasSubstr("projects/p/subscriptions/orders"));
  EXPECT_EQ(runs_, 0);
}

TEST_F(IdempotentTest, WaitForAcksOnceTheHolderElsewhereFinishes) {
  Claim other = std::get<Won>(store_->claim("m-4", std::chrono::minutes(15))).claim;
  auto handle = wrap({.wait_for = std::chrono::seconds(30)});
  std::jthread finisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(store_->complete(other));
  });
  EXPECT_EQ(handle(push("m-4")).status, 204);
  EXPECT_EQ(runs_, 0);
}

TEST_F(IdempotentTest, TheHandlersOwnMutexHeldElsewhereIsAQuiet503AndTheKeyIsReleased) {
  (void)store_->claim("po:7", std::chrono::minutes(15));  // another instance updates PO 7
  auto handle = idempotent({.backend = store_}, [&](const Delivery&) {
    auto serialized = mutex("po:7", *store_);
    ++runs_;
  });
  const PushResponse r = handle(push("m-19"));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(logs_.count("contention"), 1);
  EXPECT_EQ(logs_.count("handler_failed"), 0);
  const ClaimResult retry = store_->claim("m-19", std::chrono::minutes(1));
  ASSERT_TRUE(std::holds_alternative<Won>(retry)) << "the message's key was released";
  EXPECT_EQ(std::get<Won>(retry).claim.fence, 3);
}

TEST_F(IdempotentTest, TheHandlersOwnLockFindingItsKeyDoneIsAckedNotNackedForEver) {
  { auto done = lock("orders:1", *store_); }  // a republish's first message placed order 1
  auto handle = idempotent({.backend = store_}, [&](const Delivery&) {
    auto held = lock("orders:1", *store_);
    ++runs_;
  });
  EXPECT_EQ(handle(push("m-20")).status, 204) << "the order's work ran: ack, not dead-letter";
  EXPECT_EQ(runs_, 0);
  EXPECT_EQ(logs_.count("handler_duplicate"), 1);
  EXPECT_EQ(logs_.count("handler_failed"), 0);
}

TEST_F(IdempotentTest, AHandlerThatThrowsIsNackedAndTheRedeliveryRunsToSuccessOnce) {
  int calls = 0;
  std::vector<std::int64_t> fences;
  auto handle = idempotent({.backend = store_}, [&](const Delivery& d) {
    fences.push_back(d.fence);
    if (++calls == 1) throw std::runtime_error("supplier timeout");
  });
  EXPECT_EQ(handle(push("m-5")).status, 500);
  EXPECT_EQ(handle(push("m-5")).status, 200);
  EXPECT_EQ(handle(push("m-5")).status, 204);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(fences, (std::vector<std::int64_t>{1, 3})) << "the fence is handed to the handler";
  EXPECT_EQ(logs_.count("handler_failed"), 1);
}

TEST_F(IdempotentTest, AnUnknownOutcomeIsA503AndTheKeyStaysHeldUntilTheLeaseLapses) {
  int calls = 0;
  std::vector<std::int64_t> fences;
  auto handle =
      idempotent({.backend = store_, .lease = std::chrono::seconds(60)}, [&](const Delivery& d) {
        fences.push_back(d.fence);
        if (++calls == 1) throw OutcomeUnknown("supplier went silent");
      });
  EXPECT_EQ(handle(push("m-6")).status, 503);
  EXPECT_EQ(logs_.count("handler_outcome_unknown"), 1);
  // During the lease the silent call may still be acting: the redelivery must not run.
  EXPECT_EQ(handle(push("m-6")).status, 503);
  EXPECT_EQ(calls, 1);
  clock_->advance(std::chrono::seconds(60));
  EXPECT_EQ(handle(push("m-6")).status, 200);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(fences, (std::vector<std::int64_t>{1, 2})) << "the retry outranks the silent call";
}

TEST_F(IdempotentTest, NoKeyFailsClosedWith400UnlessUnguardedIsAllowed) {
  auto strict = wrap({.key = key_from_attribute("po_id")});
  const PushResponse r = strict(push("m-6"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body.find('\n'), r.body.size() - 1) << "one line";
  EXPECT_EQ(runs_, 0);

  auto lenient = wrap({.key = key_from_attribute("po_id"), .allow_unguarded = true});
  EXPECT_EQ(lenient(push("m-6")).status, 200);
  EXPECT_EQ(runs_, 1);
  EXPECT_EQ(logs_.count("unguarded"), 1);
}

TEST_F(IdempotentTest, UnguardedAnswersWhatTheHandlerAnswers) {
  int call = 0;
  auto handle = idempotent_response(
      {.backend = store_, .key = key_from_attribute("po_id"), .allow_unguarded = true},
      [&](const Delivery&) -> PushResponse {
        switch (++call) {
          case 1:
            return PushResponse{.status = 202, .headers = {{"X-Mine", "1"}}, .body = "queued"};
          case 2:
            throw Nack(503, "dependency down");
          default:
            throw 42;  // NOLINT(hicpp-exception-baseclass): not a std::exception, on purpose
        }
      });
  const PushResponse first = handle(push("m-6u"));
  EXPECT_EQ(first.status, 202);
  EXPECT_EQ(first.body, "queued");
  EXPECT_EQ(handle(push("m-6u")).status, 503) << "a Nack keeps its status";
  EXPECT_EQ(handle(push("m-6u")).status, 500) << "anything thrown is a nack, never an escape";
}

TEST_F(IdempotentTest, AKeyFunctionThatThrowsFailsClosed) {
  auto handle = wrap({.key = [](const Message&) -> std::string { throw std::out_of_range("x"); }});
  EXPECT_EQ(handle(push("m-7")).status, 400);
  EXPECT_EQ(runs_, 0);
}

TEST_F(IdempotentTest, AMalformedEnvelopeIs400WithItsReasonAndNeverRunsTheHandler) {
  auto handle = wrap({.allow_unguarded = true});
  PushRequest bad;
  bad.headers = {{"Content-Type", "application/json"}};
  bad.body = R"({"message": {"messageId": "m-8", "data": "***not base64***"}})";
  const PushResponse r = handle(bad);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("base64"));
  EXPECT_EQ(runs_, 0);
}

TEST_F(IdempotentTest, ABusinessKeyCatchesARepublishUnderANewMessageId) {
  auto handle = wrap({.key = key_from_attribute("po_id", "orders:")});
  EXPECT_EQ(handle(push("m-9", {{"po_id", "PO-1"}})).status, 200);
  EXPECT_EQ(handle(push("m-10", {{"po_id", "PO-1"}})).status, 204);
  EXPECT_EQ(runs_, 1);
  EXPECT_TRUE(store_->inspect("orders:PO-1").has_value());
}

TEST_F(IdempotentTest, AnUnwrappedDeliveryHasNoAttributesSoAnAttributeKeyFailsClosed) {
  // With write metadata Pub/Sub sends an attribute as a plain header (po_id: PO-9), which
  // cannot be told from a transport header: Message::attributes stays empty for this form.
  PushRequest unwrapped;
  unwrapped.headers = {{"Content-Type", "application/json"},
                       {"X-Goog-Pubsub-Message-Id", "u-1"},
                       {"X-Goog-Pubsub-Subscription-Name", "projects/p/subscriptions/raw"},
                       {"po_id", "PO-9"}};
  unwrapped.body = R"({"status": "shipped"})";
  auto by_attribute = wrap({.key = key_from_attribute("po_id", "orders:")});
  EXPECT_EQ(by_attribute(unwrapped).status, 400);
  EXPECT_EQ(runs_, 0);
  auto by_header = wrap({.key = key_from_header("po_id", "orders:")});
  EXPECT_EQ(by_header(unwrapped).status, 200);
  EXPECT_EQ(by_header(unwrapped).status, 204);
  EXPECT_EQ(runs_, 1);
  EXPECT_TRUE(store_->inspect("orders:PO-9").has_value());
}

TEST_F(IdempotentTest, OrderingKeyAndHeaderKeyHelpersResolve) {
  Message m;
  m.ordering_key = "customer-1";
  m.headers = {{"X-Request-Id", "abc"}};
  EXPECT_EQ(key_from_ordering_key("o:")(m), "o:customer-1");
  EXPECT_EQ(key_from_header("x-request-id", "h:")(m), "h:abc");
  EXPECT_EQ(key_from_header("missing")(m), "");
  EXPECT_EQ(key_from_message_id()(m), "");
}

// The message id (else the CloudEvent id) is the key, prefixed or not; a blank one is none.
TEST_F(IdempotentTest, MessageIdKeyHelperResolves) {
  Message m;
  m.message_id = "2070443601311540123";  // longer than a string keeps without a heap block
  EXPECT_EQ(key_from_message_id()(m), "2070443601311540123");
  EXPECT_EQ(key_from_message_id("orders:")(m), "orders:2070443601311540123");
  m.message_id = " \t ";
  EXPECT_EQ(key_from_message_id()(m), "");
  EXPECT_EQ(key_from_message_id("orders:")(m), "");
  m.message_id.reset();
  m.cloud_event_id = "ce-1";
  EXPECT_EQ(key_from_message_id()(m), "ce-1");
  EXPECT_EQ(key_from_message_id("e:")(m), "e:ce-1");
}

TEST_F(IdempotentTest, CompleteFailingAfterTheHandlerStillAcks) {
  auto faulty = std::make_shared<FaultyBackend>(*store_);
  faulty->fail_complete = true;
  auto handle = wrap({.backend = faulty});
  EXPECT_EQ(handle(push("m-11")).status, 200);
  EXPECT_EQ(logs_.count("complete_failed"), 1);
}

TEST_F(IdempotentTest, BeingFencedOutAfterTheHandlerStillAcksWithAnAlertableError) {
  auto faulty = std::make_shared<FaultyBackend>(*store_);
  faulty->fence_out_complete = true;
  auto handle = wrap({.backend = faulty});
  EXPECT_EQ(handle(push("m-12")).status, 200);
  EXPECT_EQ(logs_.count("fenced_out"), 1);
}

TEST_F(IdempotentTest, AStoreErrorBeforeTheHandlerIsANack) {
  auto faulty = std::make_shared<FaultyBackend>(*store_);
  faulty->fail_claim = true;
  auto handle = wrap({.backend = faulty});
  EXPECT_EQ(handle(push("m-13")).status, 503);
  EXPECT_EQ(runs_, 0);
}

TEST_F(IdempotentTest, AStoreErrorFromTheHandlersOwnCodeIsAHandlerFailure) {
  auto handle = idempotent({.backend = store_}, [](const Delivery&) {
    throw StoreError("the handler's own database is down");
  });
  EXPECT_EQ(handle(push("m-13b")).status, 500);
  EXPECT_EQ(logs_.count("handler_failed"), 1);
  EXPECT_EQ(logs_.count("store_error"), 0) << "the wrapper's store did not fail";
  // A handler failure releases the key: the redelivery runs.
  auto ok = wrap();
  EXPECT_EQ(ok(push("m-13b")).status, 200);
}

TEST_F(IdempotentTest, AKeyDoneWithForeignResultBytesIsADuplicate) {
  {
    // The same key completed by lock() elsewhere, with bytes that are not a stored response.
    auto held = lock("m-13c", *store_);
    held.complete("receipt");
  }
  auto handle = wrap({.replay_stored_response = true});
  EXPECT_EQ(handle(push("m-13c")).status, 204);
  EXPECT_EQ(handle(push("m-13c")).status, 204);
  EXPECT_EQ(runs_, 0);
  EXPECT_EQ(logs_.count("stored_result_unreadable"), 2);
}

TEST_F(IdempotentTest, OnDuplicateIsCalledAndAHookThatThrowsIsIgnored) {
  int hooks = 0;
  auto handle = wrap({.on_duplicate = [&](const Message&) {
    ++hooks;
    throw std::runtime_error("metrics down");
  }});
  EXPECT_EQ(handle(push("m-14")).status, 200);
  EXPECT_EQ(handle(push("m-14")).status, 204);
  EXPECT_EQ(hooks, 1);
  EXPECT_EQ(logs_.count("on_duplicate_failed"), 1);
}

TEST_F(IdempotentTest, TheBackendFactoryIsCalledOnceLazily) {
  std::atomic<int> built{0};
  auto handle = wrap({.backend_factory = [&] {
    ++built;
    return std::shared_ptr<LockBackend>(store_);
  }});
  EXPECT_EQ(built, 0);
  std::vector<std::jthread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { (void)handle(push("m-15-" + std::to_string(i))); });
  }
  threads.clear();
  EXPECT_EQ(built, 1);
  EXPECT_EQ(runs_, 8);
}

// One option keeps a long-running worker's store bounded: the wrapper runs a reclaimer for as
// long as the handler lives, started with the (lazily built) backend.
TEST_F(IdempotentTest, PurgeIntervalReclaimsExpiredRecordsInTheBackground) {
  {
    auto handle = wrap({.backend_factory = [&] { return std::shared_ptr<LockBackend>(store_); },
                        .purge_interval = std::chrono::milliseconds(5)});
    EXPECT_EQ(handle(push("m-purge")).status, 200);
    EXPECT_EQ(store_->stored_count(), 1U);
    clock_->advance(store_->ttl());  // expired; no write follows to sweep it
    for (int i = 0; i < 2000 && store_->stored_count() > 0; ++i) {  // a hang guard
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(store_->stored_count(), 0U);
  }  // the last copy of the handler stops the reclaimer
  EXPECT_THROW((void)wrap({.purge_interval = std::chrono::milliseconds(-1)}),
               std::invalid_argument);
  // Refused when the options are given, not by the first request's factory call, which would
  // leave the backend in use with no reclaimer.
  EXPECT_THROW((void)wrap({.backend_factory = [&] { return std::shared_ptr<LockBackend>(store_); },
                           .purge_interval = kMaxTtl + std::chrono::milliseconds(1)}),
               std::invalid_argument);
}

TEST_F(IdempotentTest, AFailingFactoryIsRetriedByTheNextRequest) {
  int attempts = 0;
  auto handle = wrap({.backend_factory = [&]() -> std::shared_ptr<LockBackend> {
    if (++attempts == 1) throw StoreError("cannot reach the store");
    return store_;
  }});
  EXPECT_EQ(handle(push("m-16")).status, 503);
  EXPECT_EQ(handle(push("m-16")).status, 200);
}

TEST_F(IdempotentTest, AuthenticationFailureIs401AndTheHandlerNeverRuns) {
  auto handle = wrap({.authenticate = [](const PushRequest& r) -> std::optional<std::string> {
    if (r.header("authorization")) return std::nullopt;
    return "no bearer token";
  }});
  const PushResponse r = handle(push("m-17"));
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.body, "no bearer token\n");
  EXPECT_EQ(runs_, 0);
}

TEST_F(IdempotentTest, DisabledByTheEnvironmentRunsUnguardedAndNeverBuildsTheBackend) {
  for (const char* value : {"1", "true", "YES", "On"}) {
    ::setenv("GCP_PUBSUB_IDEMPOTENCY_DISABLED", value, 1);
    EXPECT_TRUE(disabled_by_environment()) << value;
  }
  int built = 0;
  auto handle = wrap({.backend_factory = [&] {
    ++built;
    return std::shared_ptr<LockBackend>(store_);
  }});
  EXPECT_EQ(handle(push("m-18")).status, 200);
  EXPECT_EQ(handle(push("m-18")).status, 200);
  ::unsetenv("GCP_PUBSUB_IDEMPOTENCY_DISABLED");
  EXPECT_EQ(runs_, 2) << "a pass-through: the redelivery re-runs";
  EXPECT_EQ(built, 0);
  EXPECT_EQ(logs_.count("idempotency_disabled"), 1);
  ::setenv("GCP_PUBSUB_IDEMPOTENCY_DISABLED", "0", 1);
  EXPECT_FALSE(disabled_by_environment());
  ::unsetenv("GCP_PUBSUB_IDEMPOTENCY_DISABLED");
}

TEST_F(IdempotentTest, AResponseHandlersResponseIsAnsweredStoredAndReplayedByteForByte) {
  const std::string body("\0binary\xff", 9);
  int calls = 0;
  auto handle = idempotent_response({.backend = store_, .replay_stored_response = true},
                                    [&](const Delivery&) {
                                      ++calls;
                                      return PushResponse{202, {{"X-Upstream", "1"}}, body};
                                    });
  const PushResponse first = handle(push("m-20"));
  EXPECT_EQ(first.status, 202);
  EXPECT_EQ(first.body, body);
  const PushResponse replay = handle(push("m-20"));
  EXPECT_EQ(replay.status, 202);
  EXPECT_EQ(replay.body, body);
  EXPECT_EQ(find_header(replay.headers, "x-upstream"), std::optional<std::string_view>("1"));
  EXPECT_EQ(find_header(replay.headers, "idempotency-replayed"),
            std::optional<std::string_view>("true"));
  EXPECT_EQ(calls, 1);
}

TEST(AckSet, ExactlyTheStatusesPubSubAcks) {
  // Pub/Sub acks 102, 200, 201, 202 and 204; every other status, other 2xx included, nacks.
  for (int status = 100; status <= 599; ++status) {
    const bool acked =
        status == 102 || status == 200 || status == 201 || status == 202 || status == 204;
    EXPECT_EQ(is_ack(status), acked) << status;
  }
}

TEST_F(IdempotentTest, EveryAckStatusIsAnsweredAndStoredAndEveryOtherIsANack) {
  for (int status : {102, 200, 201, 202, 204, 203, 205, 206, 299, 301, 404, 429, 500}) {
    const std::string id = "m-ack-" + std::to_string(status);
    auto handle = idempotent_response(
        {.backend = store_}, [status](const Delivery&) { return PushResponse{.status = status}; });
    const int first = handle(push(id)).status;
    const int again = handle(push(id)).status;
    if (is_ack(status)) {
      // 102 acks, but no HTTP server can send it as a final answer: it goes as 200.
      EXPECT_EQ(first, status == 102 ? 200 : status);
      EXPECT_EQ(again, 204) << status << " was stored: the redelivery is a duplicate";
    } else {
      EXPECT_EQ(first, 500) << status << " is never passed to Pub/Sub as if it were an answer";
      EXPECT_EQ(again, 500) << status << " was not stored";
    }
  }
}

TEST_F(IdempotentTest, AHandlersProcessingStatusIsAnsweredAndReplayedAsAFinal200) {
  // A 1xx cannot be a final HTTP answer (the server would send 500, a nack), yet Pub/Sub acks
  // 102: the message ran, so it is acked now and on every replay.
  auto handle = idempotent_response(
      {.backend = store_, .replay_stored_response = true},
      [](const Delivery&) { return PushResponse{.status = 102, .body = "queued"}; });
  const PushResponse first = handle(push("m-processing"));
  const PushResponse replay = handle(push("m-processing"));
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "queued");
  EXPECT_EQ(replay.status, 200);
  EXPECT_EQ(replay.body, "queued");
  EXPECT_EQ(find_header(replay.headers, "idempotency-replayed"),
            std::optional<std::string_view>("true"));
}

TEST_F(IdempotentTest, AKeyOverTheLimitIs400WithoutAStoreCall) {
  auto faulty = std::make_shared<FaultyBackend>(*store_);
  auto handle = wrap({.backend = faulty, .key = key_from_attribute("po_id")});
  const PushResponse r =
      handle(push("m-long", nlohmann::json{{"po_id", std::string(kMaxKeyBytes + 1, 'k')}}));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body.find('\n'), r.body.size() - 1) << "one line";
  EXPECT_EQ(faulty->claims.load(), 0);
  EXPECT_EQ(runs_, 0);
}

// Issue 11, defect 6: a blank (whitespace-only) key is no key (seed 2: non-blank keys).
TEST_F(IdempotentTest, ABlankKeyIs400WithoutAStoreCall) {
  auto faulty = std::make_shared<FaultyBackend>(*store_);
  auto custom =
      wrap({.backend = faulty, .key = [](const Message&) { return std::string(" \t "); }});
  const PushResponse r = custom(push("m-blank"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body.find('\n'), r.body.size() - 1) << "one line";
  EXPECT_THAT(r.body, HasSubstr("blank"));
  // A blank attribute is a missing one, prefix or not: never one key shared by all of them.
  auto prefixed = wrap({.backend = faulty, .key = key_from_attribute("po_id", "orders:")});
  EXPECT_EQ(prefixed(push("m-blank-attr", nlohmann::json{{"po_id", "  "}})).status, 400);
  EXPECT_EQ(faulty->claims.load(), 0);
  EXPECT_EQ(runs_, 0);
  EXPECT_EQ(logs_.count("no_key"), 2);
  // Surrounding whitespace in a non-blank key is kept as it is: keys are bytes.
  EXPECT_EQ(prefixed(push("m-padded", nlohmann::json{{"po_id", " 42 "}})).status, 200);
  EXPECT_EQ(runs_, 1);
}

TEST_F(IdempotentTest, ANackChoosesTheStatusAndANonAckResponseIsNeverStored) {
  int calls = 0;
  auto handle = idempotent_response({.backend = store_}, [&](const Delivery&) -> PushResponse {
    ++calls;
    if (calls == 1) throw Nack(503, "upstream refused the connection");
    if (calls == 2) return PushResponse{404, {}, "not found"};
    return PushResponse{200, {}, "ok"};
  });
  const PushResponse first = handle(push("m-21"));
  EXPECT_EQ(first.status, 503);
  EXPECT_EQ(first.body, "upstream refused the connection\n");
  EXPECT_EQ(handle(push("m-21")).status, 500) << "a non-ack answer is a failure, not stored";
  EXPECT_EQ(handle(push("m-21")).status, 200);
  EXPECT_EQ(handle(push("m-21")).status, 204);
  EXPECT_EQ(calls, 3);
}

TEST(ResponseCodec, RoundTripsAndRefusesForeignBytes) {
  const PushResponse r{201, {{"A", "b"}, {"Set-Cookie", std::string("x\0y", 3)}}, "body"};
  const PushResponse back = Codec<PushResponse>::decode(Codec<PushResponse>::encode(r));
  EXPECT_EQ(back.status, 201);
  ASSERT_EQ(back.headers.size(), 2U);
  EXPECT_EQ(back.headers[1].value, std::string("x\0y", 3));
  EXPECT_EQ(back.body, "body");
  EXPECT_THROW((void)Codec<PushResponse>::decode("not cbor"), StoreError);
}

TEST(ResponseCodec, RoundTripsEveryLengthEncoding) {
  // CBOR writes a length inline below 24, then in 1, 2, 4 bytes: cross each boundary.
  for (const std::size_t n : {0UL, 23UL, 24UL, 255UL, 256UL, 65535UL, 65536UL}) {
    SCOPED_TRACE(n);
    PushResponse r{.status = 599, .body = std::string(n, '\xff')};
    for (std::size_t i = 0; i < std::min<std::size_t>(n, 30); ++i) {
      r.headers.push_back({"H" + std::to_string(i), std::string(i, 'v')});
    }
    const PushResponse back = Codec<PushResponse>::decode(Codec<PushResponse>::encode(r));
    EXPECT_EQ(back.status, 599);
    EXPECT_EQ(back.body, r.body);
    ASSERT_EQ(back.headers.size(), r.headers.size());
    for (std::size_t i = 0; i < r.headers.size(); ++i) {
      EXPECT_EQ(back.headers[i].name, r.headers[i].name);
      EXPECT_EQ(back.headers[i].value, r.headers[i].value);
    }
  }
}

TEST(ResponseCodec, DecodesWhatEarlierVersionsStored) {
  // Records written before the encoder was hand-written: nlohmann-json's to_cbor of the document.
  const auto bin = [](std::string_view s) {
    return nlohmann::json::binary_t(std::vector<std::uint8_t>(s.begin(), s.end()));
  };
  const nlohmann::json doc = {
      {"v", 1},
      {"status", 202},
      {"headers",
       nlohmann::json::array({nlohmann::json::array({bin("Content-Type"), bin("text/plain")})})},
      {"body", bin("stored")}};
  const auto cbor = nlohmann::json::to_cbor(doc);
  const PushResponse back = Codec<PushResponse>::decode(std::string(cbor.begin(), cbor.end()));
  EXPECT_EQ(back.status, 202);
  ASSERT_EQ(back.headers.size(), 1U);
  EXPECT_EQ(back.headers[0].value, "text/plain");
  EXPECT_EQ(back.body, "stored");
}

TEST_F(IdempotentTest, NoLogLineContainsTheKey) {
  auto faulty = std::make_shared<FaultyBackend>(*store_);
  auto handle = idempotent({.backend = faulty,
                            .key = key_from_attribute("po_id", "orders:"),
                            .on_duplicate = [](const Message&) { throw std::runtime_error("x"); }},
                           [](const Delivery& d) {
                             if (d.message.data == "fail") throw std::runtime_error("failed");
                           });
  const nlohmann::json secret = {{"po_id", "secret-123"}};
  (void)handle(push("a", secret, 1, "fail"));  // handler_failed
  (void)handle(push("a", secret));             // handled
  (void)handle(push("a", secret));             // duplicate + hook failure
  faulty->fail_complete = true;
  (void)handle(push("b", {{"po_id", "secret-123b"}}));  // complete_failed
  faulty->fail_complete = false;
  (void)store_->claim("orders:secret-123c", std::chrono::minutes(15));
  (void)handle(push("c", {{"po_id", "secret-123c"}}));  // contention
  EXPECT_GE(logs_.records().size(), 4U);
  EXPECT_THAT(logs_.all_text(), Not(HasSubstr("secret-123")));
}

}  // namespace
}  // namespace idempotency::pubsub
