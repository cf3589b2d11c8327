// PendingCompletes: the count of completes idempotent_async() runs after answering.
#include <utility>

#include "idempotency/pubsub/idempotent_async.h"

namespace idempotency::pubsub {

PendingCompletes::Ticket::Ticket(std::shared_ptr<PendingCompletes> pending)
    : pending_(std::move(pending)) {
  std::lock_guard lock(pending_->mutex_);
  ++pending_->count_;
}

PendingCompletes::Ticket& PendingCompletes::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    if (pending_) pending_->end();
    pending_ = std::move(other.pending_);
  }
  return *this;
}

PendingCompletes::Ticket::~Ticket() {
  if (pending_) pending_->end();
}

void PendingCompletes::wait() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [this] { return count_ == 0; });
}

std::size_t PendingCompletes::count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

void PendingCompletes::end() noexcept {
  std::lock_guard lock(mutex_);
  // Notified under the lock: a waiter that sees zero may destroy this at once.
  if (--count_ == 0) idle_.notify_all();
}

}  // namespace idempotency::pubsub
