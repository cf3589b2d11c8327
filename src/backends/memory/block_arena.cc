#include "block_arena.h"

#include <sanitizer/asan_interface.h>

#include <cstdint>
#include <new>

#include "huge_pages.h"

namespace idempotency::detail {

// Under AddressSanitizer, memory in a run is poisoned until allocate() hands it out and again
// once release() takes it back, so a record read after its block was freed is still reported
// (the macros are no-ops in other builds).
static_assert(kHugePageBytes % SlabSource::kRunBytes == 0);
constexpr std::size_t kRunsPerSlab = kHugePageBytes / SlabSource::kRunBytes;

SlabSource::~SlabSource() {
  for (char* slab : slabs_) {
    ASAN_UNPOISON_MEMORY_REGION(slab, kHugePageBytes);  // the next mapping there starts clean
    unmap_huge(slab, kHugePageBytes);
  }
}

char* SlabSource::take_run() {
  std::lock_guard lock(mutex_);
  if (!free_runs_.empty()) {
    char* run = free_runs_.back();
    free_runs_.pop_back();
    return run;
  }
  if (next_ == end_) {
    // Room first, so that a throw leaks nothing and give_back() never needs to allocate;
    // doubling, so that a store of many slabs does not copy the lists once a slab. Each list
    // is checked on its own: after a throw between the two, the next slab tries again.
    const std::size_t room = 2 * slabs_.size() + 1;
    if (slabs_.size() == slabs_.capacity()) slabs_.reserve(room);
    if (free_runs_.capacity() < (slabs_.size() + 1) * kRunsPerSlab) {
      free_runs_.reserve(room * kRunsPerSlab);
    }
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

void SlabSource::give_back(char* run) noexcept {
  ASAN_POISON_MEMORY_REGION(run, kRunBytes);
  std::lock_guard lock(mutex_);
  free_runs_.push_back(run);  // within the capacity reserved for every run: cannot throw
}

std::size_t SlabSource::mapped_bytes() const {
  std::lock_guard lock(mutex_);
  return slabs_.size() * kHugePageBytes;
}

std::size_t SlabSource::free_runs() const {
  std::lock_guard lock(mutex_);
  return free_runs_.size();
}

std::size_t SlabSource::runs_out() const {
  std::lock_guard lock(mutex_);
  const auto untaken = static_cast<std::size_t>(end_ - next_) / kRunBytes;
  return slabs_.size() * kRunsPerSlab - untaken - free_runs_.size();
}

// A run's header, in its first kHeaderBytes; its blocks follow, all of one size class.
struct BlockArena::Run {
  struct FreeBlock {
    FreeBlock* next;
  };
  static constexpr std::size_t kHeaderBytes = 64;

  Run* prev = nullptr;  // in open_[size_class] while `open`
  Run* next = nullptr;
  FreeBlock* free = nullptr;  // blocks given back
  char* unused;               // the first byte never handed out
  std::uint32_t in_use = 0;
  std::uint16_t size_class;
  bool open = false;

  explicit Run(std::size_t c)
      : unused(reinterpret_cast<char*>(this) + kHeaderBytes),
        size_class(static_cast<std::uint16_t>(c)) {}

  std::size_t block_bytes() const noexcept { return (std::size_t{size_class} + 1) * kGrain; }
  char* end() noexcept { return reinterpret_cast<char*>(this) + SlabSource::kRunBytes; }
  bool full() noexcept {
    return free == nullptr && static_cast<std::size_t>(end() - unused) < block_bytes();
  }
  // The run a block lies in: runs are aligned to their size.
  static Run* of(void* block) noexcept {
    auto* p = static_cast<char*>(block);
    return reinterpret_cast<Run*>(p - reinterpret_cast<std::uintptr_t>(p) % SlabSource::kRunBytes);
  }
};
BlockArena::Run* BlockArena::open_run(std::size_t size_class) {
  static_assert(sizeof(Run) <= Run::kHeaderBytes && Run::kHeaderBytes % kGrain == 0);
  if (Run* run = open_[size_class]; run != nullptr) return run;
  char* memory = source_->take_run();
  ASAN_UNPOISON_MEMORY_REGION(memory, Run::kHeaderBytes);
  Run* run = new (memory) Run(size_class);
  link(run);
  return run;
}

void BlockArena::link(Run* run) noexcept {
  Run*& head = open_[run->size_class];
  run->prev = nullptr;
  run->next = head;
  if (head != nullptr) head->prev = run;
  head = run;
  run->open = true;
}

void BlockArena::unlink(Run* run) noexcept {
  if (run->prev != nullptr) {
    run->prev->next = run->next;
  } else {
    open_[run->size_class] = run->next;
  }
  if (run->next != nullptr) run->next->prev = run->prev;
  run->prev = run->next = nullptr;
  run->open = false;
}

void* BlockArena::allocate(std::size_t bytes) {
  if (!pooled(bytes)) return ::operator new(bytes);
  Run* run = open_run(size_class(bytes));
  void* block = nullptr;
  if (run->free != nullptr) {
    ASAN_UNPOISON_MEMORY_REGION(run->free, run->block_bytes());
    block = run->free;
    run->free = run->free->next;
  } else {
    block = run->unused;
    run->unused += run->block_bytes();
    ASAN_UNPOISON_MEMORY_REGION(block, run->block_bytes());
  }
  ++run->in_use;
  if (run == spare_) spare_ = nullptr;
  if (run->full()) unlink(run);
  return block;
}

void BlockArena::release(void* block, std::size_t bytes) noexcept {
  if (block == nullptr) return;
  if (!pooled(bytes)) return ::operator delete(block);
  Run* run = Run::of(block);
  run->free = new (block) Run::FreeBlock{run->free};
  ASAN_POISON_MEMORY_REGION(block, run->block_bytes());
  --run->in_use;
  if (!run->open) link(run);
  // An empty run goes back for any size to use; but the arena keeps the one that emptied
  // last, so that one block taken and given back again and again does not take a run and
  // give it back each time.
  if (run->in_use == 0) {
    if (spare_ != nullptr && spare_ != run) {
      unlink(spare_);
      source_->give_back(reinterpret_cast<char*>(spare_));
    }
    spare_ = run;
  }
}

}  // namespace idempotency::detail
