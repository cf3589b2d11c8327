// The one-line reasons OidcVerifier::verify() gives (internal to idempotency::oidc).
//
// Each names what failed and nothing of the token: no claim value, no `kid`, no URL.
//
// Thread safety: constants.
#pragma once

#include <string_view>

namespace idempotency::oidc::internal {

inline constexpr std::string_view kNoBearerToken = "no bearer token";
inline constexpr std::string_view kMalformedToken = "malformed token";
inline constexpr std::string_view kUnsupportedAlgorithm = "unsupported algorithm";
inline constexpr std::string_view kUnknownSigningKey = "unknown signing key";
inline constexpr std::string_view kKeySetUnavailable = "key set unavailable: ";
inline constexpr std::string_view kSignatureInvalid = "signature invalid";
inline constexpr std::string_view kIssuerNotGoogle = "issuer not Google";
inline constexpr std::string_view kAudienceMismatch = "audience mismatch";
inline constexpr std::string_view kTokenExpired = "token expired";
inline constexpr std::string_view kTokenNotYetValid = "token not yet valid";
inline constexpr std::string_view kEmailNotAllowed = "email not allowed";
inline constexpr std::string_view kEmailNotVerified = "email not verified";

}  // namespace idempotency::oidc::internal
