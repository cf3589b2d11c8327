#include "metered_backend.h"

#include <chrono>
#include <utility>
#include <variant>

#include "idempotency/errors.h"

namespace idempotency::gateway {
namespace {

// Runs `call`, timing it into `operation`'s histogram and counting a StoreError.
template <typename Call>
auto metered(Metrics& metrics, std::string_view operation, Call&& call) {
  const auto start = std::chrono::steady_clock::now();
  try {
    auto result = std::forward<Call>(call)();
    metrics.backend_latency(operation).observe(std::chrono::steady_clock::now() - start);
    return result;
  } catch (const StoreError&) {
    metrics.backend_latency(operation).observe(std::chrono::steady_clock::now() - start);
    metrics.backend_error(operation);
    throw;
  }
}

// Wraps an asynchronous call's `done`: its outcome timed into `operation`'s histogram from now,
// and a StoreFailure counted.
template <typename Done>
Done metered_done(std::shared_ptr<Metrics> metrics, std::string_view operation, Done done) {
  return [metrics = std::move(metrics), operation, done = std::move(done),
          start = std::chrono::steady_clock::now()](auto outcome) {
    metrics->backend_latency(operation).observe(std::chrono::steady_clock::now() - start);
    if (std::holds_alternative<StoreFailure>(outcome)) metrics->backend_error(operation);
    done(std::move(outcome));
  };
}

}  // namespace

MeteredBackend::MeteredBackend(std::shared_ptr<LockBackend> inner, std::shared_ptr<Metrics> metrics)
    : ForwardingBackend(std::move(inner)), metrics_(std::move(metrics)) {}

ClaimResult MeteredBackend::do_claim(std::string_view key, std::chrono::milliseconds lease,
                                     const ClaimRequest& request) {
  return metered(*metrics_, "claim",
                 [&] { return ForwardingBackend::do_claim(key, lease, request); });
}

bool MeteredBackend::do_complete(const Claim& claim, std::optional<std::string> result) {
  return metered(*metrics_, "complete",
                 [&] { return ForwardingBackend::do_complete(claim, std::move(result)); });
}

void MeteredBackend::do_release(const Claim& claim) {
  metered(*metrics_, "release", [&] {
    ForwardingBackend::do_release(claim);
    return true;
  });
}

void MeteredBackend::do_claim_async(std::string_view key, std::chrono::milliseconds lease,
                                    ClaimRequest request, ClaimDone done) {
  forward_claim_async(inner(), key, lease, std::move(request),
                      metered_done(metrics_, "claim", std::move(done)));
}

void MeteredBackend::do_complete_async(const Claim& claim, std::optional<std::string> result,
                                       CompleteDone done) {
  forward_complete_async(inner(), claim, std::move(result),
                         metered_done(metrics_, "complete", std::move(done)));
}

}  // namespace idempotency::gateway
