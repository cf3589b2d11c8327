#include "idempotency/detail/lease_keeper.h"

#include <algorithm>
#include <string>
#include <utility>

#include "idempotency/detail/heartbeat.h"
#include "idempotency/key.h"
#include "idempotency/log.h"

namespace idempotency::detail {
namespace {

// When the claim's lease lapses, on the steady clock the scheduler uses. The store's instant
// is converted through the system clock and kept within [now, now + lease]: a store clock
// that runs elsewhere (or a test's manual clock) must not stretch the retry window.
std::chrono::steady_clock::time_point held_until(const Claim& claim,
                                                 std::chrono::milliseconds lease) {
  const auto now = std::chrono::steady_clock::now();
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      claim.lease_expiry - std::chrono::system_clock::now());
  return now + std::clamp(left, std::chrono::milliseconds(0), lease);
}

}  // namespace

LeaseKeeper::LeaseKeeper(LockBackend& backend, const Claim& claim, std::chrono::milliseconds lease,
                         std::chrono::milliseconds heartbeat)
    : lost_(std::make_shared<std::stop_source>()) {
  if (heartbeat.count() == 0) return;
  heartbeat_ = start_heartbeat(HeartbeatSpec{
      .interval = heartbeat,
      .lease = lease,
      .held_until = held_until(claim, lease),
      .renew = [&backend, claim, lease] { return backend.extend(claim, lease).has_value(); },
      .on_lost =
          // The fingerprint (a hash) is computed only if the claim is lost, not per claim.
      [lost = lost_, key = claim.key, fence = claim.fence] {
        log(LogRecord{
            Severity::kWarning,
            "lease_lost",
            "the claim's lease could not be renewed (fenced out, released, or the "
            "store failed until it lapsed); the work is asked to stop, and its "
            "completion will be fenced out",
            {{"key_fingerprint", key_fingerprint(key)}, {"fence", std::to_string(fence)}}});
        lost->request_stop();
      },
  });
}

LeaseKeeper::~LeaseKeeper() { stop(); }

LeaseKeeper::LeaseKeeper(LeaseKeeper&&) noexcept = default;
LeaseKeeper& LeaseKeeper::operator=(LeaseKeeper&&) noexcept = default;

void LeaseKeeper::stop() noexcept { heartbeat_.reset(); }

bool LeaseKeeper::lost() const noexcept { return lost_ && lost_->stop_requested(); }

std::stop_token LeaseKeeper::lost_token() const noexcept {
  return lost_ ? lost_->get_token() : std::stop_token();
}

}  // namespace idempotency::detail
