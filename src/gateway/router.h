// The gateway's own endpoints, answered before any request reaches a mode's handler:
//   GET /healthz  200 while the process serves
//   GET /readyz   200 when the backend answers a probe claim, else 503
//   GET /metrics  the Prometheus text exposition
// Everything else goes to the mode's handler, timed into the request latency histogram.
//
// Thread safety: the returned handler may be called from any number of threads.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "idempotency/backend.h"
#include "idempotency/http.h"
#include "metrics.h"

namespace idempotency::gateway {

/// The reserved key the readiness probe claims and releases at once; never a real key's
/// shape, so it cannot collide with traffic unless a prefix-less user key matches it exactly.
inline constexpr std::string_view kProbeKey = "pubsub-idempotency-gateway/readyz-probe";

/// probe_backend() claims and releases kProbeKey; returns a one-line reason on failure.
/// A probe that finds the key held (another probe) still proves the store answers.
[[nodiscard]] std::optional<std::string> probe_backend(LockBackend& backend,
                                                       std::chrono::milliseconds lease);

/// make_router() routes the gateway's endpoints and passes the rest to `handler`.
[[nodiscard]] http::Handler make_router(http::Handler handler, std::shared_ptr<LockBackend> backend,
                                        std::chrono::milliseconds lease,
                                        std::shared_ptr<Metrics> metrics);

}  // namespace idempotency::gateway
