// The three delivery forms: one message, on one subscription, at one attempt, as the HTTP
// request Pub/Sub (or Eventarc) would send.
//
// Thread safety: pure functions.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "idempotency/pubsub/message.h"
#include "message_source.h"
#include "options.h"

namespace idempotency::push_sim {

/// What a request carries besides the message.
struct DeliveryContext {
  std::string subscription;             ///< projects/P/subscriptions/S
  std::string topic;                    ///< projects/P/topics/T (CloudEvents ce-source)
  std::string path = "/";               ///< The endpoint's request target.
  std::optional<int> delivery_attempt;  ///< Set when the subscription has a dead-letter policy.
  std::optional<std::string> bearer;    ///< An OIDC token, sent as Authorization: Bearer.
};

/// rfc3339() formats a time as Pub/Sub's publishTime: UTC, milliseconds, "Z".
[[nodiscard]] std::string rfc3339(std::chrono::system_clock::time_point t);

/// wrapped_message() is the `message` object of a push envelope (both messageId spellings,
/// both publishTime spellings; data base64, attributes and orderingKey when present: an
/// attributes-only message, whose data is empty, has no "data" member, as Pub/Sub sends it).
[[nodiscard]] nlohmann::json wrapped_message(const SimMessage& m);

/// build_request() is the POST for `m` in `form`:
///  - kWrapped: JSON {"message": ..., "subscription": ..., "deliveryAttempt": N when set};
///  - kUnwrapped: the raw data as body, x-goog-pubsub-message-id / -publish-time /
///    -subscription-name / -ordering-key headers and one header per attribute;
///  - kCloudEvent: ce-id (the messageId), ce-source, ce-specversion 1.0, ce-type, ce-time
///    headers and a MessagePublishedData JSON body.
[[nodiscard]] pubsub::PushRequest build_request(Form form, const SimMessage& m,
                                                const DeliveryContext& context);

}  // namespace idempotency::push_sim
