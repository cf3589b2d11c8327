// RecordTable, the memory backend's packed storage: records round-trip byte for byte, deletion
// keeps every other key reachable (runs of colliding keys, runs that wrap round the end), and
// sweeps delete exactly the expired records. Hashes are chosen by the tests to force collisions.
#include "memory/record_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memory/huge_pages.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace idempotency::detail {
namespace {

Record record(std::int64_t fence, Millis expires_at) {
  Record r;
  r.state = RecordState::kClaimed;
  r.fence = fence;
  r.lease_expiry = expires_at - 10;
  r.expires_at = expires_at;
  r.claim_token = "0123456789abcdef0123456789abcdef";
  return r;
}

TEST(RecordTable, RecordsRoundTripWithEveryField) {
  SlabSource slabs;
  RecordTable table(slabs);
  Record r = record(7, 5000);
  r.state = RecordState::kDone;
  r.fingerprint = "fp";
  r.result = std::string("res\0ult", 7);
  table.insert("k", 1, r);
  Record bare = record(1, 6000);
  bare.claim_token.clear();
  bare.fingerprint = "";  // present but empty is not absent
  table.insert("bare", 2, bare);
  ASSERT_NE(table.find("k", 1), RecordTable::kNone);
  EXPECT_EQ(table.record(table.find("k", 1)), r);
  EXPECT_EQ(table.record(table.find("bare", 2)), bare);
  EXPECT_EQ(table.expires_at(table.find("k", 1)), 5000);
  EXPECT_EQ(table.find("k", 2), RecordTable::kNone);  // same key, other hash: not this record
  EXPECT_EQ(table.find("absent", 1), RecordTable::kNone);
  EXPECT_EQ(table.size(), 2U);
}

TEST(RecordTable, AssignKeepsTheKeyWhetherTheRecordGrowsOrShrinks) {
  SlabSource slabs;
  RecordTable table(slabs);
  table.insert("key", 9, record(1, 5000));
  Record done = record(1, 8000);
  done.state = RecordState::kDone;
  done.result = std::string(300, 'r');  // a bigger block
  table.assign(table.find("key", 9), done);
  EXPECT_EQ(table.record(table.find("key", 9)), done);
  Record released = record(2, 9000);
  released.claim_token.clear();  // a smaller one
  table.assign(table.find("key", 9), released);
  EXPECT_EQ(table.record(table.find("key", 9)), released);
  Record same_class = released;  // a few bytes more or less: rewritten in its block
  same_class.claim_token = "tok";
  table.assign(table.find("key", 9), same_class);
  EXPECT_EQ(table.record(table.find("key", 9)), same_class);
  same_class.claim_token.clear();
  same_class.fingerprint = "f";
  table.assign(table.find("key", 9), same_class);
  EXPECT_EQ(table.record(table.find("key", 9)), same_class);
  EXPECT_EQ(table.size(), 1U);
}

// Every key of a run that wrapped round the end of the table stays reachable after a delete
// anywhere in it, and after the table grows.
TEST(RecordTable, EraseInACollidingRunKeepsTheOthersReachable) {
  for (std::uint64_t home : {std::uint64_t{3}, std::uint64_t{14}}) {  // 14: wraps past 15
    for (int victim = 0; victim < 6; ++victim) {
      SlabSource slabs;
      RecordTable table(slabs);
      for (int i = 0; i < 6; ++i) table.insert("k" + std::to_string(i), home, record(i, 9000));
      table.insert("other", home + 1, record(99, 9000));  // its home is inside the run
      table.erase(table.find("k" + std::to_string(victim), home));
      for (int i = 0; i < 6; ++i) {
        const std::size_t slot = table.find("k" + std::to_string(i), home);
        if (i == victim) {
          EXPECT_EQ(slot, RecordTable::kNone);
        } else {
          ASSERT_NE(slot, RecordTable::kNone) << "home " << home << " victim " << victim;
          EXPECT_EQ(table.record(slot).fence, i);
        }
      }
      ASSERT_NE(table.find("other", home + 1), RecordTable::kNone);
      EXPECT_EQ(table.size(), 6U);
    }
  }
}

// Records come and go through the shard's arena: a hundred thousand claimed, completed with
// a result (a block of another size) and deleted fit in the one slab the first ones took; a
// result too big for the arena's runs is freed with the table (the ASan build's leak check).
TEST(RecordTable, RecordsThatComeAndGoReuseTheirMemory) {
  SlabSource slabs;
  {
    RecordTable table(slabs);
    for (int i = 0; i < 100'000; ++i) {
      const std::string key = "k" + std::to_string(i);
      const auto hash = static_cast<std::uint64_t>(i) * 2654435761U;
      table.insert(key, hash, record(i, 9000));
      Record done = record(i, 9000);
      done.state = RecordState::kDone;
      done.claim_token.clear();
      done.result = std::string(50, 'r');
      table.assign(table.find(key, hash), done);
      ASSERT_EQ(table.record(table.find(key, hash)), done);
      if (i >= 100) {
        const std::string old = "k" + std::to_string(i - 100);
        table.erase(table.find(old, static_cast<std::uint64_t>(i - 100) * 2654435761U));
      }
    }
    EXPECT_EQ(table.size(), 100U);
    Record big = record(1, 9000);
    big.result = std::string(5000, 'b');
    table.insert("big", 7, big);
    EXPECT_EQ(table.record(table.find("big", 7)), big);
  }
  EXPECT_EQ(slabs.mapped_bytes(), kHugePageBytes);
}

// 110,000 records take a slot array of 2 MiB, which is mapped rather than allocated: every
// record stays reachable, and LeakSanitizer, which scans the heap but not mapped memory, still
// sees the big block only that array points to.
TEST(RecordTable, AMappedSlotArrayKeepsEveryRecordAndItsBigBlocksAlive) {
  SlabSource slabs;
  RecordTable table(slabs);
  for (int i = 0; i < 110'000; ++i) {
    table.insert("k" + std::to_string(i), static_cast<std::uint64_t>(i) * 2654435761U,
                 record(i, 9000));
  }
  Record big = record(-1, 9000);
  big.result = std::string(5000, 'b');
  table.insert("big", 12345, big);
  for (int i = 0; i < 110'000; i += 997) {
    const std::size_t slot =
        table.find("k" + std::to_string(i), static_cast<std::uint64_t>(i) * 2654435761U);
    ASSERT_NE(slot, RecordTable::kNone) << i;
    EXPECT_EQ(table.record(slot).fence, i);
  }
  EXPECT_EQ(table.record(table.find("big", 12345)), big);
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(__lsan_do_recoverable_leak_check(), 0);
#endif
}

TEST(RecordTable, GrowingKeepsEveryRecord) {
  SlabSource slabs;
  RecordTable table(slabs);
  for (int i = 0; i < 5000; ++i) {
    table.insert("k" + std::to_string(i), static_cast<std::uint64_t>(i) * 2654435761U,
                 record(i, 9000));
  }
  for (int i = 0; i < 5000; ++i) {
    const std::size_t slot =
        table.find("k" + std::to_string(i), static_cast<std::uint64_t>(i) * 2654435761U);
    ASSERT_NE(slot, RecordTable::kNone) << i;
    EXPECT_EQ(table.record(slot).fence, i);
  }
}

// The slots' coarse expiry is whole seconds, rounded up: a record that expires later within
// the same second as `now` must survive, one that expired a millisecond ago must go.
TEST(RecordTable, PurgeDeletesExactlyTheExpiredRecords) {
  SlabSource slabs;
  RecordTable table(slabs);
  const Millis now = 1'000'500;
  table.insert("gone", 1, record(1, now - 1));
  table.insert("at-now", 1, record(2, now));  // expired: now >= expires_at
  table.insert("same-second", 1, record(3, now + 1));
  table.insert("later", 1, record(4, now + 60'000));
  table.insert("epoch", 1, record(5, 0));
  table.insert("before-epoch", 1, record(6, -5));
  EXPECT_EQ(table.purge_expired(now), 4U);
  EXPECT_EQ(table.size(), 2U);
  EXPECT_NE(table.find("same-second", 1), RecordTable::kNone);
  EXPECT_NE(table.find("later", 1), RecordTable::kNone);
  EXPECT_EQ(table.purge_expired(now + 1), 1U);
  EXPECT_EQ(table.find("same-second", 1), RecordTable::kNone);
}

TEST(RecordTable, SweepsGoRoundTheTableAndDeleteOnlyTheExpired) {
  SlabSource slabs;
  RecordTable table(slabs);
  std::vector<std::string> live;
  for (int i = 0; i < 10; ++i) {
    table.insert("old" + std::to_string(i), static_cast<std::uint64_t>(i) * 7, record(i, 100));
    live.push_back("new" + std::to_string(i));
    table.insert(live.back(), static_cast<std::uint64_t>(i) * 7 + 3, record(i, 50'000));
  }
  // 32 slots; a deletion re-inspects its slot, so 32 + 10 steps pass every slot at least once.
  for (int i = 0; i < 42; ++i) table.sweep(1'000, 1);
  EXPECT_EQ(table.size(), 10U);
  for (int i = 0; i < 10; ++i) {
    EXPECT_NE(table.find(live[static_cast<std::size_t>(i)], static_cast<std::uint64_t>(i) * 7 + 3),
              RecordTable::kNone);
  }
}

}  // namespace
}  // namespace idempotency::detail
