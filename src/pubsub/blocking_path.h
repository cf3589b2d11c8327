// idempotent_async()'s blocking path (internal to the pubsub component): a delivery it cannot
// guard without blocking (one that waits for a holder elsewhere, or is not guarded at all) runs
// idempotent()'s blocking form on `run_blocking`, with the asynchronous handler awaited.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <exception>
#include <memory>

#include "idempotency/pubsub/idempotent_async.h"

namespace idempotency::pubsub::detail {

struct Wrapper;

/// with_a_failure() returns `result`, with a failure reported by an empty exception_ptr
/// (`done(std::current_exception())` outside a catch) made a failure like any other:
/// rethrowing it as it is would be undefined behaviour.
HandlerResult with_a_failure(HandlerResult result);

/// awaited() makes the blocking path's handler: it starts the asynchronous one and waits for
/// its `done`, on a thread that may block. A second call of `done` (a handler bug) is ignored,
/// and a throw after the first keeps that answer; a `done` dropped uncalled is `OutcomeUnknown`.
ResponseHandler awaited(AsyncResponseHandler handler);

/// threw_before_an_outcome() logs `error`, thrown by the push wrapper's steps before they
/// decided an outcome, and returns the nack to answer.
PushResponse threw_before_an_outcome(const std::exception& error);

/// run_blocking_path() runs `wrapper` (idempotent()'s steps around awaited()) on
/// `run_blocking`, and answers through `respond`: a throw out of the wrapper is a nack.
void run_blocking_path(std::shared_ptr<const Wrapper> wrapper, const RunBlocking& run_blocking,
                       std::shared_ptr<const PushRequest> request, Respond respond);

}  // namespace idempotency::pubsub::detail
