// PendingDeliveries: the count of deliveries idempotent_async() has not finished.
#include <utility>

#include "idempotency/pubsub/idempotent_async.h"

namespace idempotency::pubsub {

PendingDeliveries::Ticket::Ticket(std::shared_ptr<PendingDeliveries> pending)
    : pending_(std::move(pending)) {
  std::lock_guard lock(pending_->mutex_);
  ++pending_->count_;
}

PendingDeliveries::Ticket& PendingDeliveries::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    if (pending_) pending_->end();
    pending_ = std::move(other.pending_);
  }
  return *this;
}

PendingDeliveries::Ticket::~Ticket() {
  if (pending_) pending_->end();
}

void PendingDeliveries::wait() {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [this] { return count_ == 0; });
}

std::size_t PendingDeliveries::count() const {
  std::lock_guard lock(mutex_);
  return count_;
}

void PendingDeliveries::end() noexcept {
  std::lock_guard lock(mutex_);
  // Notified under the lock: a waiter that sees zero may destroy this at once.
  if (--count_ == 0) idle_.notify_all();
}

}  // namespace idempotency::pubsub
