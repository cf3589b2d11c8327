// idempotent_async()'s blocking path (blocking_path.h).
#include "blocking_path.h"

#include <atomic>
#include <exception>
#include <future>
#include <memory>
#include <stdexcept>
#include <utility>
#include <variant>

#include "idempotency/errors.h"
#include "idempotency/log.h"
#include "wrapper.h"

namespace idempotency::pubsub::detail {

HandlerResult with_a_failure(HandlerResult result) {
  if (auto* error = std::get_if<std::exception_ptr>(&result); error && !*error) {
    *error = std::make_exception_ptr(
        std::runtime_error("the handler reported a failure without an exception"));
  }
  return result;
}

// Only `done` and its copies hold the promise: a handler that drops them all uncalled breaks
// it, which is an unknown outcome (held, not released), as on the asynchronous path, and not a
// thread waiting for ever on a key renewed for ever.
ResponseHandler awaited(AsyncResponseHandler handler) {
  return [handler = std::move(handler)](const Delivery& delivery) {
    // Apart from the promise, which must go with the last copy of `done`, while the flag
    // must outlive the handler's call.
    auto called = std::make_shared<std::atomic<bool>>(false);
    auto promise = std::make_shared<std::promise<HandlerResult>>();
    auto future = promise->get_future();
    try {
      handler(delivery, [called, promise = std::move(promise)](HandlerResult result) {
        if (!called->exchange(true)) promise->set_value(with_a_failure(std::move(result)));
      });
    } catch (...) {
      // Thrown before `done`: a failure like any other. Thrown after it (a handler bug), the
      // first answer stands, as on the asynchronous path: the work it reported done is kept.
      if (!called->exchange(true)) throw;
    }
    HandlerResult result;
    try {
      result = future.get();
    } catch (const std::future_error&) {
      throw OutcomeUnknown("the handler dropped its done callback without calling it");
    }
    if (auto* error = std::get_if<std::exception_ptr>(&result)) std::rethrow_exception(*error);
    return std::get<PushResponse>(std::move(result));
  };
}

PushResponse threw_before_an_outcome(const std::exception& error) {
  log(LogRecord{Severity::kError,
                "handler_threw",
                "the push wrapper threw before deciding an outcome; nacking",
                {{"error", error.what()}}});
  return push_response(DeliveryOutcome::kHandlerFailed, {});
}

void run_blocking_path(std::shared_ptr<const Wrapper> wrapper, const RunBlocking& run_blocking,
                       std::shared_ptr<const PushRequest> request, Respond respond) {
  run_blocking(
      [wrapper = std::move(wrapper), request = std::move(request), respond = std::move(respond)] {
        PushResponse response;
        try {
          response = (*wrapper)(*request);
        } catch (const std::exception& e) {
          response = threw_before_an_outcome(e);
        }
        respond(std::move(response));
      });
}

}  // namespace idempotency::pubsub::detail
