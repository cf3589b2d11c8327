#include "idempotency/reclaimer.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <utility>

#include "idempotency/log.h"

namespace idempotency {
namespace {

// A wait of `interval` ± 25 %: instances started together drift apart instead of purging in
// lockstep.
std::chrono::milliseconds jittered(std::chrono::milliseconds interval, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> factor(0.75, 1.25);
  return std::chrono::milliseconds(std::max<std::int64_t>(
      1, static_cast<std::int64_t>(static_cast<double>(interval.count()) * factor(rng))));
}

std::string milliseconds_text(std::chrono::steady_clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

}  // namespace

Reclaimer::Reclaimer(std::shared_ptr<LockBackend> backend, ReclaimerOptions options)
    : backend_(std::move(backend)), options_(std::move(options)) {
  if (!backend_) throw std::invalid_argument("Reclaimer: the backend is null");
  // At most kMaxTtl: a wait's deadline is taken in nanoseconds of the steady clock, where a
  // far longer one overflows, lands in the past, and purges in a busy loop.
  if (options_.interval.count() <= 0 || options_.interval > kMaxTtl) {
    throw std::invalid_argument("Reclaimer: the interval must be positive and at most 366 days");
  }
  thread_ = std::thread([this] { run(); });
}

Reclaimer::~Reclaimer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Reclaimer::run() {
  std::mt19937_64 rng{std::random_device{}()};
  std::unique_lock lock(mutex_);
  for (;;) {
    if (wake_.wait_for(lock, jittered(options_.interval, rng), [this] { return stopping_; })) {
      return;
    }
    lock.unlock();
    PurgePass pass;
    const auto started = std::chrono::steady_clock::now();
    try {
      pass.purged = backend_->purge_expired();
    } catch (const std::exception& e) {
      pass.error = e.what();
    } catch (...) {
      pass.error = "a non-standard exception";
    }
    pass.took = std::chrono::steady_clock::now() - started;
    // Counting costs a store a scan (SQLite), so only when someone reads the count.
    if (pass.error.empty() && options_.on_pass) {
      try {
        pass.stored = backend_->stored_records();
      } catch (...) {
        // A count is for metrics only; a store that cannot give one says nothing.
      }
    }
    passes_.fetch_add(1);
    purged_.fetch_add(pass.purged);
    if (!pass.error.empty()) {
      log({.severity = Severity::kWarning,
           .event = "purge_failed",
           .message = "Deleting expired records failed; the next pass retries.",
           .fields = {{"error", pass.error}}});
    } else if (pass.took > options_.interval) {
      log({.severity = Severity::kWarning,
           .event = "purge_behind",
           .message = "A purge pass took longer than the purge interval: expired records are "
                      "piling up faster than they are deleted.",
           .fields = {{"purged", std::to_string(pass.purged)},
                      {"took_ms", milliseconds_text(pass.took)},
                      {"interval_ms", std::to_string(options_.interval.count())}}});
    }
    if (options_.on_pass) {
      try {
        options_.on_pass(pass);
      } catch (...) {
        // Observation never stops reclaiming.
      }
    }
    lock.lock();
  }
}

}  // namespace idempotency
