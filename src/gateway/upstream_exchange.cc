// The exchange with the upstream, a chain of callbacks from the request to the reply, which both
// of UpstreamPool's entry points run: take an idle connection of the io_context or open one, write
// the request in one go, read the response (skipping interim ones), keep the connection if it is
// at a message boundary, and retry only a request that provably never left a dead idle
// connection. Deadlines are the connection's watchdog: at a deadline it closes the connection,
// and the aborted operation tells how far the request got, so the reply says what the upstream
// may have seen (nothing, maybe something, a response).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "idempotency/detail/chunked_body.h"
#include "simple_response.h"
#include "upstream_internal.h"
// After upstream_internal.h, which settles how Asio is configured.
#include <boost/asio/dispatch.hpp>
#include <boost/beast/core/read_size.hpp>

namespace idempotency::gateway {

using upstream_detail::Clock;
using upstream_detail::Connection;
using upstream_detail::IdleConnections;
using upstream_detail::no_answer;
using upstream_detail::not_sent;
using upstream_detail::one_line;
using upstream_detail::read_reply;
using upstream_detail::write_failed;
namespace asio = upstream_detail::asio;
namespace beast = upstream_detail::beast;
namespace http = upstream_detail::http;

namespace {

using upstream_detail::kHeaderLimit;
using upstream_detail::kReadSize;
static_assert(upstream_detail::kSimpleHeaderLimit < kHeaderLimit,
              "a header the fast reading takes is one Beast's parser takes too");

using Parser = upstream_detail::ResponseParser;

// One exchange, a chain of callbacks on `executor_` (one operation pending at a time, so its
// steps never overlap): its state lives here, held by whichever handler is pending.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  using Impl = UpstreamPool::Impl;
  using Done = std::function<void(UpstreamReply)>;

  Exchange(std::shared_ptr<const Impl> impl, std::shared_ptr<const pubsub::PushRequest> request,
           std::optional<std::int64_t> fence, asio::io_context& io, asio::any_io_executor executor,
           Clock::time_point start, Impl::OnBadAlloc on_bad_alloc, bool on_strand, bool bunches,
           Done done)
      : impl_(std::move(impl)),
        request_(std::move(request)),
        fence_(fence),
        io_(io),
        executor_(std::move(executor)),
        start_(start),
        deadline_(start + impl_->options.timeout),
        on_bad_alloc_(on_bad_alloc),
        done_(std::move(done)),
        idle_(asio::use_service<IdleConnections>(io)),
        on_strand_(on_strand),
        bunches_(bunches) {
    if (bunches_) impl_->exchanges.fetch_add(1, std::memory_order_relaxed);
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  // Dropped unfinished (its io_context destroyed): the connection was not given back.
  ~Exchange() {
    if (bunches_ && !finished_) impl_->exchanges.fetch_sub(1, std::memory_order_relaxed);
    drop_connection();
  }

  // start() for a caller that must not see `done` before it returns (forward_async()), run
  // inline when it is on the exchange's executor already: whatever ends the exchange within
  // it (a request that cannot be sent) is answered from the executor instead.
  void start_for_caller() {
    defer_done_ = true;
    start();
    defer_done_ = false;
  }

  // Takes an idle connection or opens one, and sends the request.
  void start() {
    step([&] {
      std::optional<std::string> invalid;
      if (impl_->setup_error.empty()) {
        connection_ = idle_.take(impl_->id, start_);
        reused_ = connection_ != nullptr;
        if (reused_) text_ = std::move(connection_->request);  // its capacity, for this request
        text_.clear();
        invalid = build_request(*request_, fence_, impl_->url, impl_->origin, text_);
      } else {
        invalid = impl_->setup_error;
      }
      if (invalid) {
        reply_ = not_sent(std::move(*invalid));
        if (reused_) give_back();
        finish();
        return;
      }
      send();
    });
  }

 private:
  // At most twice: over a reused connection found dead, then over a new one.
  void send() {
    if (connection_) {
      write();
      return;
    }
    connection_ = std::make_shared<Connection>(io_, impl_->tls ? &*impl_->tls : nullptr);
    const auto connect_deadline =
        start_ + std::min(impl_->options.connect_timeout, impl_->options.timeout);
    asio::co_spawn(
        executor_, impl_->connect(io_, executor_, on_strand_, *connection_, connect_deadline),
        [self = shared_from_this()](const std::exception_ptr& failure, std::string error) {
          self->step([&] {
            if (failure) std::rethrow_exception(failure);
            if (!error.empty()) {
              self->reply_ = not_sent(std::move(error));
              self->finish();
              return;
            }
            self->write();
          });
        });
  }

  // One write, so one sendmsg (one TLS record): nothing waits on an ACK between parts.
  void write() {
    // While other exchanges are under way, the request goes out at the end of the event loop's
    // pass, beside those the pass starts: the app then wakes once for several requests, not
    // once each (BENCHMARKS.md, "Sends bunched"). With none under way it goes now: the pass
    // would cost an epoll_wait for nothing to join.
    if (bunches_ && !bunched_ && impl_->exchanges.load(std::memory_order_relaxed) > 1) {
      bunched_ = true;
      asio::post(executor_, [self = shared_from_this()] { self->step([&] { self->write(); }); });
      return;
    }
    if (Clock::now() >= deadline_) {
      reply_ = not_sent("timed out before the request was written");
      finish();
      return;
    }
    connection_->arm(deadline_, executor_, on_strand_);
    maybe_sent_ = true;
    std::size_t sent = 0;
    if (connection_->tls() == nullptr) {
      // A request nearly always fits the socket's buffer: sent here, there is no operation to
      // queue and complete.
      beast::error_code ec;
      sent = connection_->send_now(text_, ec);
      if (ec || sent == text_.size()) {
        on_written(ec, sent);
        return;
      }
    }
    start_op(
        [&](auto& stream, auto done) {
          asio::async_write(stream, asio::buffer(text_) + sent, std::move(done));
        },
        [self = shared_from_this(), sent](beast::error_code ec, std::size_t n) {
          self->step([&] { self->on_written(ec, sent + n); });
        });
  }

  void on_written(const beast::error_code& ec, std::size_t written) {
    if (!ec) {
      read_head();
      return;
    }
    const bool timed_out = connection_->expired();
    UpstreamReply failed =
        write_failed(ec, written, connection_->tls() != nullptr, timed_out, maybe_sent_);
    if (reused_ && !maybe_sent_ && !timed_out) {
      // The idle connection died under us; nothing left, so a retry is safe. Its failure is
      // not the reply: the retry's outcome is.
      drop_connection();
      reused_ = false;
      send();
      return;
    }
    reply_ = std::move(failed);
    finish();
  }

  // How far a read goes: to the end of the response's header, or of the whole response.
  enum class Until { kHeader, kMessage };

  // The header first, on its own: Boost 1.74's parser, reading eagerly, loses its own
  // body_limit error for a too-large Content-Length when body bytes came with the header
  // (basic_parser::put loops on into the body), and would read the whole body.
  void read_head() {
    parser_.emplace(impl_->options.keep_content);
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(std::uint64_t{impl_->options.max_response_bytes});
    if (is_head()) parser_->skip(true);  // a Content-Length but no body
    parse(Until::kHeader);
  }

  void on_head(const beast::error_code& ec) {
    if (ec || !parser_->is_header_done()) {
      on_response(ec);
      return;
    }
    const auto status = parser_->response().status;
    if (parser_->is_done() && status / 100 == 1 && status != 101) {
      // An interim response: the final one follows. Read from a fresh handler, not from here:
      // one read may hold thousands of them, and each would nest a level deeper.
      asio::post(executor_,
                 [self = shared_from_this()] { self->step([&] { self->read_head(); }); });
      return;
    }
    if (parser_->is_done()) {
      on_response(ec);
      return;
    }
    connection_->ack_now();
    // Chunked and close-delimited bodies are held to body_limit as they arrive.
    parser_->eager(true);
    parse(Until::kMessage);
  }

  // Feeds the parser what the connection's buffer holds, and reads more while it needs more,
  // until `until` is reached or the read fails. What Beast's http::async_read_header and
  // async_read do (Boost 1.74, read.hpp), step for step, on one async_read_some a round
  // instead of three layers of composed operations.
  void parse(Until until) {
    if (until == Until::kHeader) {
      // Beast takes no byte of a header until the whole of it is here, so the status line is
      // still the buffer's first, however many reads brought it.
      upstream_detail::add_missing_reason_space(connection_->buffer);
      if (read_simply()) return;
    }
    auto& buffer = connection_->buffer;
    beast::error_code ec;
    while (!reached(until)) {
      const std::size_t least = idempotency::detail::least_bytes_to_parse(
          parser_->is_header_done() && parser_->chunked());
      if (buffer.size() < least) {
        read_some(until);
        return;
      }
      buffer.consume(parser_->put(buffer.data(), ec));
      if (ec == http::error::need_more) {
        read_some(until);
        return;
      }
      if (ec) break;
    }
    parsed(until, ec);
  }

  // Reads the plainest whole response without Beast's parser (simple_response.h) and ends
  // the exchange as on_response() would; false when the response is not that, not all here,
  // or Beast has begun reading it. Only the status is kept in this mode, so nothing is lost.
  bool read_simply() {
    auto& buffer = connection_->buffer;
    if (impl_->options.keep_content || buffer.size() == 0 || parser_->got_some() || is_head()) {
      return false;
    }
    const auto bytes = buffer.data();
    const auto response =
        upstream_detail::simple_response({static_cast<const char*>(bytes.data()), bytes.size()},
                                         std::uint64_t{impl_->options.max_response_bytes});
    if (!response) return false;
    buffer.consume(response->size);  // all of it: the connection is at a message boundary
    reply_ = UpstreamReply{};        // the whole reply, as on_response() makes it
    reply_.response.status = response->status;
    if (response->keep_alive) keep_connection();
    finish();
    return true;
  }

  // A view's comparison: std::string == "..." is a memcmp whatever the sizes (GCC 12).
  [[nodiscard]] bool is_head() const { return std::string_view(request_->method) == "HEAD"; }

  [[nodiscard]] bool reached(Until until) const {
    return until == Until::kHeader ? parser_->is_header_done() : parser_->is_done();
  }

  void parsed(Until until, const beast::error_code& ec) {
    if (until == Until::kHeader) {
      on_head(ec);
    } else {
      on_response(ec);
    }
  }

  void read_some(Until until) {
    auto& buffer = connection_->buffer;
    const auto size = beast::read_size(buffer, kReadSize);
    if (size == 0) {
      parsed(until, http::error::buffer_overflow);
      return;
    }
    const auto space = buffer.prepare(size);
    start_op([&](auto& stream, auto done) { stream.async_read_some(space, std::move(done)); },
             [self = shared_from_this(), until](beast::error_code ec, std::size_t n) {
               self->step([&] { self->on_read(until, ec, n); });
             });
  }

  void on_read(Until until, beast::error_code ec, std::size_t n) {
    connection_->buffer.commit(n);
    if (ec == asio::error::eof) {
      if (!parser_->got_some()) {
        parsed(until, http::error::end_of_stream);
        return;
      }
      // A body that ends with the connection (or a message cut short: put_eof says which).
      ec = {};
      parser_->put_eof(ec);
      parsed(until, ec);
      return;
    }
    if (ec) {
      parsed(until, ec);
      return;
    }
    parse(until);
  }

  void on_response(const beast::error_code& ec) {
    // A HEAD answer's length is what a GET would send, and it has no body to count: the
    // upstream's own stands (the server frames with it, not with the empty body).
    const bool head_length = !ec && is_head() && parser_->content_length().has_value();
    const std::uint64_t declared = head_length ? *parser_->content_length() : 0;
    reply_ = read_reply(*parser_, ec, ec && connection_->expired());
    if (head_length && reply_.kind == UpstreamReply::Kind::kResponse) {
      reply_.response.headers.push_back({"Content-Length", std::to_string(declared)});
    }
    // Only a connection whose response ended cleanly, framed beyond doubt, with nothing unasked
    // after it, is known to be at a message boundary.
    if (!ec && parser_->keep_alive() && connection_->buffer.size() == 0 && parser_->reusable()) {
      keep_connection();
    }
    finish();
  }

  // Starts an operation on the connection's stream (`initiate` given the stream, plain or TLS,
  // and its completion handler) whose completion runs `handler` on the exchange's executor.
  // Bound to it when that is a strand; otherwise the connection's own executor is the same
  // io_context's, and a bound any_io_executor would only cost (a type-erased executor copied
  // through every operation's layers).
  template <class Initiate, class Handler>
  void start_op(Initiate&& initiate, Handler&& handler) {
    connection_->with_stream([&](auto& stream) {
      if (on_strand_) {
        initiate(stream, asio::bind_executor(executor_, std::forward<Handler>(handler)));
      } else {
        initiate(stream, std::forward<Handler>(handler));
      }
    });
  }

  // Pools the connection, at a message boundary, unless its watchdog already fired.
  void keep_connection() {
    if (!connection_->disarm()) return;
    text_.swap(connection_->request);  // its capacity, for the next request
    give_back();
  }

  void give_back() {
    idle_.give_back(impl_->id, impl_->alive, std::exchange(connection_, nullptr),
                    impl_->options.max_idle);
  }

  // The connection, unless given back, is done with: its watchdog stopped, its socket closed.
  void drop_connection() {
    if (!connection_) return;
    connection_->disarm();
    connection_->close();
    connection_ = nullptr;
  }

  void finish() {
    finished_ = true;
    if (bunches_) impl_->exchanges.fetch_sub(1, std::memory_order_relaxed);
    drop_connection();
    reply_.elapsed = Clock::now() - start_;
    auto done = std::move(done_);
    if (defer_done_) {
      // Ended within start_for_caller(): forward_async() has not returned yet.
      asio::post(executor_, [done = std::move(done), reply = std::move(reply_)]() mutable {
        done(std::move(reply));
      });
      return;
    }
    done(std::move(reply_));
  }

  // Runs one step: what it throws ends the exchange with a reply (std::bad_alloc propagates
  // instead for forward(), which lets it), unless the reply was already given.
  template <class F>
  void step(F&& f) {
    try {
      f();
    } catch (const std::bad_alloc&) {
      if (finished_ || on_bad_alloc_ == Impl::OnBadAlloc::kThrow) throw;
      fail("out of memory");
    } catch (const std::exception& e) {
      // Asio reports a failure to create its reactor (no file descriptors left) by throwing.
      if (finished_) throw;
      fail(one_line(e.what()));
    } catch (...) {
      // Not a std::exception: nothing tells how far the request got.
      if (finished_ || on_bad_alloc_ == Impl::OnBadAlloc::kThrow) throw;
      reply_ = no_answer("the exchange failed");
      finish();
    }
  }

  void fail(std::string error) {
    reply_ = maybe_sent_ ? no_answer(std::move(error)) : not_sent(std::move(error));
    finish();
  }

  std::shared_ptr<const Impl> impl_;
  // Held until the exchange ends; from forward(), borrowed (it owns nothing): the caller keeps
  // the request until done_ is called, and nothing reads it after that.
  std::shared_ptr<const pubsub::PushRequest> request_;
  std::optional<std::int64_t> fence_;
  asio::io_context& io_;
  asio::any_io_executor executor_;
  Clock::time_point start_;
  Clock::time_point deadline_;
  Impl::OnBadAlloc on_bad_alloc_;
  Done done_;
  IdleConnections& idle_;
  std::shared_ptr<Connection> connection_;
  std::string text_;  // the request, serialized
  std::optional<Parser> parser_;
  UpstreamReply reply_;
  const bool on_strand_;  // several threads run io_: steps must be serialized
  bool reused_ = false;
  bool maybe_sent_ = false;
  bool finished_ = false;
  bool defer_done_ = false;  // see start_for_caller()
  // On a loop one thread runs (forward_async()): a post stays in that thread's queue, behind
  // the pass. On a strand it would go to another thread; forward()'s loop has one exchange.
  const bool bunches_;
  bool bunched_ = false;  // write() has put the request off to the end of the loop's pass
};

}  // namespace

void UpstreamPool::Impl::exchange(std::shared_ptr<const Impl> impl,
                                  std::shared_ptr<const pubsub::PushRequest> request,
                                  std::optional<std::int64_t> fence, asio::io_context& io,
                                  const asio::any_io_executor& executor, Clock::time_point start,
                                  OnBadAlloc on_bad_alloc, Begin begin, bool on_strand,
                                  std::function<void(UpstreamReply)> done) {
  const bool bunches = begin == Begin::kPosted && !on_strand;
  auto exchange =
      std::make_shared<Exchange>(std::move(impl), std::move(request), fence, io, executor, start,
                                 on_bad_alloc, on_strand, bunches, std::move(done));
  if (begin == Begin::kNow) {
    exchange->start();
    return;
  }
  // Dispatched, not posted: on the event loop's own thread (the gateway's push path) the
  // request goes out now, without another pass of the loop (each pass is an epoll_wait).
  auto start_now = [exchange = std::move(exchange)] { exchange->start_for_caller(); };
  if (on_strand) {
    asio::dispatch(executor, std::move(start_now));
    return;
  }
  // `executor` is io's own then: dispatched to it as it is, rather than through the type-erased
  // executor, which wraps the handler in an allocated function first.
  asio::dispatch(io.get_executor(), std::move(start_now));
}

}  // namespace idempotency::gateway
