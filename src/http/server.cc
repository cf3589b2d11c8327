// Server: owns a cpp-httplib server, its listening thread and the graceful stop.
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "adapter.h"
#include "idempotency/http.h"
#include "idempotency/log.h"

namespace idempotency::http {

namespace detail {

// Everything the listening thread touches lives here, so that a Server destroyed after an
// overrun grace period leaves the thread (and the workers it joins) valid objects.
struct ServerState {
  Handler handler;
  ServeOptions options;
  httplib::Server server;
  std::thread listener;
  std::string address;
  int port = 0;

  std::atomic<bool> stopping{false};
  std::mutex mutex;
  std::condition_variable done_cv;
  bool started = false;      // guarded by mutex
  bool listen_done = false;  // guarded by mutex; the accept loop and every worker have ended
};

}  // namespace detail

namespace {

// cpp-httplib's default sets SO_REUSEPORT, which lets a second server bind a port that is
// in use; SO_REUSEADDR alone still allows a quick restart over TIME_WAIT sockets.
void reuse_address_only(int socket) {
  int yes = 1;
  ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

std::string bind_error(const std::string& address, int port, int error) {
  std::string reason = "cannot listen on " + address + ":" + std::to_string(port);
  if (error != 0) reason += ": " + std::system_category().message(error);
  return reason;
}

// Answers one request. `body` is already read and within the limit.
void answer(detail::ServerState& state, const httplib::Request& request, std::string body,
            httplib::Response& response) {
  const auto push = detail::to_push_request(request, std::move(body));
  detail::apply_response(detail::call_handler(state.handler, push), response);
  // Tell the client not to reuse a connection the server is about to close.
  if (state.stopping.load()) response.set_header("Connection", "close");
}

void install_routes(detail::ServerState& state) {
  auto& server = state.server;
  const auto without_body = [&state](const httplib::Request& request, httplib::Response& response) {
    answer(state, request, {}, response);
  };
  const auto with_body = [&state](const httplib::Request& request, httplib::Response& response,
                                  const httplib::ContentReader& reader) {
    if (request.is_multipart_form_data()) {
      detail::error_response(415, "multipart bodies are not accepted", response);
      return;
    }
    std::string body;
    switch (detail::read_body(reader, response, state.options.max_body_bytes, body)) {
      case detail::BodyRead::kOk:
        answer(state, request, std::move(body), response);
        return;
      case detail::BodyRead::kTooLarge:
        detail::error_response(413, "request body too large", response);
        return;
      case detail::BodyRead::kFailed:
        detail::error_response(400, "could not read the request body", response);
        return;
    }
  };
  // Routing belongs to the caller: every path of every method reaches the handler.
  const std::string any = ".*";
  server.Get(any, without_body);  // also HEAD
  server.Options(any, without_body);
  server.Post(any, with_body);
  server.Put(any, with_body);
  server.Patch(any, with_body);
  server.Delete(any, with_body);
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& response, const std::exception_ptr&) {
        log({.severity = Severity::kError,
             .event = "http_internal_error",
             .message = "The HTTP adapter failed on a request; answering 500."});
        detail::error_response(500, "internal error", response);
      });
}

void configure(detail::ServerState& state) {
  const auto& options = state.options;
  auto& server = state.server;
  const auto workers = std::max<std::size_t>(options.workers, 1);
  server.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  // The content reader enforces the limit after chunked decoding; this makes cpp-httplib
  // refuse an oversized Content-Length before reading it.
  server.set_payload_max_length(options.max_body_bytes);
  server.set_read_timeout(options.read_timeout);
  server.set_write_timeout(options.write_timeout);
  server.set_keep_alive_max_count(std::max<std::size_t>(options.keep_alive_max_requests, 1));
  server.set_keep_alive_timeout(std::max<time_t>(options.keep_alive_timeout.count(), 1));
  server.set_socket_options(reuse_address_only);
  install_routes(state);
}

}  // namespace

Server::Server(Handler handler, ServeOptions options)
    : state_(std::make_shared<detail::ServerState>()) {
  state_->handler = std::move(handler);
  state_->options = std::move(options);
  configure(*state_);
}

Server::~Server() { stop(); }

int Server::start(const std::string& address, int port) {
  auto& state = *state_;
  {
    std::lock_guard lock(state.mutex);
    if (state.started) throw std::runtime_error("http server already started");
  }
  errno = 0;
  const int bound = port == 0 ? state.server.bind_to_any_port(address)
                              : (state.server.bind_to_port(address, port) ? port : -1);
  if (bound < 0) throw std::runtime_error(bind_error(address, port, errno));
  state.address = address;
  state.port = bound;
  {
    std::lock_guard lock(state.mutex);
    state.started = true;
  }
  state.listener = std::thread([keep = state_] {
    // Returns once the accept loop ended and the worker pool has joined every worker.
    keep->server.listen_after_bind();
    {
      std::lock_guard lock(keep->mutex);
      keep->listen_done = true;
    }
    keep->done_cv.notify_all();
  });
  // cpp-httplib's stop() does nothing until the accept loop has begun: wait for it, so that
  // a stop() right after start() cannot be lost.
  for (;;) {
    if (state.server.is_running()) break;
    std::unique_lock lock(state.mutex);
    if (state.done_cv.wait_for(lock, std::chrono::milliseconds(1),
                               [&] { return state.listen_done; })) {
      break;
    }
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
    if (!state.started || !state.listener.joinable()) return;
  }
  state.stopping.store(true);
  log({.severity = Severity::kInfo,
       .event = "http_stopping",
       .message = "The HTTP server stopped accepting; waiting for in-flight requests.",
       .fields = {{"port", std::to_string(state.port)}}});
  state.server.stop();
  bool finished = false;
  {
    std::unique_lock lock(state.mutex);
    finished = state.done_cv.wait_for(lock, state.options.shutdown_grace,
                                      [&] { return state.listen_done; });
  }
  if (finished) {
    state.listener.join();
    log({.severity = Severity::kInfo,
         .event = "http_stopped",
         .message = "The HTTP server answered every in-flight request and stopped.",
         .fields = {{"port", std::to_string(state.port)}}});
    return;
  }
  // The thread keeps its own reference to the state and ends when the last request does.
  state.listener.detach();
  log({.severity = Severity::kWarning,
       .event = "shutdown_grace_exceeded",
       .message = "Requests were still running when the shutdown grace period ended.",
       .fields = {{"port", std::to_string(state.port)},
                  {"grace_ms", std::to_string(state.options.shutdown_grace.count())}}});
}

bool Server::running() const {
  std::lock_guard lock(state_->mutex);
  return state_->started && !state_->listen_done && !state_->stopping.load();
}

}  // namespace idempotency::http
