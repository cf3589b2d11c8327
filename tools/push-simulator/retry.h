// Pub/Sub's rules for one attempt's outcome: which answers ack, and how long a nacked message
// waits before it is delivered again.
//
// Thread safety: pure functions.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "options.h"

namespace idempotency::push_sim {

/// How one delivery attempt ended, as Pub/Sub judges it.
enum class Verdict {
  kAck,              ///< 102, 200, 201, 202 or 204.
  kNack,             ///< Any other status, or the request failed (refused, reset, no answer).
  kDeadlineExpired,  ///< No answer within the ack deadline: a nack; the request stays open.
};

/// classify() judges an attempt: `status` is the HTTP status when one came back (nothing when
/// the request failed), `deadline_passed` whether the ack deadline passed first.
[[nodiscard]] Verdict classify(std::optional<int> status, bool deadline_passed) noexcept;

/// to_string() names a verdict for the events file ("ack", "nack", "deadline_expired").
[[nodiscard]] const char* to_string(Verdict verdict) noexcept;

/// backoff() is how long a message waits before its next delivery after its `nacks`-th nack
/// (1 for the first): zero for the immediate policy; for the exponential one min_backoff
/// doubled per earlier nack, at most max_backoff. Unscaled (see scaled()).
[[nodiscard]] std::chrono::milliseconds backoff(const RetryPolicy& policy, int nacks) noexcept;

}  // namespace idempotency::push_sim
