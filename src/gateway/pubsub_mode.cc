#include "pubsub_mode.h"

#include <utility>

#include "idempotency/errors.h"
#include "idempotency/pubsub/idempotent_async.h"

namespace idempotency::gateway {

std::string_view metric_outcome(const pubsub::OutcomeEvent& event) {
  using pubsub::DeliveryOutcome;
  switch (event.outcome) {
    case DeliveryOutcome::kHandled:
    // Disabled by the environment (only with --allow-idempotency-disabled): forwarded and
    // acked, counted as on the guarded path, as its failures are.
    case DeliveryOutcome::kUnguarded:
      return outcome::kHandled;
    case DeliveryOutcome::kJoined:
      return outcome::kJoined;
    case DeliveryOutcome::kDuplicate:
      return outcome::kDuplicate;
    case DeliveryOutcome::kReplayed:
      return outcome::kReplayed;
    case DeliveryOutcome::kContention:
      return outcome::kContention;
    case DeliveryOutcome::kHandlerNacked:
      // The only nacks are the forward step's; a joined delivery is handed its owner's.
      if (const auto* nack = dynamic_cast<const UpstreamNack*>(event.error)) {
        return nack->failure() == UpstreamFailure::kUnreachable ? outcome::kNackUnreachable
                                                                : outcome::kNackUpstream;
      }
      return outcome::kError;
    case DeliveryOutcome::kOutcomeUnknown:
      // The forward step's only OutcomeUnknown: the upstream was sent the request and went
      // silent.
      return outcome::kNackNoAnswer;
    case DeliveryOutcome::kHandlerFailed:
      // Unguarded, the library answers an OutcomeUnknown as a failure; it is still a silent
      // upstream. Anything else thrown (std::bad_alloc) is an error.
      return dynamic_cast<const OutcomeUnknown*>(event.error) != nullptr ? outcome::kNackNoAnswer
                                                                         : outcome::kError;
    case DeliveryOutcome::kStoreError:
      return outcome::kBackendError;
    case DeliveryOutcome::kMalformed:
    case DeliveryOutcome::kNoKey:
      return outcome::kBadRequest;
    case DeliveryOutcome::kUnauthenticated:
      return outcome::kUnauthorized;
  }
  return outcome::kError;
}

pubsub::KeyFunction make_key_function(const KeySpec& spec, const std::string& prefix) {
  switch (spec.kind) {
    case KeySpec::Kind::kMessageId:
      return pubsub::key_from_message_id(prefix);
    case KeySpec::Kind::kAttribute:
      return pubsub::key_from_attribute(spec.name, prefix);
    case KeySpec::Kind::kHeader:
      return pubsub::key_from_header(spec.name, prefix);
    case KeySpec::Kind::kOrderingKey:
      return pubsub::key_from_ordering_key(prefix);
  }
  return pubsub::key_from_message_id(prefix);
}

namespace {

// The forward step's answer to what the upstream did, or the exception that nacks it: the
// exception's type tells the outcome observer how the upstream failed. Made, not thrown: the
// exception is handed to whichever thread answers, and this one keeps no reference to it.
pubsub::HandlerResult result_of(const UpstreamReply& reply) {
  switch (reply.kind) {
    case UpstreamReply::Kind::kNotSent:
      // Provably not acted on: release at once, the redelivery may run straight away.
      return std::make_exception_ptr(
          UpstreamNack(UpstreamFailure::kUnreachable, 503, "upstream unreachable: " + reply.error));
    case UpstreamReply::Kind::kNoAnswer:
      // Sent and gone silent: the app may still be acting on it, so the key stays held.
      return std::make_exception_ptr(OutcomeUnknown("upstream did not answer: " + reply.error));
    case UpstreamReply::Kind::kResponse:
      break;
  }
  const int status = reply.response.status;
  if (status < 200 || status > 299) {
    // The reply's own reason, when it has one: a body cut off, or an invalid status replaced.
    std::string why = "upstream answered " + std::to_string(status);
    if (!reply.error.empty()) why += " (" + reply.error + ")";
    return std::make_exception_ptr(UpstreamNack(UpstreamFailure::kRejected, 500, why));
  }
  // Pub/Sub reads only the status, so that is all that is answered and stored; a 2xx it
  // would nack (any but 200, 201, 202 and 204) becomes a 200.
  return pubsub::PushResponse{.status = pubsub::is_ack(status) ? status : 200};
}

}  // namespace

pubsub::AsyncPushHandler make_pubsub_handler(const Config& config, const GatewayDeps& deps) {
  auto upstream = deps.upstream;
  auto metrics = deps.metrics;
  auto loop = deps.loop;
  const auto threads = config.io_threads == 1 ? LoopThreads::kOne : LoopThreads::kMany;
  // Sent on the server's event loop: the exchange never holds a thread while the app works.
  auto forward = [upstream, metrics, loop, threads](const pubsub::Delivery& delivery,
                                                    pubsub::HandlerDone done) {
    // The request lives until `done` is called (idempotent_async's promise): borrowed, not
    // copied.
    std::shared_ptr<const pubsub::PushRequest> request(std::shared_ptr<void>(), delivery.request);
    upstream->forward_async(
        std::move(request), delivery.fence, *loop,
        [metrics, done = std::move(done)](const UpstreamReply& reply) {
          metrics->upstream_latency().observe(reply.elapsed);
          done(result_of(reply));
        },
        threads);
  };

  pubsub::IdempotentOptions options{
      .backend = deps.backend,
      .key = make_key_function(config.key, config.key_prefix),
      .lease = config.lease,
      .heartbeat = config.heartbeat,
      .wait_for = config.wait_for,
      // Called once the outcome is decided: each request is counted here, from its typed
      // outcome, and only here.
      .on_outcome = [metrics](const pubsub::OutcomeEvent& e) { metrics->count(metric_outcome(e)); },
      // The upstream gets the body as it came: `data` is checked, never decoded.
      .parse = {.max_body_bytes = config.max_body, .decode_data = false},
      .authenticate = deps.authenticate,
  };
  // Pub/Sub waits on the ack alone: it goes out as soon as the upstream has acted, and the
  // complete follows it (DECISIONS.md, "The ack does not wait for the complete").
  return pubsub::idempotent_async(std::move(options), std::move(forward), deps.run_blocking,
                                  deps.pending_deliveries);
}

}  // namespace idempotency::gateway
