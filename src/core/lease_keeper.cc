#include "idempotency/detail/lease_keeper.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
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

struct LeaseKeeper::State {
  LockBackend& backend;
  Claim claim;
  std::chrono::milliseconds lease;
  bool renews = false;                 // a heartbeat was asked for: only then can the claim be lost
  std::atomic<bool> finishing{false};  // the complete is under way: a refusal is expected
  std::atomic<bool> lost{false};
  // Made when the work first asks for a token: a stop source is an allocation, and the
  // asynchronous deliveries never ask. Guarded by the mutex, as is its request once lost.
  std::mutex lost_mutex;
  std::stop_source lost_source{std::nostopstate};
  // Last: stopped before what its callbacks read goes.
  std::optional<Heartbeat> heartbeat;
};

LeaseKeeper::LeaseKeeper(LockBackend& backend, const Claim& claim, std::chrono::milliseconds lease,
                         std::chrono::milliseconds heartbeat) {
  state_ = std::unique_ptr<State>(new State{.backend = backend, .claim = claim, .lease = lease});
  if (heartbeat.count() == 0) return;
  state_->renews = true;
  state_->heartbeat.emplace(HeartbeatSpec{
      .interval = heartbeat,
      .lease = lease,
      .held_until = held_until(claim, lease),
      .renew =
          [state = state_.get()] {
            return state->backend.extend(state->claim, state->lease).has_value();
          },
      .on_lost =
          // The fingerprint (a hash) is computed only if the claim is lost, not per claim.
      [state = state_.get()] {
        if (state->finishing.load()) return;  // the complete landed before this renewal
        log(LogRecord{Severity::kWarning,
                      "lease_lost",
                      "the claim's lease could not be renewed (fenced out, released, or the "
                      "store failed until it lapsed); the work is asked to stop, and its "
                      "completion will be fenced out",
                      {{"key_fingerprint", key_fingerprint(state->claim.key)},
                       {"fence", std::to_string(state->claim.fence)}}});
        // Through a copy: a stop callback may end the work and destroy this keeper (and the
        // state) on this thread, while request_stop() still runs on the stop state it shares.
        std::stop_source lost;
        {
          std::lock_guard lock(state->lost_mutex);
          state->lost.store(true);
          lost = state->lost_source;
        }
        if (lost.stop_possible()) lost.request_stop();  // else no token was handed out yet
      },
  });
}

LeaseKeeper::~LeaseKeeper() { stop(); }

LeaseKeeper::LeaseKeeper(LeaseKeeper&&) noexcept = default;

LeaseKeeper& LeaseKeeper::operator=(LeaseKeeper&& other) noexcept {
  if (this == &other) return *this;
  stop();  // before the state its callbacks read goes
  state_ = std::move(other.state_);
  return *this;
}

void LeaseKeeper::stop() noexcept {
  if (state_) state_->heartbeat.reset();
}

void LeaseKeeper::finishing() noexcept {
  if (state_) state_->finishing.store(true);
}

bool LeaseKeeper::lost() const noexcept { return state_ && state_->lost.load(); }

std::stop_token LeaseKeeper::lost_token() const {
  if (!state_ || !state_->renews) return {};  // never lost: a token nothing can request
  std::lock_guard lock(state_->lost_mutex);
  if (!state_->lost_source.stop_possible()) {
    state_->lost_source = std::stop_source();
    if (state_->lost.load()) state_->lost_source.request_stop();  // lost before it was asked
  }
  return state_->lost_source.get_token();
}

}  // namespace idempotency::detail
