// The memory backend's record blocks: carved from huge pages, recycled by size.
//
// A fresh record on malloc costs a page fault every ~40 records as the heap grows (4 KiB pages;
// ~10 µs each on our VMs, a quarter of a pair's time) and a header word each. Here every shard's
// BlockArena bumps through 64 KiB runs that a store-wide SlabSource cuts from 2 MiB huge pages
// (the first 2 MiB on small pages, so that a small store stays small), and keeps a free list
// per 16-byte size class for the blocks records give back. Blocks above kLargestPooled
// (records with big results) come from operator new instead.
//
// Memory in runs goes back to the system only when the store is destroyed; until then the
// shard reuses it. A store that held ten million records at its peak keeps that much.
#pragma once

#include <array>
#include <cstddef>
#include <mutex>
#include <vector>

namespace idempotency::detail {

/// SlabSource hands out runs of memory from huge-page slabs it maps; thread-safe. It must
/// outlive every BlockArena that takes from it.
class SlabSource {
 public:
  /// Bytes in a run.
  static constexpr std::size_t kRunBytes = std::size_t{64} << 10;

  SlabSource() = default;
  SlabSource(const SlabSource&) = delete;
  SlabSource& operator=(const SlabSource&) = delete;
  ~SlabSource();

  /// take_run() returns kRunBytes of fresh memory, aligned to 64 bytes. Throws `std::bad_alloc`.
  [[nodiscard]] char* take_run();

  /// mapped_bytes() is the memory mapped so far.
  [[nodiscard]] std::size_t mapped_bytes() const;

 private:
  mutable std::mutex mutex_;
  std::vector<char*> slabs_;
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
  struct FreeBlock {
    FreeBlock* next;
  };
  static constexpr std::size_t size_class(std::size_t bytes) noexcept {
    return (bytes - 1) / kGrain;  // 1..16 → 0, 17..32 → 1, …
  }

  SlabSource* source_;
  std::array<FreeBlock*, kLargestPooled / kGrain> free_{};
  char* next_ = nullptr;  // the current run's first unused byte
  char* end_ = nullptr;
};

}  // namespace idempotency::detail
