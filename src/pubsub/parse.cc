// parse_push(): telling the delivery forms apart and reading MessagePublishedData.
//
// Every reason written here is built from literals, field names and option values only:
// no value read from the request ever reaches a ParseError.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "base64.h"
#include "bounded_json.h"
#include "idempotency/pubsub/message.h"

namespace idempotency::pubsub {
namespace {

using nlohmann::json;

constexpr std::string_view kStructuredContentType = "application/cloudevents+json";
constexpr std::string_view kMessageIdHeader = "x-goog-pubsub-message-id";
constexpr std::string_view kPublishTimeHeader = "x-goog-pubsub-publish-time";
constexpr std::string_view kSubscriptionHeader = "x-goog-pubsub-subscription-name";
constexpr std::string_view kOrderingKeyHeader = "x-goog-pubsub-ordering-key";

ParseError fail(ParseErrorKind kind, std::string reason) { return {kind, std::move(reason)}; }

bool is_ows(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
  return s;
}

std::optional<std::string> header_value(const PushRequest& request, std::string_view name) {
  auto value = request.header(name);
  if (!value) return std::nullopt;
  return std::string(trim(*value));
}

// The media type of Content-Type, lower-cased and without parameters.
std::string media_type(const PushRequest& request) {
  auto value = request.header("content-type");
  if (!value) return {};
  std::string_view type = trim(value->substr(0, value->find(';')));
  std::string lower(type);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](char c) {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  });
  return lower;
}

bool has_write_metadata(const PushRequest& request) {
  for (std::string_view name :
       {kMessageIdHeader, kPublishTimeHeader, kSubscriptionHeader, kOrderingKeyHeader}) {
    if (request.header(name)) return true;
  }
  return false;
}

// Only a body that starts like an object can be an envelope; skip parsing anything else.
bool may_be_json_object(std::string_view body) {
  const auto first = body.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && body[first] == '{';
}

// The member spelled `camel` or else `snake` (pass the same twice for one spelling), with the
// spelling found; JSON null counts as absent.
struct Member {
  const json* value = nullptr;
  std::string_view name;
};

Member member(const json& object, std::string_view camel, std::string_view snake) {
  for (std::string_view name : {camel, snake}) {
    auto it = object.find(name);
    if (it != object.end() && !it->is_null()) return {&*it, name};
  }
  return {nullptr, camel};
}

std::string path(std::string_view prefix, std::string_view name) {
  return std::string(prefix) + std::string(name);
}

std::optional<ParseError> read_string(const json& object, std::string_view camel,
                                      std::string_view snake, std::string_view prefix,
                                      std::optional<std::string>& out) {
  Member m = member(object, camel, snake);
  if (!m.value) return std::nullopt;
  if (!m.value->is_string()) {
    return fail(ParseErrorKind::kWrongType, path(prefix, m.name) + " must be a string");
  }
  out = m.value->get_ref<const std::string&>();
  return std::nullopt;
}

std::optional<ParseError> read_delivery_attempt(const json& object, std::string_view prefix,
                                                std::optional<int>& out) {
  Member m = member(object, "deliveryAttempt", "delivery_attempt");
  if (!m.value) return std::nullopt;
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<int>::max());
  if (m.value->is_number_unsigned() && m.value->get<std::uint64_t>() <= kMax) {
    out = static_cast<int>(m.value->get<std::uint64_t>());
    return std::nullopt;
  }
  return fail(ParseErrorKind::kWrongType,
              path(prefix, m.name) + " must be a non-negative integer that fits an int");
}

std::optional<ParseError> read_attributes(const json& message, std::string_view prefix,
                                          const ParseOptions& options, Message& out) {
  Member m = member(message, "attributes", "attributes");
  if (!m.value) return std::nullopt;
  const std::string name = path(prefix, "message.attributes");
  if (!m.value->is_object()) return fail(ParseErrorKind::kWrongType, name + " must be an object");
  if (m.value->size() > options.max_attributes) {
    return fail(ParseErrorKind::kTooManyAttributes,
                name + " has more than " + std::to_string(options.max_attributes) + " entries");
  }
  for (const auto& [key, value] : m.value->items()) {
    if (!value.is_string()) {
      return fail(ParseErrorKind::kWrongType, name + " values must be strings");
    }
    out.attributes.emplace(key, value.get_ref<const std::string&>());
  }
  return std::nullopt;
}

std::optional<ParseError> read_data(const json& message, std::string_view prefix, Message& out) {
  Member m = member(message, "data", "data");
  if (!m.value) return std::nullopt;
  const std::string name = path(prefix, "message.data");
  if (!m.value->is_string()) return fail(ParseErrorKind::kWrongType, name + " must be a string");
  auto decoded = internal::base64_decode(m.value->get_ref<const std::string&>());
  if (!decoded) return fail(ParseErrorKind::kBadBase64, name + " is not valid base64");
  out.data = std::move(*decoded);
  return std::nullopt;
}

// Reads MessagePublishedData, `{"message": {...}, "subscription": ..., "deliveryAttempt": N}`:
// the wrapped envelope, a binary CloudEvent's body, a structured CloudEvent's `data`. `prefix`
// places field names in reasons ("" for a body, "data." inside a structured CloudEvent).
std::optional<ParseError> read_message_published_data(const json& doc, std::string_view prefix,
                                                      const ParseOptions& options, Message& out) {
  if (!doc.is_object()) {
    const std::string what =
        prefix.empty() ? "body" : std::string(prefix.substr(0, prefix.size() - 1));
    return fail(ParseErrorKind::kWrongType, what + " must be a JSON object");
  }
  Member message = member(doc, "message", "message");
  if (!message.value) {
    return fail(ParseErrorKind::kMissingField, path(prefix, "message is missing"));
  }
  if (!message.value->is_object()) {
    return fail(ParseErrorKind::kWrongType, path(prefix, "message must be an object"));
  }
  const std::string in_message = path(prefix, "message.");
  const json& m = *message.value;
  if (auto e = read_string(m, "messageId", "message_id", in_message, out.message_id)) return e;
  if (auto e = read_string(m, "publishTime", "publish_time", in_message, out.publish_time)) {
    return e;
  }
  if (auto e = read_string(m, "orderingKey", "ordering_key", in_message, out.ordering_key)) {
    return e;
  }
  if (auto e = read_attributes(m, prefix, options, out)) return e;
  if (auto e = read_data(m, prefix, out)) return e;
  if (auto e = read_string(doc, "subscription", "subscription", prefix, out.subscription)) {
    return e;
  }
  return read_delivery_attempt(doc, prefix, out.delivery_attempt);
}

std::variant<json, ParseError> parse_json(std::string_view text, std::string_view what) {
  auto parsed = internal::parse_bounded_json(text);
  if (auto* failure = std::get_if<internal::JsonFailure>(&parsed)) {
    return fail(ParseErrorKind::kMalformedJson, internal::json_failure_reason(*failure, what));
  }
  return std::move(std::get<json>(parsed));
}

std::optional<ParseError> read_structured(const json& doc, const ParseOptions& options,
                                          Message& out) {
  if (!doc.is_object()) return fail(ParseErrorKind::kWrongType, "body must be a JSON object");
  if (auto e = read_string(doc, "id", "id", "", out.cloud_event_id)) return e;
  Member data = member(doc, "data", "data");
  if (!data.value) {
    if (doc.contains("data_base64")) {
      return fail(ParseErrorKind::kWrongType,
                  "data_base64 is not supported, data must be an object");
    }
    return fail(ParseErrorKind::kMissingField, "data is missing");
  }
  return read_message_published_data(*data.value, "data.", options, out);
}

// Tells the forms apart in the order the header documents. `doc` receives the parsed body
// when detection had to parse it, so it is parsed once.
DeliveryForm detect(const PushRequest& request, std::optional<json>& doc) {
  // First: Eventarc never sends x-goog-pubsub-* headers, while an unwrapped delivery carries
  // its message's attributes as bare headers, which may look like CloudEvents (ce-id, or a
  // Content-Type attribute of application/cloudevents+json).
  if (has_write_metadata(request)) return DeliveryForm::kUnwrapped;
  if (media_type(request) == kStructuredContentType) return DeliveryForm::kCloudEventStructured;
  if (request.header("ce-specversion") || request.header("ce-id")) {
    return DeliveryForm::kCloudEventBinary;
  }
  if (may_be_json_object(request.body)) {
    auto parsed = internal::parse_bounded_json(request.body);
    if (auto* j = std::get_if<json>(&parsed)) {
      auto it = j->find("message");
      if (j->is_object() && it != j->end() && it->is_object()) {
        doc = std::move(*j);
        return DeliveryForm::kWrapped;
      }
    }
  }
  return DeliveryForm::kUnwrapped;
}

}  // namespace

std::string_view to_string(DeliveryForm form) noexcept {
  switch (form) {
    case DeliveryForm::kWrapped:
      return "wrapped";
    case DeliveryForm::kUnwrapped:
      return "unwrapped";
    case DeliveryForm::kCloudEventBinary:
      return "cloudevent-binary";
    case DeliveryForm::kCloudEventStructured:
      return "cloudevent-structured";
  }
  return "unknown";
}

std::optional<std::string> default_key(const Message& message) {
  if (message.message_id && !message.message_id->empty()) return message.message_id;
  if (message.cloud_event_id && !message.cloud_event_id->empty()) return message.cloud_event_id;
  return std::nullopt;
}

std::variant<Message, ParseError> parse_push(const PushRequest& request,
                                             const ParseOptions& options) {
  if (request.method != "POST") {
    return fail(ParseErrorKind::kMethodNotAllowed, "method must be POST");
  }
  // Before anything looks at the body: nothing is allocated for an oversized one.
  if (request.body.size() > options.max_body_bytes) {
    return fail(ParseErrorKind::kBodyTooLarge,
                "body is larger than " + std::to_string(options.max_body_bytes) + " bytes");
  }

  std::optional<json> doc;
  Message out;
  out.form = options.form ? *options.form : detect(request, doc);

  if (out.form == DeliveryForm::kUnwrapped) {
    out.data = request.body;
    out.message_id = header_value(request, kMessageIdHeader);
    out.publish_time = header_value(request, kPublishTimeHeader);
    out.subscription = header_value(request, kSubscriptionHeader);
    out.ordering_key = header_value(request, kOrderingKeyHeader);
  } else {
    if (!doc) {
      auto parsed = parse_json(request.body, "body");
      if (auto* error = std::get_if<ParseError>(&parsed)) return std::move(*error);
      doc = std::move(std::get<json>(parsed));
    }
    std::optional<ParseError> error;
    switch (out.form) {
      case DeliveryForm::kCloudEventStructured:
        error = read_structured(*doc, options, out);
        break;
      case DeliveryForm::kCloudEventBinary:
        out.cloud_event_id = header_value(request, "ce-id");
        error = read_message_published_data(*doc, "", options, out);
        break;
      default:
        error = read_message_published_data(*doc, "", options, out);
        break;
    }
    if (error) return std::move(*error);
  }
  out.headers = request.headers;
  return out;
}

}  // namespace idempotency::pubsub
