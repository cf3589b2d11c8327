// idempotent_async(): the status table, the store's failures and the in-process join, with the
// handler answering later from another thread, and every store call made inline (the memory
// store), on run_blocking (a store that may block), and sent asynchronously (a store that
// sends claims and completes, as Redis does, answering them from its own thread).
#include "idempotency/pubsub/idempotent_async.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "idempotency/detail/async_outcome.h"
#include "idempotency/errors.h"
#include "idempotency/forwarding_backend.h"
#include "idempotency/guard.h"
#include "idempotency/memory_lock.h"
#include "idempotency/once.h"
#include "push_envelope.h"
#include "support/eventually.h"
#include "support/faulty_backend.h"
#include "support/log_capture.h"

namespace idempotency::pubsub {
namespace {

using idempotency::testing::eventually;
using idempotency::testing::FaultyBackend;
using idempotency::testing::LogCapture;
using testing::push;

// A store whose calls "may block", so the wrapper hands each one to run_blocking.
class MayBlock final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

 protected:
  [[nodiscard]] bool do_may_block() const noexcept override { return true; }
};

// run_blocking for the tests: a thread per piece of work, all joined at the end.
class Threads {
 public:
  ~Threads() { join(); }
  void run(std::function<void()> work) {
    std::lock_guard lock(mutex_);
    ++started_;
    threads_.emplace_back(std::move(work));
  }
  void join() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mutex_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }
  int started() {
    std::lock_guard lock(mutex_);
    return started_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::thread> threads_;
  int started_ = 0;
};

// A store that sends claims and completes asynchronously: each is answered from a thread of its
// own (as Redis answers from its I/O thread), a StoreError becoming a StoreFailure. The other
// calls may block, as on Redis.
class SendsAsync final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  // Waits for every answer given so far.
  void join() { answers_.join(); }
  // How many claims and completes were sent.
  int sent() { return answers_.started(); }

 protected:
  [[nodiscard]] bool do_may_block() const noexcept override { return true; }
  [[nodiscard]] bool do_sends_async() const noexcept override { return true; }
  void do_claim_async(std::string_view key, std::chrono::milliseconds lease, ClaimRequest request,
                      ClaimDone done) override {
    answers_.run([this, key = std::string(key), lease, request = std::move(request),
                  done = std::move(done)] {
      done(idempotency::detail::outcome_of<ClaimResult>(
          [&] { return forward_claim(inner(), key, lease, request); }));
    });
  }
  void do_complete_async(const Claim& claim, std::optional<std::string> result,
                         CompleteDone done) override {
    answers_.run([this, claim, result = std::move(result), done = std::move(done)]() mutable {
      done(idempotency::detail::outcome_of<bool>(
          [&] { return forward_complete(inner(), claim, std::move(result)); }));
    });
  }

 private:
  Threads answers_;  // joined before the backend it forwards to goes
};

// Hands `handle` a push of message `id`; the future gets its answer.
std::future<PushResponse> send_async(const AsyncPushHandler& handle, const std::string& id) {
  auto answer = std::make_shared<std::promise<PushResponse>>();
  auto future = answer->get_future();
  handle(std::make_shared<const PushRequest>(push(id)),
         [answer](PushResponse r) { answer->set_value(std::move(r)); });
  return future;
}

// run_blocking for the tests that need a bounded pool: `n` workers taking work in order. Each
// ends when the pool goes (a stop request wakes its wait), also when an assertion returns
// early.
class FifoPool {
 public:
  explicit FifoPool(int n) {
    for (int i = 0; i < n; ++i) {
      workers_.emplace_back([this](const std::stop_token& stop) { work(stop); });
    }
  }
  void run(std::function<void()> work) {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(work));
    ready_.notify_one();
  }

 private:
  void work(const std::stop_token& stop) {
    for (;;) {
      std::function<void()> next;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, stop, [&] { return !queue_.empty(); });
        if (queue_.empty()) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      next();
    }
  }

  std::mutex mutex_;
  std::condition_variable_any ready_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::jthread> workers_;  // last: joined before what they use goes
};

// A store whose calls may block and whose lease renewals wait until the test lets them go (10 s
// at most): one is in flight when a handler answers.
class SlowRenewals final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::atomic<bool> renewing{false};
  std::atomic<bool> renewed{false};  // a renewal returned
  void let_renewals_go() { go_.set_value(); }

 protected:
  [[nodiscard]] bool do_may_block() const noexcept override { return true; }
  std::optional<TimePoint> do_extend(const Claim& claim, std::chrono::milliseconds lease) override {
    renewing = true;
    (void)released_.wait_for(std::chrono::seconds(10));
    renewed = true;
    return ForwardingBackend::do_extend(claim, lease);
  }

 private:
  std::promise<void> go_;
  std::shared_future<void> released_ = go_.get_future().share();
};

// The gateway calls `done` on its event loop, the one thread serving every connection: hands
// `result` to done() while a renewal of the delivery's key is in flight, checks that done()
// returned without waiting for it, and returns the answer.
PushResponse done_with_a_renewal_in_flight(InMemoryLock& memory, const std::string& id,
                                           HandlerResult result) {
  using namespace std::chrono_literals;
  auto store = std::make_shared<SlowRenewals>(memory);
  Threads threads;
  std::promise<HandlerDone> handed;
  auto handle = idempotent_async(
      {.backend = store, .lease = 1s, .heartbeat = 100ms},
      [&](const Delivery&, HandlerDone done) { handed.set_value(std::move(done)); },
      [&](std::function<void()> work) { threads.run(std::move(work)); });
  auto answer = std::make_shared<std::promise<PushResponse>>();
  handle(std::make_shared<const PushRequest>(push(id)),
         [answer](PushResponse response) { answer->set_value(std::move(response)); });
  HandlerDone done = handed.get_future().get();
  EXPECT_TRUE(eventually([&] { return store->renewing.load(); }));
  done(std::move(result));
  EXPECT_FALSE(store->renewed) << "done() waited for the renewal in flight before returning";
  store->let_renewals_go();
  PushResponse response = answer->get_future().get();
  threads.join();
  return response;
}

TEST(IdempotentAsyncLoop, AFailureDoesNotHoldTheCallerOfDoneForARenewalInFlight) {
  InMemoryLock memory;
  EXPECT_EQ(
      done_with_a_renewal_in_flight(memory, "m-slow-renewal", PushResponse{.status = 500}).status,
      500);
  EXPECT_TRUE(std::holds_alternative<Won>(memory.claim("m-slow-renewal", std::chrono::minutes(1))))
      << "the failure released the key";
}

// An unknown outcome keeps the key held; its renewals stop off the caller's thread too.
TEST(IdempotentAsyncLoop, AnUnknownOutcomeDoesNotHoldTheCallerOfDoneForARenewalInFlight) {
  InMemoryLock memory;
  EXPECT_EQ(done_with_a_renewal_in_flight(
                memory, "m-slow-renewal-unknown",
                std::make_exception_ptr(OutcomeUnknown("no answer from the app")))
                .status,
            503);
  EXPECT_TRUE(std::holds_alternative<HeldByOther>(
      memory.claim("m-slow-renewal-unknown", std::chrono::minutes(1))))
      << "an unknown outcome keeps the key held";
}

enum class Mode { kInline, kMayBlock, kSendsAsync };

// Names the parameter in test listings and test names.
void PrintTo(Mode mode, std::ostream* out) {
  switch (mode) {
    case Mode::kInline:
      *out << "Inline";
      return;
    case Mode::kMayBlock:
      *out << "MayBlock";
      return;
    case Mode::kSendsAsync:
      *out << "SendsAsync";
      return;
  }
}

// What the handler does with a delivery: answer at once, or hold it until released.
struct Script {
  std::function<HandlerResult(const Delivery&)> answer = [](const Delivery&) {
    return HandlerResult(PushResponse{.status = 200});
  };
  bool deferred = false;  // answer from another thread, after release()
};

class IdempotentAsyncTest : public ::testing::TestWithParam<Mode> {
 protected:
  std::shared_ptr<InMemoryLock> memory_ = std::make_shared<InMemoryLock>();
  std::shared_ptr<FaultyBackend> faulty_ = std::make_shared<FaultyBackend>(*memory_);
  std::shared_ptr<SendsAsync> sends_async_ = std::make_shared<SendsAsync>(faulty_);
  std::shared_ptr<LockBackend> store_ =
      GetParam() == Mode::kMayBlock
          ? std::shared_ptr<LockBackend>(std::make_shared<MayBlock>(faulty_))
      : GetParam() == Mode::kSendsAsync ? std::shared_ptr<LockBackend>(sends_async_)
                                        : faulty_;
  Threads threads_;
  LogCapture logs_;
  Script script_;
  std::atomic<int> runs_{0};
  std::vector<DeliveryOutcome> outcomes_;
  std::mutex outcomes_mutex_;
  // Deferred answers wait here until release().
  std::mutex held_mutex_;
  std::condition_variable held_cv_;
  bool released_ = false;
  std::vector<std::thread> answerers_;

  void TearDown() override {
    faulty_->let_completes_go();
    release();
    sends_async_->join();
    threads_.join();  // every delivery has started its handler
    std::vector<std::thread> answerers;
    {
      std::lock_guard lock(held_mutex_);
      answerers.swap(answerers_);
    }
    for (auto& t : answerers) t.join();
    threads_.join();
    sends_async_->join();  // the completes the answerers started
  }

  void release() {
    std::lock_guard lock(held_mutex_);
    released_ = true;
    held_cv_.notify_all();
  }

  AsyncPushHandler wrap(IdempotentOptions options = {},
                        std::shared_ptr<PendingDeliveries> answer_first = nullptr) {
    options.backend = store_;
    options.on_outcome = [this](const OutcomeEvent& e) {
      std::lock_guard lock(outcomes_mutex_);
      outcomes_.push_back(e.outcome);
    };
    return idempotent_async(
        std::move(options),
        [this](const Delivery& d, HandlerDone done) {
          ++runs_;
          if (!script_.deferred) {
            done(script_.answer(d));
            return;
          }
          // The Delivery stays valid until done: answered later, from another thread.
          std::lock_guard lock(held_mutex_);
          answerers_.emplace_back([this, &d, done = std::move(done)] {
            std::unique_lock lock(held_mutex_);
            held_cv_.wait(lock, [this] { return released_; });
            lock.unlock();
            done(script_.answer(d));
          });
        },
        [this](std::function<void()> work) { threads_.run(std::move(work)); },
        std::move(answer_first));
  }

  // Sends one request and waits for its answer.
  static PushResponse send(const AsyncPushHandler& handle, const PushRequest& request) {
    return start(handle, request).get();
  }

  static std::future<PushResponse> start(const AsyncPushHandler& handle,
                                         const PushRequest& request) {
    auto answer = std::make_shared<std::promise<PushResponse>>();
    auto future = answer->get_future();
    handle(std::make_shared<const PushRequest>(request),
           [answer](PushResponse response) { answer->set_value(std::move(response)); });
    return future;
  }

  std::vector<DeliveryOutcome> outcomes() {
    std::lock_guard lock(outcomes_mutex_);
    return outcomes_;
  }

  // The answer, if it comes within a hang guard (not a timing: generous for a loaded box).
  static std::optional<PushResponse> answered(std::future<PushResponse>& answer) {
    if (answer.wait_for(std::chrono::seconds(20)) != std::future_status::ready) return {};
    return answer.get();
  }
};

TEST_P(IdempotentAsyncTest, TheFirstDeliveryIsHandledAndTheRedeliveryIsADuplicate) {
  auto handle = wrap();
  EXPECT_EQ(send(handle, push("m-1")).status, 200);
  EXPECT_EQ(send(handle, push("m-1")).status, 204);
  EXPECT_EQ(runs_, 1);
  EXPECT_EQ(outcomes(), (std::vector{DeliveryOutcome::kHandled, DeliveryOutcome::kDuplicate}));
  // The store calls ran where the backend says they belong: inline, on run_blocking, or sent.
  EXPECT_EQ(threads_.started() > 0, GetParam() == Mode::kMayBlock);
  EXPECT_EQ(sends_async_->sent(), GetParam() == Mode::kSendsAsync ? 3 : 0)
      << "the first delivery's claim and complete, the redelivery's claim";
}

TEST_P(IdempotentAsyncTest, TheHandlersFenceIsTheClaims) {
  std::int64_t seen = 0;
  script_.answer = [&seen](const Delivery& d) {
    seen = d.fence;
    return HandlerResult(PushResponse{.status = 200});
  };
  auto handle = wrap();
  ASSERT_EQ(send(handle, push("m-fence")).status, 200);
  const auto record = memory_->inspect("m-fence");
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(seen, record->fence);
  EXPECT_GT(seen, 0);
}

TEST_P(IdempotentAsyncTest, ADeferredAnswerIsStoredAndAConcurrentDuplicateJoinsIt) {
  script_.deferred = true;
  auto handle = wrap();
  auto first = start(handle, push("m-join"));
  // The owner's flight is registered before its claim: a duplicate arriving now joins it on
  // run_blocking instead of claiming (and, in another process, being told in_progress).
  auto second = start(handle, push("m-join"));
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  release();
  EXPECT_EQ(first.get().status, 200);
  const int second_status = second.get().status;
  EXPECT_TRUE(second_status == 200 || second_status == 204) << "joined (or, if late, a duplicate)";
  EXPECT_EQ(runs_, 1);
  const auto seen = outcomes();
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_NE(std::find(seen.begin(), seen.end(), DeliveryOutcome::kHandled), seen.end());
  EXPECT_EQ(send(handle, push("m-join")).status, 204);
}

// answer_before_complete: the ack waits on no store write.
TEST_P(IdempotentAsyncTest, AnsweredBeforeItsCompleteTheAckWaitsOnNoStoreWrite) {
  script_.deferred = true;
  auto pending = std::make_shared<PendingDeliveries>();
  auto handle = wrap({}, pending);
  faulty_->hold_completes();
  auto first = start(handle, push("m-early"));
  release();
  const auto acked = answered(first);
  ASSERT_TRUE(acked) << "not answered while its complete is held";
  EXPECT_EQ(acked->status, 200);
  ASSERT_TRUE(eventually([&] { return faulty_->completes_held == 1; }));
  EXPECT_EQ(pending->count(), 1U);
  ASSERT_TRUE(memory_->inspect("m-early").has_value());
  EXPECT_EQ(memory_->inspect("m-early")->state, RecordState::kClaimed);
  // Redelivered meanwhile to this process: a duplicate at once, as the store will answer it.
  auto redelivered = start(handle, push("m-early"));
  const auto duplicate = answered(redelivered);
  ASSERT_TRUE(duplicate) << "the redelivery waits for the complete";
  EXPECT_EQ(duplicate->status, 204);
  EXPECT_EQ(faulty_->claims, 1) << "answered without a claim";

  faulty_->let_completes_go();
  pending->wait();
  EXPECT_EQ(pending->count(), 0U);
  EXPECT_EQ(memory_->inspect("m-early")->state, RecordState::kDone);
  EXPECT_EQ(send(handle, push("m-early")).status, 204) << "and by the store once it landed";
  EXPECT_EQ(faulty_->claims, 2);
  EXPECT_EQ(runs_, 1);
  EXPECT_EQ(outcomes(), (std::vector{DeliveryOutcome::kHandled, DeliveryOutcome::kDuplicate,
                                     DeliveryOutcome::kDuplicate}));
}

// Acked before its complete, which a busy store holds: the lease is renewed until the complete
// lands, so another instance never finds the key free under this live owner and runs the work
// again (the crash storm saw that, with no process killed, when the keeper stopped at the ack).
TEST_P(IdempotentAsyncTest, AnsweredBeforeItsCompleteTheLeaseIsRenewedUntilItLands) {
  script_.deferred = true;  // answered on another thread, where an inline complete then waits
  auto pending = std::make_shared<PendingDeliveries>();
  auto handle =
      wrap({.lease = std::chrono::milliseconds(300), .heartbeat = std::chrono::milliseconds(50)},
           pending);
  faulty_->hold_completes();
  auto first = start(handle, push("m-slow"));
  release();
  const auto acked = answered(first);
  ASSERT_TRUE(acked);
  EXPECT_EQ(acked->status, 200);
  ASSERT_TRUE(eventually([&] { return faulty_->completes_held == 1; }));
  const int before = faulty_->extends;
  ASSERT_TRUE(eventually([&] { return faulty_->extends >= before + 10; }))
      << "the lease was not renewed while the complete waited";
  // Ten renewals of 50 ms: well past the 300 ms lease the key was claimed with.
  EXPECT_TRUE(std::holds_alternative<HeldByOther>(
      memory_->claim("m-slow", std::chrono::milliseconds(300))));
  faulty_->let_completes_go();
  pending->wait();
  EXPECT_EQ(memory_->inspect("m-slow")->state, RecordState::kDone);
  EXPECT_EQ(runs_, 1);
  EXPECT_EQ(logs_.count("lease_lost"), 0) << "a renewal refused after the complete is no loss";
}

TEST_P(IdempotentAsyncTest, AnsweredBeforeItsCompleteAJoinedDeliveryIsAnsweredWithIt) {
  script_.deferred = true;
  auto pending = std::make_shared<PendingDeliveries>();
  auto handle = wrap({.replay_stored_response = true}, pending);
  faulty_->hold_completes();
  auto first = start(handle, push("m-early-join"));
  auto second = start(handle, push("m-early-join"));  // joins the flight, registered at once
  release();
  const auto acked = answered(first);
  const auto joined = answered(second);
  ASSERT_TRUE(acked && joined) << "not answered while the complete is held";
  EXPECT_EQ(acked->status, 200);
  EXPECT_EQ(joined->status, 200) << "the owner's answer, before its complete lands";
  ASSERT_TRUE(eventually([&] { return faulty_->completes_held == 1; }));
  // A redelivery now gets the stored response replayed, as from the store.
  auto redelivered = start(handle, push("m-early-join"));
  const auto third = answered(redelivered);
  ASSERT_TRUE(third) << "the redelivery waits for the complete";
  EXPECT_EQ(third->status, 200);
  EXPECT_EQ(faulty_->claims, 1);
  faulty_->let_completes_go();
  pending->wait();
  EXPECT_EQ(runs_, 1);
  auto seen = outcomes();
  std::sort(seen.begin(), seen.end());
  auto expected =
      std::vector{DeliveryOutcome::kHandled, DeliveryOutcome::kJoined, DeliveryOutcome::kReplayed};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(seen, expected);
}

// What the answer callback holds (the gateway's connection) goes with the answer, not with
// the complete that follows it.
TEST_P(IdempotentAsyncTest, AnsweredBeforeItsCompleteTheAnswerCallbackIsLetGo) {
  script_.deferred = true;
  auto handle = wrap({}, std::make_shared<PendingDeliveries>());
  faulty_->hold_completes();
  auto held = std::make_shared<int>(0);
  const std::weak_ptr<int> watch = held;
  auto answer = std::make_shared<std::promise<int>>();
  auto status = answer->get_future();
  handle(std::make_shared<const PushRequest>(push("m-let-go")),
         [held = std::move(held), answer](PushResponse r) { answer->set_value(r.status); });
  release();
  ASSERT_EQ(status.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(status.get(), 200);
  ASSERT_TRUE(eventually([&] { return faulty_->completes_held == 1; }));
  // The answering thread drops the callback just after calling it, so wait for that, with the
  // complete still held: a callback kept until the complete lands never goes.
  EXPECT_TRUE(eventually([&] { return watch.expired(); })) << "kept until the complete lands";
  EXPECT_EQ(faulty_->completes_held, 1);
}

TEST_P(IdempotentAsyncTest, ByDefaultTheAnswerWaitsForTheComplete) {
  script_.deferred = true;
  auto handle = wrap();
  faulty_->hold_completes();
  auto first = start(handle, push("m-in-order"));
  release();
  ASSERT_TRUE(eventually([&] { return faulty_->completes_held == 1; }));
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  faulty_->let_completes_go();
  EXPECT_EQ(first.get().status, 200);
  EXPECT_EQ(memory_->inspect("m-in-order")->state, RecordState::kDone);
}

TEST_P(IdempotentAsyncTest, ANackReleasesTheKeySoTheRedeliveryRunsAgain) {
  script_.answer = [](const Delivery&) {
    return HandlerResult(std::make_exception_ptr(Nack(503, "dependency down")));
  };
  auto handle = wrap();
  EXPECT_EQ(send(handle, push("m-nack")).status, 503);
  EXPECT_EQ(faulty_->releases, 1);
  script_.answer = [](const Delivery&) { return HandlerResult(PushResponse{.status = 200}); };
  EXPECT_EQ(send(handle, push("m-nack")).status, 200);
  EXPECT_EQ(runs_, 2);
  EXPECT_EQ(outcomes(), (std::vector{DeliveryOutcome::kHandlerNacked, DeliveryOutcome::kHandled}));
}

TEST_P(IdempotentAsyncTest, ANonAckResponseIsAFailureAndReleased) {
  script_.answer = [](const Delivery&) { return HandlerResult(PushResponse{.status = 404}); };
  auto handle = wrap();
  EXPECT_EQ(send(handle, push("m-404")).status, 500);
  EXPECT_EQ(faulty_->releases, 1);
  EXPECT_EQ(faulty_->completes, 0);
}

TEST_P(IdempotentAsyncTest, AnUnknownOutcomeKeepsTheKeyHeld) {
  script_.answer = [](const Delivery&) {
    return HandlerResult(std::make_exception_ptr(OutcomeUnknown("went silent")));
  };
  auto handle = wrap();
  EXPECT_EQ(send(handle, push("m-unknown")).status, 503);
  EXPECT_EQ(faulty_->releases, 0);
  EXPECT_EQ(logs_.count("outcome_unknown"), 1);
  // Held until the lease lapses: a redelivery is contention, and the handler does not run.
  const PushResponse again = send(handle, push("m-unknown"));
  EXPECT_EQ(again.status, 503);
  EXPECT_EQ(runs_, 1);
  EXPECT_EQ(outcomes(),
            (std::vector{DeliveryOutcome::kOutcomeUnknown, DeliveryOutcome::kContention}));
}

// The handler's own blocking call on its delivery's key would wait for its own flight, which
// cannot end before the handler returns: on the event loop, or the Redis I/O thread, a hang.
// It is refused as a re-entry, as a blocking owner's is (seed 004).
TEST_P(IdempotentAsyncTest, AHandlersOwnBlockingCallOnItsKeyIsAReentryNotAHang) {
  std::atomic<bool> refused{false};
  script_.answer = [&](const Delivery& d) {
    try {
      // The delivery's own result type: joined, not refused as another type would be.
      (void)idempotency::once(*d.message.message_id, *store_,
                              [] { return PushResponse{.status = 200}; });
    } catch (const ReentryError&) {
      refused = true;
    }
    try {
      auto held = idempotency::lock(*d.message.message_id, *store_);
      refused = false;  // not refused: it would have taken the key the delivery holds
    } catch (const ReentryError&) {
    }
    return HandlerResult(PushResponse{.status = 200});
  };
  auto handle = wrap();
  // Sent from a thread of its own: in the inline mode the handler runs on the sender's thread.
  std::promise<int> status;
  std::thread sender([&] { status.set_value(send(handle, push("m-reentry")).status); });
  auto answered = status.get_future();
  if (answered.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {  // hang guard
    sender.detach();
    FAIL() << "the handler's own once() on its key waited for ever";
  }
  sender.join();
  EXPECT_EQ(answered.get(), 200);
  EXPECT_TRUE(refused.load());
}

TEST_P(IdempotentAsyncTest, AHandlerThatThrowsBeforeAnsweringIsAFailureAndReleased) {
  auto handle = idempotent_async(
      {.backend = store_},
      [](const Delivery&, const HandlerDone&) { throw std::runtime_error("x"); },
      [this](std::function<void()> work) { threads_.run(std::move(work)); });
  EXPECT_EQ(send(handle, push("m-throw")).status, 500);
  EXPECT_EQ(faulty_->releases, 1);
}

TEST_P(IdempotentAsyncTest, AHandlerThatDropsDoneIsAnUnknownOutcome) {
  auto handle = idempotent_async(
      {.backend = store_}, [](const Delivery&, const HandlerDone&) {},
      [this](std::function<void()> work) { threads_.run(std::move(work)); });
  EXPECT_EQ(send(handle, push("m-dropped")).status, 503);
  EXPECT_EQ(faulty_->releases, 0) << "its work may have happened: held, not released";
}

TEST_P(IdempotentAsyncTest, AHandlerThatDropsDoneOnTheBlockingPathIsAnUnknownOutcome) {
  // Waiting for a holder sends every delivery down the blocking path, which awaits `done`.
  auto handle = idempotent_async(
      {.backend = store_, .wait_for = std::chrono::seconds(1)},
      [](const Delivery&, const HandlerDone&) {},
      [this](std::function<void()> work) { threads_.run(std::move(work)); });
  EXPECT_EQ(send(handle, push("m-dropped-blocking")).status, 503);
  EXPECT_EQ(faulty_->releases, 0) << "its work may have happened: held, not released";
}

TEST_P(IdempotentAsyncTest, AFailureWithAnEmptyExceptionIsANackNotACrash) {
  for (const bool blocking : {false, true}) {
    IdempotentOptions options{.backend = store_};
    if (blocking) options.wait_for = std::chrono::seconds(1);
    auto handle = idempotent_async(
        std::move(options),
        [](const Delivery&, const HandlerDone& done) { done(std::exception_ptr()); },
        [this](std::function<void()> work) { threads_.run(std::move(work)); });
    const std::string id = blocking ? "m-empty-blocking" : "m-empty";
    EXPECT_EQ(send(handle, push(id)).status, 500);
    EXPECT_TRUE(std::holds_alternative<Won>(store_->claim(id, std::chrono::minutes(1))))
        << "a failure: the key was released";
  }
}

TEST_P(IdempotentAsyncTest, OnlyTheFirstCallOfDoneCounts) {
  auto handle = idempotent_async(
      {.backend = store_},
      [](const Delivery&, const HandlerDone& done) {
        done(PushResponse{.status = 200});
        done(PushResponse{.status = 500});
      },
      [this](std::function<void()> work) { threads_.run(std::move(work)); });
  EXPECT_EQ(send(handle, push("m-twice")).status, 200);
  EXPECT_EQ(send(handle, push("m-twice")).status, 204);
}

TEST_P(IdempotentAsyncTest, AHandlerThatThrowsAfterAnsweringKeepsItsAnswer) {
  std::atomic<int> answers{0};
  auto handle = idempotent_async(
      {.backend = store_},
      [](const Delivery&, const HandlerDone& done) {
        done(PushResponse{.status = 200});
        throw std::runtime_error("after the answer");
      },
      [this](std::function<void()> work) { threads_.run(std::move(work)); });
  auto answer = std::make_shared<std::promise<PushResponse>>();
  handle(std::make_shared<const PushRequest>(push("m-late-throw")),
         [answer, &answers](PushResponse r) {
           if (++answers == 1) answer->set_value(std::move(r));
         });
  EXPECT_EQ(answer->get_future().get().status, 200);
  threads_.join();
  EXPECT_EQ(answers, 1) << "answered once";
  EXPECT_EQ(faulty_->releases, 0) << "the completed key is not released";
  EXPECT_EQ(send(handle, push("m-late-throw")).status, 204);
}

// Waiting for a holder sends every delivery down the blocking path, where the handler is
// awaited: a throw after its answer must not undo the work it reported done there either.
TEST_P(IdempotentAsyncTest, AHandlerThatThrowsAfterAnsweringKeepsItsAnswerOnTheBlockingPath) {
  auto handle = idempotent_async(
      {.backend = store_, .wait_for = std::chrono::seconds(1)},
      [](const Delivery&, const HandlerDone& done) {
        done(PushResponse{.status = 200});
        throw std::runtime_error("after the answer");
      },
      [this](std::function<void()> work) { threads_.run(std::move(work)); });
  EXPECT_EQ(send(handle, push("m-late-throw-blocking")).status, 200);
  threads_.join();
  EXPECT_EQ(faulty_->releases, 0) << "the completed key is not released";
  EXPECT_EQ(send(handle, push("m-late-throw-blocking")).status, 204);
}

TEST_P(IdempotentAsyncTest, AnAuthenticatorThatThrowsIsANackAndClaimsNothing) {
  auto handle = idempotent_async(
      {.backend = store_,
       .authenticate = [](const PushRequest&) -> std::optional<std::string> {
         throw std::runtime_error("the key server is down");
       }},
      [this](const Delivery&, const HandlerDone& done) {
        ++runs_;
        done(PushResponse{.status = 200});
      },
      [this](std::function<void()> work) { threads_.run(std::move(work)); });
  EXPECT_EQ(send(handle, push("m-auth-throws")).status, 500);
  EXPECT_EQ(runs_, 0);
  EXPECT_TRUE(std::holds_alternative<Won>(store_->claim("m-auth-throws", std::chrono::minutes(1))))
      << "nothing was claimed";
}

TEST_P(IdempotentAsyncTest, AnAuthenticatedDeliveryWithoutAKeyRunsUnguardedAuthenticatedOnce) {
  std::atomic<int> authenticated{0};
  auto handle = idempotent_async(
      {.backend = store_,
       .key = key_from_attribute("absent"),
       .allow_unguarded = true,
       .authenticate =
           [&](const PushRequest&) {
             ++authenticated;
             return std::optional<std::string>();
           }},
      [this](const Delivery&, const HandlerDone& done) {
        ++runs_;
        done(PushResponse{.status = 200});
      },
      [this](std::function<void()> work) { threads_.run(std::move(work)); });
  EXPECT_EQ(send(handle, push("m-keyless")).status, 200);
  EXPECT_EQ(send(handle, push("m-keyless")).status, 200) << "unguarded: run again";
  EXPECT_EQ(runs_, 2);
  EXPECT_EQ(authenticated, 2) << "once a delivery";
}

TEST_P(IdempotentAsyncTest, AnAuthenticatorsRefusalIsAnsweredAndClaimsNothing) {
  auto handle = idempotent_async(
      {.backend = store_,
       .authenticate = [](const PushRequest&) { return std::optional<std::string>("no token"); }},
      [this](const Delivery&, const HandlerDone& done) {
        ++runs_;
        done(PushResponse{.status = 200});
      },
      [this](std::function<void()> work) { threads_.run(std::move(work)); });
  EXPECT_EQ(send(handle, push("m-auth-refused")).status,
            push_response(DeliveryOutcome::kUnauthenticated, {}).status);
  EXPECT_EQ(runs_, 0);
  EXPECT_TRUE(
      std::holds_alternative<Won>(store_->claim("m-auth-refused", std::chrono::minutes(1))));
}

TEST_P(IdempotentAsyncTest, AFailedClaimIsAStoreErrorAndTheHandlerNeverRuns) {
  faulty_->fail_claim = true;
  auto handle = wrap();
  EXPECT_EQ(send(handle, push("m-store")).status, 503);
  EXPECT_EQ(runs_, 0);
  EXPECT_EQ(outcomes(), (std::vector{DeliveryOutcome::kStoreError}));
  faulty_->fail_claim = false;
  EXPECT_EQ(send(handle, push("m-store")).status, 200) << "the flight ended with the failure";
}

TEST_P(IdempotentAsyncTest, AFailedCompleteIsStillAcked) {
  faulty_->fail_complete = true;
  auto handle = wrap();
  EXPECT_EQ(send(handle, push("m-complete")).status, 200) << "the work ran: never nacked";
  EXPECT_EQ(runs_, 1);
}

TEST_P(IdempotentAsyncTest, ALiveHolderElsewhereIs503WithRetryAfter) {
  (void)memory_->claim("m-held", std::chrono::minutes(15));
  auto handle = wrap();
  const PushResponse r = send(handle, push("m-held"));
  EXPECT_EQ(r.status, 503);
  ASSERT_TRUE(find_header(r.headers, "retry-after").has_value());
  EXPECT_EQ(runs_, 0);
}

TEST_P(IdempotentAsyncTest, AMalformedPushIsRefusedWithoutTheStore) {
  auto handle = wrap();
  PushRequest bad = push("m-bad");
  bad.body = R"({"message": {"messageId": "m-bad", "data": "***not base64***"}})";
  EXPECT_EQ(send(handle, bad).status, 400);
  EXPECT_EQ(faulty_->claims, 0);
  EXPECT_EQ(outcomes(), (std::vector{DeliveryOutcome::kMalformed}));
}

TEST_P(IdempotentAsyncTest, WaitForTakesTheBlockingPath) {
  auto handle = wrap({.wait_for = std::chrono::milliseconds(1)});
  EXPECT_EQ(send(handle, push("m-wait")).status, 200);
  EXPECT_GT(threads_.started(), 0);
  EXPECT_EQ(send(handle, push("m-wait")).status, 204);
}

TEST_P(IdempotentAsyncTest, ManyDeliveriesAtOnceEachRunOnce) {
  script_.deferred = true;
  auto handle = wrap();
  std::vector<std::future<PushResponse>> answers;
  for (int i = 0; i < 40; ++i)
    answers.push_back(start(handle, push("m-many-" + std::to_string(i % 10))));
  release();
  int handled = 0;
  for (auto& a : answers) {
    const int status = a.get().status;
    EXPECT_TRUE(status == 200 || status == 204) << status;
    handled += status == 200 ? 1 : 0;
  }
  EXPECT_EQ(runs_, 10);
  EXPECT_GE(handled, 10);
}

// Joined deliveries wait for their flight without a thread: with two workers for every store
// call, forty deliveries of ten keys, all held by the handler at once, must still finish
// (a joiner blocking a worker would leave the owners no worker to complete on).
TEST(IdempotentAsync, JoinersHoldNoWorkerSoABoundedPoolCannotDeadlock) {
  auto memory = std::make_shared<InMemoryLock>();
  auto store = std::make_shared<MayBlock>(memory);
  FifoPool pool(2);
  std::mutex held_mutex;
  std::vector<HandlerDone> held;
  std::atomic<int> runs{0};
  auto handle = idempotent_async(
      {.backend = store},
      [&](const Delivery&, HandlerDone done) {
        // Counted under the lock, after the push: once runs is 10, every done is in `held`.
        std::lock_guard lock(held_mutex);
        held.push_back(std::move(done));
        ++runs;
      },
      [&](std::function<void()> work) { pool.run(std::move(work)); });
  std::vector<std::future<PushResponse>> answers;
  for (int i = 0; i < 40; ++i) {
    auto answer = std::make_shared<std::promise<PushResponse>>();
    answers.push_back(answer->get_future());
    handle(std::make_shared<const PushRequest>(push("m-pool-" + std::to_string(i % 10))),
           [answer](PushResponse r) { answer->set_value(std::move(r)); });
  }
  // Every key's owner reaches its handler although thirty joiners arrived meanwhile.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (runs < 10 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(runs, 10) << "the pool is stuck";
  {
    std::lock_guard lock(held_mutex);
    for (auto& done : held) done(PushResponse{.status = 200});
  }
  for (auto& a : answers) {
    ASSERT_EQ(a.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "deadlocked";
    EXPECT_TRUE(is_ack(a.get().status));
  }
  EXPECT_EQ(runs, 10);
}

// The first deliveries build the backend through its factory on a worker, then go on as any
// other delivery: through the blocking once(), one would hold the only worker waiting for an
// asynchronous owner of its key whose claim waits for that worker.
TEST(IdempotentAsync, DeliveriesThatBuildTheBackendHoldNoWorkerWaitingForAnOwner) {
  auto memory = std::make_shared<InMemoryLock>();
  std::promise<void> build;
  const std::shared_future<void> built = build.get_future().share();
  std::promise<HandlerDone> first;
  FifoPool pool(1);
  auto handle = idempotent_async(
      {.backend_factory =
           [&, built] {
             built.wait();
             return std::make_shared<MayBlock>(memory);
           }},
      [&](const Delivery& delivery, HandlerDone done) {
        if (delivery.message.message_id == "m-first") {
          first.set_value(std::move(done));  // held: the worker must not wait for it
        } else {
          done(PushResponse{.status = 200});
        }
      },
      [&](std::function<void()> work) { pool.run(std::move(work)); });
  auto first_answer = send_async(handle, "m-first");  // the worker builds the backend
  auto early = send_async(handle, "m-k");             // queued before the backend is built
  build.set_value();
  auto first_done = first.get_future();
  ASSERT_EQ(first_done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto late = send_async(handle, "m-k");  // the backend is built: the asynchronous path
  first_done.get()(PushResponse{.status = 200});
  for (auto* answer : {&first_answer, &early, &late}) {
    ASSERT_EQ(answer->wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << "the worker waits for a flight whose claim waits for the worker";
    EXPECT_TRUE(is_ack(answer->get().status));
  }
}

// Authenticating may block (an OIDC key fetch), so it runs on a worker; the delivery then goes
// on as any other. Awaited there instead (the blocking path), a handler still working (an
// upstream call) held a worker: with one worker, every other push waited behind it.
TEST(IdempotentAsync, AnAuthenticatedDeliveryHoldsNoWorkerWhileItsHandlerWorks) {
  auto memory = std::make_shared<InMemoryLock>();
  for (const bool may_block : {false, true}) {
    std::shared_ptr<LockBackend> store = memory;
    if (may_block) store = std::make_shared<MayBlock>(memory);
    std::promise<HandlerDone> first;
    FifoPool pool(1);
    auto handle = idempotent_async(
        {.backend = store,
         .authenticate = [](const PushRequest&) { return std::optional<std::string>(); }},
        [&](const Delivery& delivery, HandlerDone done) {
          if (delivery.message.message_id.value_or("").starts_with("m-working")) {
            first.set_value(std::move(done));  // still working: no worker may wait for it
          } else {
            done(PushResponse{.status = 200});
          }
        },
        [&](std::function<void()> work) { pool.run(std::move(work)); });
    const std::string suffix = may_block ? "-may-block" : "-inline";
    auto working = send_async(handle, "m-working" + suffix);
    auto first_done = first.get_future();
    ASSERT_EQ(first_done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    const HandlerDone done = first_done.get();
    // Answered however the test ends: a worker waiting for it (the defect) must not hold the
    // pool's destructor for ever.
    const std::unique_ptr<const HandlerDone, void (*)(const HandlerDone*)> answer_at_the_end(
        &done, [](const HandlerDone* d) { (*d)(PushResponse{.status = 200}); });
    auto other = send_async(handle, "m-other" + suffix);
    ASSERT_EQ(other.wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << "the one worker waits for a handler still working";
    EXPECT_EQ(other.get().status, 200);
    done(PushResponse{.status = 200});
    ASSERT_EQ(working.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_EQ(working.get().status, 200);
  }
}

TEST(IdempotentAsync, RefusesAnEmptyHandlerOrExecutor) {
  auto backend = std::make_shared<InMemoryLock>();
  EXPECT_THROW((void)idempotent_async({.backend = backend}, nullptr, [](auto work) { work(); }),
               std::invalid_argument);
  EXPECT_THROW((void)idempotent_async(
                   {.backend = backend}, [](const Delivery&, const HandlerDone&) {}, nullptr),
               std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Stores, IdempotentAsyncTest,
                         ::testing::Values(Mode::kInline, Mode::kMayBlock, Mode::kSendsAsync),
                         ::testing::PrintToStringParamName());

}  // namespace
}  // namespace idempotency::pubsub
