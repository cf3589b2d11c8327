#include "idempotency/clock.h"

namespace idempotency {

TimePoint SystemClock::now() const {
  return std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
}

std::shared_ptr<const Clock> system_clock() {
  static const auto clock = std::make_shared<const SystemClock>();
  return clock;
}

ManualClock::ManualClock(TimePoint start) : millis_(to_millis(start)) {}

TimePoint ManualClock::now() const { return from_millis(millis_.load()); }

void ManualClock::set(TimePoint t) { millis_.store(to_millis(t)); }

void ManualClock::advance(std::chrono::milliseconds d) { millis_.fetch_add(d.count()); }

}  // namespace idempotency
