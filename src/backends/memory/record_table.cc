#include "record_table.h"

#include "huge_pages.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#if defined(__SANITIZE_ADDRESS__)
#define IDEMPOTENCY_LEAK_CHECKED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IDEMPOTENCY_LEAK_CHECKED 1
#endif
#endif
#if defined(IDEMPOTENCY_LEAK_CHECKED)
#include <sanitizer/lsan_interface.h>
#endif

namespace idempotency::detail {

namespace {

// Grow when more than 3/4 of the slots are taken: linear probing stays short up to there.
constexpr std::size_t kMaxLoadNumerator = 3;
constexpr std::size_t kMaxLoadDenominator = 4;
constexpr std::size_t kFirstCapacity = 16;
constexpr std::size_t kCacheLineBytes = 64;

constexpr std::uint8_t kHasFingerprint = 1;
constexpr std::uint8_t kHasResult = 2;

// The slot's expiry: expires_at in whole seconds since the epoch, rounded up and clamped to 32
// bits. It never decreases as its argument grows, so `expires_at <= now` implies
// `coarse_expiry(expires_at) <= coarse_expiry(now)`: a slot whose coarse expiry is above
// now's holds a live record, and only the others need their block read.
std::uint32_t coarse_expiry(Millis t) noexcept {
  if (t <= 0) return 0;
  constexpr auto kMax = std::numeric_limits<std::uint32_t>::max();
  const auto ms = static_cast<std::uint64_t>(t);
  if (ms > (std::uint64_t{kMax} - 1) * 1000) return kMax;
  return static_cast<std::uint32_t>((ms + 999) / 1000);
}

std::uint32_t checked_size(std::size_t n) {
  if (n > std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error("memory backend: a record field is longer than 4 GiB");
  }
  return static_cast<std::uint32_t>(n);
}

}  // namespace

// A record's heap block: these fields, then key, claim token, fingerprint and result bytes.
struct RecordTable::Block {
  std::int64_t fence;
  Millis lease_expiry;
  Millis expires_at;
  std::uint32_t token_size;
  std::uint32_t fingerprint_size;
  std::uint32_t result_size;
  std::uint16_t key_size;  // keys are at most kMaxKeyBytes (1024)
  RecordState state;
  std::uint8_t flags;  // kHasFingerprint | kHasResult

  char* bytes() noexcept { return reinterpret_cast<char*>(this + 1); }
  const char* bytes() const noexcept { return reinterpret_cast<const char*>(this + 1); }
  std::string_view key() const noexcept { return {bytes(), key_size}; }
  std::size_t payload() const noexcept {
    return std::size_t{key_size} + token_size + fingerprint_size + result_size;
  }

  // The bytes after the key that `r` needs.
  static std::size_t tail_size(const Record& r) noexcept {
    return r.claim_token.size() + (r.fingerprint ? r.fingerprint->size() : 0) +
           (r.result ? r.result->size() : 0);
  }

  std::size_t size() const noexcept { return sizeof(Block) + payload(); }

  static Block* allocate(BlockArena& arena, std::size_t key_size, std::size_t tail) {
    Block* b = new (arena.allocate(sizeof(Block) + key_size + tail)) Block{};
    b->key_size = static_cast<std::uint16_t>(key_size);
    return b;
  }

  // Writes `r` after the key; the block has room for exactly tail_size(r) bytes there.
  void store(const Record& r) noexcept {
    fence = r.fence;
    lease_expiry = r.lease_expiry;
    expires_at = r.expires_at;
    state = r.state;
    flags = static_cast<std::uint8_t>((r.fingerprint ? kHasFingerprint : 0) |
                                      (r.result ? kHasResult : 0));
    token_size = static_cast<std::uint32_t>(r.claim_token.size());
    fingerprint_size = static_cast<std::uint32_t>(r.fingerprint ? r.fingerprint->size() : 0);
    result_size = static_cast<std::uint32_t>(r.result ? r.result->size() : 0);
    char* p = bytes() + key_size;
    std::memcpy(p, r.claim_token.data(), token_size);
    p += token_size;
    if (r.fingerprint) std::memcpy(p, r.fingerprint->data(), fingerprint_size);
    p += fingerprint_size;
    if (r.result) std::memcpy(p, r.result->data(), result_size);
  }
};

namespace {

// Throws unless every field of `r` fits a Block's 32-bit sizes.
void check_fits(const Record& r) {
  (void)checked_size(r.claim_token.size());
  if (r.fingerprint) (void)checked_size(r.fingerprint->size());
  if (r.result) (void)checked_size(r.result->size());
}

}  // namespace

void RecordTable::place(Slot* slots, std::size_t mask, const Slot& slot) noexcept {
  std::size_t i = slot.hash & mask;
  while (slots[i].block != nullptr) i = (i + 1) & mask;
  slots[i] = slot;
}

RecordTable::~RecordTable() {
  if (!slots_) return;
  // Pooled blocks go with their runs; only the big ones were allocated one by one.
  for (std::size_t i = 0; i <= mask_; ++i) {
    const Block* b = slots_[i].block;
    if (b != nullptr && !BlockArena::pooled(b->size())) release(slots_[i].block);
  }
}

void RecordTable::release(Block* block) noexcept { blocks_.release(block, block->size()); }

std::size_t RecordTable::find(std::string_view key, std::uint64_t hash) const noexcept {
  if (!slots_) return kNone;
  const auto h = static_cast<std::uint32_t>(hash);
  for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.block == nullptr) return kNone;
    if (s.hash == h && s.block->key() == key) return i;
  }
}

void RecordTable::prefetch(std::uint64_t hash) const noexcept {
  if (!slots_) return;
  __builtin_prefetch(&slots_[static_cast<std::uint32_t>(hash) & mask_]);
  __builtin_prefetch(&slots_[sweep_cursor_ & mask_]);
}

Record RecordTable::record(std::size_t slot) const {
  const Block& b = *slots_[slot].block;
  Record r;
  r.state = b.state;
  r.fence = b.fence;
  r.lease_expiry = b.lease_expiry;
  r.expires_at = b.expires_at;
  const char* p = b.bytes() + b.key_size;
  r.claim_token.assign(p, b.token_size);
  p += b.token_size;
  if ((b.flags & kHasFingerprint) != 0) r.fingerprint.emplace(p, b.fingerprint_size);
  p += b.fingerprint_size;
  if ((b.flags & kHasResult) != 0) r.result.emplace(p, b.result_size);
  return r;
}

Millis RecordTable::expires_at(std::size_t slot) const noexcept {
  return slots_[slot].block->expires_at;
}

void RecordTable::assign(std::size_t slot, const Record& record) {
  check_fits(record);
  Slot& s = slots_[slot];
  const std::size_t tail = Block::tail_size(record);
  const std::size_t bytes = sizeof(Block) + s.block->key_size + tail;
  if (BlockArena::capacity(bytes) != BlockArena::capacity(s.block->size())) {
    // Another size class (a result stored): a new block, the key copied over. A token cleared
    // on completion usually keeps the class, and the block.
    Block* fresh = Block::allocate(blocks_, s.block->key_size, tail);
    std::memcpy(fresh->bytes(), s.block->bytes(), s.block->key_size);
    release(std::exchange(s.block, fresh));
  }
  s.block->store(record);
  s.expiry = coarse_expiry(record.expires_at);
}

void RecordTable::insert(std::string_view key, std::uint64_t hash, const Record& record) {
  check_fits(record);
  if (!slots_ || (size_ + 1) * kMaxLoadDenominator > (mask_ + 1) * kMaxLoadNumerator) grow();
  Block* b = Block::allocate(blocks_, key.size(), Block::tail_size(record));
  std::memcpy(b->bytes(), key.data(), key.size());
  b->store(record);
  place(slots_.get(), mask_,
        Slot{b, static_cast<std::uint32_t>(hash), coarse_expiry(record.expires_at)});
  ++size_;
}

void RecordTable::erase(std::size_t slot) noexcept {
  release(slots_[slot].block);
  --size_;
  // Backward shift: move each later slot of the run into the hole unless that would put it
  // before its home slot, so every key stays reachable from its home without tombstones.
  std::size_t hole = slot;
  for (std::size_t j = (hole + 1) & mask_; slots_[j].block != nullptr; j = (j + 1) & mask_) {
    const std::size_t home = slots_[j].hash & mask_;
    if (((j - home) & mask_) >= ((j - hole) & mask_)) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole] = Slot{};
}

bool RecordTable::expired(const Slot& slot, Millis now, std::uint32_t coarse_now) const noexcept {
  return slot.block != nullptr && slot.expiry <= coarse_now && now >= slot.block->expires_at;
}

void RecordTable::sweep(Millis now, std::size_t slots) noexcept {
  if (!slots_) return;
  const std::uint32_t coarse_now = coarse_expiry(now);
  std::size_t cursor = sweep_cursor_;
  for (std::size_t n = 0; n < slots; ++n) {
    const std::size_t i = cursor & mask_;
    if (expired(slots_[i], now, coarse_now)) {
      erase(i);  // a later slot may have moved into i: inspect it next, cursor unmoved
    } else {
      ++cursor;
    }
  }
  sweep_cursor_ = cursor;
}

std::size_t RecordTable::purge_expired(Millis now) noexcept {
  if (!slots_) return 0;
  const std::uint32_t coarse_now = coarse_expiry(now);
  std::size_t purged = 0;
  // Erasing at i moves later slots back into i (re-inspected) and, where a run wraps round the
  // end, slot 0's into the last slot (inspected still); nothing moves past i uninspected.
  for (std::size_t i = 0; i <= mask_; ++i) {
    while (expired(slots_[i], now, coarse_now)) {
      erase(i);
      ++purged;
    }
  }
  return purged;
}

namespace {

// LeakSanitizer scans the heap and not mapped memory: a mapped slot array is registered with
// it while it lives, or the big blocks only that array points to would read as leaked in a
// store alive at exit.
void scan_for_leaks(const void* memory, std::size_t bytes, bool scanned) noexcept {
#if defined(IDEMPOTENCY_LEAK_CHECKED)
  if (scanned) {
    __lsan_register_root_region(memory, bytes);
  } else {
    __lsan_unregister_root_region(memory, bytes);
  }
#else
  (void)memory, (void)bytes, (void)scanned;
#endif
}

}  // namespace

void RecordTable::FreeSlots::operator()(Slot* slots) const noexcept {
  if (const std::size_t bytes = capacity * sizeof(Slot); bytes >= kHugePageBytes) {
    scan_for_leaks(slots, bytes, false);
    unmap_huge(slots, bytes);
  } else {
    std::free(slots);
  }
}

RecordTable::SlotArray RecordTable::allocate_slots(std::size_t capacity) {
  const std::size_t bytes = capacity * sizeof(Slot);  // a power of two, at least 256
  if (bytes >= kHugePageBytes) {
    // A table of millions of records is read at random: on huge pages a lookup rarely misses
    // the TLB as well (see huge_pages.h). Mapped memory is zeroed, and an all-zero Slot is an
    // empty one: writing the zeros again would only touch every page before its first use.
    static_assert(std::is_trivially_copyable_v<Slot>);
    SlotArray slots(static_cast<Slot*>(map_huge(bytes)), FreeSlots{capacity});
    scan_for_leaks(slots.get(), bytes, true);
    return slots;
  }
  void* raw = std::aligned_alloc(kCacheLineBytes, bytes);
  if (raw == nullptr) throw std::bad_alloc();
  SlotArray slots(static_cast<Slot*>(raw), FreeSlots{capacity});
  std::uninitialized_value_construct_n(slots.get(), capacity);
  return slots;
}

void RecordTable::grow() {
  const std::size_t capacity = slots_ ? 2 * (mask_ + 1) : kFirstCapacity;
  SlotArray fresh = allocate_slots(capacity);
  const std::size_t mask = capacity - 1;
  if (slots_) {
    for (std::size_t i = 0; i <= mask_; ++i) {
      if (slots_[i].block != nullptr) place(fresh.get(), mask, slots_[i]);
    }
  }
  slots_ = std::move(fresh);
  mask_ = mask;
  sweep_cursor_ = 0;
}

}  // namespace idempotency::detail
