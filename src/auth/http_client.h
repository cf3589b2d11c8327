// HttpClient: the small libcurl wrapper behind the auth component and the Datastore backend.
//
// Internal (not installed). Keeps a pool of easy handles so connections are reused across
// calls. A failed transfer (no HTTP status) is reported in `HttpResponse::transport_error`,
// never thrown, so callers decide what is transient.
//
// Thread safety: `request` may be called from any number of threads at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace idempotency::auth::detail {

/// The longest reply body request() reads unless told otherwise: far above a token
/// endpoint's or the metadata server's replies (a few KiB).
inline constexpr std::size_t kDefaultMaxReplyBytes = std::size_t{1} << 20;

/// One HTTP response; `status` is 0 when the transfer failed before a status arrived.
struct HttpResponse {
  long status = 0;
  std::string body;
  /// curl's message when the transfer failed (connection refused, timed out, reset), else "".
  std::string transport_error;
  /// True when the transfer was cut off because the body grew past the caller's limit (then
  /// `transport_error` says so): a reply that will be as long when asked again.
  bool too_large = false;
};

/// HttpClient sends one request at a time per handle, from a pool of reusable handles.
class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  /// request() sends `method` (GET or POST) to `url` with `headers` ("Name: value") and `body`,
  /// waiting at most `timeout`. A reply body longer than `max_reply_bytes` is not read on: the
  /// transfer fails with `too_large` set, so a broken or hostile server cannot make the client
  /// hold an unbounded reply. Never throws for a network failure.
  [[nodiscard]] HttpResponse request(const std::string& method, const std::string& url,
                                     const std::vector<std::string>& headers,
                                     const std::string& body, std::chrono::milliseconds timeout,
                                     std::size_t max_reply_bytes = kDefaultMaxReplyBytes);

 private:
  struct Handle;
  std::unique_ptr<Handle> take();
  void give_back(std::unique_ptr<Handle> handle);

  std::mutex mutex_;
  std::vector<std::unique_ptr<Handle>> idle_;
};

/// url_encode() percent-encodes `text` for a query string or a form body.
[[nodiscard]] std::string url_encode(const std::string& text);

/// base64_decode() accepts standard base64 (padding optional); returns false on bad input.
[[nodiscard]] bool base64_decode(const std::string& text, std::string& out);

}  // namespace idempotency::auth::detail
