#include "idempotency/clock.h"

#include <array>
#include <cstdio>

namespace idempotency {

TimePoint SystemClock::now() const {
  return std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now());
}

std::string format_rfc3339(TimePoint t) {
  using namespace std::chrono;
  const auto day = floor<days>(t);
  const year_month_day ymd{day};
  const hh_mm_ss<milliseconds> hms{t - day};
  std::array<char, 40> buf{};
  std::snprintf(buf.data(), buf.size(), "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ",
                static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                static_cast<unsigned>(ymd.day()), static_cast<int>(hms.hours().count()),
                static_cast<int>(hms.minutes().count()), static_cast<int>(hms.seconds().count()),
                static_cast<int>(hms.subseconds().count()));
  return buf.data();
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
