// Server: the listening socket, the event-loop threads, the worker pool and the graceful stop.
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "connection.h"
#include "idempotency/http.h"
#include "idempotency/log.h"
#include "server_state.h"

namespace idempotency::http {
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

std::string bind_error(const std::string& address, int port, const std::string& why) {
  return "cannot listen on " + address + ":" + std::to_string(port) + ": " + why;
}

// A descriptor per connection, plus the process's other files: lift the soft limit towards the
// hard one so that `max_connections` is really reachable (many systems start at 1024).
void allow_descriptors_for(std::size_t connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(connections) + 256;
  if (limit.rlim_cur >= wanted) return;
  limit.rlim_cur = std::min(wanted, limit.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

// Errors that mean "try again shortly" rather than "the listener is broken".
bool is_transient(const boost::system::error_code& ec) {
  return ec == net::error::no_descriptors || ec == net::error::no_buffer_space ||
         ec == net::error::no_memory || ec == net::error::connection_aborted ||
         ec.value() == ENFILE;
}

void accept_next(const std::shared_ptr<detail::ServerState>& state) {
  if (state->stopping.load() || !state->acceptor) return;
  state->acceptor->async_accept(state->connection_executor(), [state](boost::system::error_code ec,
                                                                      tcp::socket socket) {
    if (state->stopping.load()) return;
    if (ec) {
      if (!is_transient(ec)) {
        log({.severity = Severity::kError,
             .event = "http_accept_failed",
             .message = "The HTTP server could not accept connections.",
             .fields = {{"error", ec.message()}}});
        state->accept_failed.store(true);
        return;
      }
      // Out of descriptors or memory: back off briefly instead of spinning.
      auto timer = std::make_shared<net::steady_timer>(state->io, std::chrono::milliseconds(50));
      timer->async_wait([state, timer](boost::system::error_code) { accept_next(state); });
      return;
    }
    std::make_shared<detail::Connection>(std::move(socket), state)->run();
    if (!state->pause_if_full()) accept_next(state);
  });
}

// Ends the event loop once the last connection closed, and joins the threads.
void wind_down(detail::ServerState& state) {
  state.keep_running.reset();
  for (auto& thread : state.io_threads) {
    if (thread.joinable() && thread.get_id() != std::this_thread::get_id()) thread.join();
  }
  state.workers.join();
}

}  // namespace

Server::Server(Handler handler, ServeOptions options)
    : state_(std::make_shared<detail::ServerState>(std::move(handler), AsyncHandler{},
                                                   std::move(options))) {}

Server::Server(AsyncHandler handler, ServeOptions options)
    : state_(std::make_shared<detail::ServerState>(Handler{}, std::move(handler),
                                                   std::move(options))) {}

Server::~Server() { stop(); }

int Server::start(const std::string& address, int port) {
  auto& state = *state_;
  {
    std::lock_guard lock(state.mutex);
    if (state.started) throw std::runtime_error("http server already started");
  }
  tcp::acceptor acceptor(state.io);
  try {
    tcp::resolver resolver(state.io);
    const auto endpoints = resolver.resolve(
        address, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service);
    const tcp::endpoint endpoint = *endpoints.begin();
    acceptor.open(endpoint.protocol());
    // SO_REUSEADDR allows a quick restart over TIME_WAIT sockets; no SO_REUSEPORT, which would
    // let a second server bind a port that is in use.
    acceptor.set_option(tcp::acceptor::reuse_address(true));
    acceptor.bind(endpoint);
    acceptor.listen(net::socket_base::max_listen_connections);
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error(bind_error(address, port, e.code().message()));
  }
  const int bound = acceptor.local_endpoint().port();
  allow_descriptors_for(state.options.max_connections);
  {
    std::lock_guard lock(state.mutex);
    state.started = true;
    state.acceptor.emplace(std::move(acceptor));
    state.keep_running.emplace(state.io.get_executor());
    std::weak_ptr<detail::ServerState> weak = state_;
    state.resume_accept = [weak] {
      if (auto locked = weak.lock()) accept_next(locked);
    };
  }
  accept_next(state_);
  const auto threads = std::max<std::size_t>(state.options.io_threads, 1);
  for (std::size_t i = 0; i < threads; ++i) {
    state.io_threads.emplace_back([&io = state.io] { io.run(); });
  }
  log({.severity = Severity::kInfo,
       .event = "http_listening",
       .message = "The HTTP server is accepting connections.",
       .fields = {{"address", address}, {"port", std::to_string(bound)}}});
  if (state.options.on_listening) state.options.on_listening(bound);
  return bound;
}

void Server::stop() {
  auto& state = *state_;
  {
    std::lock_guard lock(state.mutex);
    if (!state.started || state.stopping.load()) return;
    state.stopping.store(true);
  }
  log({.severity = Severity::kInfo,
       .event = "http_stopping",
       .message = "The HTTP server stopped accepting; waiting for in-flight requests.",
       .fields = {{"port", std::to_string(state.acceptor->local_endpoint().port())}}});
  std::vector<std::shared_ptr<detail::Connection>> open;
  {
    std::lock_guard lock(state.mutex);
    for (auto& weak : state.connections) {
      if (auto connection = weak.lock()) open.push_back(std::move(connection));
    }
    state.connections.clear();
  }
  // The acceptor and every connection belong to the event loop: close them there.
  net::post(state.io, [state = state_] {
    boost::system::error_code ignored;
    state->acceptor->close(ignored);
  });
  for (auto& connection : open) {
    net::post(connection->executor(), [connection] { connection->close_if_idle(); });
  }
  open.clear();

  bool finished = false;
  {
    std::unique_lock lock(state.mutex);
    finished = state.idle_cv.wait_for(lock, state.options.shutdown_grace,
                                      [&] { return state.open_connections == 0; });
  }
  if (finished) {
    wind_down(state);
    log({.severity = Severity::kInfo,
         .event = "http_stopped",
         .message = "The HTTP server answered every in-flight request and stopped."});
    return;
  }
  log({.severity = Severity::kWarning,
       .event = "shutdown_grace_exceeded",
       .message = "Requests were still running when the shutdown grace period ended.",
       .fields = {{"grace_ms", std::to_string(state.options.shutdown_grace.count())}}});
  // Let the overrunning requests finish and answer on their own, then wind down.
  std::thread([keep = state_] {
    {
      std::unique_lock lock(keep->mutex);
      keep->idle_cv.wait(lock, [&] { return keep->open_connections == 0; });
    }
    wind_down(*keep);
  }).detach();
}

bool Server::running() const {
  std::lock_guard lock(state_->mutex);
  return state_->started && !state_->stopping.load() && !state_->accept_failed.load();
}

}  // namespace idempotency::http
