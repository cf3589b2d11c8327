// idempotent_async(): the push wrapper for an event loop. The guarantees, the status table and
// the hooks are idempotent()'s (idempotent.h), but the handler answers through a callback, so
// no thread waits while it runs (say, while it forwards the request over the network). A claim
// and a complete on a backend that sends them asynchronously (`LockBackend::sends_async()`:
// Redis on its shared connections) are sent, and the next step (the handler's start, the
// answer) runs on the thread their outcome arrives on; a store call that may block
// (`LockBackend::may_block()`) is handed to `run_blocking`; one that cannot (the memory store)
// runs inline.
//
//   auto handle = idempotency::pubsub::idempotent_async(
//       {.backend = backend},
//       [&](const Delivery& d, HandlerDone done) {
//         client.post(d.message.data, d.fence, [done](int status) {
//           done(PushResponse{.status = status});
//         });
//       },
//       [&pool](std::function<void()> work) { boost::asio::post(pool, std::move(work)); });
//   handle(std::make_shared<const PushRequest>(std::move(request)),
//          [](PushResponse response) { /* write it */ });
//
// A delivery whose key is already running in this process joins that run without blocking and
// is answered with its outcome when it ends. With `authenticate`, which may block (a key
// fetch), each request is authenticated on `run_blocking` and goes on from there as above, as
// do the first requests of a `backend_factory`, which builds the backend there. With
// `wait_for`, which may block, and for an unguarded delivery, a request takes the blocking path
// on `run_blocking` instead: the code idempotent() runs, with the handler awaited there (a
// worker held until the handler's `done`).
//
// Thread safety: the returned callable may be called from any number of threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <variant>

#include "idempotency/pubsub/idempotent.h"

namespace idempotency::pubsub {

/// What an asynchronous handler ends with: its (ack) response, or the exception it failed with
/// (a `Nack`, an `OutcomeUnknown`, anything), exactly as a blocking handler returns or throws.
using HandlerResult = std::variant<PushResponse, std::exception_ptr>;

/// The handler calls it exactly once, from any thread, when it has finished.
using HandlerDone = std::function<void(HandlerResult)>;

/// A handler that starts its work and returns at once. The Delivery and what it refers to stay
/// valid until `done` is called.
using AsyncResponseHandler = std::function<void(const Delivery&, HandlerDone done)>;

/// Runs work that may block (a store call, an awaited handler) away from the event loop, e.g.
/// by posting it to a thread pool. It must run every piece of work it is given.
using RunBlocking = std::function<void(std::function<void()>)>;

/// Receives the answer to one request, exactly once, on whichever thread finished it.
using Respond = std::function<void(PushResponse)>;

/// An asynchronous push handler: request in, the answer through `respond`.
using AsyncPushHandler = std::function<void(std::shared_ptr<const PushRequest>, Respond respond)>;

/// PendingDeliveries counts the deliveries idempotent_async() has taken on the asynchronous
/// path and not yet finished, answered or not: with `answer_before_complete`, an acked one is
/// finished when its complete has ended. Wait on it before the backend or `run_blocking`'s
/// threads go, or a delivery already acked keeps its key held until its lease lapses.
///
/// Thread safety: every member may be called from any thread.
class PendingDeliveries {
 public:
  /// One delivery not yet finished; counted until destroyed.
  class Ticket {
   public:
    /// Counts one more on `pending`; on none (null), counts nothing.
    explicit Ticket(std::shared_ptr<PendingDeliveries> pending);
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();

   private:
    std::shared_ptr<PendingDeliveries> pending_;
  };

  /// wait() blocks until every delivery counted has finished: as long as the handler (the
  /// gateway's upstream timeout) and the store calls (their own timeouts) may take.
  void wait();
  /// count() is how many are running now.
  [[nodiscard]] std::size_t count() const;

 private:
  // An atomic, not a mutex: every delivery counts itself in and out on the push's path, and
  // only the shutdown waits.
  std::atomic<std::size_t> count_{0};
};

/// idempotent_async() wraps `handler`; claims and completes a backend sends asynchronously are
/// sent, other store calls that may block, and the blocking path, run on `run_blocking`. Throws
/// `std::invalid_argument` as idempotent() does, and when `handler` or `run_blocking` is empty.
///
/// With `answer_before_complete`, a delivery the handler acked is answered without waiting for
/// its complete: where the store sends or queues the complete, it is started and the answer
/// follows at once; where it runs inline (a store that cannot block), the answer goes first.
/// This process's flight for the key ends with the complete, and every delivery on the
/// asynchronous path is counted in `answer_before_complete` until it has finished. Nothing
/// else changes: a failed complete was acked anyway (it is logged), a delivery
/// of the key arriving meanwhile in this process is answered as a duplicate at once, and one
/// elsewhere finds the key held until the complete lands.
[[nodiscard]] AsyncPushHandler idempotent_async(
    IdempotentOptions options, AsyncResponseHandler handler, RunBlocking run_blocking,
    std::shared_ptr<PendingDeliveries> answer_before_complete = nullptr);

}  // namespace idempotency::pubsub
