// PendingDeliveries: the count of deliveries idempotent_async() has not finished.
#include <utility>

#include "idempotency/pubsub/idempotent_async.h"

namespace idempotency::pubsub {

PendingDeliveries::Ticket::Ticket(std::shared_ptr<PendingDeliveries> pending)
    : pending_(std::move(pending)) {
  if (pending_) pending_->count_.fetch_add(1);
}

PendingDeliveries::Ticket::~Ticket() {
  // The last one out wakes a waiter; `pending_` keeps the count alive until it has.
  if (pending_ && pending_->count_.fetch_sub(1) == 1) pending_->count_.notify_all();
}

void PendingDeliveries::wait() {
  for (auto n = count_.load(); n != 0; n = count_.load()) count_.wait(n);
}

std::size_t PendingDeliveries::count() const { return count_.load(); }

}  // namespace idempotency::pubsub
