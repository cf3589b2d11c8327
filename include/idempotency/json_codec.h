// JsonCodec<T>: stores any type nlohmann-json can convert (to_json / from_json) as JSON.
//
// Include it only where nlohmann-json is available (Debian: nlohmann-json3-dev); the library
// itself does not need it.
//
//   auto outcome = idempotency::once(key, backend, make_receipt, {},
//   idempotency::JsonCodec<Receipt>{});
//
// Thread safety: stateless.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace idempotency {

/// JsonCodec<T> encodes with `nlohmann::json(value).dump()` and decodes with `get<T>()`.
template <class T>
struct JsonCodec {
  /// encode() returns `value` as compact JSON text; throws `nlohmann::json::type_error` for a
  /// string that is not valid UTF-8 (`once` then logs it and stores no result).
  static std::string encode(const T& value) { return nlohmann::json(value).dump(); }
  /// decode() parses `bytes` and converts them to T; throws `nlohmann::json::exception` for
  /// bytes that are not JSON or not a T (`once` then answers `duplicate`, not a value).
  static T decode(std::string_view bytes) { return nlohmann::json::parse(bytes).get<T>(); }
};

}  // namespace idempotency
