// parse_push(): telling the delivery forms apart and reading MessagePublishedData.
//
// Every reason written here is built from literals, field names and option values only:
// no value read from the request ever reaches a ParseError.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "base64.h"
#include "bounded_json.h"
#include "default_key_text.h"
#include "idempotency/detail/ascii.h"
#include "idempotency/detail/field_syntax.h"
#include "idempotency/pubsub/message.h"
#include "parse_into.h"

namespace idempotency::pubsub {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::key_value_pair;
using simdjson::dom::object;

constexpr std::string_view kStructuredContentType = "application/cloudevents+json";
constexpr std::string_view kMessageIdHeader = "x-goog-pubsub-message-id";
constexpr std::string_view kPublishTimeHeader = "x-goog-pubsub-publish-time";
constexpr std::string_view kSubscriptionHeader = "x-goog-pubsub-subscription-name";
constexpr std::string_view kOrderingKeyHeader = "x-goog-pubsub-ordering-key";
constexpr std::string_view kContentType = "content-type";
constexpr std::string_view kCeSpecVersion = "ce-specversion";
constexpr std::string_view kCeId = "ce-id";

ParseError fail(ParseErrorKind kind, std::string reason) { return {kind, std::move(reason)}; }

std::optional<std::string> header_value(const PushRequest& request, std::string_view name) {
  auto value = request.header(name);
  if (!value) return std::nullopt;
  return std::string(idempotency::detail::trim_ows(*value));
}

// An unwrapped delivery's metadata header, into `out`; an error when it comes twice with two
// values. Pub/Sub sends each attribute as a header named by its key, so an attribute named
// `x-goog-pubsub-message-id` would come beside the real one, and which is first is Google's
// order: taking either could dedupe one message against another's id.
std::optional<ParseError> metadata_header(const PushRequest& request, std::string_view name,
                                          std::optional<std::string>& out) {
  out = header_value(request, name);
  if (!out) return std::nullopt;
  for (const Header& h : request.headers) {
    // In the spelling with underscores too, which a CGI-style app behind the gateway reads as
    // this header (see same_field_name()).
    if (idempotency::detail::same_field_name(h.name, name) &&
        idempotency::detail::trim_ows(h.value) != *out) {
      return fail(ParseErrorKind::kWrongType, std::string(name) + " is sent twice with two values");
    }
  }
  return std::nullopt;
}

// Whether the media type of a Content-Type value (without parameters) is `type`, in any case.
bool is_media_type(std::string_view value, std::string_view type) {
  return idempotency::detail::iequals_ascii(
      idempotency::detail::trim_ows(value.substr(0, value.find(';'))), type);
}

// What the headers say of the delivery form, in one pass over them rather than one a name:
// seven names are asked about on every push.
struct FormHeaders {
  bool write_metadata = false;                   // an x-goog-pubsub-* metadata header
  std::optional<std::string_view> content_type;  // the first Content-Type
  bool cloud_event = false;                      // ce-specversion or ce-id
};

FormHeaders form_headers(const PushRequest& request) {
  using idempotency::detail::iequals_ascii;
  static_assert(kPublishTimeHeader.size() == kOrderingKeyHeader.size());
  FormHeaders found;
  for (const Header& header : request.headers) {
    const std::string_view name = header.name;
    // Told apart by length first: most headers are none of these, and cost one switch.
    switch (name.size()) {
      case kMessageIdHeader.size():
        found.write_metadata = found.write_metadata || iequals_ascii(name, kMessageIdHeader);
        break;
      case kPublishTimeHeader.size():
        found.write_metadata = found.write_metadata || iequals_ascii(name, kPublishTimeHeader) ||
                               iequals_ascii(name, kOrderingKeyHeader);
        break;
      case kSubscriptionHeader.size():
        found.write_metadata = found.write_metadata || iequals_ascii(name, kSubscriptionHeader);
        break;
      case kContentType.size():
        if (!found.content_type && iequals_ascii(name, kContentType)) {
          found.content_type = header.value;
        }
        break;
      case kCeSpecVersion.size():
      case kCeId.size():
        found.cloud_event =
            found.cloud_event || iequals_ascii(name, kCeSpecVersion) || iequals_ascii(name, kCeId);
        break;
      default:
        break;
    }
  }
  return found;
}

// Only a body that starts like an object can be an envelope; skip parsing anything else.
bool may_be_json_object(std::string_view body) {
  const auto first = body.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && body[first] == '{';
}

// The member spelled `camel` or else `snake` (pass the same twice for one spelling), with the
// spelling found; JSON null counts as absent. A name given twice means its last value, as in
// nlohmann-json and the parsers an app behind the gateway is likely to use: the key read here
// must be the one the app reads.
struct Member {
  std::optional<element> value;
  std::string_view name;
};

// A member a reader wants, by its two spellings (the same twice for one).
struct Spelling {
  std::string_view camel;
  std::string_view snake;
};

// Whether member name `key` is `name`: the sizes compared inline, then the bytes a word at a
// time for the names wanted here (4 bytes or more), where std::string_view's == calls memcmp.
[[gnu::always_inline]] inline bool same_key(std::string_view key, std::string_view name) noexcept {
  if (key.size() != name.size()) return false;
  if (name.size() < sizeof(std::uint32_t)) return key == name;
  return idempotency::detail::ascii_words::equal(
      key, name, [](std::uint64_t x, std::uint64_t y) { return x == y; });
}

// The member of each spelling in `wanted` (as Member says), in one pass over the object's
// fields instead of one pass a name: an envelope's reader wants eight members of two objects.
template <std::size_t N>
std::array<Member, N> members(object fields, const std::array<Spelling, N>& wanted) {
  std::array<Member, N> found;  // each camel-cased member's last value, so far
  for (std::size_t i = 0; i < N; ++i) found[i].name = wanted[i].camel;
  std::array<std::optional<element>, N> snake{};
  for (key_value_pair field : fields) {
    for (std::size_t i = 0; i < N; ++i) {
      if (same_key(field.key, wanted[i].camel)) {
        found[i].value = field.value;
        break;
      }
      if (same_key(field.key, wanted[i].snake)) {
        snake[i] = field.value;
        break;
      }
    }
  }
  for (std::size_t i = 0; i < N; ++i) {
    if (found[i].value && !found[i].value->is_null()) continue;
    found[i].value.reset();
    if (snake[i] && !snake[i]->is_null()) found[i] = {snake[i], wanted[i].snake};
  }
  return found;
}

// The one member spelled `camel` or else `snake`.
Member member(object fields, std::string_view camel, std::string_view snake) {
  return members<1>(fields, {{{camel, snake}}})[0];
}

bool has_member(object fields, std::string_view name) {
  return std::any_of(fields.begin(), fields.end(),
                     [&](key_value_pair field) { return field.key == name; });
}

std::string path(std::string_view prefix, std::string_view name) {
  return std::string(prefix) + std::string(name);
}

// `within` names the member's object after `prefix` ("message.", say), for the reason only.
std::optional<ParseError> read_string(const Member& m, std::string_view prefix,
                                      std::string_view within, std::optional<std::string>& out) {
  if (!m.value) return std::nullopt;
  std::string_view text;
  if (m.value->get_string().get(text) != simdjson::SUCCESS) {
    return fail(ParseErrorKind::kWrongType,
                path(prefix, within) + std::string(m.name) + " must be a string");
  }
  out.emplace(text);
  return std::nullopt;
}

std::optional<ParseError> read_delivery_attempt(const Member& m, std::string_view prefix,
                                                std::optional<int>& out) {
  if (!m.value) return std::nullopt;
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<int>::max());
  // A non-negative integer (1.0 is a double and refused; -0 is the integer 0).
  std::uint64_t attempt = 0;
  const auto type = m.value->type();
  if ((type == element_type::INT64 || type == element_type::UINT64) &&
      m.value->get_uint64().get(attempt) == simdjson::SUCCESS && attempt <= kMax) {
    out = static_cast<int>(attempt);
    return std::nullopt;
  }
  return fail(ParseErrorKind::kWrongType,
              path(prefix, m.name) + " must be a non-negative integer that fits an int");
}

std::optional<ParseError> read_attributes(const Member& m, std::string_view prefix,
                                          const ParseOptions& options, Message& out) {
  if (!m.value) return std::nullopt;
  // Named only in a reason: building the name for every message cost an allocation.
  const auto name = [&] { return path(prefix, "message.attributes"); };
  object attributes;
  if (m.value->get_object().get(attributes) != simdjson::SUCCESS) {
    return fail(ParseErrorKind::kWrongType, name() + " must be an object");
  }
  // Commonly every value is a string and there are no more fields than the limit: each name's
  // last value goes straight into the map, which keeps it so, without the judging below.
  if (attributes.size() <= options.max_attributes) {
    bool all_strings = true;
    for (key_value_pair field : attributes) {
      std::string_view text;
      if (field.value.get_string().get(text) != simdjson::SUCCESS) {
        all_strings = false;
        break;
      }
      out.attributes.insert_or_assign(std::string(field.key), std::string(text));
    }
    if (all_strings) return std::nullopt;
    out.attributes.clear();
  }
  // Each name once, its last value, in name order: what a JSON object means.
  std::map<std::string_view, element> last;
  for (key_value_pair field : attributes) last.insert_or_assign(field.key, field.value);
  if (last.size() > options.max_attributes) {
    return fail(ParseErrorKind::kTooManyAttributes,
                name() + " has more than " + std::to_string(options.max_attributes) + " entries");
  }
  for (const auto& [key, value] : last) {
    std::string_view text;
    if (value.get_string().get(text) != simdjson::SUCCESS) {
      return fail(ParseErrorKind::kWrongType, name() + " values must be strings");
    }
    out.attributes.emplace(std::string(key), std::string(text));
  }
  return std::nullopt;
}

std::optional<ParseError> read_data(const Member& m, std::string_view prefix,
                                    const ParseOptions& options, Message& out) {
  if (!m.value) return std::nullopt;
  std::string_view text;
  if (m.value->get_string().get(text) != simdjson::SUCCESS) {
    return fail(ParseErrorKind::kWrongType, path(prefix, "message.data") + " must be a string");
  }
  if (!options.decode_data) {
    if (internal::base64_valid(text)) return std::nullopt;
  } else if (auto decoded = internal::base64_decode(text)) {
    out.data = std::move(*decoded);
    return std::nullopt;
  }
  return fail(ParseErrorKind::kBadBase64, path(prefix, "message.data") + " is not valid base64");
}

// MessagePublishedData's members: `{"message": {...}, "subscription": ..., "deliveryAttempt": N}`.
using PublishedMembers = std::array<Member, 3>;

PublishedMembers published_members(object root) {
  return members<3>(root, {{{"message", "message"},
                            {"subscription", "subscription"},
                            {"deliveryAttempt", "delivery_attempt"}}});
}

// Reads MessagePublishedData by its members (published_members()): the wrapped envelope, a
// binary CloudEvent's body, a structured CloudEvent's `data`. `prefix` places field names in
// reasons ("" for a body, "data." inside a structured CloudEvent).
std::optional<ParseError> read_published(const PublishedMembers& published, std::string_view prefix,
                                         const ParseOptions& options, Message& out) {
  const auto& [message, subscription, delivery_attempt] = published;
  if (!message.value) {
    return fail(ParseErrorKind::kMissingField, path(prefix, "message is missing"));
  }
  object m;
  if (message.value->get_object().get(m) != simdjson::SUCCESS) {
    return fail(ParseErrorKind::kWrongType, path(prefix, "message must be an object"));
  }
  // Field names in reasons are built only for a reason: each would cost every message a string.
  constexpr std::string_view in_message = "message.";
  const auto [message_id, publish_time, ordering_key, attributes, data] =
      members<5>(m, {{{"messageId", "message_id"},
                      {"publishTime", "publish_time"},
                      {"orderingKey", "ordering_key"},
                      {"attributes", "attributes"},
                      {"data", "data"}}});
  if (auto e = read_string(message_id, prefix, in_message, out.message_id)) return e;
  if (auto e = read_string(publish_time, prefix, in_message, out.publish_time)) return e;
  if (auto e = read_string(ordering_key, prefix, in_message, out.ordering_key)) return e;
  if (auto e = read_attributes(attributes, prefix, options, out)) return e;
  if (auto e = read_data(data, prefix, options, out)) return e;
  if (auto e = read_string(subscription, prefix, "", out.subscription)) return e;
  return read_delivery_attempt(delivery_attempt, prefix, out.delivery_attempt);
}

// Reads MessagePublishedData, `doc` (read_published()).
std::optional<ParseError> read_message_published_data(element doc, std::string_view prefix,
                                                      const ParseOptions& options, Message& out) {
  object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS) {
    const std::string what =
        prefix.empty() ? "body" : std::string(prefix.substr(0, prefix.size() - 1));
    return fail(ParseErrorKind::kWrongType, what + " must be a JSON object");
  }
  return read_published(published_members(root), prefix, options, out);
}

std::variant<element, ParseError> parse_json(internal::JsonDocument& json, std::string_view text,
                                             std::string_view what) {
  auto parsed = json.parse(text);
  if (auto* failure = std::get_if<internal::JsonFailure>(&parsed)) {
    return fail(ParseErrorKind::kMalformedJson, internal::json_failure_reason(*failure, what));
  }
  return std::get<element>(parsed);
}

std::optional<ParseError> read_structured(element doc, const ParseOptions& options, Message& out) {
  object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS) {
    return fail(ParseErrorKind::kWrongType, "body must be a JSON object");
  }
  if (auto e = read_string(member(root, "id", "id"), "", "", out.cloud_event_id)) return e;
  Member data = member(root, "data", "data");
  if (!data.value) {
    if (has_member(root, "data_base64")) {
      return fail(ParseErrorKind::kWrongType,
                  "data_base64 is not supported, data must be an object");
    }
    return fail(ParseErrorKind::kMissingField, "data is missing");
  }
  return read_message_published_data(*data.value, "data.", options, out);
}

// Tells the forms apart in the order the header documents. `wrapped` receives the body's
// members when detection had to parse it, so it is parsed and walked once.
DeliveryForm detect(const PushRequest& request, internal::JsonDocument& json,
                    std::optional<PublishedMembers>& wrapped) {
  // First: Eventarc never sends x-goog-pubsub-* headers, while an unwrapped delivery carries
  // its message's attributes as bare headers, which may look like CloudEvents (ce-id, or a
  // Content-Type attribute of application/cloudevents+json).
  const FormHeaders headers = form_headers(request);
  if (headers.write_metadata) return DeliveryForm::kUnwrapped;
  if (headers.content_type && is_media_type(*headers.content_type, kStructuredContentType)) {
    return DeliveryForm::kCloudEventStructured;
  }
  if (headers.cloud_event) return DeliveryForm::kCloudEventBinary;
  if (may_be_json_object(request.body)) {
    auto parsed = json.parse(request.body);
    object root;
    if (auto* j = std::get_if<element>(&parsed);
        j && j->get_object().get(root) == simdjson::SUCCESS) {
      const PublishedMembers published = published_members(root);
      const Member& message = published[0];
      if (message.value && message.value->is_object()) {
        wrapped = published;
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

std::string_view internal::default_key_text(const Message& message) noexcept {
  if (message.message_id && !message.message_id->empty()) return *message.message_id;
  if (message.cloud_event_id && !message.cloud_event_id->empty()) return *message.cloud_event_id;
  return {};
}

std::optional<std::string> default_key(const Message& message) {
  const std::string_view text = internal::default_key_text(message);
  if (text.empty()) return std::nullopt;
  return std::string(text);
}

std::optional<ParseError> internal::parse_push_into(const PushRequest& request,
                                                    const ParseOptions& options, Message& out) {
  if (std::string_view(request.method) != "POST") {
    return fail(ParseErrorKind::kMethodNotAllowed, "method must be POST");
  }
  // Before anything looks at the body: nothing is allocated for an oversized one.
  if (request.body.size() > options.max_body_bytes) {
    return fail(ParseErrorKind::kBodyTooLarge,
                "body is larger than " + std::to_string(options.max_body_bytes) + " bytes");
  }

  internal::JsonDocument json;
  std::optional<PublishedMembers> wrapped;  // the body's members, when detect() read them
  out.form = options.form ? *options.form : detect(request, json, wrapped);

  if (out.form == DeliveryForm::kUnwrapped) {
    if (options.decode_data) out.data = request.body;
    for (auto [name, field] : {std::pair{kMessageIdHeader, &out.message_id},
                               std::pair{kPublishTimeHeader, &out.publish_time},
                               std::pair{kSubscriptionHeader, &out.subscription},
                               std::pair{kOrderingKeyHeader, &out.ordering_key}}) {
      if (auto error = metadata_header(request, name, *field)) return error;
    }
  } else if (wrapped) {
    if (auto error = read_published(*wrapped, "", options, out)) return error;
  } else {
    auto parsed = parse_json(json, request.body, "body");
    if (auto* error = std::get_if<ParseError>(&parsed)) return std::move(*error);
    const element doc = std::get<element>(parsed);
    std::optional<ParseError> error;
    switch (out.form) {
      case DeliveryForm::kCloudEventStructured:
        error = read_structured(doc, options, out);
        break;
      case DeliveryForm::kCloudEventBinary:
        out.cloud_event_id = header_value(request, kCeId);
        error = read_message_published_data(doc, "", options, out);
        break;
      default:
        error = read_message_published_data(doc, "", options, out);
        break;
    }
    if (error) return error;
  }
  out.headers = request.headers;
  return std::nullopt;
}

std::variant<Message, ParseError> parse_push(const PushRequest& request,
                                             const ParseOptions& options) {
  Message out;
  if (auto error = internal::parse_push_into(request, options, out)) return std::move(*error);
  return out;
}

}  // namespace idempotency::pubsub
