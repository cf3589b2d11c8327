// idempotent(): wrap a Pub/Sub push handler so it runs at most once per key and its outcome
// maps to ack / nack — an error can never be swallowed into a silent ack.
//
//   auto handle = idempotency::pubsub::idempotent(
//       {.backend = std::make_shared<idempotency::SqliteLock>("/var/lib/idem.db")},
//       [](const idempotency::pubsub::Delivery& d) { send_order_to_supplier(d.message, d.fence);
//       });
//   PushResponse response = handle(request);   // any HTTP server: headers + body in, status out
//
// Every request ends in one `DeliveryOutcome` (outcome.h), answered through `push_response()`,
// the push status table, and reported to `IdempotentOptions::on_outcome`:
//
// | outcome                                   | HTTP | Pub/Sub |
// |-------------------------------------------|------|---------|
// | handler returned (or joined one that did) | 200  | ack     |
// | duplicate: DONE within the ttl (whatever   | 204  | ack     |
// |   result bytes it holds)                  |      |         |
// | live holder elsewhere (after `wait_for`),  | 503  | nack, one warning log line |
// |   or the handler's own mutex() is held    |      |         |
// | handler threw (a StoreError from the       | 500  | nack, `handler_failed` |
// |   handler's own code included)            |      |         |
// | the wrapper's store failed before the     | 503  | nack, `store_error`    |
// |   handler ran (claim)                     |      |         |
// | handler threw `OutcomeUnknown` (its side   | 503  | nack; the key stays held until |
// |   effect may be happening elsewhere)      |      |   its lease lapses             |
// | no key / malformed envelope               | 400  | nack (fail closed) |
// | authentication failed                     | 401  | nack    |
//
// Built on `once`: a duplicate delivery arriving on this instance while the first runs joins
// it and is acked with its outcome instead of a 503. After the handler ran, a store that fails
// to record it, or a fence-out, is logged and still acked: never nack a side effect that
// already happened.
//
// Thread safety: the returned callable may be called from any number of threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "idempotency/backend.h"
#include "idempotency/pubsub/message.h"
#include "idempotency/pubsub/outcome.h"
#include "idempotency/pubsub/response.h"

namespace idempotency::pubsub {

/// What the handler receives: the decoded message and the claim's fencing token (0 when the
/// handler runs unguarded) to fence its own downstream writes.
struct Delivery {
  const Message& message;
  std::int64_t fence = 0;
  /// The request the message was decoded from (raw body, every header), for a handler that
  /// passes it on as it came, like the gateway. Never null when `idempotent()` calls the
  /// handler; null in a Delivery a test builds without one.
  const PushRequest* request = nullptr;
};

/// The business handler. Returning acks the delivery (200); throwing nacks it.
using Handler = std::function<void(const Delivery&)>;

/// A handler that answers with its own response (e.g. a proxied upstream's). Its response is
/// stored with the DONE record and answered to this delivery and to joined ones; it must be
/// an ack status. Throw (e.g. `Nack`) to nack.
using ResponseHandler = std::function<PushResponse(const Delivery&)>;

/// Nack is what a handler throws to nack with a chosen status (e.g. 503 when a dependency is
/// down) and a one-line reason; the key is released like for any failure. A status Pub/Sub
/// would treat as an ack is answered 500 instead.
class Nack : public std::runtime_error {
 public:
  /// Nack() answers `status` with `reason` as `what()`; the reason is logged and sent as the
  /// response body, so it must not hold a key or customer data.
  Nack(int status, const std::string& reason) : std::runtime_error(reason), status_(status) {}
  /// status() is the HTTP status to answer.
  [[nodiscard]] int status() const noexcept { return status_; }

 private:
  int status_;
};

/// Resolves a message's idempotency key. Throwing or returning "" or a blank key (only
/// whitespace, see `is_blank_key`) means "no key".
using KeyFunction = std::function<std::string(const Message&)>;

/// A push handler: request in, response out.
using PushHandler = std::function<PushResponse(const PushRequest&)>;

/// key_from_message_id() keys by the message id (else the CloudEvent id), with a prefix.
[[nodiscard]] KeyFunction key_from_message_id(std::string prefix = {});
/// key_from_attribute() keys by the attribute `name` (business dedup, e.g. "po_id"), with a
/// prefix; a message without the attribute has no key. In every `key_from_*`, a blank value
/// (only whitespace) counts as none, prefix or not.
[[nodiscard]] KeyFunction key_from_attribute(std::string name, std::string prefix = {});
/// key_from_ordering_key() keys by the message's ordering key, with a prefix.
[[nodiscard]] KeyFunction key_from_ordering_key(std::string prefix = {});
/// key_from_header() keys by the request header `name` (case-insensitive), with a prefix.
[[nodiscard]] KeyFunction key_from_header(std::string name, std::string prefix = {});

/// Options for idempotent(). Set `backend` or `backend_factory`.
/// The push wrapper's default lease: short, because the heartbeat renews it; a message whose
/// instance crashed is retried within about this long.
inline constexpr std::chrono::milliseconds kDefaultPushLease = std::chrono::seconds(30);

/// resolved_heartbeat() is the renewal interval `options` asks for: a third of the lease when
/// unset, zero when off.
[[nodiscard]] std::chrono::milliseconds resolved_heartbeat(
    std::chrono::milliseconds lease, std::optional<std::chrono::milliseconds> heartbeat);

struct IdempotentOptions {
  /// The backend, shared.
  std::shared_ptr<LockBackend> backend;
  /// Builds the backend on the first guarded request, once, thread-safely (a factory that
  /// throws is retried by the next request). Never called when the wrapper is disabled.
  std::function<std::shared_ptr<LockBackend>()> backend_factory;
  /// The key; empty means `key_from_message_id()`.
  KeyFunction key;
  /// The claim's lease. Renewed by `heartbeat` while the handler runs and until its complete
  /// has landed, so it need only
  /// outlast a renewal's worst delay: a crashed instance's message is retried one lease later.
  std::chrono::milliseconds lease = kDefaultPushLease;
  /// Renew the lease this often while the handler runs: unset, a third of the lease; zero,
  /// never (the lease must then exceed the handler's longest runtime). When a renewal finds
  /// the claim lost, the handler's outcome no longer counts (its completion is fenced out).
  std::optional<std::chrono::milliseconds> heartbeat;
  /// On a live holder in another instance, wait this long for its outcome before a 503.
  std::chrono::milliseconds wait_for{0};
  /// Called for each duplicate delivery (a metric, a log line). A hook that throws is logged
  /// and ignored: observation never changes the ack.
  std::function<void(const Message&)> on_duplicate;
  /// Called once per request, on the request's thread, with its typed outcome, just before the
  /// response is returned (not when the wrapper itself throws: `std::bad_alloc`, or an
  /// `authenticate` that throws). Count and log from the outcome, never from the status. A
  /// hook that throws is logged and ignored: observation never changes the answer.
  std::function<void(const OutcomeEvent&)> on_outcome;
  /// Run the handler unguarded (with a warning) when no key can be resolved, instead of
  /// failing closed with 400. A malformed envelope is a 400 either way.
  bool allow_unguarded = false;
  /// Answer a duplicate with the stored response of the original delivery (plus
  /// `Idempotency-Replayed: true`) instead of 204.
  bool replay_stored_response = false;
  /// Delete expired records in the background this often (an `idempotency::Reclaimer` started
  /// with the backend, stopped with the last copy of the handler), so a long-running worker's
  /// store stays bounded. Zero (the default) leaves purging to the caller.
  std::chrono::milliseconds purge_interval{0};
  /// Limits for parsing the request.
  ParseOptions parse;
  /// Authenticates the request before anything else; returns a one-line reason to refuse it
  /// with 401 (e.g. `OidcVerifier::verify`), or nothing to accept.
  std::function<std::optional<std::string>(const PushRequest&)> authenticate;
};

/// idempotent() wraps `handler`. Throws `std::invalid_argument` when neither a backend nor a
/// factory is set (unless disabled by `GCP_PUBSUB_IDEMPOTENCY_DISABLED`).
[[nodiscard]] PushHandler idempotent(IdempotentOptions options, Handler handler);

/// idempotent_response() wraps a handler that answers with its own (ack) response, which is
/// stored for duplicates; otherwise exactly as idempotent().
[[nodiscard]] PushHandler idempotent_response(IdempotentOptions options, ResponseHandler handler);

/// disabled_by_environment() is true when GCP_PUBSUB_IDEMPOTENCY_DISABLED is 1, true, yes or
/// on (any case): idempotent() then passes every delivery straight to the handler with a
/// warning and never builds the backend. For handler unit tests only, never production.
[[nodiscard]] bool disabled_by_environment();

}  // namespace idempotency::pubsub
