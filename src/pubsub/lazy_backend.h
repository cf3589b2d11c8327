// LazyBackend (internal to the pubsub component): the push wrapper's backend, built on the
// first guarded request when only a factory was given, with its reclaimer.
//
// Thread safety: get() from any number of threads.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "idempotency/backend.h"
#include "idempotency/reclaimer.h"

namespace idempotency::pubsub::detail {

// Built at most once (a factory that throws is retried by the next request); its reclaimer
// starts with it when `purge_interval` is set.
class LazyBackend {
 public:
  LazyBackend(std::shared_ptr<LockBackend> backend,
              std::function<std::shared_ptr<LockBackend>()> factory,
              std::chrono::milliseconds purge_interval)
      : backend_(std::move(backend)),
        factory_(std::move(factory)),
        purge_interval_(purge_interval) {
    if (backend_) {
      start_reclaimer();
      ready_.store(backend_.get(), std::memory_order_release);
    }
  }

  // The backend if it is built already, else null: for callers that must not block.
  [[nodiscard]] LockBackend* ready() const { return ready_.load(std::memory_order_acquire); }

  LockBackend& get() {
    // Every request asks: once built, the answer is one atomic load, no lock.
    if (LockBackend* built = ready_.load(std::memory_order_acquire)) return *built;
    // A mutex, not std::call_once: a factory that throws must leave the slot empty for the
    // next request, and call_once's exceptional path is not reliable under TSan.
    std::lock_guard lock(mutex_);
    if (!backend_) {
      auto built = factory_();
      if (!built) throw std::invalid_argument("idempotent: the backend factory returned null");
      backend_ = std::move(built);
      start_reclaimer();
      ready_.store(backend_.get(), std::memory_order_release);
    }
    return *backend_;
  }

 private:
  void start_reclaimer() {
    if (purge_interval_.count() > 0) {
      reclaimer_ =
          std::make_unique<Reclaimer>(backend_, ReclaimerOptions{.interval = purge_interval_});
    }
  }

  std::mutex mutex_;
  std::atomic<LockBackend*> ready_{nullptr};  // backend_, once it exists
  std::shared_ptr<LockBackend> backend_;
  std::function<std::shared_ptr<LockBackend>()> factory_;
  std::chrono::milliseconds purge_interval_;
  std::unique_ptr<Reclaimer> reclaimer_;  // after backend_: stopped before it goes
};

}  // namespace idempotency::pubsub::detail
