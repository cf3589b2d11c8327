// Google credentials: OAuth 2.0 access tokens for Google APIs (Datastore, OIDC, the gateway).
//
// `google_default_credentials()` looks, in this order, at `GOOGLE_APPLICATION_CREDENTIALS`
// (a service-account key, whose RS256-signed JWT is exchanged at the file's `token_uri`, or an
// `authorized_user` file, whose refresh token is exchanged at the token endpoint), then at
// gcloud's well-known file (`$CLOUDSDK_CONFIG/application_default_credentials.json`, else
// `~/.config/gcloud/…`, which `gcloud auth application-default login` writes), then at the
// metadata server of Cloud Run / GCE / GKE (`GCE_METADATA_HOST` overrides its host, as in
// Google's own libraries). An emulator (`DATASTORE_EMULATOR_HOST`) needs no token at all; that
// decision belongs to the backend, not here.
//
//   auto credentials = idempotency::auth::google_default_credentials();
//   std::string bearer = credentials->access_token();  // cached, refreshed before expiry
//
// Tokens are cached and refreshed `refresh_margin` before they expire, one refresh at a time
// however many threads ask. A refresh that fails while the cached token is still valid is not
// an error: the cached token keeps being served and the refresh is tried again after
// `refresh_retry`. Once the token has expired the failure is thrown, and callers that arrive
// within `refresh_retry` of it get that same failure rather than each waiting on a fetch of
// their own. Errors name the source tried and why it failed; no token, key or refresh-token
// text ever appears in an error or a log line.
//
// Thread safety: every TokenSource returned here is safe to share between threads.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "idempotency/clock.h"
#include "idempotency/errors.h"

namespace idempotency::auth {

/// AuthError means no access token could be obtained; `what()` names the source and reason.
class AuthError : public Error {
 public:
  using Error::Error;
};

/// TokenSource hands out OAuth 2.0 access tokens for an `Authorization: Bearer` header.
class TokenSource {
 public:
  TokenSource() = default;
  TokenSource(const TokenSource&) = delete;
  TokenSource& operator=(const TokenSource&) = delete;
  virtual ~TokenSource() = default;

  /// access_token() returns a token for an `Authorization: Bearer` header, fetching a new one
  /// when the cached one is near expiry. Throws `AuthError` naming the source on failure.
  [[nodiscard]] virtual std::string access_token() = 0;

  /// invalidate() says that `token`, from access_token(), was refused (an API answered 401
  /// UNAUTHENTICATED: revoked, or judged expired by a clock that differs from Google's). A
  /// source that caches it drops it, so the next access_token() fetches a new one; a token
  /// other than the cached one is ignored, so many calls refused with one token cause one
  /// fetch. The default does nothing.
  virtual void invalidate(const std::string& token) { (void)token; }

  /// source() names where tokens come from (e.g. "service account key file /path"), for
  /// error messages; never contains secrets.
  [[nodiscard]] virtual std::string source() const = 0;

  /// quota_project() is the project billed for API calls made with these tokens, when the
  /// credentials name one (an `authorized_user` file's `quota_project_id`); callers send it as
  /// `x-goog-user-project`. Empty otherwise.
  [[nodiscard]] virtual std::string quota_project() const { return {}; }
};

/// The OAuth scope Datastore needs.
inline constexpr const char* kDatastoreScope = "https://www.googleapis.com/auth/datastore";

/// Options for the credential sources. Fill with designated initializers.
struct CredentialsOptions {
  /// Judges token expiry; nullptr means the system clock.
  std::shared_ptr<const Clock> clock;
  /// A cached token is refreshed this long before it expires.
  std::chrono::seconds refresh_margin = std::chrono::minutes(5);
  /// After a failed fetch, no new one starts for this long: meanwhile a cached token that has
  /// not expired is served, and once it has, callers get the failure. Zero: every call after a
  /// failure fetches again.
  std::chrono::milliseconds refresh_retry = std::chrono::seconds(1);
  /// Space-separated OAuth scopes requested by a service account.
  std::string scope = kDatastoreScope;
  /// Timeout of one HTTP request to a token endpoint or the metadata server.
  std::chrono::milliseconds timeout = std::chrono::seconds(10);
  /// A credentials file; empty means `GOOGLE_APPLICATION_CREDENTIALS` (if set), then gcloud's
  /// well-known file (if present).
  std::string credentials_file;
  /// The metadata server's host[:port]; empty means `GCE_METADATA_HOST`, else
  /// `metadata.google.internal`.
  std::string metadata_host;
};

/// google_default_credentials() picks the first available source: the credentials file
/// (service account or authorized user), else gcloud's well-known file when it exists, else
/// the metadata server. Throws `AuthError` when a file is named or present but unreadable or
/// malformed; the metadata server is only asked on first use.
[[nodiscard]] std::shared_ptr<TokenSource> google_default_credentials(
    CredentialsOptions options = {});

/// credentials_from_file() reads a `service_account` or `authorized_user` JSON file. Throws
/// `AuthError` naming the file and the problem (never its secrets).
[[nodiscard]] std::shared_ptr<TokenSource> credentials_from_file(const std::string& path,
                                                                 CredentialsOptions options = {});

/// metadata_credentials() fetches tokens from the metadata server's default service account.
[[nodiscard]] std::shared_ptr<TokenSource> metadata_credentials(CredentialsOptions options = {});

/// metadata_project_id() asks the metadata server which project this workload runs in.
/// Throws `AuthError` naming the server and the reason when it cannot.
[[nodiscard]] std::string metadata_project_id(const CredentialsOptions& options = {});

}  // namespace idempotency::auth
