// How every bench driver measures: a window after a warm-up, and the process's CPU in it.
#pragma once

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

namespace bench {

/// The unrecorded warm-up before each measured window, in seconds.
inline constexpr double kWarmupSeconds = 0.5;

/// process_cpu_seconds() is the user + system CPU time of the whole process (every thread) so
/// far, in seconds.
inline double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

/// measure_window() times the work that other threads run: kWarmupSeconds unrecorded (phase
/// 0), `seconds` recorded (phase 1), then phase 2 (stop). Returns the window's wall time and
/// the process's CPU time in it.
inline std::pair<double, double> measure_window(std::atomic<int>& phase, double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(kWarmupSeconds));
  const double cpu_start = process_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  phase = 1;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  phase = 2;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {elapsed, process_cpu_seconds() - cpu_start};
}

}  // namespace bench
