#include "upstream_pool.h"

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <cerrno>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace idempotency::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// Far above any sane response header, small enough that a hostile one cannot hurt.
constexpr std::uint32_t kHeaderLimit = 64 * 1024;
// App servers commonly close idle keep-alive connections after 2-5 s; reusing one the server
// is closing is the classic source of spurious failures, so older ones are not reused.
constexpr auto kMaxIdleAge = std::chrono::seconds(2);
// beast::http::fields keeps name and value lengths in 16 bits and throws beyond.
constexpr std::size_t kMaxFieldBytes = 65'000;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return std::string(s.substr(first, last - first + 1));
}

// The header names a `Connection` header lists are hop-by-hop for this message too.
std::set<std::string> connection_tokens(const std::vector<pubsub::Header>& headers) {
  std::set<std::string> tokens;
  for (const auto& h : headers) {
    if (!iequals(h.name, "Connection")) continue;
    std::size_t start = 0;
    while (start <= h.value.size()) {
      const auto comma = h.value.find(',', start);
      const auto end = comma == std::string::npos ? h.value.size() : comma;
      if (auto token = trim(std::string_view(h.value).substr(start, end - start)); !token.empty()) {
        tokens.insert(lower(token));
      }
      start = end + 1;
    }
  }
  return tokens;
}

// RFC 9110 §5.6.2: token = 1*tchar.
bool is_token(std::string_view s) {
  constexpr std::string_view kSymbols = "!#$%&'*+-.^_`|~";
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           kSymbols.find(c) != std::string_view::npos;
  });
}

// A field value may hold HTAB, SP, VCHAR and obs-text, never another control character: a CR
// or LF would let a value smuggle a header or a request of its own.
bool is_field_value(std::string_view s) {
  return std::none_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && u != '\t') || u == 0x7f;
  });
}

// A request target is sent as is; it must not end the request line early.
bool is_request_target(std::string_view s) {
  return !s.empty() && std::none_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f;
  });
}

// Error messages from Asio, Beast and OpenSSL are one line already; this makes sure.
std::string one_line(std::string s) {
  std::replace_if(
      s.begin(), s.end(), [](char c) { return c == '\r' || c == '\n'; }, ' ');
  return s;
}

// Where to connect, split once from UpstreamUrl::origin.
struct Origin {
  bool valid = false;
  bool tls = false;
  std::string host;  // without IPv6 brackets: for the resolver, SNI and verification
  std::uint16_t port = 0;
  std::string authority;                     // host[:port] as written: the Host header
  std::optional<asio::ip::address> address;  // set for an IP literal: nothing to resolve
};

Origin parse_origin(std::string_view origin) {
  Origin out;
  if (origin.rfind("http://", 0) == 0) {
    origin.remove_prefix(7);
  } else if (origin.rfind("https://", 0) == 0) {
    origin.remove_prefix(8);
    out.tls = true;
  } else {
    return out;
  }
  out.authority = std::string(origin);
  std::string_view host = origin;
  std::string_view port;
  if (origin.rfind('[', 0) == 0) {
    const auto close = origin.find(']');
    if (close == std::string_view::npos) return out;
    host = origin.substr(1, close - 1);
    const auto rest = origin.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return out;
      port = rest.substr(1);
    }
  } else if (const auto colon = origin.rfind(':'); colon != std::string_view::npos) {
    host = origin.substr(0, colon);
    port = origin.substr(colon + 1);
  }
  if (host.empty() || host.find_first_of("/?#@ ") != std::string_view::npos) return out;
  if (port.empty()) {
    out.port = out.tls ? 443 : 80;
  } else {
    unsigned value = 0;
    for (char c : port) {
      if (std::isdigit(static_cast<unsigned char>(c)) == 0 || port.size() > 5) return out;
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value > 65535) return out;
    out.port = static_cast<std::uint16_t>(value);
  }
  out.host = std::string(host);
  boost::system::error_code ec;
  if (auto address = asio::ip::make_address(out.host, ec); !ec) out.address = address;
  out.valid = true;
  return out;
}

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
  bool still_open() {
    if (buffer.size() != 0) return false;
    if (tls_ && SSL_pending(tls_->native_handle()) > 0) return false;
    char byte = 0;
    const auto n = ::recv(tcp().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

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
  void evict(Clock::time_point now) {
    std::erase_if(idle, [&](const IdleConnection& c) {
      return c.pool_alive.expired() || now - c.connection->idle_since > kMaxIdleAge;
    });
  }

  // The most recently used idle connection of pool `id` that is still usable, if any.
  std::unique_ptr<Connection> take(std::uint64_t id) {
    for (auto it = idle.end(); it != idle.begin();) {
      --it;
      if (it->pool_id != id) continue;
      auto connection = std::move(it->connection);
      it = idle.erase(it);
      if (connection->still_open()) return connection;
    }
    return nullptr;
  }

  // Keeps `connection` for pool `id`, dropping that pool's oldest beyond `max`.
  void give_back(std::uint64_t id, const std::shared_ptr<const int>& alive,
                 std::unique_ptr<Connection> connection, std::size_t max) {
    if (max == 0) return;
    const auto mine = [&](const IdleConnection& c) { return c.pool_id == id; };
    if (static_cast<std::size_t>(std::count_if(idle.begin(), idle.end(), mine)) >= max) {
      idle.erase(std::find_if(idle.begin(), idle.end(), mine));
    }
    connection->idle_since = Clock::now();
    idle.push_back({id, alive, std::move(connection)});
  }
};

ThreadContext& thread_context() {
  thread_local ThreadContext context;
  return context;
}

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
  bool await(asio::io_context& ioc, Clock::time_point deadline, bool settle = true) {
    while (!done) {
      if (ioc.stopped()) ioc.restart();
      if (ioc.run_one_until(deadline) == 0 && !done &&
          (Clock::now() >= deadline || ioc.stopped())) {
        resolver.cancel();
        if (connection) connection->close();
        while (settle && !done) {
          if (ioc.stopped()) ioc.restart();
          if (ioc.run_one_for(std::chrono::milliseconds(500)) == 0) break;
        }
        return false;
      }
    }
    return true;
  }
};

// Builds the request for the upstream, or says why it cannot be sent.
std::optional<std::string> build_request(const pubsub::PushRequest& in,
                                         std::optional<std::int64_t> fence, const UpstreamUrl& url,
                                         const Origin& origin,
                                         http::request<http::string_body>& out) {
  if (!is_token(in.method)) return "the request method is not a token";
  if (in.method == "CONNECT") return "CONNECT is not forwarded";
  std::string target = url.base_path + (in.path.empty() ? "/" : in.path);
  if (!is_request_target(target)) return "the request target has a space or control character";
  out.version(11);
  out.method_string(in.method);
  out.target(target);
  out.set(http::field::host, origin.authority);
  const auto listed = connection_tokens(in.headers);
  for (const auto& h : in.headers) {
    // The server in front rejects malformed headers; this is defense in depth, as is never
    // asking for 100-continue (the body goes with the header in one write).
    if (is_hop_by_hop(h.name) || listed.count(lower(h.name)) != 0 ||
        iequals(h.name, kFenceHeader) || iequals(h.name, "Expect") || !is_token(h.name) ||
        !is_field_value(h.value) || h.name.size() > kMaxFieldBytes ||
        h.value.size() > kMaxFieldBytes) {
      continue;
    }
    out.insert(h.name, h.value);
  }
  if (fence) out.set(kFenceHeader, std::to_string(*fence));
  out.body() = in.body;
  out.prepare_payload();
  return std::nullopt;
}

UpstreamReply not_sent(std::string error) {
  UpstreamReply reply;
  reply.kind = UpstreamReply::Kind::kNotSent;
  reply.error = std::move(error);
  return reply;
}

UpstreamReply no_answer(std::string error) {
  UpstreamReply reply;
  reply.kind = UpstreamReply::Kind::kNoAnswer;
  reply.error = std::move(error);
  return reply;
}

// The final response's status and end-to-end headers.
void take_head(const http::response<http::string_body>& message, pubsub::PushResponse& out) {
  out.status = static_cast<int>(message.result_int());
  std::vector<pubsub::Header> all;
  for (const auto& field : message) {
    all.push_back({std::string(field.name_string()), std::string(field.value())});
  }
  const auto listed = connection_tokens(all);
  for (auto& h : all) {
    if (is_hop_by_hop(h.name) || listed.count(lower(h.name)) != 0) continue;
    out.headers.push_back(std::move(h));
  }
}

std::atomic<std::uint64_t> next_pool_id{1};

}  // namespace

bool is_hop_by_hop(std::string_view name) {
  // Host and Content-Length are not hop-by-hop, but the client writes its own for the new hop.
  for (std::string_view h :
       {"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
        "TE", "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Content-Length"}) {
    if (iequals(name, h)) return true;
  }
  return false;
}

UpstreamUrl parse_upstream_url(const std::string& url) {
  std::string_view rest(url);
  std::string scheme;
  if (rest.rfind("http://", 0) == 0) {
    scheme = "http";
    rest.remove_prefix(7);
  } else if (rest.rfind("https://", 0) == 0) {
    scheme = "https";
    rest.remove_prefix(8);
  } else {
    throw std::invalid_argument("the URL must start with http:// or https://");
  }
  const auto slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  std::string path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  if (authority.empty()) throw std::invalid_argument("the URL has no host");
  if (authority.find('@') != std::string_view::npos) {
    throw std::invalid_argument("the URL must not carry credentials");
  }
  if (path.find_first_of("?#") != std::string::npos) {
    throw std::invalid_argument("the URL must not have a query or fragment");
  }
  // host[:port] or [v6][:port]
  const auto close = authority.rfind(']');
  const auto colon = authority.rfind(':');
  if (colon != std::string_view::npos && (close == std::string_view::npos || colon > close)) {
    const std::string_view port = authority.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }) ||
        std::stoi(std::string(port)) > 65535) {
      throw std::invalid_argument("the URL's port is not a number from 0 to 65535");
    }
    if (colon == 0) throw std::invalid_argument("the URL has no host");
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  return {.origin = scheme + "://" + std::string(authority), .base_path = std::move(path)};
}

struct UpstreamPool::Impl {
  UpstreamUrl url;
  UpstreamOptions options;
  Origin origin;
  // Keys this pool's idle connections in every thread: an id, not the address, so a pool
  // created where a destroyed one lived never inherits its connections.
  std::uint64_t id = next_pool_id.fetch_add(1, std::memory_order_relaxed);
  // Idle connections hold it weakly, so any thread can drop those of a destroyed pool.
  std::shared_ptr<const int> alive = std::make_shared<const int>(0);
  // https only. Mutable: streams are made from it on any thread (SSL_new on a shared SSL_CTX
  // is thread-safe); it is never changed after the constructor.
  mutable std::optional<ssl::context> tls;
  std::string setup_error;  // set when no request can be sent at all

  // Opens a new connection by `deadline`; on failure, says why (nothing was sent).
  std::string connect(asio::io_context& ioc, Clock::time_point deadline,
                      std::unique_ptr<Connection>& out) const;
  // One attempt over `connection`. `retry` comes in true for an idle connection reused from
  // the pool and goes out true when that connection was dead and the request provably never
  // left (then `request` is handed back for a fresh connection). `maybe_sent` says whether any
  // byte may have reached the upstream.
  UpstreamReply exchange(asio::io_context& ioc, std::unique_ptr<Connection> connection,
                         http::request<http::string_body>& request, Clock::time_point deadline,
                         bool& retry, bool& maybe_sent) const;
};

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

UpstreamReply UpstreamPool::Impl::exchange(asio::io_context& ioc,
                                           std::unique_ptr<Connection> connection,
                                           http::request<http::string_body>& request,
                                           Clock::time_point deadline, bool& retry,
                                           bool& maybe_sent) const {
  const bool reused = retry;
  retry = false;
  if (Clock::now() >= deadline) return not_sent("timed out before the request was written");
  const bool is_tls = connection->tls() != nullptr;
  auto x = std::make_shared<Exchange>(ioc, std::move(connection));
  // The request is lent to the exchange while it is written; a retry needs it back.
  x->request = std::move(request);

  // One async_write: Beast gathers header and body into a single sendmsg (one TLS record).
  maybe_sent = true;
  x->begin();
  x->connection->with_stream(
      [&](auto& stream) { http::async_write(stream, x->request, x->completion()); });
  const bool written = x->await(ioc, deadline);
  if (!written || x->ec) {
    // Plain TCP reports exactly what the kernel took; TLS counts plaintext, so any started TLS
    // write may have put a record on the wire.
    if (!is_tls && x->done && x->bytes == 0) {
      maybe_sent = false;
      if (reused && written) {
        request = std::move(x->request);
        retry = true;  // the idle connection died under us; nothing left, so a retry is safe
      }
      return not_sent(written ? "write: " + one_line(x->ec.message())
                              : "timed out before the request was written");
    }
    return no_answer(written ? "the connection broke while writing: " + one_line(x->ec.message())
                             : "timed out writing the request");
  }

  Connection& conn = *x->connection;
  const bool head = x->request.method() == http::verb::head;
  for (;;) {
    auto& parser = x->parser.emplace();
    parser.header_limit(kHeaderLimit);
    parser.body_limit(std::uint64_t{options.max_response_bytes});
    if (head) parser.skip(true);  // a HEAD response has a Content-Length but no body
    const auto read = [&](bool header_only) {
      x->begin();
      conn.with_stream([&](auto& stream) {
        if (header_only) {
          http::async_read_header(stream, conn.buffer, parser, x->completion());
        } else {
          http::async_read(stream, conn.buffer, parser, x->completion());
        }
      });
      return x->await(ioc, deadline);
    };

    // The header first, on its own: Boost 1.74's parser, reading eagerly, loses its own
    // body_limit error for a too-large Content-Length when body bytes came with the header
    // (basic_parser::put loops on into the body), and would then read the whole body.
    bool finished = read(/*header_only=*/true);
    beast::error_code ec = finished ? x->ec : beast::error_code(beast::error::timeout);
    const bool header_complete = parser.is_header_done() || ec == http::error::body_limit;
    if (!header_complete) {
      if (!finished) return no_answer("timed out waiting for the response");
      if (ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::error::connection_reset) {
        return no_answer("the connection closed before a response: " + one_line(ec.message()));
      }
      return no_answer("no valid HTTP response: " + one_line(ec.message()));
    }
    if (!ec && parser.is_done() && parser.get().result_int() / 100 == 1 &&
        parser.get().result_int() != 101) {
      continue;  // interim: the final response follows
    }
    if (!ec && !parser.is_done()) {
      // Chunked and close-delimited bodies are held to body_limit as they arrive.
      finished = read(/*header_only=*/false);
      ec = finished ? x->ec : beast::error_code(beast::error::timeout);
    }

    UpstreamReply reply;
    take_head(parser.get(), reply.response);
    if (ec) {
      // The status and header arrived, so the upstream answered; the body did not all come.
      reply.truncated = true;
      if (ec != http::error::body_limit) {
        reply.error = finished ? "the response body broke off: " + one_line(ec.message())
                               : "timed out reading the response body";
      }
      conn.close();
      return reply;
    }
    const int status = reply.response.status;
    reply.response.body = std::move(parser.get().body());
    // Only a connection whose response ended cleanly, by its length, with nothing unasked
    // after it, is known to be at a message boundary.
    if (parser.keep_alive() && status != 101 && conn.buffer.size() == 0) {
      thread_context().give_back(id, alive, std::move(x->connection), options.max_idle_per_thread);
    } else {
      conn.close();
    }
    return reply;
  }
}

UpstreamPool::UpstreamPool(UpstreamUrl url, UpstreamOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->url = std::move(url);
  impl_->options = options;
  impl_->origin = parse_origin(impl_->url.origin);
  if (!impl_->origin.valid) {
    impl_->setup_error = "the upstream URL is not valid";
    return;
  }
  if (impl_->origin.tls) {
    try {
      auto& context = impl_->tls.emplace(ssl::context::tls_client);
      SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION);
      boost::system::error_code ec;
      context.set_default_verify_paths(ec);
      if (!ec) context.set_verify_mode(ssl::verify_peer, ec);
      if (ec) impl_->setup_error = "TLS setup: " + one_line(ec.message());
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      impl_->tls.reset();
      impl_->setup_error = std::string("TLS setup: ") + one_line(e.what());
    }
  }
}

UpstreamPool::~UpstreamPool() = default;

UpstreamReply UpstreamPool::forward(const pubsub::PushRequest& request,
                                    std::optional<std::int64_t> fence) const {
  const auto start = Clock::now();
  const auto deadline = start + impl_->options.timeout;
  const auto connect_deadline =
      start + std::min(impl_->options.connect_timeout, impl_->options.timeout);
  bool maybe_sent = false;
  UpstreamReply reply;
  try {
    http::request<http::string_body> out;
    if (!impl_->setup_error.empty()) {
      reply = not_sent(impl_->setup_error);
    } else if (auto reason = build_request(request, fence, impl_->url, impl_->origin, out)) {
      reply = not_sent(std::move(*reason));
    } else {
      ThreadContext& context = thread_context();
      context.evict(start);
      auto connection = context.take(impl_->id);
      bool retry = connection != nullptr;
      for (;;) {
        if (!connection) {
          if (auto error = impl_->connect(context.ioc, connect_deadline, connection);
              !error.empty()) {
            reply = not_sent(std::move(error));
            break;
          }
        }
        reply =
            impl_->exchange(context.ioc, std::move(connection), out, deadline, retry, maybe_sent);
        if (!retry) break;
      }
    }
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    // Asio reports a failure to create its reactor (no file descriptors left) by throwing.
    reply = maybe_sent ? no_answer(one_line(e.what())) : not_sent(one_line(e.what()));
  }
  reply.elapsed = Clock::now() - start;
  return reply;
}

}  // namespace idempotency::gateway
