#include "idempotency/done_cache.h"

#include <array>
#include <deque>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>

#include "idempotency/detail/sip_hash.h"

namespace idempotency {

struct DoneCache::State {
  // A power of two: the top bits of a key's hash pick its shard.
  static constexpr std::size_t kShardBits = 4;
  static constexpr std::size_t kShards = std::size_t{1} << kShardBits;

  // An AlreadyDone answer (kept only with its expires_at), good until then.
  struct Copy {
    AlreadyDone answer;
    std::uint64_t serial = 0;  // which of `order`'s entries is this copy's
  };

  // Keyed like the memory store (detail/sip_hash.h): keys come from callers, and a map of
  // colliding keys would make every claim a scan of it. One secret key for the process.
  static const detail::SipKey& sip_key() {
    static const detail::SipKey key = detail::random_sip_key();
    return key;
  }
  static std::uint64_t hash_of(std::string_view key) { return detail::sip_hash13(sip_key(), key); }

  // A key with its hash computed once: it picks the shard and is the map's hash, so a lookup
  // hashes the key once.
  struct Hashed {
    std::string_view key;
    std::uint64_t hash;
  };
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(const Hashed& k) const noexcept {
      return static_cast<std::size_t>(k.hash);
    }
    std::size_t operator()(std::string_view k) const noexcept {
      return static_cast<std::size_t>(hash_of(k));
    }
  };
  struct KeyEqual {
    using is_transparent = void;
    bool operator()(const Hashed& a, std::string_view b) const noexcept { return a.key == b; }
    bool operator()(std::string_view a, const Hashed& b) const noexcept { return a == b.key; }
    bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
  };

  struct alignas(64) Shard {
    mutable std::mutex mutex;
    std::unordered_map<std::string, Copy, KeyHash, KeyEqual> copies;
    // Keys in the order their copies were made, oldest first, for eviction. An entry whose
    // serial no longer matches its key's copy is a leftover, skipped when it comes up.
    std::deque<std::pair<std::string, std::uint64_t>> order;
    std::uint64_t next_serial = 0;
    std::uint64_t hits = 0;
  };

  explicit State(const DoneCacheOptions& options)
      : clock(options.clock ? options.clock : system_clock()),
        margin(options.clock_margin),
        per_shard((options.capacity + kShards - 1) / kShards) {}

  Shard& shard_for(const Hashed& key) { return shards[key.hash >> (64 - kShardBits)]; }

  // A copy may be given out at `now` only while now + margin < expires_at.
  bool fresh(TimePoint expires_at, TimePoint now) const { return now + margin < expires_at; }

  // The kept answer for `key`, if one is fresh; drops a lapsed one.
  std::optional<AlreadyDone> lookup(std::string_view key) {
    const Hashed hashed{key, hash_of(key)};
    Shard& shard = shard_for(hashed);
    std::lock_guard lock(shard.mutex);
    auto it = shard.copies.find(hashed);
    if (it == shard.copies.end()) return std::nullopt;
    if (!fresh(*it->second.answer.expires_at, clock->now())) {
      shard.copies.erase(it);
      return std::nullopt;
    }
    ++shard.hits;
    return it->second.answer;
  }

  // Keeps `answer` for `key` if it is still fresh, evicting the oldest copies past capacity.
  // Best effort: it runs inside claim_async()'s callback, which must not throw, so a copy that
  // cannot be made (std::bad_alloc) is not kept and a later duplicate asks the store.
  void keep(std::string_view key, const AlreadyDone& answer) noexcept {
    try {
      keep_copy(key, answer);
    } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): not kept, as said above
    }
  }

  void keep_copy(std::string_view key, const AlreadyDone& answer) {
    if (!answer.expires_at || !fresh(*answer.expires_at, clock->now())) return;
    Shard& shard = shard_for(Hashed{key, hash_of(key)});
    std::lock_guard lock(shard.mutex);
    const std::uint64_t serial = shard.next_serial++;
    // The order entry first: if the copy then cannot be made, the entry is a leftover, which
    // eviction skips; a copy without an entry would never be evicted.
    shard.order.emplace_back(std::string(key), serial);
    shard.copies.insert_or_assign(std::string(key), Copy{answer, serial});
    // `order` holds one entry per copy plus leftovers; at most twice the capacity in all.
    while (shard.copies.size() > per_shard || shard.order.size() > 2 * per_shard) {
      auto& [oldest, oldest_serial] = shard.order.front();
      auto it = shard.copies.find(oldest);
      if (it != shard.copies.end() && it->second.serial == oldest_serial) shard.copies.erase(it);
      shard.order.pop_front();
    }
  }

  std::shared_ptr<const Clock> clock;
  std::chrono::milliseconds margin;
  std::size_t per_shard;
  std::array<Shard, kShards> shards;
};

namespace {

const DoneCacheOptions& checked(const DoneCacheOptions& options) {
  if (options.capacity == 0) throw std::invalid_argument("DoneCache: capacity must be positive");
  // At most kMaxTtl: `now + clock_margin` must not overflow, or a copy would be fresh for ever.
  if (options.clock_margin < std::chrono::milliseconds::zero() || options.clock_margin > kMaxTtl) {
    throw std::invalid_argument("DoneCache: clock_margin must be from 0 to 366 days");
  }
  return options;
}

}  // namespace

DoneCache::DoneCache(std::shared_ptr<LockBackend> inner, const DoneCacheOptions& options)
    : ForwardingBackend(std::move(inner)), state_(std::make_shared<State>(checked(options))) {}

DoneCache::DoneCache(LockBackend& inner, const DoneCacheOptions& options)
    : ForwardingBackend(inner), state_(std::make_shared<State>(checked(options))) {}

DoneCache::~DoneCache() = default;

ClaimResult DoneCache::do_claim(std::string_view key, std::chrono::milliseconds lease,
                                const ClaimRequest& request) {
  if (std::optional<AlreadyDone> kept = state_->lookup(key)) return std::move(*kept);
  ClaimResult result = ForwardingBackend::do_claim(key, lease, request);
  if (const auto* done = std::get_if<AlreadyDone>(&result)) state_->keep(key, *done);
  return result;
}

void DoneCache::do_claim_async(std::string_view key, std::chrono::milliseconds lease,
                               ClaimRequest request, ClaimDone done) {
  if (std::optional<AlreadyDone> kept = state_->lookup(key)) {
    done(AsyncClaimResult(ClaimResult(std::move(*kept))));
    return;
  }
  forward_claim_async(
      inner(), key, lease, std::move(request),
      [state = state_, key = std::string(key), done = std::move(done)](AsyncClaimResult outcome) {
        if (const auto* result = std::get_if<ClaimResult>(&outcome)) {
          if (const auto* d = std::get_if<AlreadyDone>(result)) {
            state->keep(key, *d);
          }
        }
        done(std::move(outcome));
      });
}

void DoneCache::do_complete_async(const Claim& claim, std::optional<std::string> result,
                                  CompleteDone done) {
  forward_complete_async(inner(), claim, std::move(result), std::move(done));
}

std::size_t DoneCache::cached_count() const {
  std::size_t count = 0;
  for (const auto& shard : state_->shards) {
    std::lock_guard lock(shard.mutex);
    count += shard.copies.size();
  }
  return count;
}

std::uint64_t DoneCache::hits() const {
  std::uint64_t count = 0;
  for (const auto& shard : state_->shards) {
    std::lock_guard lock(shard.mutex);
    count += shard.hits;
  }
  return count;
}

}  // namespace idempotency
