// VerifiedTokens: the tokens whose signature the verifier has checked, each with the key that
// checked it and its decoded claims (internal to idempotency::oidc).
//
// Pub/Sub sends one token with every push for up to an hour, and checking its RS256 signature
// and decoding its JSON cost ~23 µs a push, twice the rest of the gateway's work on it. A token
// found here skips both, and nothing else: its claims (expiry, audience, email) are judged
// again on every use, and it counts only while the key set still holds the very key that
// checked it.
//
// Thread safety: find() and add() may be called from any number of threads.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "jwks.h"

namespace idempotency::oidc::internal {

class VerifiedTokens {
 public:
  /// What a token's verification established.
  struct Entry {
    std::string kid;                               ///< The key id its header names.
    PublicKey key;                                 ///< The key its signature checked against.
    std::shared_ptr<const nlohmann::json> claims;  ///< Its claims set, decoded.
  };

  /// VerifiedTokens() holds at most `capacity` tokens (positive); adding one more forgets the
  /// oldest.
  explicit VerifiedTokens(std::size_t capacity);

  /// find() returns what the verification of `token` established, if it is held.
  [[nodiscard]] std::optional<Entry> find(std::string_view token) const;
  /// add() holds `token` with `entry`, replacing what it held for it.
  void add(std::string_view token, Entry entry);
  /// forget() drops `token`, if held: one whose claims no longer pass.
  void forget(std::string_view token);

 private:
  using Map = std::map<std::string, Entry, std::less<>>;

  std::size_t capacity_;
  mutable std::mutex mutex_;
  Map entries_;
  std::deque<Map::iterator> oldest_first_;  // every entry once, in the order it was added
};

}  // namespace idempotency::oidc::internal
