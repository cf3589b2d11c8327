// The exchange with the upstream, one coroutine from the request to the reply, which both of
// UpstreamPool's entry points run: take an idle connection of the io_context or open one, write
// the request in one go, read the response (skipping interim ones), keep the connection if it is
// at a message boundary, and retry only a request that provably never left a dead idle
// connection. Deadlines are the connection's watchdog: at a deadline it closes the connection,
// and the aborted operation tells how far the request got, so the reply says what the upstream
// may have seen (nothing, maybe something, a response).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>

#include "upstream_internal.h"

namespace idempotency::gateway {

namespace upstream_detail {

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

}  // namespace upstream_detail

using upstream_detail::Clock;
using upstream_detail::Connection;
using upstream_detail::IdleConnections;
using upstream_detail::no_answer;
using upstream_detail::not_sent;
using upstream_detail::one_line;
namespace asio = upstream_detail::asio;
namespace beast = upstream_detail::beast;
namespace http = upstream_detail::http;

namespace {

// Far above any sane response header, small enough that a hostile one cannot hurt.
constexpr std::uint32_t kHeaderLimit = 64 * 1024;

using Parser = upstream_detail::ResponseParser;

auto token(beast::error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

// The reply for a write that failed (`ec`) after `written` bytes. Plain TCP reports exactly what
// the kernel took; TLS counts plaintext, so any started TLS write may have put a record on the
// wire.
UpstreamReply write_failed(const beast::error_code& ec, std::size_t written, bool tls,
                           bool timed_out, bool& maybe_sent) {
  if (!tls && written == 0) {
    maybe_sent = false;
    return not_sent(timed_out ? "timed out before the request was written"
                              : "write: " + one_line(ec.message()));
  }
  return no_answer(timed_out ? "timed out writing the request"
                             : "the connection broke while writing: " + one_line(ec.message()));
}

// The reply from what was read into `parser`, `ec` saying how the last read ended: no complete
// response header (kNoAnswer), or the final response, its body truncated when `ec` is set.
UpstreamReply read_reply(Parser& parser, const beast::error_code& ec, bool timed_out) {
  if (!parser.is_header_done() && ec != http::error::body_limit) {
    if (timed_out) return no_answer("timed out waiting for the response");
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset) {
      return no_answer("the connection closed before a response: " + one_line(ec.message()));
    }
    return no_answer("no valid HTTP response: " + one_line(ec.message()));
  }
  UpstreamReply reply;
  reply.response = std::move(parser.response());
  if (ec) {
    // The status and header arrived, so the upstream answered; the body did not all come.
    reply.response.body.clear();
    reply.response.body.shrink_to_fit();
    reply.truncated = true;
    if (ec != http::error::body_limit) {
      reply.error = timed_out ? "timed out reading the response body"
                              : "the response body broke off: " + one_line(ec.message());
    }
    return reply;
  }
  return reply;
}

// Drops the exchange's connection unless it was given back: its watchdog stopped, its socket
// closed. Also when the coroutine unwinds or is destroyed unfinished.
class DropConnection {
 public:
  explicit DropConnection(std::shared_ptr<Connection>& connection) : connection_(connection) {}
  DropConnection(const DropConnection&) = delete;
  DropConnection& operator=(const DropConnection&) = delete;
  ~DropConnection() {
    if (connection_) {
      connection_->disarm();
      connection_->close();
    }
  }

 private:
  std::shared_ptr<Connection>& connection_;
};

}  // namespace

asio::awaitable<UpstreamReply> UpstreamPool::Impl::exchange(
    const pubsub::PushRequest& request, std::optional<std::int64_t> fence, asio::io_context& io,
    asio::any_io_executor executor, Clock::time_point start, OnBadAlloc on_bad_alloc) const {
  const auto deadline = start + options.timeout;
  const auto connect_deadline = start + std::min(options.connect_timeout, options.timeout);
  std::shared_ptr<Connection> connection;
  const DropConnection drop(connection);
  bool maybe_sent = false;
  UpstreamReply reply;
  try {
    auto& idle = asio::use_service<IdleConnections>(io);
    std::string text;  // the request, serialized
    bool reused = false;
    if (setup_error.empty()) {
      connection = idle.take(id, start);
      reused = connection != nullptr;
      if (reused) text = std::move(connection->request);  // its capacity, for this request
      text.clear();
    }
    auto invalid = setup_error.empty() ? build_request(request, fence, url, origin, text)
                                       : std::optional<std::string>(setup_error);
    if (invalid) {
      reply = not_sent(std::move(*invalid));
      if (reused) idle.give_back(id, alive, std::move(connection), options.max_idle);
    } else {
      // At most twice: over a reused connection found dead, then over a new one.
      for (bool retry = true; retry;) {
        retry = false;
        if (!connection) {
          connection = std::make_shared<Connection>(io, tls ? &*tls : nullptr);
          if (auto error = co_await connect(io, executor, *connection, connect_deadline);
              !error.empty()) {
            reply = not_sent(std::move(error));
            break;
          }
        }
        if (Clock::now() >= deadline) {
          reply = not_sent("timed out before the request was written");
          break;
        }
        connection->arm(deadline, executor);

        // One write, so one sendmsg (one TLS record): nothing waits on an ACK between parts.
        maybe_sent = true;
        beast::error_code ec;
        const std::size_t written = co_await connection->with_stream(
            [&](auto& stream) { return asio::async_write(stream, asio::buffer(text), token(ec)); });
        if (ec) {
          const bool timed_out = connection->expired();
          reply = write_failed(ec, written, connection->tls() != nullptr, timed_out, maybe_sent);
          if (reused && !maybe_sent && !timed_out) {
            // The idle connection died under us; nothing left, so a retry is safe.
            connection->disarm();
            connection->close();
            connection = nullptr;
            reused = false;
            retry = true;
          }
          continue;
        }

        const bool head = request.method == "HEAD";
        std::optional<Parser> parser;
        bool timed_out = false;
        for (bool interim = true; interim;) {
          interim = false;
          parser.emplace();
          parser->header_limit(kHeaderLimit);
          parser->body_limit(std::uint64_t{options.max_response_bytes});
          if (head) parser->skip(true);  // a HEAD response has a Content-Length but no body
          // The header first, on its own: Boost 1.74's parser, reading eagerly, loses its own
          // body_limit error for a too-large Content-Length when body bytes came with the
          // header (basic_parser::put loops on into the body), and would read the whole body.
          co_await connection->with_stream([&](auto& stream) {
            return http::async_read_header(stream, connection->buffer, *parser, token(ec));
          });
          timed_out = ec && connection->expired();
          if (ec || !parser->is_header_done()) break;
          const auto status = parser->response().status;
          if (parser->is_done() && status / 100 == 1 && status != 101) {
            interim = true;  // the final response follows
          } else if (!parser->is_done()) {
            connection->ack_now();
            // Chunked and close-delimited bodies are held to body_limit as they arrive.
            co_await connection->with_stream([&](auto& stream) {
              return http::async_read(stream, connection->buffer, *parser, token(ec));
            });
            timed_out = ec && connection->expired();
          }
        }
        reply = read_reply(*parser, ec, timed_out);
        // Only a connection whose response ended cleanly, by its length, with nothing unasked
        // after it, is known to be at a message boundary.
        if (!ec && parser->keep_alive() && reply.response.status != 101 &&
            connection->buffer.size() == 0 && connection->disarm()) {
          text.swap(connection->request);  // its capacity, for the next request
          idle.give_back(id, alive, std::exchange(connection, nullptr), options.max_idle);
        }
      }
    }
  } catch (const std::bad_alloc&) {
    if (on_bad_alloc == OnBadAlloc::kThrow) throw;
    reply = maybe_sent ? no_answer("out of memory") : not_sent("out of memory");
  } catch (const std::exception& e) {
    // Asio reports a failure to create its reactor (no file descriptors left) by throwing.
    reply = maybe_sent ? no_answer(one_line(e.what())) : not_sent(one_line(e.what()));
  }
  reply.elapsed = Clock::now() - start;
  co_return reply;
}

}  // namespace idempotency::gateway
