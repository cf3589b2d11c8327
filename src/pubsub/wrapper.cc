#include "wrapper.h"

#include <string>
#include <utility>

#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "idempotency/log.h"
#include "parse_into.h"

namespace idempotency::pubsub::detail {

std::vector<std::pair<std::string, std::string>> context(const Message& m, const std::string& key) {
  std::vector<std::pair<std::string, std::string>> fields;
  if (!key.empty()) fields.emplace_back("key_fingerprint", key_fingerprint(key));
  if (m.delivery_attempt)
    fields.emplace_back("delivery_attempt", std::to_string(*m.delivery_attempt));
  if (m.subscription) fields.emplace_back("subscription", *m.subscription);
  return fields;
}

PushResponse Wrapper::answer(const OutcomeEvent& event, ResponseFacts facts) const {
  PushResponse response = push_response(event.outcome, std::move(facts));
  observe(event);
  return response;
}

void Wrapper::observe(const OutcomeEvent& event) const {
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

PushResponse Wrapper::run_unguarded(const Seen& seen, const char* why) const {
  const Message& message = *seen.message;
  log(LogRecord{Severity::kWarning, "unguarded",
                std::string("running the handler unguarded: ") + why, context(message, {})});
  std::optional<PushResponse> response;
  try {
    response = checked(handler(Delivery{.message = message, .fence = 0, .request = &seen.request}));
  } catch (const Nack& n) {
    return nack(n, seen, {});
  } catch (const std::exception& e) {
    log(LogRecord{
        Severity::kError, "handler_failed", "the handler threw; nacking", {{"error", e.what()}}});
    return answer(seen.event(DeliveryOutcome::kHandlerFailed, &e));
  } catch (...) {
    log(LogRecord{Severity::kError, "handler_failed", "the handler threw a non-exception; nacking",
                  context(message, {})});
    return answer(seen.event(DeliveryOutcome::kHandlerFailed));
  }
  return answer(seen.event(DeliveryOutcome::kUnguarded), {.response = std::move(response)});
}

PushResponse Wrapper::checked(PushResponse r) {
  if (!is_ack(r.status)) throw Nack(500, "the handler answered a non-ack status");
  return r;
}

PushResponse Wrapper::nack(const Nack& n, const Seen& seen, const std::string& key) const {
  auto fields = context(*seen.message, key);
  fields.emplace_back("status", std::to_string(n.status()));
  fields.emplace_back("error", n.what());
  log(LogRecord{Severity::kWarning, "handler_nacked", "the handler nacked the delivery",
                std::move(fields)});
  return answer(seen.event(DeliveryOutcome::kHandlerNacked, &n),
                {.nack_status = n.status(), .reason = n.what()});
}

std::string Wrapper::resolve_key(const Message& message, std::string& problem) const {
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

void Wrapper::notify_duplicate(const Message& message, const std::string& key) const {
  if (!options.on_duplicate) return;
  try {
    options.on_duplicate(message);
  } catch (...) {
    log(LogRecord{Severity::kWarning, "on_duplicate_failed",
                  "the on_duplicate hook threw; ignored, the duplicate is still acked",
                  context(message, key)});
  }
}

Admission Wrapper::admit(const PushRequest& request) const {
  Admission admission;
  const Seen unparsed{request, nullptr};
  if (options.authenticate) {
    if (auto reason = options.authenticate(request)) {
      log(LogRecord{
          Severity::kWarning, "unauthenticated", "refused a push request: " + *reason, {}});
      admission.answer =
          answer(unparsed.event(DeliveryOutcome::kUnauthenticated), {.reason = *reason});
      return admission;
    }
  }
  // Parsed where the delivery keeps it.
  const Message& message = admission.message.emplace();
  if (auto error = internal::parse_push_into(request, options.parse, *admission.message)) {
    admission.message.reset();
    log(LogRecord{Severity::kWarning, "malformed_push", error->reason, {}});
    admission.answer =
        answer(unparsed.event(DeliveryOutcome::kMalformed), {.reason = error->reason});
    return admission;
  }
  if (disabled) {
    admission.unguarded_why = "GCP_PUBSUB_IDEMPOTENCY_DISABLED is set";
    return admission;
  }
  std::string problem;
  admission.key = resolve_key(message, problem);
  if (!problem.empty() || admission.key.size() > kMaxKeyBytes) {
    if (problem.empty()) problem = "no idempotency key: the key is longer than the limit";
    if (options.allow_unguarded) {
      admission.unguarded_why = std::move(problem);
      return admission;
    }
    log(LogRecord{Severity::kWarning, "no_key", problem + "; failing closed",
                  context(message, {})});
    const Seen seen{request, &message};
    admission.answer = answer(seen.event(DeliveryOutcome::kNoKey), {.reason = problem});
  }
  return admission;
}

PushResponse Wrapper::failed(const std::exception_ptr& error, const Seen& seen,
                             const std::string& key) const {
  const Message& message = *seen.message;
  try {
    std::rethrow_exception(error);
  } catch (const Nack& n) {
    return nack(n, seen, key);
  } catch (const InProgress&) {
    // The handler's own mutex met a live holder (the seed's two-verb pattern): the
    // delivery's key was released like any failure; nack quietly so Pub/Sub retries.
    log(LogRecord{Severity::kWarning, "contention",
                  "the handler's mutex is held elsewhere; nacking so Pub/Sub retries later",
                  context(message, key)});
    return answer(seen.event(DeliveryOutcome::kContention));
  } catch (const Duplicate&) {
    // The handler's own lock() found its key done (the seed's `except Duplicate: ack`): the
    // work it guards has run, so a nack would only redeliver the message until it
    // dead-letters. Acked as a duplicate; the delivery's key was released like any failure.
    log(LogRecord{Severity::kInfo, "handler_duplicate",
                  "the handler's lock found its key done; acking", context(message, key)});
    return answer(seen.event(DeliveryOutcome::kDuplicate));
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
    log(LogRecord{Severity::kError, "handler_failed", "the handler threw a non-exception; nacking",
                  context(message, key)});
    return answer(seen.event(DeliveryOutcome::kHandlerFailed));
  }
}

PushResponse Wrapper::settled(const Outcome<PushResponse>& outcome, const Seen& seen,
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

PushResponse Wrapper::operator()(const PushRequest& request) const {
  Admission admission = admit(request);
  if (admission.answer) return std::move(*admission.answer);
  const Message& message = *admission.message;
  const Seen seen{request, &message};
  if (!admission.unguarded_why.empty()) return run_unguarded(seen, admission.unguarded_why.c_str());
  const std::string& key = admission.key;

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
  } catch (...) {
    return failed(std::current_exception(), seen, key);
  }
  return settled(*outcome, seen, key);
}

}  // namespace idempotency::pubsub::detail
