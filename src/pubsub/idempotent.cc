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

namespace idempotency::pubsub {
namespace {

// The delivery's context for log lines: never the key, only its fingerprint.
std::vector<std::pair<std::string, std::string>> context(const Message& m, const std::string& key) {
  std::vector<std::pair<std::string, std::string>> fields;
  if (!key.empty()) fields.emplace_back("key_fingerprint", key_fingerprint(key));
  if (m.delivery_attempt)
    fields.emplace_back("delivery_attempt", std::to_string(*m.delivery_attempt));
  if (m.subscription) fields.emplace_back("subscription", *m.subscription);
  return fields;
}

// The backend, built at most once (a factory that throws is retried by the next request), and
// its reclaimer, started with it when `purge_interval` is set.
class LazyBackend {
 public:
  LazyBackend(std::shared_ptr<LockBackend> backend,
              std::function<std::shared_ptr<LockBackend>()> factory,
              std::chrono::milliseconds purge_interval)
      : backend_(std::move(backend)),
        factory_(std::move(factory)),
        purge_interval_(purge_interval) {
    if (backend_) {
      start_reclaimer();
      ready_.store(backend_.get(), std::memory_order_release);
    }
  }

  LockBackend& get() {
    // Every request asks: once built, the answer is one atomic load, no lock.
    if (LockBackend* built = ready_.load(std::memory_order_acquire)) return *built;
    // A mutex, not std::call_once: a factory that throws must leave the slot empty for the
    // next request, and call_once's exceptional path is not reliable under TSan.
    std::lock_guard lock(mutex_);
    if (!backend_) {
      auto built = factory_();
      if (!built) throw std::invalid_argument("idempotent: the backend factory returned null");
      backend_ = std::move(built);
      start_reclaimer();
      ready_.store(backend_.get(), std::memory_order_release);
    }
    return *backend_;
  }

 private:
  void start_reclaimer() {
    if (purge_interval_.count() > 0) {
      reclaimer_ =
          std::make_unique<Reclaimer>(backend_, ReclaimerOptions{.interval = purge_interval_});
    }
  }

  std::mutex mutex_;
  std::atomic<LockBackend*> ready_{nullptr};  // backend_, once it exists
  std::shared_ptr<LockBackend> backend_;
  std::function<std::shared_ptr<LockBackend>()> factory_;
  std::chrono::milliseconds purge_interval_;
  std::unique_ptr<Reclaimer> reclaimer_;  // after backend_: stopped before it goes
};

// A StoreError thrown by the handler's own code, told apart from the wrapper's store calls.
class HandlerStoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The request being answered, as the outcome observer is told about it.
struct Seen {
  const PushRequest& request;
  const Message* message;  // null until the request is parsed

  [[nodiscard]] OutcomeEvent event(DeliveryOutcome outcome,
                                   const std::exception* error = nullptr) const {
    return OutcomeEvent{
        .outcome = outcome, .request = &request, .message = message, .error = error};
  }
};

// Every path decides an outcome and ends in answer(): the response comes from the one status
// table (push_response), so no path here knows a status code.
struct Wrapper {
  IdempotentOptions options;
  ResponseHandler handler;
  bool disabled;
  std::shared_ptr<LazyBackend> backend;

  // The last step of every path, after anything that could throw, so the observer hears of
  // each request exactly once.
  PushResponse answer(const OutcomeEvent& event, ResponseFacts facts = {}) const {
    PushResponse response = push_response(event.outcome, std::move(facts));
    observe(event);
    return response;
  }

  void observe(const OutcomeEvent& event) const {
    if (!options.on_outcome) return;
    try {
      options.on_outcome(event);
    } catch (...) {
      auto fields = event.message ? context(*event.message, {})
                                  : std::vector<std::pair<std::string, std::string>>{};
      fields.emplace_back("outcome", std::string(to_string(event.outcome)));
      log(LogRecord{Severity::kWarning, "on_outcome_failed",
                    "the on_outcome hook threw; ignored, the answer stands", std::move(fields)});
    }
  }

  // Unguarded means "no dedup", not "another answer": the handler's response, its Nack status
  // and its failures are answered exactly as on the guarded path.
  PushResponse run_unguarded(const Seen& seen, const char* why) const {
    const Message& message = *seen.message;
    log(LogRecord{Severity::kWarning, "unguarded",
                  std::string("running the handler unguarded: ") + why, context(message, {})});
    std::optional<PushResponse> response;
    try {
      response =
          checked(handler(Delivery{.message = message, .fence = 0, .request = &seen.request}));
    } catch (const Nack& n) {
      return nack(n, seen, {});
    } catch (const std::exception& e) {
      log(LogRecord{
          Severity::kError, "handler_failed", "the handler threw; nacking", {{"error", e.what()}}});
      return answer(seen.event(DeliveryOutcome::kHandlerFailed, &e));
    } catch (...) {
      log(LogRecord{Severity::kError, "handler_failed",
                    "the handler threw a non-exception; nacking", context(message, {})});
      return answer(seen.event(DeliveryOutcome::kHandlerFailed));
    }
    return answer(seen.event(DeliveryOutcome::kUnguarded), {.response = std::move(response)});
  }

  // A handler's response must be an ack: anything else would be stored as a success.
  static PushResponse checked(PushResponse r) {
    if (!is_ack(r.status)) throw Nack(500, "the handler answered a non-ack status");
    return r;
  }

  PushResponse nack(const Nack& n, const Seen& seen, const std::string& key) const {
    auto fields = context(*seen.message, key);
    fields.emplace_back("status", std::to_string(n.status()));
    fields.emplace_back("error", n.what());
    log(LogRecord{Severity::kWarning, "handler_nacked", "the handler nacked the delivery",
                  std::move(fields)});
    return answer(seen.event(DeliveryOutcome::kHandlerNacked, &n),
                  {.nack_status = n.status(), .reason = n.what()});
  }

  std::string resolve_key(const Message& message, std::string& problem) const {
    try {
      std::string key = options.key ? options.key(message) : key_from_message_id()(message);
      if (key.empty()) {
        problem = "no idempotency key: the message has no value for the key";
      } else if (is_blank_key(key)) {
        problem = "no idempotency key: the key is blank (only whitespace)";
      }
      return key;
    } catch (...) {
      problem = "no idempotency key: the key function failed";
      return {};
    }
  }

  void notify_duplicate(const Message& message, const std::string& key) const {
    if (!options.on_duplicate) return;
    try {
      options.on_duplicate(message);
    } catch (...) {
      log(LogRecord{Severity::kWarning, "on_duplicate_failed",
                    "the on_duplicate hook threw; ignored, the duplicate is still acked",
                    context(message, key)});
    }
  }

  PushResponse operator()(const PushRequest& request) const {
    const Seen unparsed{request, nullptr};
    if (options.authenticate) {
      if (auto reason = options.authenticate(request)) {
        log(LogRecord{
            Severity::kWarning, "unauthenticated", "refused a push request: " + *reason, {}});
        return answer(unparsed.event(DeliveryOutcome::kUnauthenticated), {.reason = *reason});
      }
    }
    auto parsed = parse_push(request, options.parse);
    if (auto* error = std::get_if<ParseError>(&parsed)) {
      log(LogRecord{Severity::kWarning, "malformed_push", error->reason, {}});
      return answer(unparsed.event(DeliveryOutcome::kMalformed), {.reason = error->reason});
    }
    const Message& message = std::get<Message>(parsed);
    const Seen seen{request, &message};
    if (disabled) return run_unguarded(seen, "GCP_PUBSUB_IDEMPOTENCY_DISABLED is set");

    std::string problem;
    const std::string key = resolve_key(message, problem);
    if (!problem.empty() || key.size() > kMaxKeyBytes) {
      if (problem.empty()) problem = "no idempotency key: the key is longer than the limit";
      if (options.allow_unguarded) return run_unguarded(seen, problem.c_str());
      log(LogRecord{Severity::kWarning, "no_key", problem + "; failing closed",
                    context(message, {})});
      return answer(seen.event(DeliveryOutcome::kNoKey), {.reason = problem});
    }

    // Only once() runs inside the try: what follows it answers outside, so an answer that
    // throws is never answered a second time by a catch below.
    std::optional<Outcome<PushResponse>> outcome;
    try {
      outcome.emplace(once(
          key, backend->get(),
          [&](const Claim& claim, const std::stop_token&) {
            try {
              return checked(
                  handler(Delivery{.message = message, .fence = claim.fence, .request = &request}));
            } catch (const StoreError& e) {
              // The handler's own store failed: a handler failure, not the wrapper's store
              // failing before the handler ran.
              throw HandlerStoreError(e.what());
            }
          },
          OnceOptions{.lease = options.lease,
                      .heartbeat = resolved_heartbeat(options.lease, options.heartbeat),
                      .wait_for = options.wait_for}));
    } catch (const Nack& n) {
      return nack(n, seen, key);
    } catch (const InProgress&) {
      // The handler's own mutex met a live holder (the seed's two-verb pattern): the
      // delivery's key was released like any failure; nack quietly so Pub/Sub retries.
      log(LogRecord{Severity::kWarning, "contention",
                    "the handler's mutex is held elsewhere; nacking so Pub/Sub retries later",
                    context(message, key)});
      return answer(seen.event(DeliveryOutcome::kContention));
    } catch (const OutcomeUnknown& e) {
      // The handler cannot tell whether its side effect happened: nack, but the key stays held
      // until the lease lapses so no redelivery runs beside the call that went silent.
      auto fields = context(message, key);
      fields.emplace_back("error", e.what());
      log(LogRecord{Severity::kWarning, "handler_outcome_unknown",
                    "the handler's outcome is unknown; nacking, the key stays held until its "
                    "lease lapses",
                    std::move(fields)});
      return answer(seen.event(DeliveryOutcome::kOutcomeUnknown, &e));
    } catch (const StoreError& e) {
      auto fields = context(message, key);
      fields.emplace_back("error", e.what());
      log(LogRecord{Severity::kError, "store_error",
                    "the idempotency store failed before the handler ran; nacking",
                    std::move(fields)});
      return answer(seen.event(DeliveryOutcome::kStoreError, &e));
    } catch (const std::exception& e) {
      auto fields = context(message, key);
      fields.emplace_back("error", e.what());
      log(LogRecord{Severity::kError, "handler_failed", "the handler threw; nacking",
                    std::move(fields)});
      return answer(seen.event(DeliveryOutcome::kHandlerFailed, &e));
    } catch (...) {
      log(LogRecord{Severity::kError, "handler_failed",
                    "the handler threw a non-exception; nacking", context(message, key)});
      return answer(seen.event(DeliveryOutcome::kHandlerFailed));
    }
    return settled(*outcome, seen, key);
  }

  // The answer to a once() that returned: ran, joined, done before, or held elsewhere.
  PushResponse settled(const Outcome<PushResponse>& outcome, const Seen& seen,
                       const std::string& key) const {
    const Message& message = *seen.message;
    switch (outcome.status()) {
      case Status::kExecuted:
        return answer(seen.event(DeliveryOutcome::kHandled), {.response = outcome.value()});
      case Status::kJoined:
        return answer(seen.event(DeliveryOutcome::kJoined), {.response = outcome.value()});
      case Status::kReplayed:
        notify_duplicate(message, key);
        if (options.replay_stored_response) {
          return answer(seen.event(DeliveryOutcome::kReplayed), {.response = outcome.value()});
        }
        return answer(seen.event(DeliveryOutcome::kDuplicate));
      case Status::kDuplicate:
        notify_duplicate(message, key);
        return answer(seen.event(DeliveryOutcome::kDuplicate));
      case Status::kInProgress:
        break;
    }
    std::chrono::seconds retry_after{1};
    if (outcome.lease_expiry()) {
      retry_after = std::chrono::duration_cast<std::chrono::seconds>(
          *outcome.lease_expiry() - std::chrono::system_clock::now());
    }
    log(LogRecord{Severity::kWarning, "contention",
                  "another instance holds this message's key; nacking so Pub/Sub retries later",
                  context(message, key)});
    return answer(seen.event(DeliveryOutcome::kContention), {.retry_after = retry_after});
  }
};

}  // namespace

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

PushHandler idempotent_response(IdempotentOptions options, ResponseHandler handler) {
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
  if (options.purge_interval.count() < 0) {
    throw std::invalid_argument("idempotent: purge_interval must not be negative");
  }
  auto backend = std::make_shared<LazyBackend>(
      options.backend, options.backend_factory,
      disabled ? std::chrono::milliseconds(0) : options.purge_interval);
  auto wrapper = std::make_shared<const Wrapper>(
      Wrapper{std::move(options), std::move(handler), disabled, std::move(backend)});
  return [wrapper](const PushRequest& request) { return (*wrapper)(request); };
}

}  // namespace idempotency::pubsub
