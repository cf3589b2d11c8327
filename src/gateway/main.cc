// pubsub-idempotency-gateway: a sidecar that forwards each Pub/Sub push delivery (or each
// Idempotency-Key request) to the app beside it at most once per key. Flags: --help, and
// deploy/gateway/README.md.
//
// Exit codes: 0 after a graceful SIGTERM / SIGINT; 2 for a bad flag or malformed URL (one
// line on stderr naming the flag, before any port is bound); 1 when the store cannot be
// reached or opened at start, or the port cannot be bound.
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>

#include "config.h"
#include "deps.h"
#include "idempotency/errors.h"
#include "idempotency/http.h"
#include "idempotency/log.h"
#include "idempotency/oidc.h"
#include "idempotency/open_backend.h"
#include "idempotency/pubsub/idempotent.h"
#include "idempotency/reclaimer.h"
#include "idempotency_key_mode.h"
#include "metered_backend.h"
#include "pubsub_mode.h"
#include "router.h"
#include "startup_warnings.h"
#include "upstream_pool.h"

namespace idem = idempotency;
namespace gw = idempotency::gateway;

namespace {

constexpr const char* kProgram = "pubsub-idempotency-gateway";

int fail(int code, const std::string& line) {
  std::fprintf(stderr, "%s: %s\n", kProgram, line.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // Block the shutdown signals before any thread starts (a backend may start one), so they
  // all inherit the mask and serve() alone receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto parsed = gw::parse_config(argc, argv);
  if (auto* exit = std::get_if<gw::ConfigExit>(&parsed)) {
    if (exit->code == 0) {
      std::fputs(exit->text.c_str(), stdout);
      return 0;
    }
    return fail(exit->code, exit->text);
  }
  const gw::Config config = std::get<gw::Config>(std::move(parsed));

  // Inherited silently, the variable would turn the sidecar into a plain proxy that forwards
  // every duplicate: refuse unless asked for explicitly.
  if (config.mode == gw::Mode::kPubsub && idem::pubsub::disabled_by_environment() &&
      !config.allow_disabled) {
    return fail(2,
                "GCP_PUBSUB_IDEMPOTENCY_DISABLED is set: every push would reach the upstream "
                "unguarded; unset it, or pass --allow-idempotency-disabled (test setups only)");
  }
  try {
    idem::validate_lease(config.lease);
  } catch (const std::invalid_argument& e) {
    return fail(2, std::string("--lease: ") + e.what());
  }
  try {
    idem::validate_ttl(config.ttl);
  } catch (const std::invalid_argument& e) {
    return fail(2, std::string("--ttl: ") + e.what());
  }
  gw::warn_of_risky_setups(config);

  gw::Authenticate authenticate;
  if (!config.oidc_audience.empty()) {
    idem::OidcOptions options{.audience = config.oidc_audience,
                              .allowed_emails = config.oidc_emails};
    if (gw::jwks_is_url(config.jwks)) {
      options.jwks_url = config.jwks;
    } else {
      options.jwks_file = config.jwks;
    }
    try {
      auto verifier = std::make_shared<idem::OidcVerifier>(std::move(options));
      authenticate = [verifier](const idem::pubsub::PushRequest& r) { return verifier->verify(r); };
    } catch (const std::invalid_argument& e) {
      return fail(2, std::string("--oidc-audience/--oidc-email/--jwks: ") + e.what());
    }
  }

  // Open the store before serving: a malformed URL exits 2, an unreachable store exits 1,
  // both before the port is bound, so a bad deploy fails its first health check loudly.
  std::shared_ptr<idem::LockBackend> raw_backend;
  try {
    raw_backend = idem::open_backend(config.backend, {.ttl = config.ttl});
  } catch (const std::invalid_argument& e) {
    return fail(2, std::string("--backend: ") + e.what());
  } catch (const std::exception& e) {
    return fail(1, std::string("--backend: the store cannot be opened: ") + e.what());
  }
  if (auto reason = gw::probe_backend(*raw_backend, config.lease)) {
    return fail(1, "--backend: the store does not answer: " + *reason);
  }

  auto metrics = std::make_shared<gw::Metrics>();
  // Expired records are deleted as the gateway runs, so its store stays at what the traffic
  // needs instead of growing until the disk is full.
  std::optional<idem::Reclaimer> reclaimer;
  if (config.purge_interval.count() > 0) {
    reclaimer.emplace(raw_backend,
                      idem::ReclaimerOptions{.interval = config.purge_interval,
                                             .on_pass = [metrics](const idem::PurgePass& pass) {
                                               metrics->purge_pass(pass);
                                             }});
  }
  // The event loop serves every connection and runs every upstream exchange; the workers run
  // what may block (store calls on a server store, the idempotency-key mode).
  auto loop = std::make_shared<boost::asio::io_context>(static_cast<int>(config.io_threads));
  boost::asio::thread_pool workers(config.workers);
  idem::pubsub::RunBlocking run_blocking = [&workers](std::function<void()> work) {
    boost::asio::post(workers, std::move(work));
  };
  gw::GatewayDeps deps{
      .backend = std::make_shared<gw::MeteredBackend>(raw_backend, metrics),
      .upstream = std::make_shared<const gw::UpstreamPool>(
          gw::parse_upstream_url(config.upstream),
          gw::UpstreamOptions{.connect_timeout = config.upstream_connect_timeout,
                              .timeout = config.upstream_timeout,
                              .max_response_bytes = config.max_response,
                              // Pub/Sub reads only the status: nothing else is kept.
                              .keep_content = config.mode != gw::Mode::kPubsub}),
      .metrics = metrics,
      .authenticate = std::move(authenticate),
      .loop = loop,
      .run_blocking = run_blocking,
      .pending_deliveries = std::make_shared<idem::pubsub::PendingDeliveries>(),
  };
  idem::pubsub::AsyncPushHandler handler =
      config.mode == gw::Mode::kPubsub
          ? gw::make_pubsub_handler(config, deps)
          : gw::on_workers(gw::make_idempotency_key_handler(config, deps), run_blocking);
  auto router =
      gw::make_router(std::move(handler), raw_backend, config.lease, metrics, run_blocking);

  const std::string mode = config.mode == gw::Mode::kPubsub ? "pubsub" : "idempotency-key";
  const int exit_code = idem::http::serve(
      config.listen_host, config.listen_port, std::move(router),
      {.workers = config.workers,
       .io_threads = config.io_threads,
       .max_connections = config.max_connections,
       .max_header_bytes = config.max_header_bytes,
       .max_body_bytes = config.max_body,
       .header_timeout = config.header_timeout,
       .body_timeout = config.body_timeout,
       .keep_alive_timeout = config.idle_timeout,
       .event_loop = loop,
       .on_listening = [&](int port) {
         idem::log(idem::LogRecord{idem::Severity::kInfo,
                                   "gateway_listening",
                                   "pubsub-idempotency-gateway is serving",
                                   {{"port", std::to_string(port)},
                                    {"mode", mode},
                                    {"backend", gw::backend_scheme(config.backend)}}});
         std::printf("listening on %d\n", port);
         std::fflush(stdout);
       }});
  // Every push is answered; those acked before their completes are not finished until the
  // completes land, or their keys would stay held until their leases lapse. The workers and
  // the store are still here for them.
  deps.pending_deliveries->wait();
  return exit_code;
}
