// push(): a wrapped push envelope as Pub/Sub sends it, for the wrapper's tests.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "idempotency/pubsub/message.h"
#include "support/base64.h"

namespace idempotency::pubsub::testing {

/// The subscription push() names unless told otherwise.
inline constexpr char kOrdersSubscription[] = "projects/p/subscriptions/orders";

/// push() builds the request Pub/Sub POSTs for one delivery of `message_id` (both id
/// spellings) with `attributes` (null: none), `delivery_attempt`, `data` and `subscription`.
inline PushRequest push(const std::string& message_id, const nlohmann::json& attributes = nullptr,
                        int delivery_attempt = 1, const std::string& data = "order",
                        const std::string& subscription = kOrdersSubscription) {
  nlohmann::json message = {{"messageId", message_id},
                            {"message_id", message_id},
                            {"publishTime", "2026-11-30T12:00:00.000Z"},
                            {"data", idempotency::testing::base64(data)}};
  if (!attributes.is_null()) message["attributes"] = attributes;
  nlohmann::json envelope = {
      {"message", message}, {"subscription", subscription}, {"deliveryAttempt", delivery_attempt}};
  PushRequest r;
  r.headers = {{"Content-Type", "application/json"}};
  r.body = envelope.dump();
  return r;
}

}  // namespace idempotency::pubsub::testing
