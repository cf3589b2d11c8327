// Random claim tokens (internal).
#pragma once

#include <string>

namespace idempotency::detail {

/// new_claim_token() returns 128 random bits as 32 hex digits, from OpenSSL's CSPRNG.
std::string new_claim_token();

}  // namespace idempotency::detail
