#include "router.h"

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "idempotency/log.h"
#include "readiness_probe.h"

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

http::AsyncHandler make_router(pubsub::AsyncPushHandler handler,
                               std::shared_ptr<LockBackend> backend,
                               std::chrono::milliseconds lease, std::shared_ptr<Metrics> metrics,
                               pubsub::RunBlocking run_blocking) {
  return [handler = std::move(handler),
          readiness = ReadinessProbe(std::move(backend), lease, std::move(run_blocking)),
          metrics = std::move(metrics)](pubsub::PushRequest&& request,
                                        const http::Responder& respond) {
    if (const std::string_view method = request.method; method == "GET" || method == "HEAD") {
      const std::string path = request.path.substr(0, request.path.find('?'));
      if (path == "/healthz") return respond(text(200, "ok\n"));
      if (path == "/readyz") {
        return readiness.check([respond](const std::optional<std::string>& not_ready) {
          respond(not_ready ? text(503, "backend unavailable\n") : text(200, "ready\n"));
        });
      }
      if (path == "/metrics") {
        return respond(text(200, metrics->render(), "text/plain; version=0.0.4; charset=utf-8"));
      }
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      handler(std::make_shared<const pubsub::PushRequest>(std::move(request)),
              [metrics, respond, start](pubsub::PushResponse response) {
                metrics->request_latency().observe(std::chrono::steady_clock::now() - start);
                respond(std::move(response));
              });
    } catch (...) {
      // Thrown before an outcome was decided (std::bad_alloc), so none was counted: counted
      // here, once; the server answers 500.
      metrics->count(outcome::kError);
      throw;
    }
  };
}

pubsub::AsyncPushHandler on_workers(http::Handler handler, pubsub::RunBlocking run_blocking) {
  auto shared = std::make_shared<const http::Handler>(std::move(handler));
  return [shared, run_blocking = std::move(run_blocking)](
             std::shared_ptr<const pubsub::PushRequest> request, pubsub::Respond respond) {
    run_blocking([shared, request = std::move(request), respond = std::move(respond)] {
      pubsub::PushResponse response;
      try {
        response = (*shared)(*request);
      } catch (const std::exception& e) {
        log(LogRecord{Severity::kError,
                      "handler_threw",
                      "the request handler threw; answering 500",
                      {{"error", e.what()}}});
        response = text(500, "internal error\n");
      }
      respond(std::move(response));
    });
  };
}

}  // namespace idempotency::gateway
