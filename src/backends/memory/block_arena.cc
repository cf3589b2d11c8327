#include "block_arena.h"

#include <sanitizer/asan_interface.h>

#include <new>

#include "huge_pages.h"

namespace idempotency::detail {

// Under AddressSanitizer, memory in a run is poisoned until allocate() hands it out and again
// once release() takes it back, so a record read after its block was freed is still reported
// (the macros are no-ops in other builds).
static_assert(kHugePageBytes % SlabSource::kRunBytes == 0);

SlabSource::~SlabSource() {
  for (char* slab : slabs_) {
    ASAN_UNPOISON_MEMORY_REGION(slab, kHugePageBytes);  // the next mapping there starts clean
    unmap_huge(slab, kHugePageBytes);
  }
}

char* SlabSource::take_run() {
  std::lock_guard lock(mutex_);
  if (next_ == end_) {
    slabs_.reserve(slabs_.size() + 1);  // before mapping, so that a throw leaks nothing
    // The first slab on 4 KiB pages: a store of a few records is not 2 MiB resident.
    next_ =
        static_cast<char*>(map_huge(kHugePageBytes, slabs_.empty() ? Pages::kSmall : Pages::kHuge));
    end_ = next_ + kHugePageBytes;
    slabs_.push_back(next_);
  }
  char* run = next_;
  next_ += kRunBytes;  // a slab holds a whole number of runs
  ASAN_POISON_MEMORY_REGION(run, kRunBytes);
  return run;
}

std::size_t SlabSource::mapped_bytes() const {
  std::lock_guard lock(mutex_);
  return slabs_.size() * kHugePageBytes;
}

void* BlockArena::allocate(std::size_t bytes) {
  if (!pooled(bytes)) return ::operator new(bytes);
  const std::size_t c = size_class(bytes);
  const std::size_t rounded = (c + 1) * kGrain;
  if (FreeBlock* block = free_[c]; block != nullptr) {
    ASAN_UNPOISON_MEMORY_REGION(block, rounded);
    free_[c] = block->next;
    return block;
  }
  if (static_cast<std::size_t>(end_ - next_) < rounded) {
    // The rest of this run (under kLargestPooled bytes of 64 KiB) is left unused.
    next_ = source_->take_run();
    end_ = next_ + SlabSource::kRunBytes;
  }
  void* block = next_;
  next_ += rounded;
  ASAN_UNPOISON_MEMORY_REGION(block, rounded);
  return block;
}

void BlockArena::release(void* block, std::size_t bytes) noexcept {
  if (block == nullptr) return;
  if (!pooled(bytes)) return ::operator delete(block);
  const std::size_t c = size_class(bytes);
  free_[c] = new (block) FreeBlock{free_[c]};
  ASAN_POISON_MEMORY_REGION(block, (c + 1) * kGrain);
}

}  // namespace idempotency::detail
