// StallingClaimBackend: wraps any backend; its first claim waits until `fail_claim` opens and
// then throws StoreError, as a store that goes down in the middle of a claim does, so callers
// can join that claim's flight before it fails.
#pragma once

#include <atomic>
#include <chrono>
#include <latch>
#include <string_view>

#include "idempotency/errors.h"
#include "idempotency/forwarding_backend.h"

namespace idempotency::testing {

class StallingClaimBackend final : public ForwardingBackend {
 public:
  explicit StallingClaimBackend(LockBackend& inner) : ForwardingBackend(inner) {}

  /// Opens once the first claim has reached the backend (and hangs there).
  std::latch claim_entered{1};
  /// Count it down to make the hanging first claim throw.
  std::latch fail_claim{1};
  std::atomic<int> claims{0};

 protected:
  ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
                       const ClaimRequest& request) override {
    if (claims.fetch_add(1) == 0) {
      claim_entered.count_down();
      fail_claim.wait();
      throw StoreError("injected: the store went away mid-claim");
    }
    return ForwardingBackend::do_claim(key, lease, request);
  }
};

}  // namespace idempotency::testing
