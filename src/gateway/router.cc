#include "router.h"

#include <exception>
#include <utility>
#include <variant>

#include "idempotency/log.h"

namespace idempotency::gateway {
namespace {

pubsub::PushResponse text(int status, std::string body,
                          std::string content_type = "text/plain; charset=utf-8") {
  return {.status = status,
          .headers = {{"Content-Type", std::move(content_type)}},
          .body = std::move(body)};
}

}  // namespace

std::optional<std::string> probe_backend(LockBackend& backend, std::chrono::milliseconds lease) {
  try {
    auto claimed = backend.claim(kProbeKey, lease);
    if (auto* won = std::get_if<Won>(&claimed)) backend.release(won->claim);
    return std::nullopt;
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
}

http::Handler make_router(http::Handler handler, std::shared_ptr<LockBackend> backend,
                          std::chrono::milliseconds lease, std::shared_ptr<Metrics> metrics) {
  return [handler = std::move(handler), backend = std::move(backend), lease,
          metrics = std::move(metrics)](const pubsub::PushRequest& request) {
    if (request.method == "GET" || request.method == "HEAD") {
      const std::string path = request.path.substr(0, request.path.find('?'));
      if (path == "/healthz") return text(200, "ok\n");
      if (path == "/readyz") {
        if (auto reason = probe_backend(*backend, lease)) {
          log(LogRecord{Severity::kWarning,
                        "not_ready",
                        "the idempotency backend did not answer the readiness probe",
                        {{"error", *reason}}});
          return text(503, "backend unavailable\n");
        }
        return text(200, "ready\n");
      }
      if (path == "/metrics") {
        return text(200, metrics->render(), "text/plain; version=0.0.4; charset=utf-8");
      }
    }
    const auto start = std::chrono::steady_clock::now();
    auto response = handler(request);
    metrics->request_latency().observe(std::chrono::steady_clock::now() - start);
    return response;
  };
}

}  // namespace idempotency::gateway
