// ReadinessProbe: GET /readyz's answer, from one probe of the store at a time and, for a
// second after it, from that probe's answer. /readyz needs no credentials (platforms probe it),
// and each probe is a claim and a release in the store, queued on the workers beside the
// pushes' own store calls: answered per request, a flood of probes would be a flood of writes
// ahead of real work.
//
// Thread safety: check() may be called from any number of threads.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "idempotency/backend.h"
#include "idempotency/pubsub/idempotent_async.h"

namespace idempotency::gateway {

class ReadinessProbe {
 public:
  /// How long a probe's answer stands for later requests.
  static constexpr std::chrono::seconds kFreshFor{1};

  /// What check() hands its caller: nothing when the store answered, else why not.
  using Answer = std::function<void(const std::optional<std::string>& not_ready)>;

  /// ReadinessProbe() probes `backend` (claim and release, `lease`) on `run_blocking`.
  ReadinessProbe(std::shared_ptr<LockBackend> backend, std::chrono::milliseconds lease,
                 pubsub::RunBlocking run_blocking);

  /// check() calls `answer` with the last probe's answer while it is fresh, else with the next
  /// probe's (starting one unless one is under way); a failed probe is logged once.
  void check(Answer answer) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace idempotency::gateway
