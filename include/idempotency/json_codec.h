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
  static std::string encode(const T& value) { return nlohmann::json(value).dump(); }
  static T decode(std::string_view bytes) { return nlohmann::json::parse(bytes).get<T>(); }
};

}  // namespace idempotency
