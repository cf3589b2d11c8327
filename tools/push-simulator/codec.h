// Base64 for the simulator: standard (message data) and URL-safe without padding (JWT parts),
// by OpenSSL's EVP encoder; decoding reuses the pubsub parser's decoder.
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace idempotency::push_sim {

/// base64() encodes `bytes` with the standard alphabet and padding, as Pub/Sub sends data.
[[nodiscard]] std::string base64(std::string_view bytes);

/// base64url() encodes `bytes` with the URL-safe alphabet and no padding (RFC 7515).
[[nodiscard]] std::string base64url(std::string_view bytes);

/// base64_decode() decodes standard base64; nothing when `text` is not valid base64.
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view text);

}  // namespace idempotency::push_sim
