// The gateway's own endpoints, answered before any request reaches a mode's handler:
//   GET /healthz  200 while the process serves
//   GET /readyz   200 when the backend answers a probe claim, else 503 (one probe at a time,
//                 its answer standing for a second: ReadinessProbe)
//   GET /metrics  the Prometheus text exposition
// Everything else goes to the mode's handler, timed into the request latency histogram.
// A handler that throws before answering is counted as an error and answered 500.
//
// Thread safety: the returned handler may be called from any number of threads.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "idempotency/backend.h"
#include "idempotency/http.h"
#include "idempotency/pubsub/idempotent_async.h"
#include "metrics.h"

namespace idempotency::gateway {

/// The reserved key the readiness probe claims and releases at once; never a real key's
/// shape, so it cannot collide with traffic unless a prefix-less user key matches it exactly.
inline constexpr std::string_view kProbeKey = "pubsub-idempotency-gateway/readyz-probe";

/// probe_backend() claims and releases kProbeKey; returns a one-line reason on failure.
/// A probe that finds the key held (another probe) still proves the store answers.
[[nodiscard]] std::optional<std::string> probe_backend(LockBackend& backend,
                                                       std::chrono::milliseconds lease);

/// make_router() routes the gateway's endpoints and passes the rest to `handler`. It runs on
/// the event loop: the readiness probe, which calls the store, runs on `run_blocking`.
[[nodiscard]] http::AsyncHandler make_router(pubsub::AsyncPushHandler handler,
                                             std::shared_ptr<LockBackend> backend,
                                             std::chrono::milliseconds lease,
                                             std::shared_ptr<Metrics> metrics,
                                             pubsub::RunBlocking run_blocking);

/// on_workers() runs a blocking handler (the idempotency-key mode's) on `run_blocking`.
[[nodiscard]] pubsub::AsyncPushHandler on_workers(http::Handler handler,
                                                  pubsub::RunBlocking run_blocking);

}  // namespace idempotency::gateway
