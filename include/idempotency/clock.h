// Clocks: the system clock, and a manual clock so tests move time without sleeping.
//
// Backends that judge time on the client (memory, SQLite, Datastore) read a `Clock`;
// Redis and PostgreSQL judge by the server's own clock instead.
//
// Thread safety: both clocks are safe to read and (ManualClock) move from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace idempotency {

/// A wall-clock instant at millisecond resolution, the resolution every backend stores.
using TimePoint = std::chrono::sys_time<std::chrono::milliseconds>;

/// Clock is the time source a client-clock backend judges leases and ttls by.
class Clock {
 public:
  virtual ~Clock() = default;
  /// now() returns the current instant.
  [[nodiscard]] virtual TimePoint now() const = 0;
};

/// SystemClock reads `std::chrono::system_clock`.
class SystemClock final : public Clock {
 public:
  /// now() returns the system clock's time truncated to the millisecond; it follows the host's
  /// clock adjustments, so it may step backwards.
  [[nodiscard]] TimePoint now() const override;
};

/// ManualClock stands still until told to move: for tests of leases and ttls.
class ManualClock final : public Clock {
 public:
  /// ManualClock() starts at `start` (default: an arbitrary fixed instant in 2026).
  explicit ManualClock(TimePoint start = TimePoint(std::chrono::milliseconds(1'780'000'000'000)));
  /// now() returns the instant last set (the start, moved by every `set` and `advance`); it
  /// never moves by itself.
  [[nodiscard]] TimePoint now() const override;
  /// set() jumps to `t`, forwards or backwards.
  void set(TimePoint t);
  /// advance() moves forward by `d`.
  void advance(std::chrono::milliseconds d);

 private:
  std::atomic<std::int64_t> millis_;
};

/// system_clock() returns the one shared SystemClock, for a `BackendOptions::clock` left null.
[[nodiscard]] std::shared_ptr<const Clock> system_clock();

/// format_rfc3339() renders `t` as RFC 3339 UTC with milliseconds: 2026-11-30T12:00:00.000Z.
[[nodiscard]] std::string format_rfc3339(TimePoint t);

/// to_millis() converts an instant to the epoch milliseconds backends store.
[[nodiscard]] constexpr std::int64_t to_millis(TimePoint t) noexcept {
  return t.time_since_epoch().count();
}

/// from_millis() converts stored epoch milliseconds back to an instant.
[[nodiscard]] constexpr TimePoint from_millis(std::int64_t ms) noexcept {
  return TimePoint(std::chrono::milliseconds(ms));
}

}  // namespace idempotency
