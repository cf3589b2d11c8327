// Answering a request: an AsyncHandler's answer (put off to the end of the loop's pass while
// others await theirs), the write straight from the worker or the loop, what is left of it
// written within the write deadline, and the Responder a handler answers through.
#include <sys/socket.h>
#include <sys/uio.h>
#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <string>
#include <utility>

#include "connection.h"
#include "idempotency/log.h"

namespace idempotency::http::detail {
namespace net = boost::asio;
namespace beast = boost::beast;

void Connection::answer(pubsub::PushResponse&& response, Framing framing) {
  if (!answer_posted_) {
    const std::size_t others = state_->unanswered.fetch_sub(1, std::memory_order_relaxed) - 1;
    // Answered inside the handler call: sent once it returns, or the next pipelined request
    // would start one stack frame deeper each time. And while other requests await their
    // answers, sent at the end of the loop's pass with those it completes: a client reading
    // many connections (a proxy, a load generator) then wakes once for several answers, not
    // once each. With none awaited it goes now: the pass would cost an epoll_wait for nothing
    // to join. Only on a loop one thread runs: on several, a post wakes another thread.
    if (in_handler_ || (others > 0 && state_->options.io_threads == 1)) {
      net::post(executor(), [self = shared_from_this(), response = std::move(response),
                             framing]() mutable { self->answer(std::move(response), framing); });
      answer_posted_ = true;
      return;
    }
  }
  answer_posted_ = false;
  // Decided again now: a stop() since the request came means this is the connection's last.
  framing.keep_alive = framing.keep_alive && !state_->stopping.load();
  encode_response(std::move(response), framing, response_);
  after_inline_write(write_inline(), framing.keep_alive);
}

// Runs on the worker, while the event loop has nothing pending on this connection (no read is
// armed until the answer is out). Sending here, without blocking, spares the hand-off back to
// the event loop on the latency path; whatever the socket does not take at once is finished
// there.
Connection::InlineWrite Connection::write_inline() {
  response_sent_ = 0;
  const int fd = socket_.native_handle();
  for (;;) {
    const auto parts = unsent();
    std::array<iovec, 2> vectors{};
    std::size_t count = 0;
    for (const auto& part : parts) {
      if (part.size() == 0) continue;
      vectors[count++] = iovec{const_cast<void*>(part.data()), part.size()};  // NOLINT
    }
    if (count == 0) return InlineWrite::kDone;
    msghdr message{};
    message.msg_iov = vectors.data();
    message.msg_iovlen = count;
    const ssize_t sent = ::sendmsg(fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? InlineWrite::kPending : InlineWrite::kFailed;
    }
    response_sent_ += static_cast<std::size_t>(sent);
  }
}

std::array<net::const_buffer, 2> Connection::unsent() const {
  const std::string& head = response_.head;
  const std::string& body = response_.body;
  const std::size_t in_head = std::min(response_sent_, head.size());
  const std::size_t in_body = std::min(response_sent_ - in_head, body.size());
  return {net::buffer(head.data() + in_head, head.size() - in_head),
          net::buffer(body.data() + in_body, body.size() - in_body)};
}

// Sends what is left of response_ on the event loop, within the write deadline.
void Connection::write_rest(bool keep_alive) {
  phase_ = Phase::kWriting;
  expire_after(state_->options.write_timeout);
  net::async_write(socket_, unsent(),
                   [self = shared_from_this(), keep_alive](beast::error_code ec, std::size_t) {
                     self->on_written(ec, keep_alive);
                   });
}

void Connection::after_inline_write(InlineWrite sent, bool keep_alive) {
  ++served_;
  if (phase_ == Phase::kClosing || sent == InlineWrite::kFailed) {
    release_response();
    close();
    return;
  }
  if (sent == InlineWrite::kDone) {
    on_written({}, keep_alive);
    return;
  }
  write_rest(keep_alive);  // the client reads slowly
}

void Connection::on_written(beast::error_code ec, bool keep_alive) {
  release_response();
  if (phase_ == Phase::kClosing) return;
  if (ec) {
    close();
    return;
  }
  if (!keep_alive || state_->stopping.load()) {
    end_after_answer();
    return;
  }
  start_request();
}

// Closing with the client's next bytes unread (a pipelined request) sends a reset, which
// discards what of the answer the socket has not sent yet; so then the connection lingers, as
// after a refusal. Otherwise it closes at once, as nginx's lingering_close judges.
void Connection::end_after_answer() {
  char byte = 0;
  const bool unread =
      buffer_.size() > 0 || ::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  if (unread) {
    linger_then_close();
  } else {
    close();
  }
}

// The head keeps its capacity for the next answer; a body may be large, so it goes.
void Connection::release_response() {
  response_.head.clear();
  std::string().swap(response_.body);
  response_sent_ = 0;
}

}  // namespace idempotency::http::detail

namespace idempotency::http {

Responder::Responder(std::shared_ptr<State> state) : state_(std::move(state)) {}

void Responder::operator()(pubsub::PushResponse response) const {
  state_->send(std::move(response));
}

void Responder::State::send(pubsub::PushResponse&& response) {
  if (answered.exchange(true)) return;
  // Dispatched: from the event loop's own thread (an upstream exchange that completed there) it
  // runs at once, without another pass of the loop (each pass is a syscall).
  auto& c = *connection;
  c.run_on_executor(
      [connection = connection, response = std::move(response), framing = framing]() mutable {
        connection->answer(std::move(response), framing);
      });
}

Responder::State::~State() {
  if (answered.load()) return;
  log({.severity = Severity::kError,
       .event = "handler_dropped_request",
       .message = "An asynchronous handler dropped a request unanswered; answering 500."});
  try {
    send(detail::internal_error());
  } catch (...) {  // NOLINT(bugprone-empty-catch): no memory to answer; the connection closes
  }
}

}  // namespace idempotency::http
