// DeliveryOutcome: what became of one push request, as a value, and the push status table.
//
// `idempotent()` decides an outcome for every request, then answers it through
// `push_response()`, the only place that knows which outcome is which HTTP status, and tells
// `IdempotentOptions::on_outcome` the outcome. Count and log from the outcome, never from the
// status: the status of an outcome may change (it is the wire contract with Pub/Sub), what
// happened does not.
//
//   options.on_outcome = [&](const idempotency::pubsub::OutcomeEvent& e) {
//     requests_total.add(1, {{"outcome", idempotency::pubsub::to_string(e.outcome)}});
//   };
//
// | outcome            | HTTP                                         | Pub/Sub |
// |--------------------|----------------------------------------------|---------|
// | `kHandled`         | the handler's response (200 for a `Handler`) | ack     |
// | `kJoined`          | the response of the delivery it joined       | ack     |
// | `kDuplicate`       | 204                                          | ack     |
// | `kReplayed`        | the stored response + `Idempotency-Replayed` | ack     |
// | `kUnguarded`       | the handler's response                       | ack     |
// | `kContention`      | 503 + `Retry-After`                          | nack    |
// | `kHandlerNacked`   | the `Nack`'s status (500 for an ack status)  | nack    |
// | `kHandlerFailed`   | 500                                          | nack    |
// | `kOutcomeUnknown`  | 503 (the key stays held)                     | nack    |
// | `kStoreError`      | 503                                          | nack    |
// | `kMalformed`       | 400 with the parser's one-line reason        | nack    |
// | `kNoKey`           | 400 with a one-line reason                   | nack    |
// | `kUnauthenticated` | 401 with the refusal's one-line reason       | nack    |
//
// Thread safety: pure functions over values.
#pragma once

#include <chrono>
#include <exception>
#include <optional>
#include <string_view>

#include "idempotency/pubsub/message.h"
#include "idempotency/pubsub/response.h"

namespace idempotency::pubsub {

/// What became of one push request. Every request `idempotent()` answers has exactly one.
enum class DeliveryOutcome {
  /// The handler ran under the claim and acked; its response is stored and answered.
  kHandled,
  /// A delivery of the same key was running on this instance: this one waited for it and
  /// shares its response; the handler did not run again.
  kJoined,
  /// The key is DONE within its ttl: acked with 204 without running the handler.
  kDuplicate,
  /// The key is DONE within its ttl and `replay_stored_response` is set: the stored response
  /// is answered again.
  kReplayed,
  /// A live holder elsewhere (after `wait_for`), or the handler's own `mutex` met one: nacked
  /// with a Retry-After, the handler did not finish.
  kContention,
  /// The handler threw `Nack`: nacked with its status; the key is released.
  kHandlerNacked,
  /// The handler threw anything else (a `StoreError` from its own code included), or the
  /// wrapper failed outside the store: nacked with 500; the key is released.
  kHandlerFailed,
  /// The handler threw `OutcomeUnknown`: nacked; the key stays held until its lease lapses.
  kOutcomeUnknown,
  /// The idempotency store failed before the handler ran: nacked, the handler did not run.
  kStoreError,
  /// Not a push request the parser accepts: nacked with 400, the handler did not run.
  kMalformed,
  /// No usable key (none, blank, over the limit, or the key function threw) and
  /// `allow_unguarded` is off: fails closed with 400, the handler did not run.
  kNoKey,
  /// `IdempotentOptions::authenticate` refused the request: 401, nothing else was read.
  kUnauthenticated,
  /// The handler ran without deduplication (`GCP_PUBSUB_IDEMPOTENCY_DISABLED`, or no key with
  /// `allow_unguarded`) and acked. An unguarded handler that nacks or throws is
  /// `kHandlerNacked` / `kHandlerFailed`, as on the guarded path.
  kUnguarded,
};

/// to_string() names an outcome for metric labels and log fields ("handled", "joined",
/// "duplicate", "replayed", "contention", "handler_nacked", "handler_failed",
/// "outcome_unknown", "store_error", "malformed", "no_key", "unauthenticated", "unguarded").
[[nodiscard]] constexpr std::string_view to_string(DeliveryOutcome outcome) noexcept {
  switch (outcome) {
    case DeliveryOutcome::kHandled:
      return "handled";
    case DeliveryOutcome::kJoined:
      return "joined";
    case DeliveryOutcome::kDuplicate:
      return "duplicate";
    case DeliveryOutcome::kReplayed:
      return "replayed";
    case DeliveryOutcome::kContention:
      return "contention";
    case DeliveryOutcome::kHandlerNacked:
      return "handler_nacked";
    case DeliveryOutcome::kHandlerFailed:
      return "handler_failed";
    case DeliveryOutcome::kOutcomeUnknown:
      return "outcome_unknown";
    case DeliveryOutcome::kStoreError:
      return "store_error";
    case DeliveryOutcome::kMalformed:
      return "malformed";
    case DeliveryOutcome::kNoKey:
      return "no_key";
    case DeliveryOutcome::kUnauthenticated:
      return "unauthenticated";
    case DeliveryOutcome::kUnguarded:
      return "unguarded";
  }
  return "unknown";
}

/// What push_response() needs besides the outcome. Each field is read only for the outcomes
/// it names; the rest leave it unset.
struct ResponseFacts {
  /// kHandled, kJoined, kReplayed, kUnguarded: the handler's own (ack) response, answered as
  /// it is (kReplayed adds `Idempotency-Replayed: true`). Unset for kHandled or kUnguarded
  /// means the plain 200 "ok" of a handler that answers nothing itself.
  std::optional<PushResponse> response;
  /// kHandlerNacked: the status the `Nack` chose (one Pub/Sub would ack becomes 500).
  int nack_status = 500;
  /// kHandlerNacked, kMalformed, kNoKey, kUnauthenticated: the one-line reason answered as
  /// the body. It must never contain a key.
  std::string_view reason;
  /// kContention: when the holder's lease lapses, from now; answered as `Retry-After` in
  /// whole seconds, at least 1 and at most 600.
  std::chrono::seconds retry_after{1};
};

/// push_response() is the push status table: the HTTP response for `outcome`. Every answer of
/// `idempotent()` is built here and nowhere else. A handler's 102, which Pub/Sub acks but no
/// HTTP server can send as a final answer, is answered as 200, fresh or replayed.
[[nodiscard]] PushResponse push_response(DeliveryOutcome outcome, ResponseFacts facts);

/// What `IdempotentOptions::on_outcome` is told about one request. Its pointers are valid
/// only during the call.
struct OutcomeEvent {
  /// What became of the request: count by this, not by the answer's status.
  DeliveryOutcome outcome = DeliveryOutcome::kHandled;
  /// The request as received.
  const PushRequest* request = nullptr;
  /// The decoded message; null for kUnauthenticated and kMalformed (nothing was decoded).
  const Message* message = nullptr;
  /// For kHandlerNacked, kHandlerFailed, kOutcomeUnknown and kStoreError: the exception that
  /// decided it (for a joined delivery, the one its owner's handler threw), so an observer can
  /// tell apart causes only the handler knows, e.g. by its own `Nack` subclasses. Null for a
  /// non-standard throw and for every other outcome. Its `what()` is the thrower's text.
  const std::exception* error = nullptr;
};

}  // namespace idempotency::pubsub
