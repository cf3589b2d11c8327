#include "startup_warnings.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "idempotency/log.h"

namespace idempotency::gateway {

void warn_of_risky_setups(const Config& config) {
  if (config.heartbeat.count() == 0 && config.lease <= config.upstream_timeout) {
    // Allowed (the app may always answer well within the lease), but then a call that outlasts
    // the lease and is still running when the gateway gives up on it is not held for a lease
    // after: a redelivery or retry may run beside it.
    log(LogRecord{Severity::kWarning,
                  "lease_shorter_than_upstream_timeout",
                  "--heartbeat 0 and --lease no longer than --upstream-timeout: an upstream call "
                  "that outlasts the lease can run twice; give --lease more than the app's "
                  "longest call",
                  {{"lease_ms", std::to_string(config.lease.count())},
                   {"upstream_timeout_ms", std::to_string(config.upstream_timeout.count())}}});
  }
  if (config.mode == Mode::kPubsub && config.key.kind == KeySpec::Kind::kOrderingKey) {
    // Allowed for publishers whose ordering key names one event, but an ordering key usually
    // names a stream of distinct messages, and a completed key suppresses all of them.
    log(LogRecord{Severity::kWarning,
                  "key_is_ordering_key",
                  "--key ordering-key completes the ordering key: every later message with it "
                  "within --ttl is acked as a duplicate and never reaches the app; use it only "
                  "when an ordering key names one event",
                  {{"ttl_ms", std::to_string(config.ttl.count())}}});
  }
  if (!config.oidc_audience.empty() && !config.jwks.empty() && !jwks_is_url(config.jwks) &&
      access(config.jwks.c_str(), R_OK) != 0) {
    // Allowed: the file is read when the first token comes, and may be written after the
    // start (a secret mounted late). Still missing then, every push is refused with a 401.
    log(LogRecord{Severity::kWarning,
                  "jwks_file_unreadable",
                  "the --jwks file cannot be read now: unless it can be by the first push, every "
                  "push is refused (401)",
                  {}});
  }
  const std::string scheme = backend_scheme(config.backend);
  const bool cloud_run = std::getenv("K_SERVICE") != nullptr;  // NOLINT(concurrency-mt-unsafe)
  if (cloud_run && (scheme == "sqlite" || scheme == "memory")) {
    // Cloud Run's file system is each instance's own memory, gone with it: duplicates that
    // reach another instance, or arrive after a restart, are not caught.
    log(LogRecord{Severity::kWarning,
                  "local_store_on_cloud_run",
                  "a " + scheme +
                      " store on Cloud Run is the instance's own and lost with it: duplicates "
                      "on other instances or after a restart run again; use Redis, PostgreSQL "
                      "or Datastore",
                  {{"backend", scheme}}});
  }
}

}  // namespace idempotency::gateway
