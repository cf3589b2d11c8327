// once() on the in-memory backend: every statement of the second seed as a test — executed,
// joined and replayed; failures never cached; the ttl from success; cancellation of a joined
// caller and of the owner (hand-off); re-entry; key validation.
#include "idempotency/once.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <latch>
#include <numeric>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/forwarding_backend.h"
#include "idempotency/guard.h"
#include "idempotency/json_codec.h"
#include "idempotency/memory_lock.h"
#include "support/eventually.h"
#include "support/faulty_backend.h"
#include "support/joiners.h"
#include "support/log_capture.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::Not;

class OnceTest : public ::testing::Test {
 protected:
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  InMemoryLock store_{BackendOptions{.ttl = std::chrono::hours(1), .clock = clock_}};
  FaultyBackend backend_{store_};
};

TEST_F(OnceTest, TheFirstCallExecutesAndALaterCallReplaysTheStoredResult) {
  int runs = 0;
  auto op = [&] {
    ++runs;
    return std::string("payment-1");
  };
  auto first = once("create-payment:r-123", backend_, op);
  auto second = once("create-payment:r-123", backend_, op);
  EXPECT_EQ(first.status(), Status::kExecuted);
  EXPECT_FALSE(first.cache_hit());
  EXPECT_EQ(first.value(), "payment-1");
  EXPECT_EQ(first.fence(), 1);
  EXPECT_EQ(second.status(), Status::kReplayed);
  EXPECT_TRUE(second.cache_hit());
  EXPECT_EQ(second.value(), "payment-1");
  EXPECT_EQ(runs, 1);
}

TEST_F(OnceTest, ConcurrentCallersJoinOneExecutionAndShareTheSameValueObject) {
  constexpr int kJoiners = 6;
  std::atomic<int> runs{0};
  std::latch release_owner(1);
  auto op = [&] {
    ++runs;
    release_owner.wait();
    return std::string("result");
  };
  std::vector<Outcome<std::string>> outcomes;
  std::mutex outcomes_mutex;
  std::vector<std::jthread> threads;
  threads.emplace_back([&] {
    auto o = once("k", backend_, op);
    std::lock_guard l(outcomes_mutex);
    outcomes.push_back(o);
  });
  ASSERT_TRUE(eventually([&] { return runs == 1; }));
  for (int i = 0; i < kJoiners; ++i) {
    threads.emplace_back([&] {
      auto o = once("k", backend_, op);
      std::lock_guard l(outcomes_mutex);
      outcomes.push_back(o);
    });
  }
  std::this_thread::sleep_for(milliseconds(50));  // let the joiners arrive (not a timing assert)
  release_owner.count_down();
  threads.clear();
  ASSERT_EQ(outcomes.size(), kJoiners + 1U);
  int executed = 0;
  const std::string* shared = outcomes.front().shared_value().get();
  for (const auto& o : outcomes) {
    executed += o.status() == Status::kExecuted ? 1 : 0;
    EXPECT_TRUE(o.status() == Status::kExecuted || o.status() == Status::kJoined ||
                o.status() == Status::kReplayed);
    EXPECT_EQ(o.shared_value().get() == shared || o.status() == Status::kReplayed, true);
  }
  EXPECT_EQ(executed, 1);
  EXPECT_EQ(runs, 1);
}

TEST_F(OnceTest, JoinedCallersDoNotClaimTheBackendAgain) {
  std::latch started(1);
  std::latch release_owner(1);
  std::atomic<int> joined{0};
  std::jthread owner([&] {
    (void)once("k", backend_, [&] {
      started.count_down();
      release_owner.wait();
    });
  });
  started.wait();
  auto call = [&] {
    if (once("k", backend_, [] {}).status() == Status::kJoined) ++joined;
  };
  std::vector<std::jthread> joiners = start_joiners(call, 4);
  release_owner.count_down();
  joiners.clear();
  owner.join();
  // Every joiner arrived while the owner ran, joined it, and never touched the store.
  EXPECT_EQ(joined.load(), 4);
  EXPECT_EQ(backend_.claims, 1);
}

struct PaymentDeclined : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the owner of "k" and one caller joined to it caught, each the address of its E (null:
// none), and how often the operation ran. The operation throws `error()` once released; the
// joiner is joined before that.
template <class E>
struct SharedFailure {
  const void* owner = nullptr;
  const void* joiner = nullptr;
  int runs = 0;
};

template <class E, class MakeError>
SharedFailure<E> owner_and_joiner_failing(LockBackend& backend, MakeError error) {
  std::latch started(1);
  std::latch release_owner(1);
  std::atomic<int> runs{0};
  auto failing = [&] {
    // Only the first run signals: a second one (a joiner that came too late and ran on its
    // own, which the test then reports) must not count the latch below zero.
    if (runs++ == 0) started.count_down();
    release_owner.wait();
    throw error();
    return std::string();
  };
  std::atomic<const void*> owner_error{nullptr};
  std::atomic<const void*> joiner_error{nullptr};
  const auto call = [&](std::atomic<const void*>& caught) {
    try {
      (void)once("k", backend, failing);
    } catch (const E& e) {
      caught = &e;
    }
  };
  std::jthread owner([&] { call(owner_error); });
  started.wait();
  auto join = [&] { call(joiner_error); };
  std::vector<std::jthread> joiner = start_joiners(join, 1);
  release_owner.count_down();
  owner.join();
  joiner.clear();
  return {owner_error.load(), joiner_error.load(), runs.load()};
}

TEST_F(OnceTest, FailuresAreNotStoredAndJoinedCallersReceiveTheSameException) {
  const auto caught = owner_and_joiner_failing<PaymentDeclined>(
      backend_, [] { return PaymentDeclined("declined"); });
  ASSERT_NE(caught.owner, nullptr);
  ASSERT_NE(caught.joiner, nullptr);
  EXPECT_EQ(caught.owner, caught.joiner) << "the same exception object, not a copy";
  EXPECT_EQ(caught.runs, 1) << "the joined caller received the owner's failure, it did not re-run";
  // Nothing was stored: the next call executes again.
  auto later = once("k", backend_, [] { return std::string("ok"); });
  EXPECT_EQ(later.status(), Status::kExecuted);
  EXPECT_EQ(later.value(), "ok");
}

TEST_F(OnceTest, AnUnknownOutcomeKeepsTheKeyHeldUntilItsLeaseLapses) {
  int runs = 0;
  const OnceOptions options{.lease = milliseconds(30'000)};
  auto went_silent = [&]() -> std::string {
    ++runs;
    throw OutcomeUnknown("the payment service did not answer");
  };
  EXPECT_THROW((void)once("k", backend_, went_silent, options), OutcomeUnknown);
  // Released, the key would be reclaimable now; held, a retry during the lease finds it busy.
  auto during = once(
      "k", backend_, [&] { return std::string("again"); }, options);
  EXPECT_EQ(during.status(), Status::kInProgress);
  EXPECT_EQ(runs, 1);
  clock_->advance(milliseconds(30'000));
  auto after = once(
      "k", backend_, [&] { return std::string("again"); }, options);
  EXPECT_EQ(after.status(), Status::kExecuted);
  EXPECT_EQ(after.fence(), 2) << "the retry outranks the silent call at the sink";
}

TEST_F(OnceTest, AReleaseThrowingANonStandardExceptionDoesNotTerminate) {
  backend_.fail_release_oddly = true;
  EXPECT_THROW((void)once("k", backend_, []() -> std::string { throw PaymentDeclined("no"); }),
               PaymentDeclined);
  {
    // The guard's destructor, unwinding: it must swallow the release failure, whatever it is.
    EXPECT_THROW(
        {
          auto held = lock("g", backend_);
          throw PaymentDeclined("no");
        },
        PaymentDeclined);
  }
  EXPECT_EQ(backend_.releases.load(), 2);
}

TEST_F(OnceTest, TheTtlIsMeasuredFromSuccessAndEndsExactlyAtTtl) {
  int runs = 0;
  auto op = [&] { return std::to_string(++runs); };
  EXPECT_EQ(once("k", backend_, op).status(), Status::kExecuted);
  clock_->advance(std::chrono::hours(1) - milliseconds(1));
  EXPECT_EQ(once("k", backend_, op).status(), Status::kReplayed);
  clock_->advance(milliseconds(1));
  auto again = once("k", backend_, op);
  EXPECT_EQ(again.status(), Status::kExecuted);
  EXPECT_EQ(again.value(), "2");
}

TEST_F(OnceTest, ACancelledJoinedCallerAloneGetsCancelled) {
  std::latch started(1);
  std::latch release_owner(1);
  std::jthread owner_thread;
  std::atomic<bool> owner_got_value{false};
  owner_thread = std::jthread([&] {
    auto o = once("k", backend_, [&] {
      started.count_down();
      release_owner.wait();
      return std::string("v");
    });
    owner_got_value = o.status() == Status::kExecuted && o.value() == "v";
  });
  started.wait();
  std::stop_source cancel;
  std::atomic<bool> joiner_cancelled{false};
  std::jthread joiner([&] {
    try {
      (void)once(
          "k", backend_, [] { return std::string("never"); },
          OnceOptions{.stop = cancel.get_token()});
    } catch (const Cancelled&) {
      joiner_cancelled = true;
    }
  });
  std::atomic<bool> other_joined{false};
  std::jthread other([&] {
    other_joined = once("k", backend_, [] { return std::string("never"); }).value() == "v";
  });
  std::this_thread::sleep_for(milliseconds(30));
  cancel.request_stop();
  joiner.join();
  EXPECT_TRUE(joiner_cancelled);
  release_owner.count_down();  // the shared execution went on regardless
  owner_thread.join();
  other.join();
  EXPECT_TRUE(owner_got_value);
  EXPECT_TRUE(other_joined);
}

TEST_F(OnceTest, ACancelledOwnerReleasesTheKeyAndAJoinerTakesOver) {
  std::latch owner_started(1);
  std::atomic<int> runs{0};
  std::stop_source owner_cancel;
  std::atomic<bool> owner_cancelled{false};
  std::jthread owner([&] {
    try {
      (void)once(
          "k", backend_,
          [&](std::stop_token token) {
            ++runs;
            owner_started.count_down();
            while (!token.stop_requested()) std::this_thread::sleep_for(milliseconds(1));
            throw std::runtime_error("interrupted");
            return std::string();
          },
          OnceOptions{.stop = owner_cancel.get_token()});
    } catch (const Cancelled&) {
      owner_cancelled = true;
    }
  });
  owner_started.wait();
  constexpr int kJoiners = 3;
  std::vector<Status> statuses(kJoiners);
  std::vector<std::jthread> joiners;
  for (int i = 0; i < kJoiners; ++i) {
    joiners.emplace_back([&, i] {
      statuses[i] = once("k", backend_, [&] {
                      ++runs;
                      return std::string("second");
                    }).status();
    });
  }
  std::this_thread::sleep_for(milliseconds(50));
  owner_cancel.request_stop();
  owner.join();
  joiners.clear();
  EXPECT_TRUE(owner_cancelled);
  EXPECT_EQ(backend_.releases, 1) << "the cancelled owner released the key at once";
  int executed = 0;
  for (Status s : statuses) executed += s == Status::kExecuted ? 1 : 0;
  EXPECT_EQ(executed, 1) << "exactly one joiner became the new owner";
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(once("k", backend_, [] { return std::string("x"); }).value(), "second");
}

// Only the owner's own cancellation hands the flight off. An operation that throws Cancelled
// while nobody cancelled its owner (a nested call cancelled by its own token, say) failed: the
// joiner receives that very exception and does not run the operation again (seed 004: owner
// and joined callers receive the same exception; joined callers are not cancelled).
TEST_F(OnceTest, ACancelledThrownByTheOperationItselfIsAFailureTheJoinersShare) {
  const auto caught = owner_and_joiner_failing<Cancelled>(backend_, [] { return Cancelled(); });
  EXPECT_EQ(caught.runs, 1) << "the joiner ran the operation again instead of sharing its failure";
  ASSERT_NE(caught.owner, nullptr);
  EXPECT_EQ(caught.owner, caught.joiner);
}

TEST_F(OnceTest, AnAlreadyStoppedCallerIsCancelledBeforeTouchingTheStore) {
  std::stop_source stopped;
  stopped.request_stop();
  EXPECT_THROW((void)once(
                   "k", backend_, [] {}, OnceOptions{.stop = stopped.get_token()}),
               Cancelled);
  EXPECT_EQ(backend_.claims, 0);
  EXPECT_EQ(once("k", backend_, [] {}).status(), Status::kExecuted);
}

TEST_F(OnceTest, ReentryIsAnErrorNotADeadlock) {
  const std::string key = "create-payment:secret-777";
  try {
    (void)once(key, backend_, [&] { (void)once(key, backend_, [] {}); });
    FAIL() << "expected ReentryError";
  } catch (const ReentryError& e) {
    EXPECT_EQ(e.key(), key);
    EXPECT_THAT(e.what(), Not(HasSubstr("secret-777")));
  }
  EXPECT_THROW((void)once(key + "2", backend_, [&] { auto g = lock(key + "2", backend_); }),
               ReentryError);
  {
    auto held = lock(key + "3", backend_);
    EXPECT_THROW((void)once(key + "3", backend_, [] {}), ReentryError);
    EXPECT_THROW((void)lock(key + "3", backend_), ReentryError);
    EXPECT_THROW((void)mutex(key + "3", backend_), ReentryError);
  }
  // Once finished, the same thread uses the keys normally.
  EXPECT_EQ(once(key + "3", backend_, [] {}).status(), Status::kReplayed);
  EXPECT_NO_THROW({ auto g = mutex(key + "4", backend_); });
  EXPECT_NO_THROW({ auto g = mutex(key + "4", backend_); });
}

TEST_F(OnceTest, AnotherThreadWaitingOnAHeldGuardIsNotReentry) {
  auto held = lock("k", backend_);
  std::jthread other([&] { EXPECT_EQ(once("k", backend_, [] {}).status(), Status::kInProgress); });
}

TEST_F(OnceTest, BadKeysPropagateBeforeAnyBackendCall) {
  EXPECT_THROW((void)once("", backend_, [] {}), std::invalid_argument);
  auto key_fn = [](const std::string& id) -> std::string {
    if (id.empty()) throw std::domain_error("no request id");
    return "p:" + id;
  };
  auto create = policy(key_fn, backend_).apply([](const std::string& id) { return id + "!"; });
  EXPECT_THROW((void)create(""), std::domain_error);
  auto empty_key = policy([](int) { return std::string(); }, backend_).apply([](int) {});
  EXPECT_THROW((void)empty_key(1), std::invalid_argument);
  EXPECT_EQ(backend_.claims, 0);
}

TEST_F(OnceTest, APolicyKeysTheOperationByItsArguments) {
  int runs = 0;
  auto create_payment =
      policy([](const std::string& id, int) { return "create-payment:" + id; }, backend_)
          .apply([&](const std::string& id, int cents) {
            ++runs;
            return id + ":" + std::to_string(cents);
          });
  EXPECT_EQ(create_payment("r-1", 2499).status(), Status::kExecuted);
  auto replay = create_payment("r-1", 2499);
  EXPECT_EQ(replay.status(), Status::kReplayed);
  EXPECT_EQ(replay.value(), "r-1:2499");
  EXPECT_EQ(create_payment("r-2", 100).status(), Status::kExecuted);
  EXPECT_EQ(runs, 2);
}

TEST_F(OnceTest, AKeyDoneByLockIsADuplicateWithoutAValue) {
  { auto held = lock("k", backend_); }
  auto o = once("k", backend_, [] { return std::string("x"); });
  EXPECT_EQ(o.status(), Status::kDuplicate);
  EXPECT_FALSE(o.has_value());
  EXPECT_THROW((void)o.value(), std::logic_error);
}

TEST_F(OnceTest, VoidOperationsStoreNothingAndReplay) {
  int runs = 0;
  EXPECT_EQ(once("k", backend_, [&] { ++runs; }).status(), Status::kExecuted);
  EXPECT_EQ(once("k", backend_, [&] { ++runs; }).status(), Status::kReplayed);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(store_.inspect("k")->result, std::nullopt);
}

TEST_F(OnceTest, BytesResultsRoundTrip) {
  const std::vector<std::byte> bytes = {std::byte{0}, std::byte{0xff}, std::byte{7}};
  EXPECT_EQ(once("k", backend_, [&] { return bytes; }).value(), bytes);
  EXPECT_EQ(once("k", backend_, [] { return std::vector<std::byte>(); }).value(), bytes);
}

TEST_F(OnceTest, AStoreErrorAfterSuccessIsLoggedAndTheValueStillReturned) {
  LogCapture logs;
  backend_.fail_complete = true;
  auto o = once("k", backend_, [] { return std::string("v"); });
  EXPECT_EQ(o.status(), Status::kExecuted);
  EXPECT_EQ(o.value(), "v");
  EXPECT_EQ(logs.count("complete_failed"), 1);
}

// A codec whose encode() always throws, as JsonCodec does for a string that is not UTF-8.
struct UnencodableCodec {
  static std::string encode(const std::string&) { throw std::runtime_error("cannot encode"); }
  static std::string decode(std::string_view bytes) { return std::string(bytes); }
};

TEST_F(OnceTest, AResultItsCodecCannotEncodeNeverRunsTheOperationAgain) {
  LogCapture logs;
  int runs = 0;
  auto op = [&] {
    ++runs;
    return std::string("charged");
  };
  auto first = once("pay:secret-order-42", backend_, op, {}, UnencodableCodec{});
  EXPECT_EQ(first.status(), Status::kExecuted);
  EXPECT_EQ(first.value(), "charged");
  auto second = once("pay:secret-order-42", backend_, op, {}, UnencodableCodec{});
  EXPECT_EQ(second.status(), Status::kDuplicate);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(store_.inspect("pay:secret-order-42")->state, RecordState::kDone);
  EXPECT_EQ(logs.count("result_unencodable"), 1);
  EXPECT_THAT(logs.all_text(), HasSubstr("cannot encode"));
  EXPECT_THAT(logs.all_text(), Not(HasSubstr("secret-order-42")));
}

// A store that keeps results of at most 4 bytes.
class TinyResults final : public ForwardingBackend {
 public:
  explicit TinyResults(LockBackend& inner) : ForwardingBackend(inner) {}

 protected:
  [[nodiscard]] std::size_t do_max_result_bytes() const noexcept override { return 4; }
};

TEST_F(OnceTest, AResultLongerThanTheStoreKeepsCompletesTheKeyWithoutIt) {
  LogCapture logs;
  TinyResults tiny(backend_);
  int runs = 0;
  auto op = [&] {
    ++runs;
    return std::string("receipt-0042");
  };
  EXPECT_EQ(once("pay:secret-order-7", tiny, op).value(), "receipt-0042");
  EXPECT_EQ(once("pay:secret-order-7", tiny, op).status(), Status::kDuplicate);
  EXPECT_EQ(runs, 1) << "a complete refused for its size would have let the work run again";
  EXPECT_EQ(store_.inspect("pay:secret-order-7")->result, std::nullopt);
  EXPECT_EQ(logs.count("result_too_large"), 1);
  EXPECT_THAT(logs.all_text(), Not(HasSubstr("secret-order-7")));
  EXPECT_EQ(once("short", tiny, [] { return std::string("ok"); }).value(), "ok");
  EXPECT_EQ(once("short", tiny, [] { return std::string("no"); }).value(), "ok") << "replayed";
}

// A result whose move throws, as a move that allocates does when memory runs out: the
// operation has returned, and only keeping its result fails.
struct FragileResult {
  FragileResult() = default;
  FragileResult(const FragileResult&) = default;
  // NOLINTNEXTLINE(performance-noexcept-move-constructor): throwing is its point
  FragileResult(FragileResult&&) { throw std::bad_alloc(); }
};
struct FragileCodec {
  static std::string encode(const FragileResult&) { return "r"; }
  static FragileResult decode(std::string_view) { return {}; }
};

TEST_F(OnceTest, AResultThatCannotBeKeptCompletesTheKeyInsteadOfReleasingIt) {
  int runs = 0;
  auto op = [&] {
    ++runs;
    return FragileResult{};
  };
  EXPECT_THROW((void)once("k", backend_, op, {}, FragileCodec{}), std::bad_alloc);
  EXPECT_EQ(store_.inspect("k")->state, RecordState::kDone);
  EXPECT_EQ(once("k", backend_, op, {}, FragileCodec{}).status(), Status::kDuplicate);
  EXPECT_EQ(runs, 1);
}

TEST_F(OnceTest, AStringJsonCannotHoldIsADuplicateLaterNotARerun) {
  int runs = 0;
  auto op = [&] {
    ++runs;
    return std::string("caf\xe9");  // Latin-1: not UTF-8, so nlohmann::json::dump() throws
  };
  EXPECT_EQ(once("k", backend_, op, {}, JsonCodec<std::string>{}).value(), "caf\xe9");
  EXPECT_EQ(once("k", backend_, op, {}, JsonCodec<std::string>{}).status(), Status::kDuplicate);
  EXPECT_EQ(runs, 1);
}

TEST_F(OnceTest, AStoreErrorBeforeTheWorkPropagatesToOwnerAndJoiners) {
  backend_.fail_claim = true;
  EXPECT_THROW((void)once("k", backend_, [] {}), StoreError);
}

TEST_F(OnceTest, ALiveHolderElsewhereIsInProgressWithItsLeaseExpiry) {
  InMemoryLock& other_instance_view = store_;  // a claim made without this process's table
  Claim c = std::get<Won>(other_instance_view.claim("k", milliseconds(5000))).claim;
  auto o = once("k", backend_, [] { return std::string("x"); });
  EXPECT_EQ(o.status(), Status::kInProgress);
  EXPECT_EQ(o.lease_expiry(), c.lease_expiry);
}

// 16 threads x 1000 keys, every thread calling every key in its own random order, one call
// in ten cancelling its own execution: every key with at least one caller that did not cancel
// succeeds exactly once, and no key's operation ever runs concurrently with itself.
TEST(OnceStress, EveryKeyRunsToSuccessExactlyOnceAndNeverConcurrently) {
  constexpr int kThreads = 16;
  constexpr int kKeys = 1000;
  InMemoryLock backend;
  std::vector<std::atomic<int>> successes(kKeys);
  std::vector<std::atomic<int>> inside(kKeys);
  std::vector<std::atomic<bool>> has_steady_caller(kKeys);
  std::atomic<int> overlaps{0};
  std::vector<std::jthread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t + 1));
      std::vector<int> order(kKeys);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      for (int k : order) {
        std::stop_source source;
        const bool cancels = rng() % 10 == 0;
        if (!cancels) has_steady_caller[k] = true;
        try {
          auto outcome = once(
              "key-" + std::to_string(k), backend,
              [&, k](const std::stop_token&) {
                if (inside[k].fetch_add(1) != 0) ++overlaps;
                if (cancels) {  // cancelled mid-flight: the caller stops its own token
                  inside[k].fetch_sub(1);
                  source.request_stop();
                  throw std::runtime_error("interrupted");
                }
                ++successes[k];
                inside[k].fetch_sub(1);
                return std::to_string(k);
              },
              OnceOptions{.stop = source.get_token()});
          EXPECT_EQ(outcome.value(), std::to_string(k));
        } catch (const Cancelled&) {
          EXPECT_TRUE(cancels) << "only a caller that cancelled may see Cancelled";
        }
      }
    });
  }
  threads.clear();
  EXPECT_EQ(overlaps, 0);
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(successes[k], has_steady_caller[k] ? 1 : 0) << "key " << k;
  }
}

}  // namespace
}  // namespace idempotency::testing
