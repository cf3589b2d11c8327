#include "pubsub_mode.h"

#include <string_view>
#include <utility>

#include "idempotency/errors.h"
#include "idempotency/log.h"

namespace idempotency::gateway {
namespace {

// What the wrapped handler saw of the request being handled on this thread. The library's
// wrapper is opaque and runs the handler on the calling thread (a joined duplicate never runs
// it), so the request and its outcome travel through this per-thread slot.
struct InFlight {
  const pubsub::PushRequest* request = nullptr;
  bool upstream_called = false;
  std::string_view outcome;
};
thread_local InFlight in_flight;

bool has_header(const pubsub::PushResponse& r, std::string_view name) {
  return pubsub::find_header(r.headers, name).has_value();
}

// The outcome of a request whose handler did not run: told apart by the wrapper's answer.
std::string_view outcome_without_upstream(const pubsub::PushResponse& r) {
  if (r.status == 204) return outcome::kDuplicate;
  if (pubsub::is_ack(r.status)) return outcome::kJoined;
  if (r.status == 503) {
    return has_header(r, "Retry-After") ? outcome::kContention : outcome::kBackendError;
  }
  if (r.status == 400 || r.status == 405 || r.status == 413) return outcome::kBadRequest;
  if (r.status == 401) return outcome::kUnauthorized;
  return outcome::kError;
}

}  // namespace

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

http::Handler make_pubsub_handler(const Config& config, const GatewayDeps& deps) {
  auto upstream = deps.upstream;
  auto metrics = deps.metrics;
  auto forward = [upstream, metrics](const pubsub::Delivery& delivery) -> pubsub::PushResponse {
    InFlight& slot = in_flight;
    slot.upstream_called = true;
    auto reply = upstream->forward(*slot.request, delivery.fence);
    metrics->upstream_latency().observe(reply.elapsed);
    switch (reply.kind) {
      case UpstreamReply::Kind::kNotSent:
        // Provably not acted on: release at once, the redelivery may run straight away.
        slot.outcome = outcome::kNackUnreachable;
        throw pubsub::Nack(503, "upstream unreachable: " + reply.error);
      case UpstreamReply::Kind::kNoAnswer:
        // Sent and gone silent: the app may still be acting on it, so the key stays held.
        slot.outcome = outcome::kNackNoAnswer;
        throw OutcomeUnknown("upstream did not answer: " + reply.error);
      case UpstreamReply::Kind::kResponse:
        break;
    }
    const int status = reply.response.status;
    if (status < 200 || status > 299) {
      slot.outcome = outcome::kNackUpstream;
      throw pubsub::Nack(500, "upstream answered " + std::to_string(status));
    }
    slot.outcome = outcome::kHandled;
    // Pub/Sub reads only the status, so that is all that is answered and stored; a 2xx it
    // would nack (203/205/206) becomes a 200.
    return pubsub::PushResponse{.status = pubsub::is_ack(status) ? status : 200};
  };

  pubsub::IdempotentOptions options{
      .backend = deps.backend,
      .key = make_key_function(config.key, config.key_prefix),
      .lease = config.lease,
      .heartbeat = config.heartbeat,
      .wait_for = config.wait_for,
      .parse = {.max_body_bytes = config.max_body},
      .authenticate = deps.authenticate,
  };
  auto wrapped = pubsub::idempotent_response(std::move(options), std::move(forward));
  return [wrapped = std::move(wrapped), metrics](const pubsub::PushRequest& request) {
    in_flight = InFlight{.request = &request};
    pubsub::PushResponse response;
    try {
      response = wrapped(request);
    } catch (...) {
      in_flight = {};
      metrics->count(outcome::kError);
      throw;
    }
    const InFlight seen = in_flight;
    in_flight = {};
    metrics->count(seen.upstream_called && !seen.outcome.empty()
                       ? seen.outcome
                       : outcome_without_upstream(response));
    return response;
  };
}

}  // namespace idempotency::gateway
