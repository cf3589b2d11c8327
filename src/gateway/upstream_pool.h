// UpstreamPool: forwards a request to the upstream app over a small pool of keep-alive
// connections.
//
// cpp-httplib's Client is not thread-safe, so each call borrows a whole client from the pool
// (guarded by a mutex) and returns it afterwards; a client whose exchange failed is dropped,
// never reused, so a half-broken connection cannot poison the next request. Hop-by-hop headers
// (RFC 9110 §7.6.1, plus whatever `Connection` names) are not forwarded either way.
//
// Thread safety: forward() may be called from any number of threads at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "idempotency/pubsub/message.h"
#include "idempotency/pubsub/response.h"

namespace idempotency::gateway {

/// The header carrying the claim's fencing token to the upstream.
inline constexpr const char* kFenceHeader = "X-Idempotency-Fence";

/// An upstream base URL, split: `origin` is scheme://host[:port], `base_path` is prepended to
/// every forwarded path ("" or "/prefix").
struct UpstreamUrl {
  std::string origin;
  std::string base_path;
};

/// parse_upstream_url() checks an http(s) URL without credentials, query or fragment. Throws
/// std::invalid_argument with a one-line reason.
[[nodiscard]] UpstreamUrl parse_upstream_url(const std::string& url);

/// What came back from the upstream.
struct UpstreamReply {
  enum class Kind {
    kResponse,     ///< The upstream answered (any status).
    kUnreachable,  ///< No connection: refused, unresolvable, TLS handshake failed.
    kFailed,       ///< The exchange broke off or timed out after connecting.
  };
  Kind kind = Kind::kResponse;
  /// The upstream's response when kind is kResponse, minus hop-by-hop headers.
  pubsub::PushResponse response;
  /// A one-line transport error otherwise (names no URL, header or body).
  std::string error;
  /// How long the exchange took.
  std::chrono::steady_clock::duration elapsed{};
};

/// UpstreamPool forwards requests to one upstream.
class UpstreamPool {
 public:
  /// UpstreamPool() connects lazily; `timeout` bounds connecting and each read and write.
  UpstreamPool(UpstreamUrl url, std::chrono::milliseconds timeout, std::size_t max_idle);
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  /// forward() sends `request` unchanged (method, path, headers minus hop-by-hop and any
  /// incoming fence header, body), plus `X-Idempotency-Fence: fence` when set. Never throws
  /// but std::bad_alloc: transport failures are a reply kind.
  [[nodiscard]] UpstreamReply forward(const pubsub::PushRequest& request,
                                      std::optional<std::int64_t> fence) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// is_hop_by_hop() says whether a header is connection-specific and so never forwarded.
[[nodiscard]] bool is_hop_by_hop(std::string_view name);

}  // namespace idempotency::gateway
