// One exchange with the upstream: each step an asynchronous operation on the calling thread's
// io_context under the exchange's deadline, and the account of what the upstream may have
// seen (nothing, maybe something, a response).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "upstream_internal.h"

namespace idempotency::gateway {

namespace upstream_detail {

bool Exchange::await(asio::io_context& ioc, Clock::time_point deadline, bool settle) {
  while (!done) {
    if (ioc.stopped()) ioc.restart();
    if (ioc.run_one_until(deadline) == 0 && !done && (Clock::now() >= deadline || ioc.stopped())) {
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

namespace {

// Far above any sane response header, small enough that a hostile one cannot hurt.
constexpr std::uint32_t kHeaderLimit = 64 * 1024;

}  // namespace

using upstream_detail::Clock;
using upstream_detail::Connection;
using upstream_detail::Exchange;
using upstream_detail::no_answer;
using upstream_detail::not_sent;
using upstream_detail::one_line;
using upstream_detail::take_head;
using upstream_detail::thread_context;
namespace asio = upstream_detail::asio;
namespace beast = upstream_detail::beast;
namespace http = upstream_detail::http;

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

}  // namespace idempotency::gateway
