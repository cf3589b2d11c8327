#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "fetch.h"
#include "idempotency/detail/ascii.h"
#include "idempotency/oidc.h"
#include "jwks.h"
#include "jwt.h"
#include "key_cache.h"
#include "reasons.h"
#include "verified_tokens.h"

namespace idempotency {
namespace {

using oidc::internal::Jwt;
using oidc::internal::KeyCache;
using oidc::internal::PublicKey;
using oidc::internal::VerifiedTokens;

// Pub/Sub reuses a token for up to an hour, one per push identity and audience: a few are live
// at once, and a few dozen cover any subscription set a verifier serves (each is ~1 KiB).
constexpr std::size_t kVerifiedTokens = 64;
// The largest options check_options() accepts (see there).
constexpr std::chrono::seconds kMaxClockSkew = std::chrono::minutes(10);
constexpr std::chrono::seconds kMaxJwksInterval = std::chrono::hours(24);
constexpr std::chrono::milliseconds kMaxJwksTimeout = std::chrono::minutes(10);

constexpr std::string_view kIssuers[] = {"https://accounts.google.com", "accounts.google.com"};

using detail::ascii_lower;

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string reason(std::string_view text) { return std::string(text); }

// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive), or
// nothing for any other scheme or shape.
std::optional<std::string_view> bearer_token(const pubsub::PushRequest& request) {
  const std::optional<std::string_view> value = request.header("authorization");
  if (!value) return std::nullopt;
  constexpr std::string_view kScheme = "bearer";
  std::string_view rest = *value;
  if (rest.size() <= kScheme.size() || !is_space(rest[kScheme.size()])) return std::nullopt;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (ascii_lower(rest[i]) != kScheme[i]) return std::nullopt;
  }
  rest.remove_prefix(kScheme.size());
  while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
  while (!rest.empty() && is_space(rest.back())) rest.remove_suffix(1);
  if (rest.empty() || std::any_of(rest.begin(), rest.end(), is_space)) return std::nullopt;
  return rest;
}

const nlohmann::json* member(const nlohmann::json& object, const char* name) {
  const auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

bool is_string_equal(const nlohmann::json* value, std::string_view expected) {
  return value != nullptr && value->is_string() && value->get_ref<const std::string&>() == expected;
}

// `aud` is one string, or (RFC 7519 §4.1.3) an array of them; one must match exactly.
bool audience_matches(const nlohmann::json* aud, std::string_view audience) {
  if (aud == nullptr) return false;
  if (aud->is_array()) {
    return std::any_of(aud->begin(), aud->end(),
                       [&](const nlohmann::json& one) { return is_string_equal(&one, audience); });
  }
  return is_string_equal(aud, audience);
}

// A NumericDate claim in seconds, or nothing when absent or not a finite number.
std::optional<double> numeric_date(const nlohmann::json& claims, const char* name) {
  const nlohmann::json* value = member(claims, name);
  if (value == nullptr || !value->is_number()) return std::nullopt;
  const auto seconds = value->get<double>();
  if (!std::isfinite(seconds)) return std::nullopt;
  return seconds;
}

// Google writes `email_verified` as a boolean; older tokens wrote the string "true".
bool email_verified(const nlohmann::json& claims) {
  const nlohmann::json* value = member(claims, "email_verified");
  if (value == nullptr) return false;
  if (value->is_boolean()) return value->get<bool>();
  return is_string_equal(value, "true");
}

void check_options(const OidcOptions& options) {
  if (options.audience.empty()) throw std::invalid_argument("OidcOptions: audience is required");
  if (options.allowed_emails.empty()) {
    throw std::invalid_argument("OidcOptions: allowed_emails is required");
  }
  if (std::any_of(options.allowed_emails.begin(), options.allowed_emails.end(),
                  [](const std::string& email) { return email.empty(); })) {
    throw std::invalid_argument("OidcOptions: allowed_emails holds an empty email");
  }
  if (!options.jwks_file.empty() && !options.jwks_url.empty()) {
    throw std::invalid_argument("OidcOptions: set jwks_file or jwks_url, not both");
  }
  if (options.jwks_file.empty() && !options.jwks_url.empty() &&
      !oidc::internal::is_allowed_url(options.jwks_url)) {
    throw std::invalid_argument(
        "OidcOptions: jwks_url must be https (or plain http to a loopback host)");
  }
  if (options.clock_skew.count() < 0 || options.jwks_min_refresh.count() < 0) {
    throw std::invalid_argument(
        "OidcOptions: clock_skew and jwks_min_refresh must not be negative");
  }
  if (options.jwks_max_age.count() <= 0 || options.jwks_timeout.count() <= 0) {
    throw std::invalid_argument("OidcOptions: jwks_max_age and jwks_timeout must be positive");
  }
  // Bounded so that none overflows once in milliseconds (a "never refetch" of seconds::max()
  // would turn negative, and every made-up `kid` would fetch the key set), and so that a skew
  // cannot outlast a token: Google's live an hour.
  if (options.clock_skew > kMaxClockSkew || options.jwks_min_refresh > kMaxJwksInterval ||
      options.jwks_max_age > kMaxJwksInterval || options.jwks_timeout > kMaxJwksTimeout) {
    throw std::invalid_argument(
        "OidcOptions: clock_skew is at most 10 minutes, jwks_min_refresh and jwks_max_age at "
        "most a day, jwks_timeout at most 10 minutes");
  }
}

KeyCache::Fetch make_fetch(const OidcOptions& options) {
  if (!options.jwks_file.empty()) {
    return [path = options.jwks_file] { return oidc::internal::read_file(path); };
  }
  oidc::internal::init_curl();
  std::string url = options.jwks_url.empty() ? std::string(kGoogleJwksUrl) : options.jwks_url;
  return [url = std::move(url), timeout = options.jwks_timeout] {
    return oidc::internal::fetch_url(url, timeout);
  };
}

}  // namespace

struct OidcVerifier::State {
  State(OidcOptions opts, std::shared_ptr<const Clock> time)
      : options(std::move(opts)),
        clock(std::move(time)),
        keys(make_fetch(options), clock, options.jwks_min_refresh, options.jwks_max_age),
        verified(kVerifiedTokens) {}

  // The verdict on a token verified before, its claims judged again, when the key set still
  // holds the key that checked its signature; nothing when it must be verified afresh.
  [[nodiscard]] std::optional<std::optional<std::string>> reverify(std::string_view token);

  // The claims checks, in the order their reasons are reported; the signature is good.
  [[nodiscard]] std::optional<std::string> check_claims(const nlohmann::json& claims) const;

  OidcOptions options;
  std::shared_ptr<const Clock> clock;
  KeyCache keys;
  VerifiedTokens verified;
};

std::optional<std::optional<std::string>> OidcVerifier::State::reverify(std::string_view token) {
  std::optional<VerifiedTokens::Entry> entry = verified.find(token);
  if (!entry) return std::nullopt;
  // The same key object, not only the same kid: a key set refreshed since holds new objects,
  // and a key replaced under its kid must check the signature again.
  const std::variant<PublicKey, std::string> key = keys.find(entry->kid);
  const auto* now_held = std::get_if<PublicKey>(&key);
  if (now_held == nullptr || *now_held != entry->key) {
    verified.forget(token);
    return std::nullopt;
  }
  std::optional<std::string> verdict = check_claims(*entry->claims);
  if (verdict) verified.forget(token);  // expired, say: it will not pass again
  return verdict;
}

std::optional<std::string> OidcVerifier::State::check_claims(const nlohmann::json& claims) const {
  using oidc::internal::kAudienceMismatch;
  const nlohmann::json* iss = member(claims, "iss");
  if (std::none_of(std::begin(kIssuers), std::end(kIssuers),
                   [&](std::string_view issuer) { return is_string_equal(iss, issuer); })) {
    return reason(oidc::internal::kIssuerNotGoogle);
  }
  if (!audience_matches(member(claims, "aud"), options.audience)) return reason(kAudienceMismatch);

  const std::optional<double> exp = numeric_date(claims, "exp");
  const std::optional<double> iat = numeric_date(claims, "iat");
  if (!exp || !iat) return reason(oidc::internal::kMalformedToken);
  const double now = std::chrono::duration<double>(clock->now().time_since_epoch()).count();
  const auto skew = static_cast<double>(options.clock_skew.count());
  if (now >= *exp + skew) return reason(oidc::internal::kTokenExpired);
  if (*iat > now + skew) return reason(oidc::internal::kTokenNotYetValid);
  if (claims.contains("nbf")) {
    const std::optional<double> nbf = numeric_date(claims, "nbf");
    if (!nbf) return reason(oidc::internal::kMalformedToken);
    if (*nbf > now + skew) return reason(oidc::internal::kTokenNotYetValid);
  }

  const nlohmann::json* email = member(claims, "email");
  if (std::none_of(options.allowed_emails.begin(), options.allowed_emails.end(),
                   [&](const std::string& allowed) { return is_string_equal(email, allowed); })) {
    return reason(oidc::internal::kEmailNotAllowed);
  }
  if (!email_verified(claims)) return reason(oidc::internal::kEmailNotVerified);
  return std::nullopt;
}

OidcVerifier::OidcVerifier(OidcOptions options) {
  check_options(options);
  std::shared_ptr<const Clock> clock = options.clock ? options.clock : system_clock();
  state_ = std::make_unique<State>(std::move(options), std::move(clock));
}

OidcVerifier::~OidcVerifier() = default;
OidcVerifier::OidcVerifier(OidcVerifier&&) noexcept = default;
OidcVerifier& OidcVerifier::operator=(OidcVerifier&&) noexcept = default;

std::optional<std::string> OidcVerifier::verify(const pubsub::PushRequest& request) const {
  const std::optional<std::string_view> token = bearer_token(request);
  if (!token) return reason(oidc::internal::kNoBearerToken);
  if (auto verdict = state_->reverify(*token)) return std::move(*verdict);

  // Everything is decoded before any key is looked up, so only a well-formed token can
  // make the cache fetch.
  std::optional<Jwt> jwt = oidc::internal::parse_jwt(*token);
  if (!jwt) return reason(oidc::internal::kMalformedToken);
  // Only RS256: this refuses `none`, and HS256 made with the public key as the HMAC secret.
  if (!is_string_equal(member(jwt->header, "alg"), "RS256")) {
    return reason(oidc::internal::kUnsupportedAlgorithm);
  }
  // Unknown critical extensions must be refused (RFC 7515 §4.1.11); Google sends none.
  if (jwt->header.contains("crit")) return reason(oidc::internal::kMalformedToken);
  const nlohmann::json* kid = member(jwt->header, "kid");
  if (kid == nullptr || !kid->is_string() || kid->get_ref<const std::string&>().empty()) {
    return reason(oidc::internal::kUnknownSigningKey);
  }

  std::variant<PublicKey, std::string> key = state_->keys.find(kid->get_ref<const std::string&>());
  if (auto* failure = std::get_if<std::string>(&key)) return std::move(*failure);
  if (!oidc::internal::verify_rs256(std::get<PublicKey>(key).get(), jwt->signing_input,
                                    jwt->signature)) {
    return reason(oidc::internal::kSignatureInvalid);
  }
  std::optional<std::string> verdict = state_->check_claims(jwt->claims);
  if (!verdict) {
    state_->verified.add(
        *token, {.kid = kid->get<std::string>(),
                 .key = std::move(std::get<PublicKey>(key)),
                 .claims = std::make_shared<const nlohmann::json>(std::move(jwt->claims))});
  }
  return verdict;
}

}  // namespace idempotency
