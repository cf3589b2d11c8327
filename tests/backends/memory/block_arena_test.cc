// BlockArena and SlabSource, the memory backend's record allocator: blocks are distinct,
// aligned and writable; a released block is reused for its size class; a run emptied goes
// back for any size; big blocks bypass the runs; and memory stays near its peak however many
// records come and go, and whatever sizes they drift through.
#include "memory/block_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "memory/huge_pages.h"

namespace idempotency::detail {
namespace {

TEST(BlockArena, BlocksAreDistinctAlignedAndHoldWhatIsWritten) {
  SlabSource slabs;
  BlockArena arena(slabs);
  std::vector<std::pair<char*, std::size_t>> blocks;
  for (std::size_t i = 0; i < 3000; ++i) {
    const std::size_t bytes = 1 + (i * 37) % BlockArena::kLargestPooled;
    auto* b = static_cast<char*>(arena.allocate(bytes));
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(b) % 16, 0U) << bytes;
    std::memset(b, static_cast<int>(i % 251), bytes);
    blocks.emplace_back(b, bytes);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const auto [b, bytes] = blocks[i];
    for (std::size_t j = 0; j < bytes; ++j) {
      ASSERT_EQ(static_cast<unsigned char>(b[j]), i % 251) << "block " << i << " overwritten";
    }
  }
  for (const auto& [b, bytes] : blocks) arena.release(b, bytes);
}

TEST(BlockArena, AReleasedBlockIsReusedForItsSizeClassOnly) {
  SlabSource slabs;
  BlockArena arena(slabs);
  void* a = arena.allocate(72);
  arena.release(a, 72);
  void* other_class = arena.allocate(100);
  EXPECT_NE(other_class, a);
  EXPECT_EQ(arena.allocate(80), a);  // 72 and 80 share the class of 65..80 bytes
}

TEST(BlockArena, BigBlocksBypassTheRuns) {
  SlabSource slabs;
  BlockArena arena(slabs);
  EXPECT_TRUE(BlockArena::pooled(BlockArena::kLargestPooled));
  EXPECT_FALSE(BlockArena::pooled(BlockArena::kLargestPooled + 1));
  void* big = arena.allocate(std::size_t{1} << 20);
  std::memset(big, 1, std::size_t{1} << 20);
  EXPECT_EQ(slabs.mapped_bytes(), 0U);
  arena.release(big, std::size_t{1} << 20);
}

TEST(BlockArena, RunsComeFromHugePageSlabsSharedByArenas) {
  SlabSource slabs;
  BlockArena one(slabs);
  BlockArena two(slabs);
  std::set<char*> runs;
  (void)one.allocate(16);
  (void)two.allocate(16);
  EXPECT_EQ(slabs.mapped_bytes(), kHugePageBytes);  // two runs, one slab
  for (std::size_t i = 0; i < kHugePageBytes / SlabSource::kRunBytes; ++i) {
    runs.insert(slabs.take_run());
  }
  EXPECT_EQ(runs.size(), kHugePageBytes / SlabSource::kRunBytes);
  EXPECT_EQ(slabs.mapped_bytes(), 2 * kHugePageBytes);
}

// Records that come and go reuse their blocks: a million of them, a hundred alive at a time,
// never need a second slab.
TEST(BlockArena, ChurnStaysInTheMemoryItAlreadyHas) {
  SlabSource slabs;
  BlockArena arena(slabs);
  std::vector<void*> live(100, nullptr);
  for (std::size_t i = 0; i < 1'000'000; ++i) {
    void*& slot = live[i % live.size()];
    arena.release(slot, 90);
    slot = arena.allocate(90);
  }
  for (void* b : live) arena.release(b, 90);
  EXPECT_EQ(slabs.mapped_bytes(), kHugePageBytes);
}

#if defined(__SANITIZE_ADDRESS__)
// Pooled blocks are poisoned while free: ASan still reports a record read after its release.
TEST(BlockArenaDeathTest, AReleasedBlockReadUnderAddressSanitizerIsReported) {
  SlabSource slabs;
  BlockArena arena(slabs);
  auto* block = static_cast<volatile char*>(arena.allocate(64));
  block[8] = 1;
  arena.release(const_cast<char*>(block), 64);
  EXPECT_DEATH((void)block[8], "use-after-poison");
  auto* never_handed_out = static_cast<volatile char*>(arena.allocate(64)) + 64;
  EXPECT_DEATH((void)*never_handed_out, "use-after-poison");
}
#endif

TEST(BlockArena, ARunEmptiedGoesBackForAnySizeAndAnyArena) {
  SlabSource slabs;
  BlockArena small(slabs);
  std::vector<void*> blocks;
  for (int i = 0; i < 10'000; ++i) blocks.push_back(small.allocate(96));
  const std::size_t mapped = slabs.mapped_bytes();
  for (void* b : blocks) small.release(b, 96);
  EXPECT_GT(slabs.free_runs(), 10U);
  EXPECT_EQ(slabs.runs_out(), 1U);  // all but the one empty run the arena keeps
  BlockArena big(slabs);
  blocks.clear();
  for (int i = 0; i < 1'000; ++i) blocks.push_back(big.allocate(900));
  EXPECT_EQ(slabs.mapped_bytes(), mapped);  // the runs the small blocks left, reused
  for (void* b : blocks) big.release(b, 900);
}

// Records whose sizes drift (results of one length for a while, then of another) reuse the
// runs of the sizes they left: 2,000 live blocks of at most 1 KiB (2 MiB at most) through
// every size class, 400,000 blocks in all, stay within a few slabs.
TEST(BlockArena, DriftingSizesStayNearThePeak) {
  SlabSource slabs;
  BlockArena arena(slabs);
  constexpr std::size_t kLive = 2'000;
  std::vector<std::pair<void*, std::size_t>> live(kLive, {nullptr, 1});
  for (std::size_t i = 0; i < 400'000; ++i) {
    auto& [block, bytes] = live[i % kLive];
    arena.release(block, bytes);
    bytes = 1 + (i * BlockArena::kLargestPooled / 400'000);
    block = arena.allocate(bytes);
  }
  EXPECT_LE(slabs.mapped_bytes(), 3 * kHugePageBytes);
  for (auto& [block, bytes] : live) arena.release(block, bytes);
  // Every class it passed through is empty now: one run kept, not one a class.
  EXPECT_EQ(slabs.runs_out(), 1U);
}

TEST(HugePages, MappedMemoryIsZeroedAlignedAndWritable) {
  void* memory = map_huge(2 * kHugePageBytes);
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(memory) % kHugePageBytes, 0U);
  const auto* bytes = static_cast<const unsigned char*>(memory);
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[2 * kHugePageBytes - 1], 0);
  std::memset(memory, 0xAB, 2 * kHugePageBytes);
  unmap_huge(memory, 2 * kHugePageBytes);
}

}  // namespace
}  // namespace idempotency::detail
