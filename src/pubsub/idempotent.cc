// idempotent(): authenticate -> parse -> resolve the key -> once() -> a typed outcome, answered
// through the push status table (push_response) and reported to on_outcome.
#include "idempotency/pubsub/idempotent.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "idempotency/log.h"
#include "idempotency/once.h"
#include "idempotency/pubsub/outcome.h"
#include "idempotency/reclaimer.h"
#include "wrapper.h"

namespace idempotency::pubsub {

using detail::LazyBackend;
using detail::Wrapper;

std::chrono::milliseconds resolved_heartbeat(std::chrono::milliseconds lease,
                                             std::optional<std::chrono::milliseconds> heartbeat) {
  return heartbeat.value_or(lease / 3);
}

bool disabled_by_environment() {
  // Read when a wrapper is built, not per request; nothing here sets the environment.
  const char* raw =
      std::getenv("GCP_PUBSUB_IDEMPOTENCY_DISABLED");  // NOLINT(concurrency-mt-unsafe)
  if (raw == nullptr) return false;
  std::string v(raw);
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

PushHandler idempotent(IdempotentOptions options, Handler handler) {
  if (!handler) throw std::invalid_argument("idempotent: the handler is empty");
  return idempotent_response(std::move(options), [handler = std::move(handler)](const Delivery& d) {
    handler(d);
    return push_response(DeliveryOutcome::kHandled, {});  // the plain 200 of a void handler
  });
}

std::shared_ptr<const detail::Wrapper> detail::make_wrapper(IdempotentOptions options,
                                                            ResponseHandler handler) {
  if (!handler) throw std::invalid_argument("idempotent: the handler is empty");
  const bool disabled = disabled_by_environment();
  if (disabled) {
    log(LogRecord{Severity::kWarning,
                  "idempotency_disabled",
                  "GCP_PUBSUB_IDEMPOTENCY_DISABLED is set: every delivery runs unguarded and "
                  "duplicates re-run their side effects; never set it in production",
                  {}});
  } else if (!options.backend && !options.backend_factory) {
    throw std::invalid_argument("idempotent: set a backend or a backend factory");
  }
  validate_lease(options.lease);
  validate_heartbeat(resolved_heartbeat(options.lease, options.heartbeat), options.lease);
  // Bounded here, as the Reclaimer bounds it: with a backend_factory the reclaimer starts only
  // on the first request, too late to refuse the options.
  if (options.purge_interval.count() < 0 || options.purge_interval > kMaxTtl) {
    throw std::invalid_argument("idempotent: purge_interval must be from 0 to 366 days");
  }
  auto backend = std::make_shared<LazyBackend>(
      options.backend, options.backend_factory,
      disabled ? std::chrono::milliseconds(0) : options.purge_interval);
  return std::make_shared<const Wrapper>(
      Wrapper{std::move(options), std::move(handler), disabled, std::move(backend)});
}

PushHandler idempotent_response(IdempotentOptions options, ResponseHandler handler) {
  auto wrapper = detail::make_wrapper(std::move(options), std::move(handler));
  return [wrapper](const PushRequest& request) { return (*wrapper)(request); };
}

}  // namespace idempotency::pubsub
