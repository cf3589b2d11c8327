// Connections to the upstream: opening one (resolve, connect, TLS; a coroutine) by a deadline on
// the exchange's executor, the watchdog timer that enforces deadlines by closing the connection,
// and an io_context's idle connections, kept for reuse only while surely usable.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "upstream_internal.h"

namespace idempotency::gateway {

namespace upstream_detail {
namespace {

// App servers commonly close idle keep-alive connections after 2-5 s (gunicorn's default is
// 2 s); reusing one the server is closing is the classic source of spurious failures, and here
// of a push held for its lease (the request was sent, no answer came), so a connection is
// reused only well inside the shortest of those.
constexpr auto kMaxIdleAge = std::chrono::seconds(1);

// A lazy wait ends this soon at the latest: a wait in progress is work that keeps the
// io_context's run() from returning, and the server's shutdown joins its event loop, so an idle
// connection must not hold it for a whole upstream timeout. Re-arming ten times a second per
// busy connection costs nothing next to a timer queued and cancelled per exchange.
constexpr auto kLazyWaitHorizon = std::chrono::milliseconds(100);

}  // namespace

Connection::Connection(asio::io_context& io, ssl::context* tls) : watchdog_(io) {
  buffer.max_size(kMaxBufferBytes);
  if (tls != nullptr) {
    tls_.emplace(io, *tls);
  } else {
    plain_.emplace(io);
  }
}

void Connection::close() {
  boost::system::error_code ignored;
  socket().close(ignored);
}

void Connection::ack_now() {
  const int on = 1;
  // Best effort: where the option is missing, the ACK just comes when the kernel sends it.
  (void)::setsockopt(socket().native_handle(), IPPROTO_TCP, TCP_QUICKACK, &on, sizeof on);
}

bool Connection::still_open() {
  if (buffer.size() != 0) return false;
  if (tls_ && SSL_pending(tls_->native_handle()) > 0) return false;
  char byte = 0;
  const auto n = ::recv(socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

std::size_t Connection::send_now(std::string_view bytes, beast::error_code& ec) {
  ec = {};
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const auto n = ::send(socket().native_handle(), bytes.data() + sent, bytes.size() - sent,
                          MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
    } else if (errno != EINTR) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        ec.assign(errno, boost::system::system_category());
      }
      break;
    }
  }
  return sent;
}

void Connection::arm(Clock::time_point deadline, const asio::any_io_executor& executor,
                     bool on_strand) {
  armed_ = true;
  deadline_ = deadline;
  lazy_ = !on_strand;
  if (lazy_) {
    if (!watching_ || deadline < watchdog_.expiry()) watch();
    return;
  }
  // Any lazy wait ends here (cancelled, or stale if already queued): the next lazy arm()
  // starts one of its own.
  watching_ = false;
  ++watch_generation_;
  watchdog_.expires_at(deadline);
  // The handler owns the connection: once disarm() finds it queued, the connection may be
  // dropped before it runs.
  watchdog_.async_wait(asio::bind_executor(
      executor, [self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec) return;  // disarmed
        self->expired_ = true;
        self->close();
      }));
}

void Connection::watch() {
  watching_ = true;
  const auto generation = ++watch_generation_;
  // A wait in progress ends as cancelled, or stale below.
  watchdog_.expires_at(std::min(deadline_, Clock::now() + kLazyWaitHorizon));
  // Only one thread runs the io_context, the exchange's: the handler never races it. It does
  // not own the connection, which a pool may hold idle with this wait in progress.
  watchdog_.async_wait([weak = weak_from_this(), generation](const boost::system::error_code& ec) {
    if (ec) return;  // replaced, or the connection is gone
    if (auto self = weak.lock()) self->on_watchdog(generation);
  });
}

void Connection::on_watchdog(std::uint64_t generation) {
  if (generation != watch_generation_) return;  // queued just before an earlier deadline's wait
  watching_ = false;
  if (!armed_) return;  // idle: the next arm() starts a wait
  if (Clock::now() < deadline_) {
    watch();
    return;
  }
  expired_ = true;
  close();
}

bool Connection::disarm() {
  if (!armed_) return !expired_;
  armed_ = false;
  // Lazy: had the wait found the deadline passed, it would have closed the connection already.
  if (lazy_) return !expired_;
  // 0 cancelled: the handler has run or is queued to, with success.
  return watchdog_.cancel() > 0;
}

std::shared_ptr<Connection> IdleConnections::take(std::uint64_t pool, Clock::time_point now) {
  for (;;) {
    std::shared_ptr<Connection> connection;
    std::vector<IdleConnection> gone;  // closed once the lock is released
    {
      const std::lock_guard lock(mutex_);
      // Stable: take() reuses the newest and give_back() drops the oldest, by their order.
      const auto stale =
          std::stable_partition(idle_.begin(), idle_.end(), [&](const IdleConnection& c) {
            return !c.pool_alive.expired() && now - c.connection->idle_since <= kMaxIdleAge;
          });
      if (stale != idle_.end()) {
        gone.assign(std::make_move_iterator(stale), std::make_move_iterator(idle_.end()));
        idle_.erase(stale, idle_.end());
      }
      const auto mine = std::find_if(idle_.rbegin(), idle_.rend(),
                                     [&](const IdleConnection& c) { return c.pool_id == pool; });
      if (mine == idle_.rend()) return nullptr;
      connection = std::move(mine->connection);
      idle_.erase(std::next(mine).base());
    }
    if (connection->still_open()) return connection;
  }
}

void IdleConnections::give_back(std::uint64_t pool, const std::shared_ptr<const int>& alive,
                                std::shared_ptr<Connection> connection, std::size_t max) {
  if (max == 0) return;
  connection->idle_since = Clock::now();
  std::shared_ptr<Connection> dropped;  // closed once the lock is released
  const std::lock_guard lock(mutex_);
  const auto mine = [&](const IdleConnection& c) { return c.pool_id == pool; };
  if (static_cast<std::size_t>(std::count_if(idle_.begin(), idle_.end(), mine)) >= max) {
    const auto oldest = std::find_if(idle_.begin(), idle_.end(), mine);
    dropped = std::move(oldest->connection);
    idle_.erase(oldest);
  }
  idle_.push_back({pool, alive, std::move(connection)});
}

void IdleConnections::shutdown() {
  const std::lock_guard lock(mutex_);
  idle_.clear();
}

asio::io_context& thread_io() {
  // Concurrency hint 1: only this thread ever runs it.
  thread_local asio::io_context io{1};
  return io;
}

}  // namespace upstream_detail

using upstream_detail::Clock;
using upstream_detail::Connection;
using upstream_detail::one_line;
using upstream_detail::TlsStream;
namespace asio = upstream_detail::asio;
namespace ssl = upstream_detail::ssl;
using tcp = upstream_detail::tcp;

namespace {

// One resolve in flight. A resolve cannot be interrupted (getaddrinfo runs on Asio's resolver
// thread), so at the deadline the exchange stops waiting and leaves it to finish on its own:
// its handler, not the coroutine's frame, owns this.
struct Resolution {
  explicit Resolution(asio::io_context& io) : resolver(io), wake(io) {}
  tcp::resolver resolver;
  asio::steady_timer wake;  // the coroutine waits on it; the handler cancels it
  bool done = false;
  boost::system::error_code ec;
  tcp::resolver::results_type results;
};

}  // namespace

asio::awaitable<std::string> UpstreamPool::Impl::connect(asio::io_context& io,
                                                         const asio::any_io_executor& executor,
                                                         bool on_strand, Connection& connection,
                                                         Clock::time_point deadline) const {
  const auto token = [](boost::system::error_code& ec) {
    return asio::redirect_error(asio::use_awaitable, ec);
  };
  boost::system::error_code ec;
  std::vector<tcp::endpoint> endpoints;
  if (origin.address) {
    endpoints.emplace_back(*origin.address, origin.port);
  } else {
    // Resolved for each new connection, so DNS changes are followed.
    auto r = std::make_shared<Resolution>(io);
    r->wake.expires_at(deadline);
    r->resolver.async_resolve(
        origin.host, std::to_string(origin.port), tcp::resolver::numeric_service,
        asio::bind_executor(
            executor, [r](const boost::system::error_code& e, tcp::resolver::results_type results) {
              r->done = true;
              r->ec = e;
              r->results = std::move(results);
              r->wake.cancel();
            }));
    co_await r->wake.async_wait(token(ec));
    if (!r->done) {
      r->resolver.cancel();
      co_return "resolving the host timed out";
    }
    if (r->ec) co_return "resolve: " + one_line(r->ec.message());
    for (const auto& entry : r->results) endpoints.push_back(entry.endpoint());
  }

  connection.arm(deadline, executor, on_strand);
  co_await asio::async_connect(connection.socket(), endpoints, token(ec));
  if (ec)
    co_return connection.expired() ? "connect timed out" : "connect: " + one_line(ec.message());
  // The request goes out in one write; without Nagle nothing holds it back waiting for an ACK
  // (delayed up to 40 ms) either. Set once per connection, never per request.
  connection.socket().set_option(tcp::no_delay(true), ec);
  if (ec) co_return "TCP_NODELAY: " + one_line(ec.message());

  if (TlsStream* stream = connection.tls()) {
    // No SNI for an IP literal (RFC 6066 §3); verification then matches the IP SAN.
    if (!origin.address &&
        SSL_set_tlsext_host_name(stream->native_handle(), origin.host.c_str()) != 1) {
      co_return "TLS: the server name cannot be set";
    }
    stream->set_verify_mode(ssl::verify_peer);
    stream->set_verify_callback(ssl::host_name_verification(origin.host));
    co_await stream->async_handshake(ssl::stream_base::client, token(ec));
    if (ec) {
      co_return connection.expired() ? "TLS handshake timed out"
                                     : "TLS handshake: " + one_line(ec.message());
    }
  }
  // The watchdog fired just as the connection came up: it is, or is about to be, closed.
  if (!connection.disarm())
    co_return connection.tls() ? "TLS handshake timed out" : "connect timed out";
  co_return std::string();
}

}  // namespace idempotency::gateway
