// The Datastore REST wire format, shared by the backend's files: values, timestamps, error
// replies classified for the retry loop, and records as entities. Internal to the datastore
// component.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "auth/http_client.h"
#include "idempotency/record.h"

namespace idempotency::datastore_detail {

/// The console's name for the default database; the API wants an empty databaseId instead and
/// refuses this one ("'(default)' is not allowed; use empty string").
inline constexpr std::string_view kDefaultDatabaseName = "(default)";

/// is_reserved_name() says whether Datastore reserves `s` (it matches __.*__).
[[nodiscard]] bool is_reserved_name(std::string_view s);

/// format_timestamp() writes `ms` as RFC 3339 UTC with milliseconds, clamped to the years a
/// Datastore timestamp covers.
[[nodiscard]] std::string format_timestamp(Millis ms);

// Failures of one REST call, classified for the retry loop.
struct RpcFailure {
  long http = 0;
  std::string status;  // Google's canonical status, e.g. "ABORTED"
  std::string message;
  bool retryable = false;

  [[nodiscard]] std::string describe() const {
    std::string out = http != 0 ? std::to_string(http) + " " : std::string();
    return out + status + ": " + message;
  }
};

/// replace_all() replaces every `what` in `text` with `with`.
[[nodiscard]] std::string replace_all(std::string text, std::string_view what,
                                      std::string_view with);

/// redact_keys() returns Google's error `message` with every one of `secrets` (the keys and
/// entity names the call was about), as they are or quoted as protobuf's text format quotes
/// them (`\"`, octal escapes), replaced by `<key>`, and what follows "entity group" (the
/// contention error's list of entity keys, in Google's own quoting) dropped: keys are customer
/// data, and the message goes into errors and logs.
[[nodiscard]] std::string redact_keys(std::string message,
                                      std::span<const std::string_view> secrets);

/// classify() turns a non-200 reply (or no reply) into a failure the retry loop can judge. A
/// reply cut off for its length is not retried: it would be as long again.
[[nodiscard]] RpcFailure classify(const auth::detail::HttpResponse& r);

/// decode_blob() decodes a blobValue in either base64 alphabet, padded or not; false when it
/// is not base64.
[[nodiscard]] bool decode_blob(std::string text, std::string& out);

/// json_int() reads an int64 value, written as a JSON number or (proto3 JSON) a string.
/// Throws std::invalid_argument when it is neither.
[[nodiscard]] std::int64_t json_int(const nlohmann::json& v);

/// record_from_entity() reads a record entity (datastore_entity.cc). Throws `StoreError` for
/// a missing or mistyped property, an unknown state or a blob that is not base64.
[[nodiscard]] Record record_from_entity(const nlohmann::json& entity);

/// entity_properties() writes a record as entity properties: integers unindexed, `expires_at`
/// also as an indexed timestamp for the purge query and a Datastore TTL policy.
[[nodiscard]] nlohmann::json entity_properties(const Record& record);

/// The most an entity may hold, as Datastore counts it (entity_size()).
inline constexpr std::size_t kMaxEntityBytes = 1'048'572;

/// entity_size() counts `entity` (a key and properties, as the REST API writes them) the way
/// Google documents an entity's storage size: the key (namespace, each path element's kind and
/// name or 8 for an id, + 16), each property's name + 1 and value (a blob's bytes, a string's
/// + 1, 8 for an integer, double or timestamp, 1 for a boolean or null), + 32.
[[nodiscard]] std::size_t entity_size(const nlohmann::json& entity);

}  // namespace idempotency::datastore_detail
