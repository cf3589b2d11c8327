// ServerState: what the acceptor, every connection and the worker pool share. Owned by the
// Server through a shared_ptr, and kept alive by the thread that finishes an overrun request
// after stop() gave up waiting.
//
// Thread safety: the counters are atomics or guarded by `mutex`; the io_context, acceptor and
// pool are Asio objects used as Asio allows (post from any thread).
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/thread_pool.hpp>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "idempotency/http.h"

namespace idempotency::http::detail {

class Connection;

struct ServerState {
  ServerState(Handler h, AsyncHandler a, ServeOptions o);
  ~ServerState();
  ServerState(const ServerState&) = delete;
  ServerState& operator=(const ServerState&) = delete;

  Handler handler;             // set, or
  AsyncHandler async_handler;  // this
  ServeOptions options;

  std::atomic<bool> stopping{false};
  std::atomic<bool> accept_failed{false};
  // Requests handed to the AsyncHandler and not answered yet, on every connection: while others
  // are pending, an answer is sent at the end of the event loop's pass (Connection::answer()).
  std::atomic<std::size_t> unanswered{0};

  // Guards started, the connection registry and the accept pause.
  std::mutex mutex;
  std::condition_variable idle_cv;  // signalled when the last connection closes
  bool started = false;
  bool accept_paused = false;
  std::vector<std::weak_ptr<Connection>> connections;  // pruned as they close
  std::size_t open_connections = 0;

  // Declared last among what connections touch, first to go: destroying the io_context
  // destroys the handlers it still holds, and with them the connections, which report to
  // the members above.
  boost::asio::thread_pool workers;
  std::shared_ptr<boost::asio::io_context> io_owner;  // options.event_loop, or our own
  boost::asio::io_context& io;
  std::optional<boost::asio::ip::tcp::acceptor> acceptor;
  // Keeps the event loop running while the acceptor is paused and no connection is open.
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>
      keep_running;
  std::vector<std::thread> io_threads;

  /// on_connection_open() registers a new connection; it says false (and the connection must
  /// close) when the server is stopping.
  bool on_connection_open(const std::shared_ptr<Connection>& connection);
  /// on_connection_closed() unregisters one, resumes a paused acceptor, wakes stop().
  void on_connection_closed();
  /// pause_if_full() says whether accepting must pause (and marks it paused); called by the
  /// acceptor after each accept.
  bool pause_if_full();
  /// resume_accept is set by the acceptor: it posts the next accept.
  std::function<void()> resume_accept;
  /// connection_executor() is where a new connection runs: the event loop itself when one
  /// thread runs it (its handlers never overlap), else a strand of its own.
  boost::asio::any_io_executor connection_executor();
};

}  // namespace idempotency::http::detail
