// The push wrapper's steps, shared by its blocking and asynchronous forms (internal to the
// pubsub component): admit a request (authenticate, parse, resolve the key), map a failure to
// its outcome, and answer every outcome through the push status table (push_response) and
// on_outcome. idempotent.cc runs them around a blocking once(); idempotent_async.cc around an
// owner that runs the handler asynchronously.
//
// Thread safety: a Wrapper is immutable once built and may be used from any number of threads.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "idempotency/backend.h"
#include "idempotency/once.h"
#include "idempotency/pubsub/idempotent.h"
#include "idempotency/pubsub/outcome.h"
#include "lazy_backend.h"

namespace idempotency::pubsub::detail {

// The delivery's context for log lines: never the key, only its fingerprint.
std::vector<std::pair<std::string, std::string>> context(const Message& m, const std::string& key);

// A StoreError thrown by the handler's own code, told apart from the wrapper's store calls.
class HandlerStoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The request being answered, as the outcome observer is told about it.
struct Seen {
  const PushRequest& request;
  const Message* message;  // null until the request is parsed

  [[nodiscard]] OutcomeEvent event(DeliveryOutcome outcome,
                                   const std::exception* error = nullptr) const {
    return OutcomeEvent{
        .outcome = outcome, .request = &request, .message = message, .error = error};
  }
};

// What admit() decided about a request before any store call.
struct Admission {
  // Set when the request is answered already: refused, or run unguarded.
  std::optional<PushResponse> answer;
  // Set when it is to be guarded (and when it was run unguarded).
  std::optional<Message> message;
  std::string key;
  // Not empty when no key resolved and `allow_unguarded` lets the handler run without one.
  std::string unguarded_why;
};

// Every path decides an outcome and ends in answer(): the response comes from the one status
// table (push_response), so no path here knows a status code.
struct Wrapper {
  IdempotentOptions options;
  ResponseHandler handler;
  bool disabled;
  std::shared_ptr<LazyBackend> backend;

  // The last step of every path, after anything that could throw, so the observer hears of
  // each request exactly once.
  PushResponse answer(const OutcomeEvent& event, ResponseFacts facts = {}) const;

  void observe(const OutcomeEvent& event) const;

  // Unguarded means "no dedup", not "another answer": the handler's response, its Nack status
  // and its failures are answered exactly as on the guarded path.
  PushResponse run_unguarded(const Seen& seen, const char* why) const;

  // A handler's response must be an ack: anything else would be stored as a success.
  static PushResponse checked(PushResponse r);

  PushResponse nack(const Nack& n, const Seen& seen, const std::string& key) const;

  std::string resolve_key(const Message& message, std::string& problem) const;

  void notify_duplicate(const Message& message, const std::string& key) const;

  // Authenticates, parses and resolves the key. Refusals are answered (and observed) here;
  // a request to run unguarded comes back with `unguarded_why` and is not yet answered.
  [[nodiscard]] Admission admit(const PushRequest& request) const;

  // The answer to a failed once(): what the handler or the store threw (rethrown here).
  PushResponse failed(const std::exception_ptr& error, const Seen& seen,
                      const std::string& key) const;

  // The answer to a once() that returned: ran, joined, done before, or held elsewhere.
  PushResponse settled(const Outcome<PushResponse>& outcome, const Seen& seen,
                       const std::string& key) const;

  // The blocking path: admit, once() around the handler, answer.
  PushResponse operator()(const PushRequest& request) const;
};

// make_wrapper() validates `options` and builds the wrapper both forms run; throws
// std::invalid_argument as idempotent() documents.
[[nodiscard]] std::shared_ptr<const Wrapper> make_wrapper(IdempotentOptions options,
                                                          ResponseHandler handler);

}  // namespace idempotency::pubsub::detail
