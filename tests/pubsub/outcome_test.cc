// Typed outcomes: the push status table pinned row by row, and every path through idempotent()
// reported to on_outcome exactly once, with an outcome that agrees with the answer — so a
// metric counted from the outcome stays right whatever the table says.
#include "idempotency/pubsub/outcome.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <iterator>
#include <latch>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/guard.h"
#include "idempotency/key.h"
#include "idempotency/memory_lock.h"
#include "idempotency/pubsub/idempotent.h"
#include "push_envelope.h"
#include "support/faulty_backend.h"
#include "support/log_capture.h"
#include "support/stalling_claim_backend.h"

namespace idempotency::pubsub {
namespace {

using idempotency::testing::FaultyBackend;
using idempotency::testing::LogCapture;
using idempotency::testing::StallingClaimBackend;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::push;

constexpr DeliveryOutcome kEveryOutcome[] = {
    DeliveryOutcome::kHandled,       DeliveryOutcome::kJoined,
    DeliveryOutcome::kDuplicate,     DeliveryOutcome::kReplayed,
    DeliveryOutcome::kContention,    DeliveryOutcome::kHandlerNacked,
    DeliveryOutcome::kHandlerFailed, DeliveryOutcome::kOutcomeUnknown,
    DeliveryOutcome::kStoreError,    DeliveryOutcome::kMalformed,
    DeliveryOutcome::kNoKey,         DeliveryOutcome::kUnauthenticated,
    DeliveryOutcome::kUnguarded,
};

// A handler's own nack reason, as the gateway's forward step throws to say why it nacked.
class SupplierDown : public Nack {
 public:
  SupplierDown() : Nack(503, "supplier down") {}
};

// What on_outcome was told, copied out: its pointers live only during the call.
struct Seen {
  DeliveryOutcome outcome;
  const PushRequest* request;
  bool has_message;
  std::string error;  // what() of the deciding exception, "" when none
  bool supplier_down;
};

class Observed {
 public:
  std::function<void(const OutcomeEvent&)> hook() {
    return [this](const OutcomeEvent& e) {
      std::lock_guard lock(mutex_);
      seen_.push_back({e.outcome, e.request, e.message != nullptr,
                       e.error != nullptr ? e.error->what() : "",
                       dynamic_cast<const SupplierDown*>(e.error) != nullptr});
    };
  }
  std::vector<Seen> seen() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  std::vector<DeliveryOutcome> outcomes() const {
    std::vector<DeliveryOutcome> out;
    for (const Seen& s : seen()) out.push_back(s.outcome);
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Seen> seen_;
};

class OutcomeTest : public ::testing::Test {
 protected:
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::shared_ptr<InMemoryLock> store_ =
      std::make_shared<InMemoryLock>(BackendOptions{.clock = clock_});
  LogCapture logs_;
  Observed observed_;
  std::atomic<int> runs_{0};

  // A wrapper over `handler` that reports to observed_.
  PushHandler wrap(IdempotentOptions options, Handler handler) {
    if (!options.backend && !options.backend_factory) options.backend = store_;
    options.on_outcome = observed_.hook();
    return idempotent(std::move(options), std::move(handler));
  }
  PushHandler wrap(IdempotentOptions options = {}) {
    return wrap(std::move(options), [this](const Delivery&) { ++runs_; });
  }
};

// --- the table ------------------------------------------------------------------------------

TEST(PushStatusTable, EveryOutcomeHasItsStatusHeadersAndBody) {
  const PushResponse own{201, {{"X-Own", "1"}}, "mine"};
  EXPECT_EQ(push_response(DeliveryOutcome::kHandled, {.response = own}).body, "mine");
  EXPECT_EQ(push_response(DeliveryOutcome::kJoined, {.response = own}).status, 201);
  EXPECT_EQ(push_response(DeliveryOutcome::kUnguarded, {.response = own}).status, 201);

  const PushResponse plain = push_response(DeliveryOutcome::kHandled, {});
  EXPECT_EQ(plain.status, 200);
  EXPECT_EQ(plain.body, "ok\n");
  EXPECT_EQ(find_header(plain.headers, "content-type"),
            std::optional<std::string_view>("text/plain; charset=utf-8"));

  const PushResponse replayed = push_response(DeliveryOutcome::kReplayed, {.response = own});
  EXPECT_EQ(replayed.status, 201);
  EXPECT_EQ(replayed.body, "mine");
  EXPECT_EQ(find_header(replayed.headers, "x-own"), std::optional<std::string_view>("1"));
  EXPECT_EQ(find_header(replayed.headers, "idempotency-replayed"),
            std::optional<std::string_view>("true"));

  const PushResponse duplicate = push_response(DeliveryOutcome::kDuplicate, {});
  EXPECT_EQ(duplicate.status, 204);
  EXPECT_TRUE(duplicate.headers.empty());
  EXPECT_TRUE(duplicate.body.empty());

  const PushResponse held =
      push_response(DeliveryOutcome::kContention, {.retry_after = std::chrono::seconds(42)});
  EXPECT_EQ(held.status, 503);
  EXPECT_EQ(held.body, "in progress elsewhere; retry later\n");
  EXPECT_EQ(find_header(held.headers, "retry-after"), std::optional<std::string_view>("42"));
  EXPECT_EQ(find_header(push_response(DeliveryOutcome::kContention, {}).headers, "Retry-After"),
            std::optional<std::string_view>("1"));
  EXPECT_EQ(find_header(push_response(DeliveryOutcome::kContention,
                                      {.retry_after = std::chrono::seconds(-5)})
                            .headers,
                        "Retry-After"),
            std::optional<std::string_view>("1"));
  EXPECT_EQ(find_header(
                push_response(DeliveryOutcome::kContention, {.retry_after = std::chrono::hours(2)})
                    .headers,
                "Retry-After"),
            std::optional<std::string_view>("600"));

  const PushResponse nacked =
      push_response(DeliveryOutcome::kHandlerNacked, {.nack_status = 429, .reason = "slow down"});
  EXPECT_EQ(nacked.status, 429);
  EXPECT_EQ(nacked.body, "slow down\n");
  EXPECT_EQ(
      push_response(DeliveryOutcome::kHandlerNacked, {.nack_status = 204, .reason = "x"}).status,
      500)
      << "a nack is never answered with a status Pub/Sub acks";

  EXPECT_EQ(push_response(DeliveryOutcome::kHandlerFailed, {}).body, "handler failed\n");
  EXPECT_EQ(push_response(DeliveryOutcome::kHandlerFailed, {}).status, 500);
  EXPECT_EQ(push_response(DeliveryOutcome::kOutcomeUnknown, {}).status, 503);
  EXPECT_FALSE(
      find_header(push_response(DeliveryOutcome::kOutcomeUnknown, {}).headers, "Retry-After"));
  EXPECT_EQ(push_response(DeliveryOutcome::kStoreError, {}).body,
            "idempotency store unavailable; retry later\n");
  EXPECT_EQ(push_response(DeliveryOutcome::kStoreError, {}).status, 503);
  EXPECT_EQ(push_response(DeliveryOutcome::kMalformed, {.reason = "bad"}).status, 400);
  EXPECT_EQ(push_response(DeliveryOutcome::kNoKey, {.reason = "no key"}).body, "no key\n");
  EXPECT_EQ(push_response(DeliveryOutcome::kUnauthenticated, {.reason = "no token"}).status, 401);
}

TEST(PushStatusTable, WorkDoneIsAnAckAndEverythingElseANack) {
  const std::set<DeliveryOutcome> acked = {DeliveryOutcome::kHandled, DeliveryOutcome::kJoined,
                                           DeliveryOutcome::kDuplicate, DeliveryOutcome::kReplayed,
                                           DeliveryOutcome::kUnguarded};
  for (DeliveryOutcome o : kEveryOutcome) {
    const PushResponse r = push_response(o, {.nack_status = 503, .reason = "why"});
    EXPECT_EQ(is_ack(r.status), acked.contains(o)) << to_string(o);
  }
}

TEST(PushStatusTable, EveryOutcomeHasItsOwnName) {
  std::set<std::string_view> names;
  for (DeliveryOutcome o : kEveryOutcome) {
    EXPECT_NE(to_string(o), "unknown");
    names.insert(to_string(o));
  }
  EXPECT_EQ(names.size(), std::size(kEveryOutcome));
  static_assert(to_string(DeliveryOutcome::kHandled) == "handled");
  static_assert(to_string(DeliveryOutcome::kStoreError) == "store_error");
}

// --- every path, observed -------------------------------------------------------------------

TEST_F(OutcomeTest, HandledThenDuplicateEachReportedOnceWithTheRequestAndMessage) {
  auto handle = wrap();
  const PushRequest first = push("m-1");
  const PushRequest again = push("m-1");
  EXPECT_EQ(handle(first).status, 200);
  EXPECT_EQ(handle(again).status, 204);
  const auto seen = observed_.seen();
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[0].outcome, DeliveryOutcome::kHandled);
  EXPECT_EQ(seen[0].request, &first);
  EXPECT_TRUE(seen[0].has_message);
  EXPECT_EQ(seen[0].error, "");
  EXPECT_EQ(seen[1].outcome, DeliveryOutcome::kDuplicate);
  EXPECT_EQ(seen[1].request, &again);
}

TEST_F(OutcomeTest, TheHandlerIsGivenTheRequestItsMessageCameIn) {
  const PushRequest request = push("m-req");
  const PushRequest* given = nullptr;
  auto handle = wrap({}, [&](const Delivery& d) { given = d.request; });
  EXPECT_EQ(handle(request).status, 200);
  EXPECT_EQ(given, &request);
}

TEST_F(OutcomeTest, AStoredResponseIsReplayedOnlyWhenAskedElseADuplicate) {
  auto replaying = idempotent_response(
      {.backend = store_, .on_outcome = observed_.hook(), .replay_stored_response = true},
      [](const Delivery&) { return PushResponse{.status = 202, .body = "queued"}; });
  EXPECT_EQ(replaying(push("m-2")).status, 202);
  const PushResponse replay = replaying(push("m-2"));
  EXPECT_EQ(replay.status, 202);
  EXPECT_EQ(find_header(replay.headers, "Idempotency-Replayed"),
            std::optional<std::string_view>("true"));
  auto plain = wrap();
  EXPECT_EQ(plain(push("m-2")).status, 204) << "the same stored record, not replayed";
  EXPECT_THAT(observed_.outcomes(),
              ElementsAre(DeliveryOutcome::kHandled, DeliveryOutcome::kReplayed,
                          DeliveryOutcome::kDuplicate));
}

TEST_F(OutcomeTest, AConcurrentDuplicateOnThisInstanceIsJoined) {
  auto faulty = std::make_shared<FaultyBackend>(*store_);
  std::latch inside(1);
  std::latch finish(1);
  auto handle = wrap({.backend = faulty}, [&](const Delivery&) {
    inside.count_down();
    finish.wait();
  });
  int second = 0;
  std::jthread a([&] { EXPECT_EQ(handle(push("m-3")).status, 200); });
  inside.wait();
  std::jthread b([&] { second = handle(push("m-3")).status; });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  finish.count_down();
  a.join();
  b.join();
  const auto outcomes = observed_.outcomes();
  ASSERT_EQ(outcomes.size(), 2U);
  EXPECT_EQ(outcomes[0] == DeliveryOutcome::kHandled ? outcomes[1] : outcomes[0],
            faulty->claims.load() == 1 ? DeliveryOutcome::kJoined : DeliveryOutcome::kDuplicate)
      << "a caller that never claimed joined; one that came late found the key done";
  EXPECT_EQ(second, faulty->claims.load() == 1 ? 200 : 204);
}

TEST_F(OutcomeTest, ALiveHolderElsewhereAndTheHandlersOwnMutexAreContention) {
  (void)store_->claim("m-4", std::chrono::minutes(15));
  (void)store_->claim("po:7", std::chrono::minutes(15));
  auto handle = wrap({}, [&](const Delivery& d) {
    if (d.message.message_id == "m-5") {
      auto serialized = mutex("po:7", *store_);
    }
  });
  const PushResponse held = handle(push("m-4"));
  const PushResponse mutexed = handle(push("m-5"));
  EXPECT_EQ(held.status, 503);
  EXPECT_EQ(mutexed.status, 503);
  EXPECT_EQ(find_header(mutexed.headers, "Retry-After"), std::optional<std::string_view>("1"));
  EXPECT_THAT(observed_.outcomes(),
              ElementsAre(DeliveryOutcome::kContention, DeliveryOutcome::kContention));
}

TEST_F(OutcomeTest, AStoreFailingBeforeTheHandlerIsAStoreErrorWithTheStoresException) {
  auto faulty = std::make_shared<FaultyBackend>(*store_);
  faulty->fail_claim = true;
  auto handle = wrap({.backend = faulty});
  EXPECT_EQ(handle(push("m-6")).status, 503);
  const auto seen = observed_.seen();
  ASSERT_EQ(seen.size(), 1U);
  EXPECT_EQ(seen[0].outcome, DeliveryOutcome::kStoreError);
  EXPECT_EQ(seen[0].error, "injected: claim failed");
  EXPECT_EQ(runs_, 0);
}

TEST_F(OutcomeTest, DeliveriesJoinedToAClaimThatFailsAreStoreErrorsNotJoined) {
  // Below the stalling claim every other claim fails too, so a caller that comes too late to
  // join meets a store error of its own: the outcome is the same whatever the timing.
  FaultyBackend down(*store_);
  down.fail_claim = true;
  auto stalling = std::make_shared<StallingClaimBackend>(down);
  auto handle = wrap({.backend = stalling});
  std::vector<std::jthread> callers;
  callers.emplace_back([&] { EXPECT_EQ(handle(push("m-7")).status, 503); });
  stalling->claim_entered.wait();
  for (int i = 0; i < 3; ++i) {
    callers.emplace_back([&] { EXPECT_EQ(handle(push("m-7")).status, 503); });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stalling->fail_claim.count_down();
  callers.clear();
  const auto seen = observed_.seen();
  ASSERT_EQ(seen.size(), 4U);
  for (const Seen& s : seen) {
    EXPECT_EQ(s.outcome, DeliveryOutcome::kStoreError);
    EXPECT_THAT(s.error, HasSubstr("injected"));
  }
  EXPECT_EQ(runs_, 0);
}

TEST_F(OutcomeTest, AMalformedOrUnauthenticatedRequestHasNoMessage) {
  auto handle = wrap({.authenticate = [](const PushRequest& r) -> std::optional<std::string> {
    if (r.header("authorization")) return std::nullopt;
    return "no bearer token";
  }});
  EXPECT_EQ(handle(push("m-8")).status, 401);
  PushRequest bad;
  bad.headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer x"}};
  bad.body = R"({"message": {"messageId": "m-9", "data": "***not base64***"}})";
  EXPECT_EQ(handle(bad).status, 400);
  const auto seen = observed_.seen();
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[0].outcome, DeliveryOutcome::kUnauthenticated);
  EXPECT_FALSE(seen[0].has_message);
  EXPECT_EQ(seen[1].outcome, DeliveryOutcome::kMalformed);
  EXPECT_FALSE(seen[1].has_message);
  EXPECT_EQ(seen[1].request, &bad);
  EXPECT_EQ(runs_, 0);
}

TEST_F(OutcomeTest, NoKeyFailsClosedUnlessUnguardedIsAllowed) {
  auto strict = wrap({.key = key_from_attribute("po_id")});
  EXPECT_EQ(strict(push("m-10")).status, 400);
  auto over_limit = wrap({.key = key_from_attribute("po_id")});
  EXPECT_EQ(over_limit(push("m-11", {{"po_id", std::string(kMaxKeyBytes + 1, 'k')}})).status, 400);
  auto lenient = wrap({.key = key_from_attribute("po_id"), .allow_unguarded = true});
  EXPECT_EQ(lenient(push("m-12")).status, 200);
  EXPECT_THAT(observed_.outcomes(), ElementsAre(DeliveryOutcome::kNoKey, DeliveryOutcome::kNoKey,
                                                DeliveryOutcome::kUnguarded));
  EXPECT_EQ(runs_, 1);
}

TEST_F(OutcomeTest, DisabledByTheEnvironmentEveryDeliveryIsUnguardedAndItsFailuresAreTheSame) {
  // The variable is read when the wrapper is built, before any other thread runs here.
  ::setenv("GCP_PUBSUB_IDEMPOTENCY_DISABLED", "1", 1);  // NOLINT(concurrency-mt-unsafe)
  int calls = 0;
  auto handle = wrap({}, [&](const Delivery&) {
    if (++calls == 2) throw SupplierDown();
    if (calls == 3) throw std::runtime_error("boom");
  });
  ::unsetenv("GCP_PUBSUB_IDEMPOTENCY_DISABLED");  // NOLINT(concurrency-mt-unsafe)
  EXPECT_EQ(handle(push("m-13")).status, 200);
  EXPECT_EQ(handle(push("m-13")).status, 503);
  EXPECT_EQ(handle(push("m-13")).status, 500);
  const auto seen = observed_.seen();
  ASSERT_EQ(seen.size(), 3U);
  EXPECT_EQ(seen[0].outcome, DeliveryOutcome::kUnguarded);
  EXPECT_EQ(seen[1].outcome, DeliveryOutcome::kHandlerNacked);
  EXPECT_TRUE(seen[1].supplier_down);
  EXPECT_EQ(seen[2].outcome, DeliveryOutcome::kHandlerFailed);
  EXPECT_EQ(seen[2].error, "boom");
}

TEST_F(OutcomeTest, AHandlersNackIsReportedWithItsOwnExceptionType) {
  int calls = 0;
  auto handle = wrap({}, [&](const Delivery&) {
    if (++calls == 1) throw SupplierDown();
    throw Nack(429, "slow down");
  });
  EXPECT_EQ(handle(push("m-14")).status, 503);
  EXPECT_EQ(handle(push("m-14")).status, 429);
  const auto seen = observed_.seen();
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[0].outcome, DeliveryOutcome::kHandlerNacked);
  EXPECT_TRUE(seen[0].supplier_down) << "an observer can tell the handler's own causes apart";
  EXPECT_EQ(seen[1].outcome, DeliveryOutcome::kHandlerNacked);
  EXPECT_FALSE(seen[1].supplier_down);
  EXPECT_EQ(seen[1].error, "slow down");
}

TEST_F(OutcomeTest, AJoinedDeliveryIsToldTheOwnersNack) {
  std::latch inside(1);
  std::latch finish(1);
  auto handle = wrap({}, [&](const Delivery&) {
    inside.count_down();
    finish.wait();
    throw SupplierDown();
  });
  std::jthread a([&] { EXPECT_EQ(handle(push("m-15")).status, 503); });
  inside.wait();
  std::jthread b([&] { (void)handle(push("m-15")); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  finish.count_down();
  a.join();
  b.join();
  // A joiner is handed the owner's exception; one too late to join runs the handler itself,
  // which throws the same type: either way the cause reaches the observer.
  const auto seen = observed_.seen();
  ASSERT_EQ(seen.size(), 2U);
  for (const Seen& s : seen) {
    EXPECT_EQ(s.outcome, DeliveryOutcome::kHandlerNacked);
    EXPECT_TRUE(s.supplier_down);
  }
}

TEST_F(OutcomeTest, AnUnknownOutcomeIsReportedAndTheKeyStaysHeld) {
  auto handle = wrap({.lease = std::chrono::seconds(60)},
                     [](const Delivery&) { throw OutcomeUnknown("supplier went silent"); });
  EXPECT_EQ(handle(push("m-16")).status, 503);
  EXPECT_EQ(handle(push("m-16")).status, 503);
  const auto seen = observed_.seen();
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_EQ(seen[0].outcome, DeliveryOutcome::kOutcomeUnknown);
  EXPECT_EQ(seen[0].error, "supplier went silent");
  EXPECT_EQ(seen[1].outcome, DeliveryOutcome::kContention) << "held until the lease lapses";
}

TEST_F(OutcomeTest, AHandlerThatThrowsIsAHandlerFailureWhateverItThrows) {
  int calls = 0;
  auto handle = wrap({}, [&](const Delivery&) {
    ++calls;
    if (calls == 1) throw std::runtime_error("supplier timeout");
    if (calls == 2) throw StoreError("the handler's own database");
    throw 7;  // NOLINT(hicpp-exception-baseclass): a non-standard throw
  });
  for (int i = 0; i < 3; ++i) EXPECT_EQ(handle(push("m-17")).status, 500);
  const auto seen = observed_.seen();
  ASSERT_EQ(seen.size(), 3U);
  for (const Seen& s : seen) EXPECT_EQ(s.outcome, DeliveryOutcome::kHandlerFailed);
  EXPECT_EQ(seen[0].error, "supplier timeout");
  EXPECT_EQ(seen[1].error, "the handler's own database");
  EXPECT_EQ(seen[2].error, "") << "nothing to point at";
}

TEST_F(OutcomeTest, AnObserverThatThrowsIsLoggedAndChangesNoAnswer) {
  auto handle = idempotent({.backend = store_,
                            .key = key_from_attribute("po_id", "orders:"),
                            .on_outcome = [](const OutcomeEvent&) { throw 1; }},
                           [](const Delivery&) {});
  EXPECT_EQ(handle(push("m-18", {{"po_id", "secret-42"}})).status, 200);
  EXPECT_EQ(handle(push("m-18", {{"po_id", "secret-42"}})).status, 204);
  EXPECT_EQ(logs_.count("on_outcome_failed"), 2);
  EXPECT_THAT(logs_.all_text(), Not(HasSubstr("secret-42")));
  EXPECT_THAT(logs_.all_text(), HasSubstr("duplicate"));
}

}  // namespace
}  // namespace idempotency::pubsub
