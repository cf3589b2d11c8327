#include "fetch.h"

#include <curl/curl.h>

#include <cerrno>
#include <cstddef>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "jwks.h"

namespace idempotency::oidc::internal {
namespace {

struct CurlDeleter {
  void operator()(CURL* curl) const noexcept { curl_easy_cleanup(curl); }
};
using CurlPtr = std::unique_ptr<CURL, CurlDeleter>;

// The body collected so far; a body over the bound aborts the transfer.
struct Sink {
  std::string body;
  bool too_large = false;
};

std::size_t write_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const std::size_t n = size * count;
  if (sink->body.size() + n > kMaxJwksBytes) {
    sink->too_large = true;
    return 0;  // anything but n makes curl fail the transfer with CURLE_WRITE_ERROR
  }
  sink->body.append(data, n);
  return n;
}

FetchResult failure(std::string error) { return FetchResult{std::nullopt, std::move(error)}; }

bool starts_with_icase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    const char c = text[i];
    const char lower = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    if (lower != prefix[i]) return false;
  }
  return true;
}

}  // namespace

FetchResult read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    return failure("cannot open JWKS file: " + std::generic_category().message(error));
  }
  std::string body;
  char buffer[4096];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    body.append(buffer, static_cast<std::size_t>(in.gcount()));
    if (body.size() > kMaxJwksBytes) return failure("JWKS file too large");
  }
  if (in.bad()) return failure("cannot read JWKS file");
  return FetchResult{std::move(body), {}};
}

void init_curl() {
  static const CURLcode kInit = curl_global_init(CURL_GLOBAL_DEFAULT);
  (void)kInit;  // a failed init shows again as a failing curl_easy_init
}

bool is_allowed_url(std::string_view url) {
  if (starts_with_icase(url, "https://")) return url.size() > 8;
  if (!starts_with_icase(url, "http://")) return false;
  std::string_view rest = url.substr(7);
  const std::size_t end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end);
  if (authority.find('@') != std::string_view::npos) return false;
  for (std::string_view host : {"127.0.0.1", "localhost", "[::1]"}) {
    if (starts_with_icase(authority, host) &&
        (authority.size() == host.size() || authority[host.size()] == ':')) {
      return true;
    }
  }
  return false;
}

FetchResult fetch_url(const std::string& url, std::chrono::milliseconds timeout) {
  CurlPtr curl(curl_easy_init());
  if (!curl) return failure("cannot start an HTTP client");
  Sink sink;
  CURL* c = curl.get();
  const long timeout_ms = static_cast<long>(timeout.count());
  // Options that cannot fail on a curl built with HTTP; a failure would show as an error
  // of the transfer itself.
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https,http");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // many threads: no SIGALRM for DNS timeouts
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  const CURLcode rc = curl_easy_perform(c);
  if (sink.too_large) return failure("key set too large");
  // curl_easy_strerror() names the kind of failure only, never the URL or host.
  if (rc != CURLE_OK) return failure(curl_easy_strerror(rc));
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) return failure("HTTP status " + std::to_string(status));
  return FetchResult{std::move(sink.body), {}};
}

}  // namespace idempotency::oidc::internal
