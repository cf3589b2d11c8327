// Base64 decoding for `message.data`, by OpenSSL's EVP decoder (internal to idempotency::pubsub).
//
// Thread safety: pure function.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace idempotency::pubsub::internal {

/// base64_decode() decodes standard base64 (RFC 4648 alphabet, padding required, embedded
/// whitespace ignored), as Pub/Sub writes it; nothing when `text` is not valid base64.
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view text);

}  // namespace idempotency::pubsub::internal
