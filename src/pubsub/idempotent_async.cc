// idempotent_async(): the push wrapper's steps (wrapper.h) around an owner that runs the handler
// asynchronously: admit -> begin this process's flight -> claim -> the handler, which answers
// later -> complete or release -> settle the flight -> answer (or, with answer_before_complete
// and an ack, answer -> complete -> settle). A claim and a complete are sent
// asynchronously when the backend sends them so (Redis), and the next step runs on the thread
// their outcome arrives on; every other store call runs inline when the backend cannot block,
// else on `run_blocking`. Nothing here waits.
#include "idempotency/pubsub/idempotent_async.h"

#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <utility>
#include <variant>

#include "blocking_path.h"
#include "idempotency/detail/lease_keeper.h"
#include "idempotency/detail/once_engine.h"
#include "idempotency/errors.h"
#include "idempotency/guard.h"
#include "idempotency/log.h"
#include "idempotency/once.h"
#include "wrapper.h"

namespace idempotency::pubsub {
namespace {

using detail::awaited;
using detail::run_blocking_path;
using detail::Seen;
using detail::threw_before_an_outcome;
using detail::with_a_failure;
using detail::Wrapper;
using idempotency::detail::AsyncFlight;
using idempotency::detail::ErasedOutcome;
using idempotency::detail::LeaseKeeper;

// What every delivery on this wrapper shares.
struct Shared {
  std::shared_ptr<const Wrapper> blocking;  // its handler awaits `handler`
  AsyncResponseHandler handler;
  RunBlocking run_blocking;
  idempotency::detail::OnceHooks hooks;  // the PushResponse type and decoder, for replays
  std::shared_ptr<PendingDeliveries> answer_first;  // set: acks go out before their completes
};

// One guarded delivery in flight; every step holds it alive until it is answered.
class Delivering : public std::enable_shared_from_this<Delivering> {
 public:
  // The admission by rvalue reference: taken by value, its Message would be moved once more.
  Delivering(std::shared_ptr<const Shared> shared, std::shared_ptr<const PushRequest> request,
             Respond&& respond, detail::Admission&& admission, LockBackend& backend)
      : ticket_(shared->answer_first),
        shared_(std::move(shared)),
        request_(std::move(request)),
        respond_(std::move(respond)),
        message_(std::move(*admission.message)),
        key_(std::move(admission.key)),
        backend_(backend) {}

  // Dropped unanswered: the handler let go of `done` without calling it (or run_blocking
  // dropped a step). Its work may have happened, so this is an unknown outcome: the key stays
  // held until its lease lapses, and the delivery is nacked.
  ~Delivering() {
    if (answered_) {
      // Acked before its complete, whose step was then dropped: the key stays held until its
      // lease lapses, and a redelivery after that may run the work again.
      if (complete_pending_) {
        log(LogRecord{Severity::kError, "complete_dropped",
                      "an acked delivery's complete never ran; the key stays held until its "
                      "lease lapses",
                      detail::context(message_, key_)});
      }
      return;
    }
    if (keeper_) keeper_->stop();
    if (claim_) idempotency::detail::keep_after_unknown_outcome(*claim_);
    fail(std::make_exception_ptr(
        OutcomeUnknown("the asynchronous handler finished without calling done")));
  }
  Delivering(const Delivering&) = delete;
  Delivering& operator=(const Delivering&) = delete;

  // Owns this process's flight for the key and claims it, or joins the flight that runs: then
  // the callback answers with its outcome when it ends (or starts over, if it was given up).
  void start() {
    auto flight = idempotency::detail::begin_async_flight(
        key_, backend_, typeid(PushResponse),
        [self = shared_from_this()](std::optional<ErasedOutcome> outcome,
                                    std::exception_ptr error) {
          if (outcome) {
            self->settle(*outcome);
          } else if (error) {
            self->fail(std::move(error));
          } else {
            self->start();
          }
        });
    if (!flight) return;  // joined; and flight_ is not ours to touch now
    flight_ = std::move(flight);
    claim();
  }

 private:
  void claim() {
    store(
        [self = shared_from_this()] {
          const auto& options = self->wrapper().options;
          return self->backend_.claim(self->key_, options.lease);
        },
        [this](auto finish) {
          backend_.claim_async(key_, wrapper().options.lease, ClaimRequest{},
                               [finish](AsyncClaimResult outcome) mutable {
                                 finish([&] { return claimed(std::move(outcome)); });
                               });
        },
        // By reference down to claim_: each move of a Claim is its strings moved.
        [](const std::shared_ptr<Delivering>& self, ClaimResult&& result) {
          self->on_claim(std::move(result));
        });
  }

  // A claim_async() outcome as claim() ends: its result, or the StoreError it throws.
  static ClaimResult claimed(AsyncClaimResult outcome) {
    if (auto* failure = std::get_if<StoreFailure>(&outcome)) throw StoreError(failure->message);
    return std::get<ClaimResult>(std::move(outcome));
  }

  [[nodiscard]] const Wrapper& wrapper() const { return *shared_->blocking; }
  [[nodiscard]] Seen seen() const { return Seen{*request_, &message_}; }

  // Runs a store call where the backend says it belongs, then `then` with its result; a call
  // that throws goes to fail() instead. A backend that sends its calls (sends_async()) gets
  // `send(finish)`, which starts the call; its callback hands `finish` a function yielding the
  // result (or throwing), run on the thread the outcome arrives on. Any other backend gets
  // `call`, as below.
  template <class Call, class Send, class Then>
  void store(Call call, Send send, Then then) {
    if (!backend_.sends_async()) {
      store(std::move(call), std::move(then));
      return;
    }
    try {
      send([self = shared_from_this(), then = std::move(then)](auto result) mutable {
        self->finish(result, then);
      });
    } catch (...) {  // refused before any store call (a bad key or lease), as `call` would be
      fail(std::current_exception());
    }
  }

  // Whether store(call, send, then) runs `call` before it returns: the backend neither sends
  // its calls nor may block.
  [[nodiscard]] bool stores_inline() const {
    return !backend_.sends_async() && !backend_.may_block();
  }

  // Runs `call` (a store call) inline when the backend cannot block, else on run_blocking,
  // then `then` with its result; a call that throws goes to fail() instead.
  template <class Call, class Then>
  void store(Call call, Then then) {
    auto step = [self = shared_from_this(), call = std::move(call),
                 then = std::move(then)]() mutable { self->finish(call, then); };
    if (backend_.may_block()) {
      shared_->run_blocking(std::move(step));
    } else {
      step();
    }
  }

  // `then` with what `call` yields, or fail() with what it throws.
  template <class Call, class Then>
  void finish(Call& call, Then& then) {
    using Result = decltype(call());
    std::optional<Result> result;
    try {
      result.emplace(call());
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    then(shared_from_this(), std::move(*result));
  }

  void on_claim(ClaimResult&& result) {
    if (auto* won = std::get_if<Won>(&result)) {
      run_handler(std::move(won->claim));
      return;
    }
    ErasedOutcome outcome;
    if (auto* done = std::get_if<AlreadyDone>(&result)) {
      outcome = idempotency::detail::outcome_of_done(*done, key_, shared_->hooks);
    } else {
      outcome = ErasedOutcome{Status::kInProgress, nullptr, 0,
                              std::get<HeldByOther>(result).lease_expiry};
    }
    settle(outcome);
  }

  void run_handler(Claim&& claim) {
    claim_ = std::move(claim);
    const auto& options = wrapper().options;
    keeper_.emplace(backend_, *claim_, options.lease,
                    resolved_heartbeat(options.lease, options.heartbeat));
    // The flag is the delivery's own: one allocation and one reference count fewer a call.
    auto done = [self = shared_from_this()](HandlerResult r) {
      if (self->handler_called_.exchange(true)) return;  // a handler bug; the first answer stands
      self->on_handler_done(with_a_failure(std::move(r)));
    };
    // Its own blocking call on the key (once(), lock()) is a re-entry, refused: it would wait
    // for this very flight, which cannot end before the handler returns.
    const idempotency::detail::RunningFlight running(flight_.get());
    try {
      shared_->handler(Delivery{.message = message_, .fence = claim_->fence, .request = &*request_},
                       std::move(done));
    } catch (...) {
      // Thrown before the handler called `done`: a failure like any other. Thrown after it
      // (a handler bug), the first answer stands.
      if (!handler_called_.exchange(true)) on_handler_done(std::current_exception());
    }
  }

  void on_handler_done(HandlerResult result) {
    if (auto* response = std::get_if<PushResponse>(&result)) {
      std::shared_ptr<const PushResponse> value;
      try {
        value = std::make_shared<const PushResponse>(Wrapper::checked(std::move(*response)));
        result_bytes_ = Codec<PushResponse>{}.encode(*value);
      } catch (...) {
        handler_failed(std::current_exception());
        return;
      }
      const ErasedOutcome executed{Status::kExecuted, std::move(value), claim_->fence,
                                   std::nullopt};
      const bool early = shared_->answer_first != nullptr;
      // Answered before the complete only where the complete runs inline: elsewhere it is
      // sent or queued first, which costs the answer nothing and shortens the time another
      // instance finds the key held.
      const bool inline_complete = stores_inline();
      // Decided before the complete lands: this process answers the key's later deliveries as
      // the store will then (DONE, the response stored) instead of making them wait.
      if (early && flight_) flight_->decide(executed);
      if (early && inline_complete) answer_with(executed);
      // Renewed until the complete has landed: one queued behind a busy store must not let the
      // lease lapse under this live owner, or another instance would run the work again.
      keeper_->finishing();
      complete_pending_ = early;
      // Whatever the store answers, the work ran and is acked: a failure is only logged.
      store(
          [self = shared_from_this()] {
            (void)idempotency::detail::complete_after_work(self->backend_, *self->claim_,
                                                           std::move(self->result_bytes_));
            return true;
          },
          [self = shared_from_this()](auto finish) {
            auto noted = [self, finish](const AsyncCompleteResult& outcome) mutable {
              finish([&] {
                (void)idempotency::detail::note_complete_outcome(*self->claim_, outcome);
                return true;
              });
            };
            try {
              self->backend_.complete_async(*self->claim_, std::move(self->result_bytes_), noted);
            } catch (...) {  // the claim's key was valid, so only out of memory
              noted(StoreFailure{"complete_async failed before sending"});
            }
          },
          [executed](const std::shared_ptr<Delivering>& self, bool) {
            self->keeper_->stop();
            self->complete_pending_ = false;
            self->settle(executed);
          });
      // The complete's own thread may have answered already, after it: answer() tells.
      if (early && !inline_complete) answer_with(executed);
      return;
    }
    handler_failed(std::get<std::exception_ptr>(std::move(result)));
  }

  void handler_failed(std::exception_ptr error) {
    try {
      std::rethrow_exception(error);
    } catch (const StoreError& e) {
      // The handler's own store failed: a handler failure, not the wrapper's store failing
      // before the handler ran.
      error = std::make_exception_ptr(detail::HandlerStoreError(e.what()));
    } catch (const OutcomeUnknown&) {
      // The work may have happened: the key stays held until its lease lapses.
      after_renewals_stop(
          [self = shared_from_this()] {
            idempotency::detail::keep_after_unknown_outcome(*self->claim_);
          },
          std::move(error));
      return;
    } catch (...) {  // NOLINT(bugprone-empty-catch): every other failure releases below
    }
    // Failures are never stored: give the key up, then answer.
    after_renewals_stop(
        [self = shared_from_this()] {
          idempotency::detail::release_after_failure(self->backend_, *self->claim_);
        },
        std::move(error));
  }

  // Stops the renewals, runs `then` (the release, which no renewal may race), and answers
  // with `error`, where a store call goes: stopping waits for a renewal in flight (a store
  // round trip), which must not hold the event loop that called `done`.
  template <class Then>
  void after_renewals_stop(Then then, std::exception_ptr error) {
    store(
        [self = shared_from_this(), then = std::move(then)] {
          self->keeper_->stop();
          then();
          return true;
        },
        // Moved, not copied: the exception object's only owner goes where the answer is made.
        [error = std::move(error)](const std::shared_ptr<Delivering>& self, bool) {
          self->fail(error);
        });
  }

  void settle(const ErasedOutcome& outcome) {
    if (flight_) flight_->settle(outcome);
    if (!answered_) answer_with(outcome);
  }

  void answer_with(const ErasedOutcome& outcome) {
    const Outcome<PushResponse> typed(outcome.status,
                                      std::static_pointer_cast<const PushResponse>(outcome.value),
                                      outcome.fence, outcome.lease_expiry);
    answer([&] { return wrapper().settled(typed, seen(), key_); });
  }

  void fail(std::exception_ptr error) {
    if (flight_) flight_->fail(error);
    answer([&] { return wrapper().failed(error, seen(), key_); });
  }

  // Answers once, from whichever thread comes first; an answer that cannot be built
  // (std::bad_alloc) is still answered, as a nack.
  template <class Build>
  void answer(Build build) noexcept {
    if (answered_.exchange(true)) return;
    PushResponse response;
    try {
      response = build();
    } catch (...) {
      response = PushResponse{.status = 500};
    }
    // Let go of with the answer: what it holds (the connection) is not kept until the
    // complete that may follow.
    Respond respond = std::move(respond_);
    try {
      respond(std::move(response));
    } catch (...) {  // NOLINT(bugprone-empty-catch): the caller's callback failed; nothing to add
    }
  }

  // First, so last to go: the delivery is counted until all else of it has gone.
  PendingDeliveries::Ticket ticket_;
  std::shared_ptr<const Shared> shared_;
  std::shared_ptr<const PushRequest> request_;
  Respond respond_;
  Message message_;
  std::string key_;
  LockBackend& backend_;
  std::unique_ptr<AsyncFlight> flight_;
  std::optional<Claim> claim_;
  std::optional<std::string> result_bytes_;  // the handler's answer encoded, until completed
  std::optional<LeaseKeeper> keeper_;
  std::atomic<bool> handler_called_{false};  // the handler's `done` (or its throw) was taken
  std::atomic<bool> answered_{false};        // the complete's thread and the handler's may race
  bool complete_pending_ = false;            // answered, and the complete not yet ended
};

// The first guarded deliveries build the backend through its factory, which may block: on
// run_blocking, after which each goes on as any other delivery. Never through the blocking
// once(): it would hold a worker waiting for an asynchronous flight of the same key, whose
// own steps wait for a worker, and a few such deliveries at start-up would hold every worker
// for ever.
void build_backend_then_deliver(const std::shared_ptr<const Shared>& shared,
                                std::shared_ptr<const PushRequest> request, Respond respond,
                                detail::Admission admission) {
  shared->run_blocking([shared, request = std::move(request), respond = std::move(respond),
                        admission = std::move(admission)]() mutable {
    const Wrapper& wrapper = *shared->blocking;
    LockBackend* backend = nullptr;
    try {
      backend = &wrapper.backend->get();
    } catch (...) {
      PushResponse response;
      try {
        response = wrapper.failed(std::current_exception(), Seen{*request, &*admission.message},
                                  admission.key);
      } catch (...) {  // an answer that cannot be built (std::bad_alloc) is still a nack
        response = PushResponse{.status = 500};
      }
      respond(std::move(response));
      return;
    }
    std::make_shared<Delivering>(shared, std::move(request), std::move(respond),
                                 std::move(admission), *backend)
        ->start();
  });
}

// A delivery admitted: answered already, run unguarded on a worker, or guarded by a Delivering
// (after the backend is built, the first time). By reference: an Admission holds the parsed
// message, and each move of it is its strings moved.
void deliver(const std::shared_ptr<const Shared>& shared,
             std::shared_ptr<const PushRequest>&& request, Respond&& respond,
             detail::Admission&& admission) {
  if (admission.answer) {
    respond(std::move(*admission.answer));
    return;
  }
  if (!admission.unguarded_why.empty()) {
    // The handler runs awaited, so on a worker; admitted already (authenticated, parsed), so
    // not through the blocking path, which would admit it again.
    shared->run_blocking([shared, request = std::move(request), respond = std::move(respond),
                          admission = std::move(admission)]() mutable {
      PushResponse response;
      try {
        response = shared->blocking->run_unguarded(Seen{*request, &*admission.message},
                                                   admission.unguarded_why.c_str());
      } catch (const std::exception& e) {
        response = threw_before_an_outcome(e);
      }
      respond(std::move(response));
    });
    return;
  }
  LockBackend* backend = shared->blocking->backend->ready();
  if (backend == nullptr) {
    build_backend_then_deliver(shared, std::move(request), std::move(respond),
                               std::move(admission));
    return;
  }
  std::make_shared<Delivering>(shared, std::move(request), std::move(respond), std::move(admission),
                               *backend)
      ->start();
}

}  // namespace

AsyncPushHandler idempotent_async(IdempotentOptions options, AsyncResponseHandler handler,
                                  RunBlocking run_blocking,
                                  std::shared_ptr<PendingDeliveries> answer_before_complete) {
  if (!handler) throw std::invalid_argument("idempotent_async: the handler is empty");
  if (!run_blocking) throw std::invalid_argument("idempotent_async: run_blocking is empty");
  auto shared = std::make_shared<Shared>();
  shared->blocking = detail::make_wrapper(std::move(options), awaited(handler));
  shared->handler = std::move(handler);
  shared->run_blocking = std::move(run_blocking);
  shared->answer_first = std::move(answer_before_complete);
  shared->hooks.type = typeid(PushResponse);
  shared->hooks.decode = [](const std::string& bytes) -> std::shared_ptr<const void> {
    return std::make_shared<const PushResponse>(Codec<PushResponse>{}.decode(bytes));
  };
  return [shared = std::shared_ptr<const Shared>(std::move(shared))](
             std::shared_ptr<const PushRequest>&& request, Respond&& respond) {
    const Wrapper& wrapper = *shared->blocking;
    // Waiting for a holder and the unguarded path may block throughout.
    if (wrapper.disabled || wrapper.options.wait_for.count() > 0) {
      run_blocking_path(shared->blocking, shared->run_blocking, std::move(request),
                        std::move(respond));
      return;
    }
    // Authenticating may block (an OIDC key fetch), so it runs on a worker; the delivery then
    // goes on from there as any other, the handler's call (the upstream's) holding no worker.
    if (wrapper.options.authenticate) {
      shared->run_blocking(
          [shared, request = std::move(request), respond = std::move(respond)]() mutable {
            std::optional<detail::Admission> admission;
            try {
              admission.emplace(shared->blocking->admit(*request));
            } catch (const std::exception& e) {
              respond(threw_before_an_outcome(e));
              return;
            }
            deliver(shared, std::move(request), std::move(respond), std::move(*admission));
          });
      return;
    }
    detail::Admission admission = wrapper.admit(*request);
    deliver(shared, std::move(request), std::move(respond), std::move(admission));
  };
}

}  // namespace idempotency::pubsub
