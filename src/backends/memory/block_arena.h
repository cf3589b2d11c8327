// The memory backend's record blocks: carved from huge pages, recycled by size.
//
// A fresh record on malloc costs a page fault every ~40 records as the heap grows (4 KiB pages;
// ~10 µs each on our VMs, a quarter of a pair's time) and a header word each. Here a store-wide
// SlabSource cuts 64 KiB runs from 2 MiB huge pages (the first 2 MiB on small pages, so that a
// small store stays small), and each shard's BlockArena fills a run with blocks of one 16-byte
// size class: bumping through it first, then reusing the blocks records give back. A run whose
// blocks are all free again goes back to the SlabSource, for any shard and any size next (each
// arena keeps one empty run at most); so a store's runs are about its peak, not the sum of
// every size's peak (results whose length drifts over time reuse the runs of the lengths they
// left), less the runs that stay partly used (the fragmentation of any slab allocator). Blocks
// above kLargestPooled (records with big results) come from operator new instead.
//
// Mapped memory goes back to the system only when the store is destroyed.
#pragma once

#include <array>
#include <cstddef>
#include <mutex>
#include <vector>

namespace idempotency::detail {

/// SlabSource hands out runs of memory from huge-page slabs it maps, and takes them back for
/// reuse; thread-safe. It must outlive every BlockArena that takes from it.
class SlabSource {
 public:
  /// Bytes in a run; runs are aligned to it.
  static constexpr std::size_t kRunBytes = std::size_t{64} << 10;

  SlabSource() = default;
  SlabSource(const SlabSource&) = delete;
  SlabSource& operator=(const SlabSource&) = delete;
  ~SlabSource();

  /// take_run() returns a run: one given back if there is one, else fresh memory. Throws
  /// `std::bad_alloc`.
  [[nodiscard]] char* take_run();

  /// give_back() returns a run that take_run() handed out, for any caller to take next.
  void give_back(char* run) noexcept;

  /// mapped_bytes() is the memory mapped so far.
  [[nodiscard]] std::size_t mapped_bytes() const;

  /// free_runs() is the number of runs given back and not yet taken again.
  [[nodiscard]] std::size_t free_runs() const;

  /// runs_out() is the number of runs taken and not given back.
  [[nodiscard]] std::size_t runs_out() const;

 private:
  mutable std::mutex mutex_;
  std::vector<char*> slabs_;
  // Its capacity covers every run of every slab, so that give_back() never allocates.
  std::vector<char*> free_runs_;
  char* next_ = nullptr;  // the current slab's first untaken byte
  char* end_ = nullptr;
};

/// BlockArena allocates blocks for one shard; not thread-safe (the shard's mutex guards it).
class BlockArena {
 public:
  /// Blocks up to this size are pooled; larger ones use operator new.
  static constexpr std::size_t kLargestPooled = 1024;

  explicit BlockArena(SlabSource& source) : source_(&source) {}
  BlockArena(const BlockArena&) = delete;
  BlockArena& operator=(const BlockArena&) = delete;
  ~BlockArena() = default;  // pooled memory belongs to the SlabSource

  /// allocate() returns `bytes` (> 0) of memory aligned to 16 bytes. Throws `std::bad_alloc`.
  [[nodiscard]] void* allocate(std::size_t bytes);

  /// release() takes back a block that allocate(`bytes`) returned.
  void release(void* block, std::size_t bytes) noexcept;

  /// pooled() tells whether a block of `bytes` lives in the arena's runs; one that does not
  /// must be released even when the whole store is dropped.
  [[nodiscard]] static constexpr bool pooled(std::size_t bytes) noexcept {
    return bytes <= kLargestPooled;
  }

  /// capacity() is how many bytes a block that allocate(`bytes`) returns can hold: a block
  /// can be rewritten in place with any size of the same capacity, and released with it.
  [[nodiscard]] static constexpr std::size_t capacity(std::size_t bytes) noexcept {
    return pooled(bytes) ? (size_class(bytes) + 1) * kGrain : bytes;
  }

 private:
  static constexpr std::size_t kGrain = 16;
  static constexpr std::size_t kClasses = kLargestPooled / kGrain;
  static constexpr std::size_t size_class(std::size_t bytes) noexcept {
    return (bytes - 1) / kGrain;  // 1..16 → 0, 17..32 → 1, …
  }
  struct Run;

  Run* open_run(std::size_t size_class);
  void link(Run* run) noexcept;
  void unlink(Run* run) noexcept;

  SlabSource* source_;
  // Per size class, the runs with a block to hand out (free or never used), doubly linked.
  std::array<Run*, kClasses> open_{};
  // The one empty run the arena keeps (still in its class's open list), or null.
  Run* spare_ = nullptr;
};

}  // namespace idempotency::detail
