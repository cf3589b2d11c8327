// Base64 decoding for `message.data`, by OpenSSL's EVP decoder, and the same check without
// decoding (internal to idempotency::pubsub).
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

/// base64_valid() says whether base64_decode() would decode `text`, without decoding it: for a
/// caller that forwards the message as it came and only must not accept what a decoder refuses.
[[nodiscard]] bool base64_valid(std::string_view text) noexcept;

}  // namespace idempotency::pubsub::internal
