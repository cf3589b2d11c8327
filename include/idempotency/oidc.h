// OIDC push authentication: verifies the Google-signed JWT Pub/Sub sends with each push.
//
//   idempotency::OidcVerifier verifier({
//       .audience = "https://handler.example.com/push",
//       .allowed_emails = {"push-invoker@my-project.iam.gserviceaccount.com"},
//   });
//   if (auto reason = verifier.verify(request)) {
//     return respond(401, *reason);  // one line; names what failed, never token content
//   }
//
// A request passes when its `Authorization: Bearer <JWT>` header carries an RS256 token whose
// signature checks against a key of the configured JWKS (Google's certs by default), whose
// `iss` is Google (`https://accounts.google.com` or `accounts.google.com`), whose `aud` is
// exactly the configured audience, which is within its `iat`..`exp` window (give or take
// `clock_skew`), and whose `email` is in the allow-list with `email_verified` true. Every
// other algorithm (`none`, HS256, RS512, ...) is refused, whatever key the token names.
//
// Keys are cached by `kid`. The key set is fetched on the first verify(), again when a token
// names an unknown `kid` or the set is older than `jwks_max_age`, and never more than once
// per `jwks_min_refresh`, so a flood of tokens with made-up `kid`s cannot flood the JWKS
// server. A failed refresh keeps the keys already held.
//
// Only a token that is well formed (three base64url segments, JSON header and claims, RS256)
// can cause a fetch; the token never chooses where keys come from (`jku`, `x5u` and `jwk`
// header parameters are ignored).
//
// A token whose signature checked is remembered (the last 64, with the key that checked it):
// Pub/Sub sends the same token with every push for up to an hour, and checking an RS256
// signature and decoding the JSON cost ~26 µs a push where the rest of the gateway's work on
// it is ~10. A remembered token skips only those: its claims (expiry, audience, email) are
// judged on every use, and it counts only while the key set still holds that same key; a key
// replaced under its `kid`, or gone, has the token checked afresh.
//
// Thread safety: verify() may be called from any number of threads at once. The key cache and
// the remembered tokens are each guarded by a mutex, and at most one fetch runs at a time;
// threads holding a cached key do not wait for it.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idempotency/clock.h"
#include "idempotency/pubsub/message.h"

namespace idempotency {

/// kGoogleJwksUrl is where Google publishes the keys that sign its OIDC tokens.
inline constexpr std::string_view kGoogleJwksUrl = "https://www.googleapis.com/oauth2/v3/certs";

/// Options for OidcVerifier, meant to be filled with designated initializers.
struct OidcOptions {
  /// The exact `aud` the tokens must carry (the push subscription's audience, by default its
  /// push endpoint URL). Required.
  std::string audience;
  /// The service account emails allowed to push (the subscription's push identity). Required.
  std::vector<std::string> allowed_emails;
  /// A JWKS file to read keys from instead of a URL; re-read under the same refresh rules.
  /// At most one of `jwks_file` and `jwks_url` may be set.
  std::string jwks_file;
  /// The JWKS URL (https; plain http only to a loopback host). Empty, with `jwks_file` empty
  /// too: `kGoogleJwksUrl`.
  std::string jwks_url;
  /// How far `exp` and `iat` may be off the verifier's clock, at most 10 minutes. Google's
  /// tokens live an hour.
  std::chrono::seconds clock_skew{60};
  /// The least time between two fetches of the key set, whatever asks for them; at most a day.
  std::chrono::seconds jwks_min_refresh{60};
  /// A key set older than this is refreshed by the next verify(); the old keys keep serving
  /// meanwhile and if the refresh fails. At most a day.
  std::chrono::seconds jwks_max_age{std::chrono::hours(1)};
  /// The longest one JWKS fetch over HTTP may take, at most 10 minutes.
  std::chrono::milliseconds jwks_timeout{std::chrono::seconds(10)};
  /// The clock `exp`, `iat` and the refresh intervals are judged by; nullptr: the system clock.
  std::shared_ptr<const Clock> clock;
};

/// OidcVerifier checks the OIDC token of Pub/Sub push requests (see the file comment).
class OidcVerifier {
 public:
  /// OidcVerifier() checks the options and throws std::invalid_argument when they are unusable
  /// (no audience, no or an empty allowed email, both key sources, a jwks_url neither https nor
  /// loopback http, a negative skew or refresh interval, a non-positive max age or timeout).
  /// It fetches nothing: the first verify() does. A moved-from verifier may only be destroyed
  /// or assigned to.
  explicit OidcVerifier(OidcOptions options);
  ~OidcVerifier();
  OidcVerifier(const OidcVerifier&) = delete;
  OidcVerifier& operator=(const OidcVerifier&) = delete;
  OidcVerifier(OidcVerifier&&) noexcept;
  OidcVerifier& operator=(OidcVerifier&&) noexcept;

  /// verify() returns nothing when `request` carries a valid token, else a one-line reason for
  /// a 401 ("no bearer token", "malformed token", "unsupported algorithm", "unknown signing
  /// key", "key set unavailable: ...", "signature invalid", "issuer not Google", "audience
  /// mismatch", "token expired", "token not yet valid", "email not allowed", "email not
  /// verified"). No reason contains the token, its claims, its `kid` or the JWKS URL.
  /// It may block on a key set fetch (at most `jwks_timeout`). Never throws but std::bad_alloc.
  [[nodiscard]] std::optional<std::string> verify(const pubsub::PushRequest& request) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace idempotency
