// KeyCache: the verifier's signing keys by `kid`, refreshed on demand and rate-limited
// (internal to idempotency::oidc).
//
// Thread safety: find() may be called from any number of threads. `mutex_` guards the cached
// state and is never held during a fetch; `refresh_mutex_` lets one fetch run at a time.
// Lock order: `refresh_mutex_` before `mutex_`.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "fetch.h"
#include "idempotency/clock.h"
#include "jwks.h"

namespace idempotency::oidc::internal {

/// KeyCache holds the keys of the last good fetch. A fetch happens when a key is asked for
/// and either nothing was fetched yet, the `kid` is unknown, or the keys are older than
/// `max_age`; never sooner than `min_refresh` after the previous attempt, good or failed.
class KeyCache {
 public:
  /// Fetch produces a JWKS document or an error.
  using Fetch = std::function<FetchResult()>;

  /// KeyCache() fetches nothing yet; the first find() does.
  KeyCache(Fetch fetch, std::shared_ptr<const Clock> clock, std::chrono::seconds min_refresh,
           std::chrono::seconds max_age);

  /// find() returns the key named `kid`, refreshing first when the rules above allow, or the
  /// one-line reason a key could not be had: "unknown signing key", or "key set unavailable:
  /// ..." when the last fetch failed (the key may exist; we could not tell).
  [[nodiscard]] std::variant<PublicKey, std::string> find(std::string_view kid);

 private:
  [[nodiscard]] PublicKey lookup(std::string_view kid) const;  // mutex_ held
  [[nodiscard]] std::string miss() const;                      // mutex_ held
  [[nodiscard]] bool stale(TimePoint now) const;               // mutex_ held
  [[nodiscard]] bool refresh_due(TimePoint now) const;         // mutex_ held

  Fetch fetch_;
  std::shared_ptr<const Clock> clock_;
  std::chrono::milliseconds min_refresh_;
  std::chrono::milliseconds max_age_;

  std::mutex refresh_mutex_;
  std::mutex mutex_;
  KeySet keys_;
  std::optional<TimePoint> loaded_at_;     // when `keys_` was fetched
  std::optional<TimePoint> attempted_at_;  // when the last fetch started
  std::uint64_t attempts_ = 0;
  std::string last_error_;  // empty when the last fetch succeeded
};

}  // namespace idempotency::oidc::internal
