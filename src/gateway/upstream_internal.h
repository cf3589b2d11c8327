// UpstreamPool internals shared by its sources (never installed): where to connect
// (upstream_url.cc), the forwarded message (upstream_message.cc), one connection, its deadline
// watchdog and an io_context's idle connections (upstream_connections.cc), and the exchange, a
// chain of callbacks (upstream_exchange.cc). upstream_pool.cc runs it for both entry points.
//
// Thread safety: a Connection is used by one exchange at a time, and only on that exchange's
// executor (its watchdog's handler runs there too); IdleConnections is mutex-guarded.
#pragma once

// First: Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

// Boost 1.74 turns co_await on for clang only with libc++'s <experimental/coroutine>; with
// libstdc++, clang (clang-tidy's parser too) has C++20's <coroutine>, which Asio then uses.
#if defined(__clang__) && !defined(BOOST_ASIO_HAS_CO_AWAIT) && __has_include(<coroutine>)
#define BOOST_ASIO_HAS_CO_AWAIT 1
#endif

#include <openssl/ssl.h>

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idempotency/detail/field_syntax.h"
#include "upstream_pool.h"

namespace idempotency::gateway {
namespace upstream_detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using TlsStream = ssl::stream<tcp::socket>;

// Far above any sane response header, small enough that a hostile one cannot hurt.
inline constexpr std::uint32_t kHeaderLimit = 64 * 1024;
// At most this much is read at once, as Beast's own reads.
inline constexpr std::size_t kReadSize = 65'536;
// The most a connection's buffer holds. Beast bounds the head it parses (each of the status
// line and the fields to kHeaderLimit) but not a chunk's size line nor the trailer: an upstream
// that never ends one would grow the buffer until the upstream timeout. Room for a whole head
// and a read beyond it; reached, the read ends in buffer_overflow.
inline constexpr std::size_t kMaxBufferBytes = 2 * std::size_t{kHeaderLimit} + kReadSize;

// ---------------------------------------------------------------------------------------
// Where to connect (upstream_url.cc)

// Where to connect, split once from UpstreamUrl::origin.
struct Origin {
  bool valid = false;
  bool tls = false;
  std::string host;  // without IPv6 brackets: for the resolver, SNI and verification
  std::uint16_t port = 0;
  std::string authority;                     // host[:port] as written: the Host header
  std::optional<asio::ip::address> address;  // set for an IP literal: nothing to resolve
};

// parse_origin() splits an UpstreamUrl::origin; `valid` is false when it cannot be used.
Origin parse_origin(std::string_view origin);

// ---------------------------------------------------------------------------------------
// The forwarded message (upstream_message.cc)

// Error messages from Asio, Beast and OpenSSL are one line already; this makes sure.
std::string one_line(std::string s);

// Appends the request for the upstream, serialized (request line, header, body), to `out`, or
// says why it cannot be sent. Serialized once, so it goes out in one write.
std::optional<std::string> build_request(const pubsub::PushRequest& in,
                                         std::optional<std::int64_t> fence, const UpstreamUrl& url,
                                         const Origin& origin, std::string& out);

// Drops the hop-by-hop fields of `response` and those its Connection fields list. Run on what
// was read, however the read ended: the parser may stop before the header's end (a body over
// the limit).
void drop_hop_by_hop(pubsub::PushResponse& response);

// Puts in the space RFC 9112 §4 asks for before an empty reason phrase when a response in
// `buffer` starts with `HTTP/1.x DDD` CRLF without it: some servers send that, nginx reads it,
// and Beast refuses it, which would make every answer of such an app read as none (the push
// nacked, its key held, the work run again after the lease). Nothing else changes.
void add_missing_reason_space(beast::flat_buffer& buffer);

// Beast's strict HTTP/1 response parser, writing the status, every header field (a chunked
// body's trailer fields dropped) and the body straight into a PushResponse, instead of into
// Beast's message and then copied. drop_hop_by_hop() then leaves the end-to-end fields.
class ResponseParser : public http::basic_parser<false> {
 public:
  /// With `keep_content` false, only the status is kept; the fields and the body are dropped.
  explicit ResponseParser(bool keep_content = true) : keep_content_(keep_content) {}

  /// Whether a Transfer-Encoding field named a coding besides chunked.
  [[nodiscard]] bool foreign_coding() const { return codings_.codings() > codings_.chunked(); }

  /// Whether the response's own framing leaves the connection at a message boundary, by what
  /// its header said (the exchange also checks that nothing was read past it). Not so when its
  /// Transfer-Encoding does not end in chunked (the body ends at the close: RFC 9112 §6.3,
  /// whatever Content-Length says), when it has both Transfer-Encoding and Content-Length,
  /// when a 1xx or 204, which may carry neither, announced a body (its bytes may come later
  /// and be read as the next request's response), or after a 101.
  [[nodiscard]] bool reusable() const;

  [[nodiscard]] pubsub::PushResponse& response() { return response_; }

 private:
  using error_code = beast::error_code;
  using string_view = beast::string_view;

  void on_request_impl(http::verb method, string_view method_string, string_view target,
                       int version, error_code& ec) override;
  void on_response_impl(int code, string_view reason, int version, error_code& ec) override;
  void on_field_impl(http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;

  bool keep_content_;
  idempotency::detail::TransferCodings codings_;  // the Transfer-Encoding fields'
  pubsub::PushResponse response_;
};

// ---------------------------------------------------------------------------------------
// Connections and the idle ones (upstream_connections.cc)

// One connection to the upstream, plain or TLS, with the bytes read past the last response and
// a watchdog: a timer that closes the connection when a deadline passes, so that whatever
// operation is pending completes at once (operation_aborted) and tells how far it got.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Sockets and timer are made on `io`: a pooled connection outlives the exchange that made it.
  Connection(asio::io_context& io, ssl::context* tls);

  tcp::socket& socket() { return tls_ ? tls_->next_layer() : *plain_; }
  TlsStream* tls() { return tls_ ? &*tls_ : nullptr; }

  // Returns f(stream) for the stream requests and responses go over (f returns one type).
  template <class F>
  auto with_stream(F&& f) {
    return tls_ ? f(*tls_) : f(*plain_);
  }

  // Makes every pending operation complete at once (operation_aborted).
  void close();

  // Acknowledges what has arrived now instead of after the delayed-ACK timer (TCP_QUICKACK,
  // which lasts for one ACK). Called when a response's header is in and its body is not: an
  // upstream that writes header and body in two sends without TCP_NODELAY holds the body back
  // (Nagle) until that ACK, ~40 ms on every keep-alive request otherwise.
  void ack_now();

  // still_open() says whether an idle connection can carry a request: the peer has not
  // closed it (recv would return 0) nor sent anything unasked (a late or stray response).
  bool still_open();

  // Sends what a plain connection's socket takes now, without waiting: the bytes sent, and
  // `ec` set when the send failed (not when the socket is merely full).
  std::size_t send_now(std::string_view bytes, beast::error_code& ec);

  // Closes the connection at `deadline`, never racing the exchange. One deadline at a time:
  // disarm() before arming again. `on_strand` says several threads run the io_context: the
  // watchdog is then a wait of its own per deadline, its handler run on `executor` (the
  // exchange's strand) and cancelled by disarm(). Otherwise it is lazy, as the server's
  // deadlines are: a wait in progress that ends no later than the deadline stays, and when it
  // ends (on the loop's one thread, the exchange's) it waits again for whatever deadline is
  // armed then, so a keep-alive exchange queues and cancels no timer. A connection may be used
  // in both modes in turn.
  void arm(Clock::time_point deadline, const asio::any_io_executor& executor, bool on_strand);
  // Stops the watchdog. False when the connection must not be reused: it has been closed at
  // its deadline or, in the per-deadline mode, the handler that will close it is queued.
  bool disarm();
  // Whether the watchdog closed the connection: an operation that failed since then failed
  // because the deadline passed.
  [[nodiscard]] bool expired() const { return expired_; }

  beast::flat_buffer buffer;
  // The last request's bytes, kept for their capacity: the next request is written into it.
  std::string request;
  Clock::time_point idle_since{};

 private:
  std::optional<tcp::socket> plain_;
  std::optional<TlsStream> tls_;
  // Waits again for deadline_ (lazy mode), replacing any wait in progress.
  void watch();
  void on_watchdog(std::uint64_t generation);

  asio::steady_timer watchdog_;
  Clock::time_point deadline_{};
  std::uint64_t watch_generation_ = 0;  // the lazy wait in progress; older ones are stale
  bool armed_ = false;
  bool expired_ = false;
  bool lazy_ = false;      // armed in lazy mode
  bool watching_ = false;  // a lazy wait is in progress
};

// An idle connection, of one UpstreamPool.
struct IdleConnection {
  std::uint64_t pool_id = 0;
  std::weak_ptr<const int> pool_alive;  // expired once the UpstreamPool is gone
  std::shared_ptr<Connection> connection;
};

// The idle connections of one io_context, for every UpstreamPool that uses it: an Asio service,
// so they close when the io_context is destroyed and never outlive it. forward() uses its
// calling thread's io_context, so its connections are kept per thread; forward_async() those
// of the io_context it is given. Mutex-guarded: uncontended when one thread runs the io_context.
class IdleConnections : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;

  explicit IdleConnections(asio::execution_context& context) : service(context) {}

  // The most recently used idle connection of pool `pool` that is still usable, if any; on the
  // way, closes connections idle too long or whose pool is gone.
  std::shared_ptr<Connection> take(std::uint64_t pool, Clock::time_point now);
  // Keeps `connection` for pool `pool`, dropping that pool's oldest beyond `max`.
  void give_back(std::uint64_t pool, const std::shared_ptr<const int>& alive,
                 std::shared_ptr<Connection> connection, std::size_t max);

 private:
  void shutdown() override;

  std::mutex mutex_;
  std::vector<IdleConnection> idle_;  // oldest first
};

// The calling thread's own io_context, which forward() runs the exchange on.
asio::io_context& thread_io();

// Replies for a request that provably was not acted on, or may have been (upstream_reply.cc).
UpstreamReply not_sent(std::string error);
UpstreamReply no_answer(std::string error);

// The reply for a write that failed (`ec`) after `written` bytes: kNotSent only when plain TCP
// took none of it (`maybe_sent` cleared then); TLS counts plaintext, so any started TLS write
// may have put a record on the wire.
UpstreamReply write_failed(const beast::error_code& ec, std::size_t written, bool tls,
                           bool timed_out, bool& maybe_sent);

// The reply from what was read into `parser`, `ec` saying how the last read ended: no complete
// response header (kNoAnswer), or the final response minus its hop-by-hop fields, its body
// dropped (`truncated`) when `ec` is set or its transfer coding is not undone, and a status
// outside 100..599 replaced by a 502 of the client's own.
UpstreamReply read_reply(ResponseParser& parser, const beast::error_code& ec, bool timed_out);

}  // namespace upstream_detail

struct UpstreamPool::Impl {
  UpstreamUrl url;
  UpstreamOptions options;
  upstream_detail::Origin origin;
  // Keys this pool's idle connections in every io_context: an id, not the address, so a pool
  // created where a destroyed one lived never inherits its connections.
  std::uint64_t id = 0;
  // Idle connections hold it weakly, so any thread can drop those of a destroyed pool.
  std::shared_ptr<const int> alive = std::make_shared<const int>(0);
  // https only. Mutable: streams are made from it on any thread (SSL_new on a shared SSL_CTX
  // is thread-safe); it is never changed after the constructor.
  mutable std::optional<upstream_detail::ssl::context> tls;
  std::string setup_error;  // set when no request can be sent at all
  // Exchanges of forward_async() on a one-thread loop, begun and not finished: while others are
  // under way, a request is written at the end of the loop's pass (upstream_exchange.cc's
  // write()).
  mutable std::atomic<std::size_t> exchanges{0};

  // What the exchange does with std::bad_alloc: forward() lets it propagate; forward_async()
  // cannot, so it becomes a reply.
  enum class OnBadAlloc { kThrow, kReply };

  // Where the exchange's first step runs: here, on the calling thread (which must be one that
  // may run `executor`'s handlers), or posted to `executor`.
  enum class Begin { kNow, kPosted };

  // The exchange, from taking or opening a connection to the reply (upstream_exchange.cc), a
  // chain of callbacks on `executor`, an executor of `io`: a strand (`on_strand`) when several
  // threads run `io`, else `io`'s own, whose one thread then runs every step. `done` gets the reply
  // (`request` is held until then, and must live until then when its pointer owns nothing);
  // deadlines count from `start`. Transport failures are a reply kind. std::bad_alloc: thrown here
  // if the exchange cannot be set up; later, with kThrow, it propagates out of the handler that
  // met it (out of run_one()), with kReply it is a reply.
  static void exchange(std::shared_ptr<const Impl> impl,
                       std::shared_ptr<const pubsub::PushRequest> request,
                       std::optional<std::int64_t> fence, upstream_detail::asio::io_context& io,
                       const upstream_detail::asio::any_io_executor& executor,
                       upstream_detail::Clock::time_point start, OnBadAlloc on_bad_alloc,
                       Begin begin, bool on_strand, std::function<void(UpstreamReply)> done);

  // Opens `connection` (resolve, connect, TLS handshake) by `deadline`, for the exchange running
  // on `executor` (a strand when `on_strand`; upstream_connections.cc). On failure, says why
  // (nothing was sent).
  upstream_detail::asio::awaitable<std::string> connect(
      upstream_detail::asio::io_context& io, const upstream_detail::asio::any_io_executor& executor,
      bool on_strand, upstream_detail::Connection& connection,
      upstream_detail::Clock::time_point deadline) const;
};

}  // namespace idempotency::gateway
