// The contract, differential and concurrency suites once more, on the memory store behind a
// DoneCache ("MemoryDoneCache/…"): answering DONE claims from copies changes no answer, even at
// the very edge of expiry (no margin, the store's own clock).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "contract/suites.h"
#include "idempotency/done_cache.h"
#include "idempotency/memory_lock.h"

namespace idempotency::testing {
namespace {

BackendFactory memory_done_cache_factory() {
  BackendFactory factory = memory_factory();
  factory.name = "MemoryDoneCache";
  factory.make = [](const BackendOptions& options) -> std::unique_ptr<LockBackend> {
    return std::make_unique<DoneCache>(
        std::make_shared<InMemoryLock>(options),
        DoneCacheOptions{.clock_margin = std::chrono::milliseconds(0), .clock = options.clock});
  };
  return factory;
}

}  // namespace

IDEMPOTENCY_INSTANTIATE(MemoryDoneCache, BackendContract, memory_done_cache_factory());
IDEMPOTENCY_INSTANTIATE(MemoryDoneCache, Differential, memory_done_cache_factory());
IDEMPOTENCY_INSTANTIATE(MemoryDoneCache, Concurrency, memory_done_cache_factory());

}  // namespace idempotency::testing
