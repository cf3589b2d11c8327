#include "connection.h"

#include <sys/socket.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <string>
#include <string_view>
#include <utility>

#include "idempotency/detail/ascii.h"
#include "idempotency/detail/chunked_body.h"
#include "idempotency/log.h"
#include "request_head.h"

namespace idempotency::http::detail {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace beast_http = boost::beast::http;
using tcp = net::ip::tcp;
using idempotency::detail::iequals_ascii;

namespace {

// A read hands Beast at most this much at a time: small enough to keep a trickling client's
// buffer small, large enough for a whole push envelope in a few reads.
constexpr std::size_t kReadChunk = std::size_t{64} * 1024;
// After refusing a request, its unread rest is drained for at most this long (and this many
// bytes) so the client reads the answer instead of a connection reset.
constexpr std::chrono::milliseconds kLingerTime{1'000};
constexpr std::size_t kLingerBytes = std::size_t{1} << 20;

void log_refused(int status, std::string_view reason) {
  log({.severity = Severity::kWarning,
       .event = "http_request_refused",
       .message = "Refused a request the handler never saw.",
       .fields = {{"status", std::to_string(status)}, {"reason", std::string(reason)}}});
}

}  // namespace

Connection::Connection(tcp::socket socket, std::shared_ptr<ServerState> state)
    : socket_(std::move(socket)), timer_(socket_.get_executor()), state_(std::move(state)) {}

Connection::~Connection() {
  if (registered_) state_->on_connection_closed();
}

void Connection::run() {
  beast::error_code ignored;
  // Answers are written whole, in one go; Nagle would only hold them back for a delayed ACK.
  socket_.set_option(tcp::no_delay(true), ignored);
  // Beast bounds the head it parses but not a chunk's size line nor the trailer: it keeps
  // asking for more, and reads into the buffer, until their end. Capped, an endless one ends
  // in a refusal (read_body()) instead of the process's memory. Room for a whole
  // head (HeaderScan refuses a longer one) and two reads beyond it.
  buffer_.max_size(std::min<std::size_t>(state_->options.max_header_bytes, UINT32_MAX) +
                   2 * kReadChunk);
  registered_ = true;  // counted even when refused, so the destructor's uncount matches
  if (!state_->on_connection_open(shared_from_this())) {
    close();
    return;
  }
  start_request();
}

void Connection::close_if_idle() {
  if (phase_ == Phase::kReading) close();
}

void Connection::start_request() {
  phase_ = Phase::kReading;
  scan_.reset();
  simple_tried_ = false;
  empty_lines_skipped_ = 0;
  first_byte_seen_ = buffer_.size() > 0;
  body_deadline_set_ = false;
  // A new connection must start its request promptly; a kept-alive one may idle longer.
  const auto& options = state_->options;
  expire_after(first_byte_seen_ || served_ == 0 ? options.header_timeout
                                                : options.keep_alive_timeout);
  if (buffer_.size() > 0) {
    on_header_bytes({}, 0);  // a pipelined request is already here
    return;
  }
  read_header();
}

void Connection::read_header() {
  socket_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = shared_from_this()](beast::error_code ec, std::size_t bytes) {
                            self->on_header_bytes(ec, bytes);
                          });
}

void Connection::on_header_bytes(beast::error_code ec, std::size_t bytes) {
  if (phase_ == Phase::kClosing) return;
  if (ec) {
    close();  // the client went away, or its header deadline passed
    return;
  }
  buffer_.commit(bytes);
  if (!first_byte_seen_ && buffer_.size() > 0) {
    first_byte_seen_ = true;
    expire_after(state_->options.header_timeout);
  }
  if (!skip_empty_lines()) {
    read_header();
    return;
  }
  const auto* data = static_cast<const char*>(buffer_.data().data());
  const std::string_view received(data, buffer_.size());
  const auto& options = state_->options;
  // Beast's parser counts its limit for the request line and the fields apart (up to twice it
  // in all, when the header came in one read), and in 32 bits: HeaderScan holds it, whole.
  const std::size_t header_limit = std::min<std::size_t>(options.max_header_bytes, UINT32_MAX);
  // What simple_request() accepts, HeaderScan would find complete, within the limit and
  // sound, so nearly every request (whole in its first read) skips the scan. Only its first
  // bytes are offered: a header trickling in is not read again and again.
  if (!simple_tried_) {
    simple_tried_ = true;
    if (auto simple = simple_request(received, header_limit, options.max_body_bytes)) {
      dispatch_simple(std::move(*simple));
      return;
    }
  }
  switch (scan_.scan(received, header_limit)) {
    case HeaderScan::Verdict::kTooLarge:
      refuse(431, "the request header is larger than the limit");
      return;
    case HeaderScan::Verdict::kObsFold:
      refuse(400, "obs-fold (a header line starting with whitespace) is not accepted");
      return;
    case HeaderScan::Verdict::kBareLineEnding:
      refuse(400, "a header line ends in a bare CR or LF; only CRLF is accepted");
      return;
    case HeaderScan::Verdict::kNeedMore:
      read_header();
      return;
    case HeaderScan::Verdict::kComplete:
      break;
  }
  if (auto simple = simple_request(received, header_limit, options.max_body_bytes)) {
    dispatch_simple(std::move(*simple));
    return;
  }
  // Built only for a request the fast reading left to it.
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(header_limit));
  parser_->body_limit(options.max_body_bytes);
  parser_->eager(false);
  const std::size_t used = parser_->put(buffer_.data(), ec);
  buffer_.consume(used);
  if (ec == beast_http::error::body_limit) {
    refuse(413, "the request body is larger than the limit");
    return;
  }
  if (ec || !parser_->is_header_done()) {
    refuse(400, ec ? "malformed request: " + ec.message() : std::string("malformed request"));
    return;
  }
  on_header();
}

// RFC 9112 §2.2: a server SHOULD ignore at least one empty line before a request line (some
// clients send a CRLF after a POST body); nginx ignores them too. A few, not any number: they
// are the header's bytes, under its deadline. False when the bytes so far are only those.
bool Connection::skip_empty_lines() {
  constexpr std::size_t kMaxEmptyLines = 4;
  std::string_view rest(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  while (empty_lines_skipped_ < kMaxEmptyLines && rest.starts_with("\r\n")) {
    rest.remove_prefix(2);
    ++empty_lines_skipped_;
  }
  // Nothing but empty lines so far, or half of one more (its LF still to come).
  const bool more_to_come = rest.empty() || (rest == "\r" && empty_lines_skipped_ < kMaxEmptyLines);
  buffer_.consume(buffer_.size() - rest.size());
  return !more_to_come;
}

void Connection::dispatch_simple(SimpleRequest&& simple) {
  buffer_.consume(simple.size);
  if (const auto refusal = settle_head(simple.request, kHttp11)) {
    refuse(refusal->status, refusal->reason);
    return;
  }
  dispatch(std::move(simple.request), kHttp11, simple.keep_alive);
}

void Connection::on_header() {
  // Before the body is read: a request refused for its head is refused from the head alone.
  if (const auto refusal = settle_head(parser_->request(), parser_->version())) {
    refuse(refusal->status, refusal->reason);
    return;
  }
  header_keep_alive_ = parser_->keep_alive();
  const auto expect = parser_->expect();
  const bool wants_continue = iequals_ascii(expect, "100-continue");
  if (!expect.empty() && !wants_continue) {
    refuse(417, "only Expect: 100-continue is supported");
    return;
  }
  // An HTTP/1.0 client knows no 100 Continue; the expectation is ignored (RFC 9110 §10.1.1).
  const bool continue_expected = wants_continue && parser_->version() >= kHttp11;
  parser_->eager(true);
  if (!continue_expected || parser_->is_done()) {
    parse_body();
    return;
  }
  // The body is acceptable (an oversized Content-Length was refused above), so invite it.
  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  expire_after(state_->options.write_timeout);
  net::async_write(socket_, net::buffer(kContinue.data(), kContinue.size()),
                   [self = shared_from_this()](beast::error_code error, std::size_t) {
                     if (self->phase_ == Phase::kClosing) return;
                     if (error) {
                       self->close();
                       return;
                     }
                     self->parse_body();
                   });
}

// The body usually came in the same read as the header: parsed here, a whole one is handed on
// at once instead of through a read that completes immediately (a pass of the event loop, a
// syscall, per request). The header was accepted, so its Content-Length is within the limit.
//
// Beast's async_read is not used: it hands the parser every read, however short, which a
// chunked body must not be (detail::least_bytes_to_parse()).
void Connection::parse_body() {
  const std::size_t least = idempotency::detail::least_bytes_to_parse(parser_->chunked());
  while (!parser_->is_done()) {
    if (buffer_.size() < least) {
      read_body();
      return;
    }
    beast::error_code ec;
    buffer_.consume(parser_->put(buffer_.data(), ec));
    if (ec == beast_http::error::need_more) {
      read_body();
      return;
    }
    if (ec) {
      refuse_body(ec);
      return;
    }
  }
  dispatch_parsed();
}

void Connection::read_body() {
  if (!body_deadline_set_) {
    body_deadline_set_ = true;
    expire_after(state_->options.body_timeout);
  }
  // Zero once the buffer is full: only a chunk's size line or a trailer that never ends
  // fills it (see run()).
  const std::size_t size = beast::read_size(buffer_, kReadChunk);
  if (size == 0) {
    refuse(400, "a chunk's size line or the trailer is longer than the header limit");
    return;
  }
  socket_.async_read_some(buffer_.prepare(size),
                          [self = shared_from_this()](beast::error_code ec, std::size_t bytes) {
                            self->on_body_bytes(ec, bytes);
                          });
}

void Connection::on_body_bytes(beast::error_code ec, std::size_t bytes) {
  if (phase_ == Phase::kClosing) return;
  if (ec) {
    close();  // the client went away, or the body's deadline passed
    return;
  }
  buffer_.commit(bytes);
  parse_body();
}

void Connection::refuse_body(const beast::error_code& ec) {
  if (ec == beast_http::error::body_limit) {
    refuse(413, "the request body is larger than the limit");
    return;
  }
  refuse(400, "malformed request body: " + ec.message());
}

void Connection::dispatch_parsed() {
  const unsigned version = parser_->version();
  pubsub::PushRequest request = std::move(parser_->request());
  parser_.reset();
  dispatch(std::move(request), version, header_keep_alive_);
}

void Connection::dispatch(pubsub::PushRequest&& request, unsigned version, bool keep_alive) {
  phase_ = Phase::kHandling;
  // The handler may take as long as it needs; the client is not being read meanwhile.
  expire_never();
  Framing framing{.version = version,
                  .head = std::string_view(request.method) == "HEAD",
                  .keep_alive = keep_alive && !state_->stopping.load() &&
                                served_ + 1 < state_->options.keep_alive_max_requests};
  if (state_->async_handler) {
    dispatch_async(std::move(request), framing);
    return;
  }
  net::post(state_->workers,
            [self = shared_from_this(), request = std::move(request), framing]() mutable {
              pubsub::PushResponse response = call_handler(self->state_->handler, request);
              // Decided again: a stop() since the request came makes this the last answer.
              framing.keep_alive = framing.keep_alive && !self->state_->stopping.load();
              encode_response(std::move(response), framing, self->response_);
              const InlineWrite sent = self->write_inline();
              net::post(self->executor(), [self, sent, keep_alive = framing.keep_alive] {
                self->after_inline_write(sent, keep_alive);
              });
            });
}

void Connection::dispatch_async(pubsub::PushRequest&& request, Framing framing) {
  auto respond = Responder(std::make_shared<Responder::State>(shared_from_this(), framing));
  const std::string method = request.method;
  state_->unanswered.fetch_add(1, std::memory_order_relaxed);
  in_handler_ = true;
  try {
    state_->async_handler(std::move(request), respond);
  } catch (...) {
    respond(answer_to_throw(std::current_exception(), method));
  }
  in_handler_ = false;
}

void Connection::refuse(int status, std::string_view reason) {
  log_refused(status, reason);
  phase_ = Phase::kWriting;
  encode_refusal(status, reason, response_);
  response_sent_ = 0;
  expire_after(state_->options.write_timeout);
  net::async_write(socket_, unsent(),
                   [self = shared_from_this()](beast::error_code ec, std::size_t) {
                     self->release_response();
                     if (ec || self->phase_ == Phase::kClosing) {
                       self->close();
                       return;
                     }
                     self->linger_then_close();
                   });
}

void Connection::linger_then_close() {
  // Closing with unread bytes in the socket sends a reset, which can destroy the answer
  // before the client reads it; so stop sending, and drain what is in flight for a moment.
  phase_ = Phase::kClosing;
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  expire_after(kLingerTime);
  lingered_ = 0;
  on_linger({}, 0);
}

void Connection::on_linger(beast::error_code ec, std::size_t bytes) {
  lingered_ += bytes;
  buffer_.clear();
  if (ec || lingered_ > kLingerBytes) {
    close();
    return;
  }
  socket_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = shared_from_this()](beast::error_code error, std::size_t n) {
                            self->on_linger(error, n);
                          });
}

void Connection::close() {
  phase_ = Phase::kClosing;
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  // A waiting timer holds the connection (and its buffers): let it go now.
  deadline_ = Clock::time_point::max();
  if (timer_waiting_) timer_.cancel();
}

// Deadlines are lazy, as nginx's timers are: a new deadline later than the one the timer waits
// for only moves deadline_, and the timer, when it fires, waits again for whatever deadline_
// says then. A request resets its deadline three or four times; the timer is re-armed about
// once per timeout instead, rather than cancelled and queued (a pass of the event loop) each time.
void Connection::expire_after(Clock::duration timeout) {
  deadline_ = Clock::now() + timeout;
  if (!timer_waiting_ || deadline_ < timer_.expiry()) wait_for_deadline();
}

void Connection::expire_never() { deadline_ = Clock::time_point::max(); }

void Connection::wait_for_deadline() {
  timer_waiting_ = true;
  const auto generation = ++timer_generation_;
  timer_.expires_at(deadline_);  // a wait for a later expiry ends as cancelled: stale below
  timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
    self->on_timer(ec, generation);
  });
}

void Connection::on_timer(beast::error_code ec, std::uint64_t generation) {
  if (generation != timer_generation_) return;  // replaced by a wait for an earlier deadline
  timer_waiting_ = false;
  // close() sets no deadline; a lingering connection (closing, still read) keeps one.
  if (ec || deadline_ == Clock::time_point::max()) return;
  if (Clock::now() >= deadline_) {
    close();  // pending reads and writes end with an error, and find the connection closing
    return;
  }
  wait_for_deadline();
}

}  // namespace idempotency::http::detail
