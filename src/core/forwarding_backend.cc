#include "idempotency/forwarding_backend.h"

#include <stdexcept>
#include <utility>

namespace idempotency {
namespace {

std::shared_ptr<LockBackend> checked(std::shared_ptr<LockBackend> inner) {
  if (!inner) throw std::invalid_argument("ForwardingBackend: the wrapped backend is null");
  return inner;
}

}  // namespace

ForwardingBackend::ForwardingBackend(std::shared_ptr<LockBackend> inner)
    : LockBackend(BackendOptions{.ttl = checked(inner)->ttl()}), inner_(std::move(inner)) {}

// An aliasing pointer with no owner: it points at `inner` and never deletes it.
ForwardingBackend::ForwardingBackend(LockBackend& inner)
    : LockBackend(BackendOptions{.ttl = inner.ttl()}),
      inner_(std::shared_ptr<LockBackend>(), &inner) {}

ClaimResult ForwardingBackend::do_claim(std::string_view key, std::chrono::milliseconds lease,
                                        const ClaimRequest& request) {
  return forward_claim(*inner_, key, lease, request);
}

bool ForwardingBackend::do_complete(const Claim& claim, std::optional<std::string> result) {
  return forward_complete(*inner_, claim, std::move(result));
}

void ForwardingBackend::do_release(const Claim& claim) { forward_release(*inner_, claim); }

std::optional<TimePoint> ForwardingBackend::do_extend(const Claim& claim,
                                                      std::chrono::milliseconds lease) {
  return forward_extend(*inner_, claim, lease);
}

std::size_t ForwardingBackend::do_purge_expired() { return inner_->purge_expired(); }

std::optional<Record> ForwardingBackend::do_inspect(std::string_view key) {
  return forward_inspect(*inner_, key);
}

std::optional<std::size_t> ForwardingBackend::do_stored_records() {
  return inner_->stored_records();
}

void ForwardingBackend::do_wait_for_change(std::string_view key, std::chrono::milliseconds timeout,
                                           const std::stop_token& stop) {
  forward_wait_for_change(*inner_, key, timeout, stop);
}

}  // namespace idempotency
