// Connections to the upstream and the calling thread's idle ones: opening one (resolve,
// connect, TLS) by a deadline, and keeping it for reuse only while it is surely usable.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "upstream_internal.h"

namespace idempotency::gateway {

namespace upstream_detail {
namespace {

// App servers commonly close idle keep-alive connections after 2-5 s; reusing one the server
// is closing is the classic source of spurious failures, so older ones are not reused.
constexpr auto kMaxIdleAge = std::chrono::seconds(2);

}  // namespace

bool Connection::still_open() {
  if (buffer.size() != 0) return false;
  if (tls_ && SSL_pending(tls_->native_handle()) > 0) return false;
  char byte = 0;
  const auto n = ::recv(tcp().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void ThreadContext::evict(Clock::time_point now) {
  std::erase_if(idle, [&](const IdleConnection& c) {
    return c.pool_alive.expired() || now - c.connection->idle_since > kMaxIdleAge;
  });
}
std::unique_ptr<Connection> ThreadContext::take(std::uint64_t id) {
  for (auto it = idle.end(); it != idle.begin();) {
    --it;
    if (it->pool_id != id) continue;
    auto connection = std::move(it->connection);
    it = idle.erase(it);
    if (connection->still_open()) return connection;
  }
  return nullptr;
}
void ThreadContext::give_back(std::uint64_t id, const std::shared_ptr<const int>& alive,
                              std::unique_ptr<Connection> connection, std::size_t max) {
  if (max == 0) return;
  const auto mine = [&](const IdleConnection& c) { return c.pool_id == id; };
  if (static_cast<std::size_t>(std::count_if(idle.begin(), idle.end(), mine)) >= max) {
    idle.erase(std::find_if(idle.begin(), idle.end(), mine));
  }
  connection->idle_since = Clock::now();
  idle.push_back({id, alive, std::move(connection)});
}
ThreadContext& thread_context() {
  thread_local ThreadContext context;
  return context;
}

}  // namespace upstream_detail

using upstream_detail::Clock;
using upstream_detail::Connection;
using upstream_detail::Exchange;
using upstream_detail::one_line;
using upstream_detail::TlsStream;
namespace asio = upstream_detail::asio;
namespace beast = upstream_detail::beast;
namespace ssl = upstream_detail::ssl;
using tcp = upstream_detail::tcp;

std::string UpstreamPool::Impl::connect(asio::io_context& ioc, Clock::time_point deadline,
                                        std::unique_ptr<Connection>& out) const {
  auto x =
      std::make_shared<Exchange>(ioc, std::make_unique<Connection>(ioc, tls ? &*tls : nullptr));
  if (origin.address) {
    x->endpoints.emplace_back(*origin.address, origin.port);
  } else {
    // Resolved for each new connection, so DNS changes are followed.
    x->begin();
    x->resolver.async_resolve(
        origin.host, std::to_string(origin.port), tcp::resolver::numeric_service,
        [self = x->shared_from_this()](const beast::error_code& ec,
                                       const tcp::resolver::results_type& results) {
          if (!ec) {
            for (const auto& entry : results) self->endpoints.push_back(entry.endpoint());
          }
          self->finish(ec, 0);
        });
    if (!x->await(ioc, deadline, /*settle=*/false)) return "resolving the host timed out";
    if (x->ec) return "resolve: " + one_line(x->ec.message());
  }

  x->begin();
  x->connection->tcp().async_connect(
      x->endpoints, [self = x->shared_from_this()](const beast::error_code& ec,
                                                   const tcp::endpoint&) { self->finish(ec, 0); });
  if (!x->await(ioc, deadline)) return "connect timed out";
  if (x->ec) return "connect: " + one_line(x->ec.message());
  // Beast writes header and body in one gathered sendmsg; without Nagle nothing holds it back
  // waiting for an ACK (delayed up to 40 ms) either.
  beast::error_code ec;
  x->connection->tcp().socket().set_option(tcp::no_delay(true), ec);
  if (ec) return "TCP_NODELAY: " + one_line(ec.message());

  if (TlsStream* stream = x->connection->tls()) {
    // No SNI for an IP literal (RFC 6066 §3); verification then matches the IP SAN.
    if (!origin.address &&
        SSL_set_tlsext_host_name(stream->native_handle(), origin.host.c_str()) != 1) {
      return "TLS: the server name cannot be set";
    }
    stream->set_verify_mode(ssl::verify_peer);
    stream->set_verify_callback(ssl::host_name_verification(origin.host));
    x->begin();
    stream->async_handshake(
        ssl::stream_base::client,
        [self = x->shared_from_this()](const beast::error_code& e) { self->finish(e, 0); });
    if (!x->await(ioc, deadline)) return "TLS handshake timed out";
    if (x->ec) return "TLS handshake: " + one_line(x->ec.message());
  }
  out = std::move(x->connection);
  return {};
}

}  // namespace idempotency::gateway
