#include "retry.h"

#include <algorithm>

#include "idempotency/pubsub/response.h"

namespace idempotency::push_sim {

Verdict classify(std::optional<int> status, bool deadline_passed) noexcept {
  if (deadline_passed) return Verdict::kDeadlineExpired;
  if (status && pubsub::is_ack(*status)) return Verdict::kAck;
  return Verdict::kNack;
}

const char* to_string(Verdict verdict) noexcept {
  switch (verdict) {
    case Verdict::kAck:
      return "ack";
    case Verdict::kNack:
      return "nack";
    case Verdict::kDeadlineExpired:
      return "deadline_expired";
  }
  return "nack";
}

std::chrono::milliseconds backoff(const RetryPolicy& policy, int nacks) noexcept {
  if (policy.kind == RetryPolicy::Kind::kImmediate || nacks < 1) {
    return std::chrono::milliseconds(0);
  }
  std::chrono::milliseconds delay = policy.min_backoff;
  // Doubling stops at the cap, so 600 s is never overflowed however many nacks came before.
  for (int i = 1; i < nacks && delay < policy.max_backoff; ++i) delay *= 2;
  return std::min(delay, policy.max_backoff);
}

void PushBackoff::on_nack(Clock::time_point now, double time_scale) noexcept {
  if (now < resume_at_) return;
  step_ = step_.count() == 0 ? kFirst : std::min(step_ * 2, kMax);
  resume_at_ = now + scaled(step_, time_scale);
}

}  // namespace idempotency::push_sim
