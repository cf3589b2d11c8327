// HTTP serving: a small embeddable server that hands every request to one push handler.
//
//   using idempotency::pubsub::PushRequest, idempotency::pubsub::PushResponse;
//   int main() {
//     return idempotency::http::serve("0.0.0.0", 8080, [](const PushRequest& request) {
//       return PushResponse{.status = request.body.empty() ? 400 : 204};
//     });
//   }
//
// Every request, whatever its method and path, goes to the handler: routing belongs to the
// caller. The server bounds what one instance takes on: a fixed worker count (a connection
// waits for a free worker), a request body limit (413 without calling the handler), socket
// read/write timeouts (the per-request deadline; Pub/Sub's ack deadline is its push timeout)
// and a per-connection keep-alive request count. A handler that throws is answered 500 and
// logged (`handler_threw`); the server keeps serving.
//
// Shutdown is graceful: stop() (or SIGTERM/SIGINT under serve()) closes the listening socket
// at once, so new connections are refused, then lets requests already being handled finish
// and send their response, waiting at most `ServeOptions::shutdown_grace`. Connections that
// were accepted but not yet picked up by a worker are closed unanswered, and an idle
// keep-alive connection is closed once its keep-alive wait ends; Pub/Sub redelivers both.
//
// Thread safety: the handler is called from several worker threads at once and must be safe
// for that. A Server's start() and stop() may be called from any thread, but not
// concurrently with each other or with destruction.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "idempotency/pubsub/message.h"
#include "idempotency/pubsub/response.h"

namespace idempotency::http {

namespace detail {
struct ServerState;
}  // namespace detail

/// Handler answers one request; it is called concurrently from the worker threads.
using Handler = std::function<pubsub::PushResponse(const pubsub::PushRequest&)>;

/// Options for Server and serve(), meant to be filled with designated initializers.
struct ServeOptions {
  /// Worker threads, hence the most requests handled at once; further connections queue.
  std::size_t workers = 16;
  /// Requests with a larger body (after any chunked decoding) get 413 and never reach the
  /// handler. Pub/Sub messages are up to 10 MB, and wrapping and base64 add a margin.
  std::size_t max_body_bytes = std::size_t{10} * 1024 * 1024 + std::size_t{64} * 1024;
  /// Longest wait for the client between reads while receiving a request.
  std::chrono::milliseconds read_timeout{30'000};
  /// Longest wait for the client between writes while sending a response.
  std::chrono::milliseconds write_timeout{30'000};
  /// Requests served on one connection before the server closes it.
  std::size_t keep_alive_max_requests = 1000;
  /// How long an idle keep-alive connection waits for its next request (whole seconds,
  /// at least 1). An idle connection also holds its worker this long after stop() begins.
  std::chrono::seconds keep_alive_timeout{5};
  /// How long stop() waits for in-flight requests. Cloud Run allows 10 s after SIGTERM.
  std::chrono::milliseconds shutdown_grace{9'000};
  /// Called once with the bound port when the server is ready to accept connections
  /// (useful with port 0); runs on the thread that called start() or serve().
  std::function<void(int port)> on_listening;
};

/// Server runs the HTTP server on background threads, for embedding and tests.
class Server {
 public:
  /// Server() keeps the handler and options; nothing is bound until start().
  explicit Server(Handler handler, ServeOptions options = {});
  /// ~Server() stops the server as stop() does.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// start() binds address:port (0 picks a free port) and serves on background threads
  /// until stop(); it returns the bound port. Throws std::runtime_error with a one-line
  /// reason when it cannot bind, or when the server was already started.
  int start(const std::string& address, int port);

  /// stop() closes the listening socket, then waits up to `shutdown_grace` for in-flight
  /// requests to be answered and returns. A request still running after the grace period is
  /// left to finish on its own thread (logged as `shutdown_grace_exceeded`). Idempotent.
  void stop();

  /// running() says whether the server is accepting connections: started, not stopped,
  /// and its accept loop has not failed.
  [[nodiscard]] bool running() const;

 private:
  // Shared with the listening thread, which outlives the Server when a request overruns the
  // grace period.
  std::shared_ptr<detail::ServerState> state_;
};

/// serve() runs a server until SIGTERM or SIGINT, then shuts down gracefully and returns 0;
/// it returns 1 if it could not bind or the server failed. It blocks both signals in the
/// calling thread (threads it starts inherit that) and waits for them with sigtimedwait, so no
/// work runs in a signal handler. Call it before starting other threads, or block SIGTERM and
/// SIGINT in them, or a signal may be delivered to a thread that does not wait for it.
int serve(const std::string& address, int port, Handler handler, ServeOptions options = {});

}  // namespace idempotency::http
