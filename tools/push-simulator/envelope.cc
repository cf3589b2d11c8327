#include "envelope.h"

#include <cstdio>
#include <ctime>

#include "codec.h"

namespace idempotency::push_sim {

std::string rfc3339(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  char millis[8];
  std::snprintf(millis, sizeof millis, ".%03dZ", static_cast<int>(ms % 1000));
  return std::string(text, n) + millis;
}

nlohmann::json wrapped_message(const SimMessage& m) {
  const std::string published = rfc3339(m.publish_time);
  nlohmann::json message{{"messageId", m.id},
                         {"message_id", m.id},
                         {"publishTime", published},
                         {"publish_time", published}};
  // Pub/Sub's JSON leaves an empty bytes field out: an attributes-only message has no "data".
  if (!m.data.empty()) message["data"] = base64(m.data);
  if (!m.attributes.empty()) message["attributes"] = m.attributes;
  if (!m.ordering_key.empty()) message["orderingKey"] = m.ordering_key;
  return message;
}

pubsub::PushRequest build_request(Form form, const SimMessage& m, const DeliveryContext& context) {
  pubsub::PushRequest r;
  r.method = "POST";
  r.path = context.path.empty() ? "/" : context.path;
  r.headers.push_back({"User-Agent", "APIs-Google; (pubsub-push-sim)"});
  if (context.bearer) r.headers.push_back({"Authorization", "Bearer " + *context.bearer});
  switch (form) {
    case Form::kWrapped: {
      nlohmann::json body{{"message", wrapped_message(m)}, {"subscription", context.subscription}};
      if (context.delivery_attempt) body["deliveryAttempt"] = *context.delivery_attempt;
      r.headers.push_back({"Content-Type", "application/json"});
      r.body = body.dump();
      break;
    }
    case Form::kUnwrapped: {
      r.headers.push_back({"Content-Type", "application/octet-stream"});
      r.headers.push_back({"x-goog-pubsub-message-id", m.id});
      r.headers.push_back({"x-goog-pubsub-publish-time", rfc3339(m.publish_time)});
      r.headers.push_back({"x-goog-pubsub-subscription-name", context.subscription});
      if (!m.ordering_key.empty()) {
        r.headers.push_back({"x-goog-pubsub-ordering-key", m.ordering_key});
      }
      for (const auto& [name, value] : m.attributes) r.headers.push_back({name, value});
      r.body = m.data;
      break;
    }
    case Form::kCloudEvent: {
      r.headers.push_back({"Content-Type", "application/json"});
      r.headers.push_back({"ce-id", m.id});
      r.headers.push_back({"ce-source", "//pubsub.googleapis.com/" + context.topic});
      r.headers.push_back({"ce-specversion", "1.0"});
      r.headers.push_back({"ce-type", "google.cloud.pubsub.topic.v1.messagePublished"});
      r.headers.push_back({"ce-time", rfc3339(m.publish_time)});
      r.body =
          nlohmann::json{{"message", wrapped_message(m)}, {"subscription", context.subscription}}
              .dump();
      break;
    }
  }
  return r;
}

}  // namespace idempotency::push_sim
