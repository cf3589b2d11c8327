// Connection: one accepted socket, served request after request on the event loop.
//
// The life of a request: wait for its first byte (the keep-alive deadline), read the header
// within `header_timeout` through a strict parser (request_guard.h adds the obs-fold check
// Beast lacks; simple_request.h reads the plainest whole requests the same way, faster),
// refuse a bad or oversized one at once, read the body within `body_timeout`,
// hand the request to the worker pool, and write the handler's response back within
// `write_timeout`. Only the handler call leaves the event loop, so a client that trickles
// bytes holds a socket and a buffer, never a thread.
//
// Thread safety: every member runs on the connection's executor (a strand, or the event loop
// itself when one thread runs it), except the handler call and the first attempt to send its
// answer, which run on a worker while the executor has nothing pending on this connection, and
// post the outcome back to it. An AsyncHandler is called on the executor, and its Responder
// dispatches the answer back to it.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "adapter.h"
#include "request_guard.h"
#include "request_parser.h"
#include "server_state.h"
#include "simple_request.h"

namespace idempotency::http::detail {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  /// Connection() takes the accepted socket; run() starts serving it.
  Connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<ServerState> state);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// run() starts reading the first request.
  void run();
  /// executor() is the connection's strand, where every call to it must run.
  [[nodiscard]] auto executor() { return socket_.get_executor(); }
  /// run_on_executor() runs `f` on executor(): at once when called there, else posted to it.
  template <class F>
  void run_on_executor(F&& f) {
    // With one thread on the loop the connection's executor is the loop's own
    // (ServerState::connection_executor()): dispatched to that as it is, rather than through
    // the type-erased one, which first wraps `f` in an allocated function.
    if (state_->options.io_threads <= 1) {
      boost::asio::dispatch(state_->io.get_executor(), std::forward<F>(f));
    } else {
      boost::asio::dispatch(executor(), std::forward<F>(f));
    }
  }
  /// close_if_idle() is posted at stop(): a connection waiting for (or reading) a request
  /// closes now; one whose request is being handled or answered finishes it first.
  void close_if_idle();
  /// answer() sends an AsyncHandler's response (after the handler call returns, when given
  /// inside it; at the end of the loop's pass while other requests await theirs); runs on the
  /// strand.
  void answer(pubsub::PushResponse&& response, Framing framing);

 private:
  enum class Phase { kReading, kHandling, kWriting, kClosing };

  void start_request();
  void read_header();
  void on_header_bytes(boost::beast::error_code ec, std::size_t bytes);
  // The request simple_request() read: settled (request_head.h), then handled.
  bool skip_empty_lines();
  void dispatch_simple(SimpleRequest&& simple);
  void on_header();
  void parse_body();
  void read_body();
  void on_body_bytes(boost::beast::error_code ec, std::size_t bytes);
  void refuse_body(const boost::beast::error_code& ec);
  enum class InlineWrite { kDone, kPending, kFailed };

  // dispatch_parsed() hands on what parser_ read and releases the parser; dispatch() hands any
  // request to the handler.
  void dispatch_parsed();
  void dispatch(pubsub::PushRequest&& request, unsigned version, bool keep_alive);
  void dispatch_async(pubsub::PushRequest&& request, Framing framing);
  InlineWrite write_inline();
  // The part of response_ not sent yet.
  [[nodiscard]] std::array<boost::asio::const_buffer, 2> unsent() const;
  void write_rest(bool keep_alive);
  void release_response();
  void after_inline_write(InlineWrite sent, bool keep_alive);
  void on_written(boost::beast::error_code ec, bool keep_alive);
  void refuse(int status, std::string_view reason);
  void end_after_answer();
  void linger_then_close();
  void on_linger(boost::beast::error_code ec, std::size_t bytes);
  void close();

  using Clock = std::chrono::steady_clock;
  // The connection closes at the deadline (never: Clock::time_point::max()).
  void expire_after(Clock::duration timeout);
  void expire_never();
  void wait_for_deadline();
  void on_timer(boost::beast::error_code ec, std::uint64_t generation);

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  Clock::time_point deadline_ = Clock::time_point::max();
  std::uint64_t timer_generation_ = 0;
  bool timer_waiting_ = false;
  std::shared_ptr<ServerState> state_;
  boost::beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;  // only for a request simple_request() left to it
  HeaderScan scan_;
  EncodedResponse response_;  // the answer being sent, kept (with its capacity) until written
  std::size_t response_sent_ = 0;
  Phase phase_ = Phase::kReading;
  bool first_byte_seen_ = false;
  bool simple_tried_ = false;       // this request's first bytes were offered to simple_request()
  bool body_deadline_set_ = false;  // this request's body deadline is armed
  std::size_t empty_lines_skipped_ = 0;  // CRLFs before this request's line (skip_empty_lines())
  // Whether the request's header lets the connection stay open: read once the header is in,
  // since Beast would let a `Connection` trailer field (dropped otherwise) change it.
  bool header_keep_alive_ = true;
  std::size_t served_ = 0;
  std::size_t lingered_ = 0;
  bool registered_ = false;
  bool in_handler_ = false;     // the AsyncHandler call is running (on this strand)
  bool answer_posted_ = false;  // answer() has put this answer off to a later pass of the loop
};

}  // namespace idempotency::http::detail

namespace idempotency::http {

// What a Responder answers on: the connection and how its request wants the answer framed.
struct Responder::State {
  State(std::shared_ptr<detail::Connection> c, detail::Framing f)
      : connection(std::move(c)), framing(f) {}
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  // Unanswered: answers 500, so the connection moves on.
  ~State();

  // Posts the answer to the connection's strand, once.
  void send(pubsub::PushResponse&& response);

  std::shared_ptr<detail::Connection> connection;
  detail::Framing framing;
  std::atomic<bool> answered{false};
};

}  // namespace idempotency::http
