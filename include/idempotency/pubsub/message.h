// Pub/Sub push parsing: one function turns an HTTP push request into a decoded message.
//
//   auto parsed = idempotency::pubsub::parse_push(request);
//   if (auto* error = std::get_if<idempotency::pubsub::ParseError>(&parsed)) {
//     return respond(400, error->reason);  // one line, never customer data
//   }
//   auto& message = std::get<idempotency::pubsub::Message>(parsed);
//   auto key = idempotency::pubsub::default_key(message);  // messageId, else ce-id
//
// Four delivery forms are accepted, told apart in this order:
//  1. Any of the write-metadata headers `x-goog-pubsub-message-id`, `-publish-time`,
//     `-subscription-name`, `-ordering-key`: an unwrapped delivery; the raw body is the data.
//     Checked first because Eventarc never sends them, while an unwrapped delivery carries
//     its attributes as bare headers that may look like CloudEvents (`ce-id`, or a
//     `Content-Type` attribute of `application/cloudevents+json`).
//  2. `Content-Type: application/cloudevents+json`: a structured CloudEvent whose `data` is
//     MessagePublishedData (`{"message": {...}, "subscription": ...}`).
//  3. A `ce-specversion` or `ce-id` header: a binary-mode CloudEvent (Eventarc) whose body is
//     MessagePublishedData.
//  4. A JSON body whose `message` member is an object: the wrapped push envelope (camelCase or
//     snake_case field spellings). Anything else is an unwrapped delivery without metadata.
// An unwrapped delivery without write metadata whose data happens to be a JSON object with an
// object `message` member is indistinguishable from a wrapped one; set `ParseOptions::form`
// (or enable write metadata) when that can happen.
//
// Attributes of unwrapped deliveries arrive as plain headers that cannot be told apart from
// transport headers reliably, so `Message::attributes` stays empty for that form; every
// request header is kept on the message (`Message::header`) for key functions to read.
//
// Malformed input is an expected outcome, so it is a value (`ParseError`), never an
// exception. The body size is checked before any parsing, and JSON nesting depth and value
// count are bounded, so memory stays proportional to the (bounded) body.
//
// Thread safety: pure functions over values; the types are plain values.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace idempotency::pubsub {

/// One HTTP request header, as received. Names compare case-insensitively.
struct Header {
  std::string name;
  std::string value;
};

/// find_header() returns the value of the first header named `name` (ASCII case-insensitive),
/// or nothing when there is none.
[[nodiscard]] std::optional<std::string_view> find_header(const std::vector<Header>& headers,
                                                          std::string_view name);

/// The parts of an HTTP push request the parser reads.
struct PushRequest {
  std::string method = "POST";
  /// The request target: path and query, e.g. "/push?token=1".
  std::string path = "/";
  std::vector<Header> headers;
  std::string body;

  /// header() returns the first header named `name` (case-insensitive), if any.
  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const {
    return find_header(headers, name);
  }
};

/// How the message was delivered.
enum class DeliveryForm {
  kWrapped,               ///< The default push envelope `{"message": {...}, ...}`.
  kUnwrapped,             ///< Payload unwrapping: the body is the data, metadata in headers.
  kCloudEventBinary,      ///< Eventarc, binary mode: `ce-*` headers, MessagePublishedData body.
  kCloudEventStructured,  ///< `application/cloudevents+json`; `data` is MessagePublishedData.
};

/// to_string() names a delivery form for log lines ("wrapped", "unwrapped", ...).
[[nodiscard]] std::string_view to_string(DeliveryForm form) noexcept;

/// A decoded Pub/Sub message. Every field but `form`, `data` and `headers` is customer or
/// delivery metadata that may be absent; absent and JSON `null` fields are left empty.
struct Message {
  DeliveryForm form = DeliveryForm::kWrapped;
  /// messageId (or message_id) from the body; `x-goog-pubsub-message-id` when unwrapped.
  std::optional<std::string> message_id;
  /// publishTime (or publish_time), RFC 3339 text as sent; not validated.
  std::optional<std::string> publish_time;
  /// The message data, base64-decoded; the raw body when unwrapped. Empty when absent, and
  /// when parsed with `ParseOptions::decode_data` false.
  std::string data;
  /// The message attributes (empty for unwrapped deliveries: see the file comment).
  std::map<std::string, std::string> attributes;
  std::optional<std::string> ordering_key;
  /// 1 + nacks + deadline expiries; sent only when the subscription has a dead-letter policy.
  std::optional<int> delivery_attempt;
  /// The full subscription name, `projects/P/subscriptions/S`.
  std::optional<std::string> subscription;
  /// The CloudEvent id (`ce-id` header, or `id` when structured); CloudEvent forms only.
  std::optional<std::string> cloud_event_id;
  /// A copy of every request header, for key functions that read `header:NAME`.
  std::vector<Header> headers;

  /// header() returns the first request header named `name` (case-insensitive), if any.
  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const {
    return find_header(headers, name);
  }
};

/// default_key() returns the default idempotency key: the message id from the body, else
/// (only when the body has none) the CloudEvent id; nothing when neither is present or both
/// are empty, and the caller must then fail closed.
[[nodiscard]] std::optional<std::string> default_key(const Message& message);

/// What was wrong with a request, coarsely; every kind maps to HTTP 400 except
/// `kMethodNotAllowed` (405) and `kBodyTooLarge` (413) where a server wants finer statuses.
enum class ParseErrorKind {
  kMethodNotAllowed,   ///< Not a POST.
  kBodyTooLarge,       ///< Body over `ParseOptions::max_body_bytes`; nothing was parsed.
  kMalformedJson,      ///< Not JSON, or nested / sized beyond the parser's bounds.
  kMissingField,       ///< A required member (such as `message` or `data`) is absent.
  kWrongType,          ///< A member has the wrong JSON type or an invalid value.
  kBadBase64,          ///< `message.data` is not valid base64.
  kTooManyAttributes,  ///< More than `ParseOptions::max_attributes` attributes.
};

/// A malformed request. `reason` is one line naming only fields and what is wrong with them;
/// it never contains a message id, data or attribute key or value.
struct ParseError {
  ParseErrorKind kind = ParseErrorKind::kMalformedJson;
  std::string reason;
};

/// Options for parse_push(), meant to be filled with designated initializers.
struct ParseOptions {
  /// Requests with a larger body are refused before parsing. Pub/Sub messages are up to 10 MB
  /// of data, which base64 in a wrapped envelope or CloudEvent turns into ~13.4 MB: 16 MiB
  /// admits the largest legal message in every delivery form.
  std::size_t max_body_bytes = std::size_t{16} * 1024 * 1024;
  /// Messages with more attributes are refused. Pub/Sub allows at most 100.
  std::size_t max_attributes = 100;
  /// Skips detection and requires this form, when set.
  std::optional<DeliveryForm> form;
  /// Fills `Message::data` (decoded, or the unwrapped body). When false, `data` is only checked
  /// (data that is not valid base64 is refused all the same) and `Message::data` stays empty:
  /// for a proxy that forwards the body as it came, such as the gateway.
  bool decode_data = true;
};

/// parse_push() decodes a push request into a Message, or says in one line why it cannot.
[[nodiscard]] std::variant<Message, ParseError> parse_push(const PushRequest& request,
                                                           const ParseOptions& options = {});

}  // namespace idempotency::pubsub
