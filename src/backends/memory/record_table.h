// RecordTable: one shard of the memory backend's records, packed for size and cache misses.
//
// Each record is one block from the shard's BlockArena: its fixed fields, then its key, claim
// token, fingerprint and result bytes back to back (no std::string, no node, no bucket list). The
// table is open addressing with linear probing over 16-byte slots: the block's address, 32 bits of
// the key's hash (its home slot, and a filter that keeps other keys' blocks unread) and a coarse
// expiry. A lookup of an absent key reads one run of slots, usually one cache line; a present key
// adds its block. The coarse expiry lets a sweep pass live records without reading their blocks.
// Deletion shifts the following run back (no tombstones), so lookups never slow with churn.
//
// Thread safety: none; the memory backend holds the shard's mutex around every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "block_arena.h"
#include "idempotency/record.h"

namespace idempotency::detail {

class RecordTable {
 public:
  /// The slot index find() returns for an absent key.
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  /// A table whose blocks come from runs of `source`, which must outlive it.
  explicit RecordTable(SlabSource& source) : blocks_(source) {}
  RecordTable(const RecordTable&) = delete;
  RecordTable& operator=(const RecordTable&) = delete;
  ~RecordTable();

  /// find() returns the slot of `key`, whose sip_hash13 is `hash`, or kNone.
  [[nodiscard]] std::size_t find(std::string_view key, std::uint64_t hash) const noexcept;

  /// prefetch() starts loading the slots that find(…, hash) and sweep() read first, so that
  /// their cache misses overlap each other and the caller's work before them.
  void prefetch(std::uint64_t hash) const noexcept;

  /// record() decodes the record in `slot` (a slot find() returned).
  [[nodiscard]] Record record(std::size_t slot) const;

  /// expires_at() is the exact expires_at of the record in `slot`.
  [[nodiscard]] Millis expires_at(std::size_t slot) const noexcept;

  /// assign() replaces the record in `slot` by `record`; the key stays. Throws
  /// `std::length_error` for a field longer than 4 GiB, `std::bad_alloc`; then nothing changed.
  void assign(std::size_t slot, const Record& record);

  /// insert() adds `key` (absent, hash `hash`) with `record`. Throws like assign().
  void insert(std::string_view key, std::uint64_t hash, const Record& record);

  /// erase() deletes the record in `slot`. Other slots may move: earlier indexes are stale.
  void erase(std::size_t slot) noexcept;

  /// sweep() inspects the next `slots` slots after the last one swept (round the table) and
  /// deletes the records expired at `now`. Indexes are stale afterwards.
  void sweep(Millis now, std::size_t slots) noexcept;

  /// purge_expired() deletes every record expired at `now` and returns how many.
  std::size_t purge_expired(Millis now) noexcept;

  /// size() is the number of records held, expired ones not yet deleted included.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  struct Block;
  struct Slot {
    Block* block = nullptr;    // nullptr: the slot is empty
    std::uint32_t hash = 0;    // the low 32 bits of the key's hash
    std::uint32_t expiry = 0;  // coarse_expiry() of the record's expires_at
  };

  // Frees a slot array by its capacity: big ones are mapped, small ones from malloc.
  struct FreeSlots {
    std::size_t capacity;
    void operator()(Slot* slots) const noexcept;
  };
  using SlotArray = std::unique_ptr<Slot[], FreeSlots>;

  static SlotArray allocate_slots(std::size_t capacity);
  void release(Block* block) noexcept;
  // place() puts `slot` in the first empty slot of its run, from its home `hash & mask`.
  static void place(Slot* slots, std::size_t mask, const Slot& slot) noexcept;
  void grow();
  [[nodiscard]] bool expired(const Slot& slot, Millis now, std::uint32_t coarse_now) const noexcept;

  BlockArena blocks_;
  SlotArray slots_{nullptr, FreeSlots{0}};
  std::size_t mask_ = 0;  // capacity - 1; the capacity is a power of two, or zero
  std::size_t size_ = 0;
  std::size_t sweep_cursor_ = 0;
};

}  // namespace idempotency::detail
