#include "idempotency/errors.h"

#include <utility>

namespace idempotency {

Duplicate::Duplicate(std::optional<std::string> result)
    : Error("already done: the key completed within its ttl"), result_(std::move(result)) {}

InProgress::InProgress(TimePoint lease_expiry)
    : Error("in progress: a live holder has the key"), lease_expiry_(lease_expiry) {}

Cancelled::Cancelled() : Error("cancelled: the caller's stop token was stopped") {}

NotInspectable::NotInspectable() : Error("this backend's records cannot be inspected") {}

ReentryError::ReentryError(std::string key)
    : Error("re-entry: this thread already owns the key; waiting for itself would deadlock"),
      key_(std::move(key)) {}

}  // namespace idempotency
