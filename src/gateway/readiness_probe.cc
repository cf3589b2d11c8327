#include "readiness_probe.h"

#include <mutex>
#include <utility>
#include <vector>

#include "idempotency/log.h"
#include "router.h"

namespace idempotency::gateway {

struct ReadinessProbe::State {
  std::shared_ptr<LockBackend> backend;
  std::chrono::milliseconds lease;
  pubsub::RunBlocking run_blocking;
  std::mutex mutex;
  std::optional<std::optional<std::string>> last;  // guarded by mutex: the last answer
  std::chrono::steady_clock::time_point last_at;   // guarded by mutex
  // Guarded by mutex: the answers the probe under way owes; empty when none is under way.
  std::vector<Answer> waiting;
};

ReadinessProbe::ReadinessProbe(std::shared_ptr<LockBackend> backend,
                               std::chrono::milliseconds lease, pubsub::RunBlocking run_blocking)
    : state_(std::make_shared<State>()) {
  state_->backend = std::move(backend);
  state_->lease = lease;
  state_->run_blocking = std::move(run_blocking);
}

void ReadinessProbe::check(Answer answer) const {
  std::unique_lock lock(state_->mutex);
  if (state_->last && std::chrono::steady_clock::now() - state_->last_at < kFreshFor) {
    const std::optional<std::string> fresh = *state_->last;
    lock.unlock();
    answer(fresh);
    return;
  }
  const bool under_way = !state_->waiting.empty();
  state_->waiting.push_back(std::move(answer));
  if (under_way) return;
  lock.unlock();
  state_->run_blocking([state = state_] {
    const std::optional<std::string> not_ready = probe_backend(*state->backend, state->lease);
    if (not_ready) {
      log(LogRecord{Severity::kWarning,
                    "not_ready",
                    "the idempotency backend did not answer the readiness probe",
                    {{"error", *not_ready}}});
    }
    std::vector<Answer> answers;
    {
      const std::lock_guard guard(state->mutex);
      state->last = not_ready;
      state->last_at = std::chrono::steady_clock::now();
      answers.swap(state->waiting);
    }
    for (auto& answer : answers) answer(not_ready);
  });
}

}  // namespace idempotency::gateway
