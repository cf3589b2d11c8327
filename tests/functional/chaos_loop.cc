#include "chaos_loop.h"

#include <exception>
#include <random>

namespace idempotency::testing {

ChaosLoop::ChaosLoop(ProcessFleet& fleet, std::chrono::milliseconds min_interval,
                     std::chrono::milliseconds max_interval, std::uint32_t seed)
    : fleet_(fleet), thread_([=, this] { run(min_interval, max_interval, seed); }) {}

ChaosLoop::~ChaosLoop() { stop(); }

void ChaosLoop::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

int ChaosLoop::kills() const {
  std::lock_guard lock(mutex_);
  return kills_;
}

std::string ChaosLoop::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void ChaosLoop::run(std::chrono::milliseconds min_interval, std::chrono::milliseconds max_interval,
                    std::uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<std::int64_t> pause(min_interval.count(), max_interval.count());
  std::uniform_int_distribution<int> victim(0, fleet_.size() - 1);
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto next = std::chrono::milliseconds(pause(random));
    if (wake_.wait_for(lock, next, [&] { return stopping_; })) return;
    const int slot = victim(random);
    lock.unlock();
    std::string failed;
    try {
      fleet_.kill_and_restart(slot);
    } catch (const std::exception& e) {
      failed = e.what();
    }
    lock.lock();
    ++kills_;
    if (!failed.empty()) {
      failure_ = "restarting slot " + std::to_string(slot) + ": " + failed;
      return;
    }
  }
}

}  // namespace idempotency::testing
