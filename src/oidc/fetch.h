// Reading a JWKS document from a file or an http(s) URL (internal to idempotency::oidc).
//
// Errors are one line and name neither the path nor the URL, which may carry secrets.
//
// Thread safety: both functions may run from any thread; init_curl() must have returned
// before fetch_url() first runs.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace idempotency::oidc::internal {

/// What a fetch produced: the document, or a one-line error.
struct FetchResult {
  std::optional<std::string> body;
  std::string error;
};

/// read_file() reads the whole file at `path`, up to kMaxJwksBytes.
[[nodiscard]] FetchResult read_file(const std::string& path);

/// init_curl() initialises libcurl once per process (curl_global_init is not thread-safe).
void init_curl();

/// is_allowed_url() says whether `url` is https, or plain http to a loopback host (tests and
/// sidecars); keys fetched over plain http from elsewhere could be swapped on the way.
[[nodiscard]] bool is_allowed_url(std::string_view url);

/// fetch_url() GETs `url` by libcurl (no redirects, https or http only, TLS peer verified) and
/// returns the body of a 200 response, up to kMaxJwksBytes, within `timeout`.
[[nodiscard]] FetchResult fetch_url(const std::string& url, std::chrono::milliseconds timeout);

}  // namespace idempotency::oidc::internal
