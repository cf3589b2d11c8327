// UpstreamPool internals shared by its sources (never installed): where to connect
// (upstream_url.cc), the forwarded message (upstream_message.cc), one connection and the
// calling thread's idle ones (upstream_connections.cc), and one exchange's asynchronous steps
// (upstream_exchange.cc). upstream_pool.cc ties them together.
//
// Thread safety: a Connection, an Exchange and a ThreadContext belong to one thread.
#pragma once

#include <openssl/ssl.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "upstream_pool.h"

namespace idempotency::gateway {
namespace upstream_detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

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

// Builds the request for the upstream, or says why it cannot be sent.
std::optional<std::string> build_request(const pubsub::PushRequest& in,
                                         std::optional<std::int64_t> fence, const UpstreamUrl& url,
                                         const Origin& origin,
                                         http::request<http::string_body>& out);

// The final response's status and end-to-end headers.
void take_head(const http::response<http::string_body>& message, pubsub::PushResponse& out);

// ---------------------------------------------------------------------------------------
// Connections and the per-thread pool (upstream_connections.cc)

// One connection to the upstream, plain or TLS, with the bytes read past the last response.
class Connection {
 public:
  Connection(asio::io_context& ioc, ssl::context* tls) {
    if (tls != nullptr) {
      tls_.emplace(ioc, *tls);
    } else {
      plain_.emplace(ioc);
    }
  }

  beast::tcp_stream& tcp() { return tls_ ? tls_->next_layer() : *plain_; }
  TlsStream* tls() { return tls_ ? &*tls_ : nullptr; }

  // Calls f with the stream requests and responses go over.
  template <class F>
  void with_stream(F&& f) {
    if (tls_) {
      f(*tls_);
    } else {
      f(*plain_);
    }
  }

  // Makes every pending operation complete at once (operation_aborted).
  void close() { tcp().close(); }

  // still_open() says whether an idle connection can carry a request: the peer has not
  // closed it (recv would return 0) nor sent anything unasked (a late or stray response).
  bool still_open();

  beast::flat_buffer buffer;
  Clock::time_point idle_since{};

 private:
  std::optional<beast::tcp_stream> plain_;
  std::optional<TlsStream> tls_;
};

// An idle connection in a thread's pool.
struct IdleConnection {
  std::uint64_t pool_id = 0;
  std::weak_ptr<const int> pool_alive;  // expired once the UpstreamPool is gone
  std::unique_ptr<Connection> connection;
};

// Everything a calling thread keeps: its io_context and idle connections.
struct ThreadContext {
  // Concurrency hint 1: only this thread ever runs it.
  asio::io_context ioc{1};
  // Oldest first. Declared after ioc, so these sockets close before the io_context goes.
  std::vector<IdleConnection> idle;

  // Closes connections idle too long or whose pool is gone (other threads may hold theirs).
  void evict(Clock::time_point now);
  // The most recently used idle connection of pool `id` that is still usable, if any.
  std::unique_ptr<Connection> take(std::uint64_t id);
  // Keeps `connection` for pool `id`, dropping that pool's oldest beyond `max`.
  void give_back(std::uint64_t id, const std::shared_ptr<const int>& alive,
                 std::unique_ptr<Connection> connection, std::size_t max);
};

// The calling thread's context.
ThreadContext& thread_context();

// ---------------------------------------------------------------------------------------
// One exchange (upstream_exchange.cc)

// One step of an exchange in flight. Completion handlers own it (shared_ptr), so an operation
// abandoned at a deadline can never touch freed memory, whenever it finally completes.
struct Exchange : std::enable_shared_from_this<Exchange> {
  Exchange(asio::io_context& ioc, std::unique_ptr<Connection> c)
      : resolver(ioc), connection(std::move(c)) {}

  tcp::resolver resolver;
  std::unique_ptr<Connection> connection;
  std::vector<tcp::endpoint> endpoints;
  http::request<http::string_body> request;
  std::optional<http::response_parser<http::string_body>> parser;

  // The current operation's outcome.
  bool done = false;
  beast::error_code ec;
  std::size_t bytes = 0;

  void begin() {
    done = false;
    ec = {};
    bytes = 0;
  }

  void finish(const beast::error_code& e, std::size_t n) {
    ec = e;
    bytes = n;
    done = true;
  }

  auto completion() {
    return [self = shared_from_this()](const beast::error_code& e, std::size_t n) {
      self->finish(e, n);
    };
  }

  // Runs the calling thread's io_context until the current operation completes or `deadline`
  // passes. On expiry it closes the connection and runs the aborted operation's completion,
  // which comes at once, so `bytes` says what was written; a resolve cannot be interrupted and
  // is left to finish on its own (`settle` false). Returns false on expiry.
  bool await(asio::io_context& ioc, Clock::time_point deadline, bool settle = true);
};

// Replies for a request that provably was not acted on, or may have been.
UpstreamReply not_sent(std::string error);
UpstreamReply no_answer(std::string error);

}  // namespace upstream_detail

struct UpstreamPool::Impl {
  UpstreamUrl url;
  UpstreamOptions options;
  upstream_detail::Origin origin;
  // Keys this pool's idle connections in every thread: an id, not the address, so a pool
  // created where a destroyed one lived never inherits its connections.
  std::uint64_t id = 0;
  // Idle connections hold it weakly, so any thread can drop those of a destroyed pool.
  std::shared_ptr<const int> alive = std::make_shared<const int>(0);
  // https only. Mutable: streams are made from it on any thread (SSL_new on a shared SSL_CTX
  // is thread-safe); it is never changed after the constructor.
  mutable std::optional<upstream_detail::ssl::context> tls;
  std::string setup_error;  // set when no request can be sent at all

  // Opens a new connection by `deadline` (upstream_connections.cc); on failure, says why (nothing
  // was sent).
  std::string connect(upstream_detail::asio::io_context& ioc,
                      upstream_detail::Clock::time_point deadline,
                      std::unique_ptr<upstream_detail::Connection>& out) const;
  // One attempt over `connection` (upstream_exchange.cc). `retry` comes in true for an idle
  // connection reused from the pool and goes out true when that connection was dead and the request
  // provably never left (then `request` is handed back for a fresh connection). `maybe_sent` says
  // whether any byte may have reached the upstream.
  UpstreamReply exchange(
      upstream_detail::asio::io_context& ioc,
      std::unique_ptr<upstream_detail::Connection> connection,
      upstream_detail::http::request<upstream_detail::http::string_body>& request,
      upstream_detail::Clock::time_point deadline, bool& retry, bool& maybe_sent) const;
};

}  // namespace idempotency::gateway
