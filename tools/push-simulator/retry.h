// Pub/Sub's rules for one attempt's outcome: which answers ack, how long a nacked message waits
// before it is delivered again, and the push back-off that pauses a whole subscription.
//
// Thread safety: pure functions, and PushBackoff, which is not thread-safe (the scheduler's one
// event loop owns each).
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
  kDeadlineExpired,  ///< No answer within the ack deadline: a nack; the request is closed.
};

/// classify() judges an attempt: `status` is the HTTP status when one came back (nothing when
/// the request failed), `deadline_passed` whether the ack deadline passed first.
[[nodiscard]] Verdict classify(std::optional<int> status, bool deadline_passed) noexcept;

/// to_string() names a verdict for the events file ("ack", "nack", "deadline_expired").
[[nodiscard]] const char* to_string(Verdict verdict) noexcept;

/// backoff() is how long a message waits before its next delivery after its `nacks`-th nack
/// (1 for the first): zero for the immediate policy (PushBackoff paces it); for the exponential
/// one min_backoff doubled per earlier nack, at most max_backoff. Unscaled (see scaled()).
[[nodiscard]] std::chrono::milliseconds backoff(const RetryPolicy& policy, int nacks) noexcept;

/// PushBackoff is a push subscription's own back-off, which paces the immediate retry policy:
/// a nack (a non-ack status, a failed request, an expired deadline) pauses every delivery to
/// the subscription for 100 ms, doubled by each later nack up to 60 s, and an ack resets it so
/// the next nack pauses 100 ms again. A nack during a pause neither lengthens nor grows it: the
/// requests already out when a pause began fail together, and count as one step.
class PushBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFirst{100};
  static constexpr std::chrono::milliseconds kMax{60'000};

  /// on_nack() records a nack at `now`; a pause that begins lasts the step scaled by
  /// `time_scale` (see scaled()).
  void on_nack(Clock::time_point now, double time_scale) noexcept;

  /// on_ack() resets the step; a pause under way still runs out.
  void on_ack() noexcept { step_ = std::chrono::milliseconds(0); }

  /// resume_at() is when the current pause ends (in the past when there is none).
  [[nodiscard]] Clock::time_point resume_at() const noexcept { return resume_at_; }

  /// step() is the last pause's length, unscaled; zero after an ack or before any nack.
  [[nodiscard]] std::chrono::milliseconds step() const noexcept { return step_; }

 private:
  std::chrono::milliseconds step_{0};
  Clock::time_point resume_at_{};
};

}  // namespace idempotency::push_sim
