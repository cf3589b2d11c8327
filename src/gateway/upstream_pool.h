// UpstreamPool: forwards a request to the upstream app over keep-alive connections, on
// Boost.Beast.
//
// Each exchange is one chain of callbacks (opening a connection is a C++20 coroutine: rare, and
// clearer so), with real deadlines: a connect deadline and one for the whole exchange, each a
// timer that closes the connection when it passes. Two entry points run that same exchange:
// forward() on the calling thread's own
// io_context (thread_local), blocking until the reply; forward_async() on an io_context the
// caller runs (the HTTP server's event loop), handing the reply to a callback, with no thread
// hop. Idle connections are kept per io_context: per calling thread for forward(), shared by the
// io_context's threads for forward_async(). The outcome says what the upstream may have done:
// kNotSent (provably nothing, a retry is safe), kNoAnswer (maybe something: ambiguous) or
// kResponse. Hop-by-hop headers (RFC 9110 §7.6.1, plus whatever `Connection` names) are not
// forwarded either way.
//
// Thread safety: forward() and forward_async() may be called from any number of threads at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "idempotency/pubsub/message.h"
#include "idempotency/pubsub/response.h"

// Only a reference to one crosses this header, so Asio stays out of its includers.
namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace idempotency::gateway {

/// The header carrying the claim's fencing token to the upstream.
inline constexpr std::string_view kFenceHeader = "X-Idempotency-Fence";

/// An upstream base URL, split: `origin` is scheme://host[:port], `base_path` is prepended to
/// every forwarded path ("" or "/prefix").
struct UpstreamUrl {
  std::string origin;
  std::string base_path;
};

/// parse_upstream_url() checks an http(s) URL without credentials, query or fragment. Throws
/// std::invalid_argument with a one-line reason.
[[nodiscard]] UpstreamUrl parse_upstream_url(const std::string& url);

/// Limits of one upstream exchange.
struct UpstreamOptions {
  /// Deadline for establishing a connection (TCP, and TLS for https); capped by `timeout`.
  std::chrono::milliseconds connect_timeout{5'000};
  /// Deadline for the whole exchange: connect, write the request, read the whole response.
  std::chrono::milliseconds timeout{30'000};
  /// Largest response body kept; a larger one is dropped (body empty, `truncated` set) and its
  /// connection closed, so memory stays bounded whatever the upstream sends.
  std::size_t max_response_bytes = std::size_t{1} << 20;
  /// When false, only the status is kept: the header fields and the body are read (within the
  /// same limits, for the connection's framing) and dropped, as the reply's reader needs none.
  bool keep_content = true;
  /// Idle keep-alive connections kept per io_context: per calling thread of forward(), which
  /// needs one, and per io_context of forward_async(), which needs as many as it has requests in
  /// flight at once (64: as an nginx `keepalive 64` upstream block).
  std::size_t max_idle = 64;
};

/// What came back from the upstream.
struct UpstreamReply {
  enum class Kind {
    kResponse,  ///< A complete status line and header arrived (the body may be `truncated`).
    kNotSent,   ///< Provably not acted on: could not connect (refused, unresolvable, connect
                ///< timeout, TLS handshake failed) or not one byte of the request was written.
    kNoAnswer,  ///< The request was (at least partly) sent, then the deadline passed or the
                ///< connection broke before a complete response header: the upstream may
                ///< still be acting on it (an ambiguous outcome).
  };
  Kind kind = Kind::kResponse;
  /// The upstream's final (non-1xx) response when kind is kResponse, minus hop-by-hop headers.
  /// A status outside 100..599, which no HTTP server may send, is replaced as RFC 9110 says to
  /// read it, by a server error: a 502 of the client's own, `error` naming the status.
  pubsub::PushResponse response;
  /// The body is not all here, so response.body is empty: it was over max_response_bytes
  /// (`error` empty), the connection broke or the deadline passed mid-body (`error` says so),
  /// or it came in a transfer coding besides chunked (`foreign_coding`).
  bool truncated = false;
  /// The body came in a transfer coding besides chunked (`gzip, chunked`), which this client
  /// does not undo: it is dropped, `truncated` set, rather than passed on as if plain.
  bool foreign_coding = false;
  /// A one-line reason for kNotSent, kNoAnswer, a body not all here, or a replaced status;
  /// never a URL, header or body.
  std::string error;
  /// How long forward() took, or forward_async() from the call to `done`.
  std::chrono::steady_clock::duration elapsed{};
};

/// How many threads run the io_context given to UpstreamPool::forward_async(). With one, the
/// exchange needs no strand: its handlers cannot overlap.
enum class LoopThreads { kOne, kMany };

/// UpstreamPool forwards requests to one upstream.
class UpstreamPool {
 public:
  /// UpstreamPool() connects lazily. An https upstream is verified against the system's
  /// default CA paths and the URL's host name.
  UpstreamPool(UpstreamUrl url, UpstreamOptions options);
  ~UpstreamPool();
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  /// forward() sends `request` unchanged (method, path, headers minus hop-by-hop and any
  /// incoming fence header, body), plus `X-Idempotency-Fence: fence` when set. Never throws
  /// but std::bad_alloc: transport failures are a reply kind. Never retries once a byte of the
  /// request may have reached the upstream. Blocks until the reply, running the exchange on the
  /// calling thread's own io_context.
  [[nodiscard]] UpstreamReply forward(const pubsub::PushRequest& request,
                                      std::optional<std::int64_t> fence) const;

  /// forward_async() forwards `request` (not null) as forward() does, without blocking: the
  /// exchange runs on a strand of its own on `io`, so any number of threads may run `io` (or,
  /// with LoopThreads::kOne, directly on `io`, which one thread alone must run), and
  /// `done` (not empty) gets the reply exactly once, on a thread running `io`. Idle connections
  /// are kept per `io`. Throws only std::bad_alloc, before anything starts (`done` is then never
  /// called); later a std::bad_alloc is a reply (kNotSent or kNoAnswer, as far as the request
  /// got). The exchange holds this pool's state and `request`, so the UpstreamPool may be
  /// destroyed while it is in flight; `io` must keep running until `done` (an io_context
  /// destroyed first drops the exchange and `done` uncalled).
  void forward_async(std::shared_ptr<const pubsub::PushRequest> request,
                     std::optional<std::int64_t> fence, boost::asio::io_context& io,
                     std::function<void(UpstreamReply)> done,
                     LoopThreads threads = LoopThreads::kMany) const;

  /// Impl is the pool's state (upstream_internal.h), named here for the exchange's own code.
  struct Impl;

 private:
  // Shared with the exchanges forward_async() has in flight.
  std::shared_ptr<const Impl> impl_;
};

/// is_hop_by_hop() says whether a header is connection-specific and so never forwarded.
[[nodiscard]] bool is_hop_by_hop(std::string_view name);

}  // namespace idempotency::gateway
