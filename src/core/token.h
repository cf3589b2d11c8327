// Random claim tokens (internal).
#pragma once

#include <string>

namespace idempotency::detail {

/// new_claim_token() returns 90 random bits as 15 base64url characters, from this thread's
/// ChaCha20 generator keyed by the kernel (getrandom): no lock is taken.
std::string new_claim_token();

}  // namespace idempotency::detail
