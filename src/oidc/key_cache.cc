#include "key_cache.h"

#include <utility>

#include "reasons.h"

namespace idempotency::oidc::internal {
namespace {

// Whether `interval` has passed since `then`. A clock that went back also counts, so a wall
// clock stepped backwards cannot freeze the cache until it catches up.
bool elapsed(TimePoint then, TimePoint now, std::chrono::milliseconds interval) {
  return now < then || now - then >= interval;
}

}  // namespace

KeyCache::KeyCache(Fetch fetch, std::shared_ptr<const Clock> clock,
                   std::chrono::seconds min_refresh, std::chrono::seconds max_age)
    : fetch_(std::move(fetch)),
      clock_(std::move(clock)),
      min_refresh_(min_refresh),
      max_age_(max_age) {}

std::variant<PublicKey, std::string> KeyCache::find(std::string_view kid) {
  PublicKey cached;
  std::uint64_t seen = 0;
  {
    std::lock_guard lock(mutex_);
    const TimePoint now = clock_->now();
    cached = lookup(kid);
    if (cached && !stale(now)) return cached;
    if (!refresh_due(now)) {
      if (cached) return cached;
      return miss();
    }
    seen = attempts_;
  }

  // A thread with a usable (if old) key does not wait for somebody else's refresh.
  std::unique_lock refresh(refresh_mutex_, std::defer_lock);
  if (cached) {
    if (!refresh.try_lock()) return cached;
  } else {
    refresh.lock();
  }
  const TimePoint started = clock_->now();
  {
    std::lock_guard lock(mutex_);
    // Another thread refreshed while this one waited: its result is as fresh as ours would be.
    if (attempts_ != seen) {
      if (PublicKey key = lookup(kid)) return key;
      return miss();
    }
  }

  FetchResult fetched = fetch_();
  std::variant<KeySet, std::string> parsed =
      fetched.body ? parse_jwks(*fetched.body) : std::variant<KeySet, std::string>(fetched.error);

  std::lock_guard lock(mutex_);
  ++attempts_;
  attempted_at_ = started;
  if (auto* set = std::get_if<KeySet>(&parsed)) {
    keys_ = std::move(*set);
    loaded_at_ = started;
    last_error_.clear();
  } else {
    // The keys already held keep serving: a bad fetch must not lock every sender out.
    last_error_ = std::move(std::get<std::string>(parsed));
  }
  if (PublicKey key = lookup(kid)) return key;
  return miss();
}

PublicKey KeyCache::lookup(std::string_view kid) const {
  const auto it = keys_.find(kid);
  return it == keys_.end() ? nullptr : it->second;
}

std::string KeyCache::miss() const {
  if (!last_error_.empty()) return std::string(kKeySetUnavailable) + last_error_;
  return std::string(kUnknownSigningKey);
}

bool KeyCache::stale(TimePoint now) const {
  return !loaded_at_ || elapsed(*loaded_at_, now, max_age_);
}

bool KeyCache::refresh_due(TimePoint now) const {
  return !attempted_at_ || elapsed(*attempted_at_, now, min_refresh_);
}

}  // namespace idempotency::oidc::internal
