// LeaseKeeper (internal: guards and `once` use it): keeps one claim's lease alive with the
// process's heartbeat scheduler while work runs and its complete lands, and says when the claim
// was lost.
//
// A loss — a renewal refused because the claim was fenced out, released or completed, or
// renewals failing until the lease lapsed — is logged once (`lease_lost`, the key's
// fingerprint only) and requests `lost_token()`, which the work may watch to stop early. A
// keeper with a zero heartbeat renews nothing and is never lost.
//
// Thread safety: finishing(), stop() and the destructor from the owner's thread (or whichever
// thread carries on its work, one at a time); lost() and lost_token() from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <stop_token>

#include "idempotency/backend.h"

namespace idempotency::detail {

class LeaseKeeper {
 public:
  /// LeaseKeeper() renews `claim` for `lease` every `heartbeat` (zero: never). `backend` must
  /// outlive the keeper; the heartbeat must be shorter than the lease (see
  /// validate_heartbeat()).
  LeaseKeeper(LockBackend& backend, const Claim& claim, std::chrono::milliseconds lease,
              std::chrono::milliseconds heartbeat);
  /// ~LeaseKeeper() stops renewing (see stop()).
  ~LeaseKeeper();
  LeaseKeeper(LeaseKeeper&&) noexcept;
  LeaseKeeper& operator=(LeaseKeeper&&) noexcept;

  /// stop() ends the renewals, waiting for one in flight, so none runs after the work's
  /// complete or release. Idempotent.
  void stop() noexcept;
  /// finishing() says the work is done and its complete is under way: renewals go on until
  /// stop(), so a complete that is slow to land (queued, or a busy store) cannot let the lease
  /// lapse under a live owner, and a renewal refused meanwhile is the complete having landed,
  /// not a loss (nothing is logged or requested). Call stop() once the complete has returned.
  void finishing() noexcept;
  /// lost() says whether the claim was lost.
  [[nodiscard]] bool lost() const noexcept;
  /// lost_token() is requested when the claim is lost (at once if it already was); never when
  /// the heartbeat is off. Its stop state is made on the first call (std::bad_alloc).
  [[nodiscard]] std::stop_token lost_token() const;

 private:
  struct State;
  // The claim, the heartbeat and what its callbacks read (by a plain pointer: a capture that
  // needs no allocation), in one allocation that stays put while the keeper moves. Null only
  // once moved from.
  std::unique_ptr<State> state_;
};

}  // namespace idempotency::detail
