// MeteredBackend: a LockBackend decorator that times every claim / complete / release and
// counts the ones that throw, so the gateway can export backend latency even where the
// library's wrapper (idempotent_response) calls the backend out of its sight.
//
// Thread safety: as safe as the backend it wraps (every shipped backend is shareable).
#pragma once

#include <memory>

#include "idempotency/forwarding_backend.h"
#include "metrics.h"

namespace idempotency::gateway {

/// MeteredBackend forwards to `inner` and records into `metrics`.
class MeteredBackend : public ForwardingBackend {
 public:
  MeteredBackend(std::shared_ptr<LockBackend> inner, std::shared_ptr<Metrics> metrics);

 protected:
  ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
                       const ClaimRequest& request) override;
  bool do_complete(const Claim& claim, std::optional<std::string> result) override;
  void do_release(const Claim& claim) override;
  /// Forwarded as sent, timed from the call to its outcome: the gateway's event loop calls
  /// them itself when the wrapped backend sends them asynchronously.
  void do_claim_async(std::string_view key, std::chrono::milliseconds lease, ClaimRequest request,
                      ClaimDone done) override;
  void do_complete_async(const Claim& claim, std::optional<std::string> result,
                         CompleteDone done) override;
  [[nodiscard]] bool do_sends_async() const noexcept override { return inner().sends_async(); }

 private:
  std::shared_ptr<Metrics> metrics_;
};

}  // namespace idempotency::gateway
