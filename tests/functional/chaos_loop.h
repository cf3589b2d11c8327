// ChaosLoop: SIGKILLs a random process of a fleet every `min_interval`..`max_interval` and
// restarts it on its port, on a thread of its own, until stopped (or destroyed).
//
// Thread safety: stop() and kills() may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "process_fleet.h"

namespace idempotency::testing {

class ChaosLoop {
 public:
  /// ChaosLoop() starts killing at once (the first kill one interval from now). A restart that
  /// fails is kept as `failure()` and ends the loop.
  ChaosLoop(ProcessFleet& fleet, std::chrono::milliseconds min_interval,
            std::chrono::milliseconds max_interval, std::uint32_t seed);
  ~ChaosLoop();
  ChaosLoop(const ChaosLoop&) = delete;
  ChaosLoop& operator=(const ChaosLoop&) = delete;

  /// stop() ends the loop after the kill in progress, if any, and its restart.
  void stop();
  /// kills() is the number of kills made so far.
  [[nodiscard]] int kills() const;
  /// failure() is why the loop ended early ("" while it runs or when stopped).
  [[nodiscard]] std::string failure() const;

 private:
  void run(std::chrono::milliseconds min_interval, std::chrono::milliseconds max_interval,
           std::uint32_t seed);

  ProcessFleet& fleet_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  int kills_ = 0;          // guarded by mutex_
  std::string failure_;    // guarded by mutex_
  std::thread thread_;
};

}  // namespace idempotency::testing
