#include "verified_tokens.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace idempotency::oidc::internal {

VerifiedTokens::VerifiedTokens(std::size_t capacity) : capacity_(capacity) {
  if (capacity_ == 0) throw std::invalid_argument("VerifiedTokens: capacity must be positive");
}

std::optional<VerifiedTokens::Entry> VerifiedTokens::find(std::string_view token) const {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(token);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void VerifiedTokens::add(std::string_view token, Entry entry) {
  std::lock_guard lock(mutex_);
  if (const auto it = entries_.find(token); it != entries_.end()) {
    it->second = std::move(entry);
    return;
  }
  if (entries_.size() == capacity_) {
    entries_.erase(oldest_first_.front());
    oldest_first_.pop_front();
  }
  oldest_first_.push_back(entries_.emplace(std::string(token), std::move(entry)).first);
}

void VerifiedTokens::forget(std::string_view token) {
  std::lock_guard lock(mutex_);
  const auto it = entries_.find(token);
  if (it == entries_.end()) return;
  oldest_first_.erase(std::find(oldest_first_.begin(), oldest_first_.end(), it));
  entries_.erase(it);
}

}  // namespace idempotency::oidc::internal
