// push_response(): the push status table, the one place an outcome becomes an HTTP status.
#include "idempotency/pubsub/outcome.h"

#include <algorithm>
#include <string>
#include <utility>

namespace idempotency::pubsub {
namespace {

// A nack's answer: one line of text, so a person reading Pub/Sub's push logs sees why.
PushResponse text(int status, std::string_view line) {
  PushResponse r;
  r.status = status;
  r.headers.push_back({"Content-Type", "text/plain; charset=utf-8"});
  r.body.reserve(line.size() + 1);
  r.body.append(line);
  r.body.push_back('\n');
  return r;
}

// The handler's response as the final answer. 102 (Processing) is in Pub/Sub's ack set, but an
// HTTP server cannot answer with a 1xx: it would go out as a 500, a nack, on every delivery
// that replays it. 200 acks the same.
PushResponse final_answer(PushResponse r) {
  if (r.status == 102) r.status = 200;
  return r;
}

}  // namespace

PushResponse push_response(DeliveryOutcome outcome, ResponseFacts facts) {
  switch (outcome) {
    case DeliveryOutcome::kHandled:
    case DeliveryOutcome::kJoined:
    case DeliveryOutcome::kUnguarded:
      if (facts.response) return final_answer(std::move(*facts.response));
      return text(200, "ok");
    case DeliveryOutcome::kReplayed: {
      PushResponse r =
          facts.response ? final_answer(std::move(*facts.response)) : PushResponse{.status = 204};
      r.headers.push_back({"Idempotency-Replayed", "true"});
      return r;
    }
    case DeliveryOutcome::kDuplicate:
      // Nothing to say but "done": no body, so no Content-Type.
      return PushResponse{.status = 204};
    case DeliveryOutcome::kContention: {
      PushResponse r = text(503, "in progress elsewhere; retry later");
      const auto seconds = std::clamp<std::chrono::seconds::rep>(facts.retry_after.count(), 1, 600);
      r.headers.push_back({"Retry-After", std::to_string(seconds)});
      return r;
    }
    case DeliveryOutcome::kHandlerNacked:
      // A handler cannot nack with a status Pub/Sub would take as an ack.
      return text(is_ack(facts.nack_status) ? 500 : facts.nack_status, facts.reason);
    case DeliveryOutcome::kHandlerFailed:
      return text(500, "handler failed");
    case DeliveryOutcome::kOutcomeUnknown:
      return text(503, "outcome unknown; retried once the lease lapses");
    case DeliveryOutcome::kStoreError:
      return text(503, "idempotency store unavailable; retry later");
    case DeliveryOutcome::kMalformed:
    case DeliveryOutcome::kNoKey:
      return text(400, facts.reason);
    case DeliveryOutcome::kUnauthenticated:
      return text(401, facts.reason);
  }
  return text(500, "handler failed");
}

}  // namespace idempotency::pubsub
