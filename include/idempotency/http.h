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
// caller. The server is asynchronous (Boost.Beast on Asio): its I/O threads read and write
// every connection, so a slow client costs a socket, not a thread, and the handler runs on a
// separate bounded pool of workers, so a slow handler or store cannot stall accepting.
//
// It is strict and bounded. A request with a bare CR or bare LF line ending, an obs-fold
// line, a NUL or other control byte in a field, an invalid field name, or both Content-Length
// and Transfer-Encoding is answered 400 and never reaches the handler; so is an HTTP/1.1
// request without exactly one valid Host, a Transfer-Encoding in HTTP/1.0 or without chunked
// last, and a target that is neither a path, an http(s) URI nor `*` for OPTIONS (any other
// transfer coding than chunked is 501), and a request whose header does not arrive within
// `header_timeout` (the connection is closed). What the handler gets is RFC 9112's reading:
// `path` is the target in origin-form (`/path?query`, or `*`), an absolute-form target's
// authority its Host, and a chunked body's trailer fields are dropped, never merged. A
// declared body over `max_body_bytes` is answered 413 straight after the header, without
// reading it and without `100 Continue`. Idle keep-alive connections close after
// `keep_alive_timeout`, and at most `max_connections` are open at once (further ones wait in
// the kernel's backlog).
// A handler that throws is answered 500 and logged (`handler_threw`); the server keeps
// serving.
//
// Shutdown is graceful: stop() (or SIGTERM/SIGINT under serve()) closes the listening socket
// at once, so new connections are refused, closes idle connections, then lets requests already
// being handled finish and send their response (with `Connection: close`), waiting at most
// `ServeOptions::shutdown_grace`. Pub/Sub redelivers whatever was cut off.
//
// An AsyncHandler is the alternative for handlers that do their own asynchronous I/O: it runs
// on the event loop, answers through a Responder when its work is done, and hands anything
// that blocks to a pool of its own.
//
// Thread safety: the handler is called from several worker threads at once and must be safe
// for that (an AsyncHandler from the I/O threads). A Server's start() and stop() may be called from
// any thread, but not concurrently with each other or with destruction.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "idempotency/pubsub/message.h"
#include "idempotency/pubsub/response.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace idempotency::http {

namespace detail {
struct ServerState;
}  // namespace detail

/// Handler answers one request; it is called concurrently from the worker threads.
using Handler = std::function<pubsub::PushResponse(const pubsub::PushRequest&)>;

/// Responder answers one request of an AsyncHandler. Call it once, from any thread; later
/// calls are ignored. Dropped unanswered (every copy destroyed), it answers 500 and logs
/// `handler_dropped_request`, so a lost callback cannot hang a connection.
class Responder {
 public:
  struct State;
  /// Responder() is made by the server for each request.
  explicit Responder(std::shared_ptr<State> state);
  /// operator() sends `response` (the first call only).
  void operator()(pubsub::PushResponse response) const;

 private:
  std::shared_ptr<State> state_;
};

/// AsyncHandler starts answering a request on the event loop and returns at once: it must not
/// block (hand blocking work to a thread pool) and answers through `respond`, now or later. No
/// worker thread is involved, so a request costs no thread hop. A handler that throws is
/// answered 500 (logged `handler_threw`).
using AsyncHandler = std::function<void(pubsub::PushRequest request, Responder respond)>;

/// Options for Server and serve(), meant to be filled with designated initializers. Every
/// bound has a default meant for production on Cloud Run.
struct ServeOptions {
  /// Worker threads, hence the most handler calls at once; further requests queue for one.
  std::size_t workers = 16;
  /// Threads running the event loop (reading, parsing, writing). One keeps up with a
  /// loopback NIC on two cores; raise it only on machines with many cores.
  std::size_t io_threads = 1;
  /// Connections open at once; the server stops accepting above it until one closes.
  std::size_t max_connections = 4096;
  /// The request line plus header fields, in bytes; more is answered 431. An unwrapped
  /// Pub/Sub delivery carries up to 100 attributes of 256 + 1024 bytes as headers.
  std::size_t max_header_bytes = std::size_t{192} * 1024;
  /// Requests with a larger body (after any chunked decoding) get 413 and never reach the
  /// handler. A 10 MB Pub/Sub message is ~13.4 MB wrapped in base64 JSON: 16 MiB admits it in
  /// every delivery form.
  std::size_t max_body_bytes = std::size_t{16} * 1024 * 1024;
  /// From a request's first byte to the end of its header; past it the connection is closed.
  std::chrono::milliseconds header_timeout{10'000};
  /// From the end of the header to the end of the body; past it the connection is closed.
  std::chrono::milliseconds body_timeout{60'000};
  /// Longest time to send a response; past it the connection is closed.
  std::chrono::milliseconds write_timeout{30'000};
  /// Requests served on one connection before the server closes it.
  std::size_t keep_alive_max_requests = 1000;
  /// How long an idle keep-alive connection waits for its next request.
  std::chrono::milliseconds keep_alive_timeout{60'000};
  /// How long stop() waits for in-flight requests. Cloud Run allows 10 s after SIGTERM.
  std::chrono::milliseconds shutdown_grace{9'000};
  /// The event loop the server runs on its `io_threads`; null: one of its own. Share one to run
  /// an AsyncHandler's own asynchronous I/O (e.g. a client call) on the server's threads; it
  /// must not be run by other threads.
  std::shared_ptr<boost::asio::io_context> event_loop;
  /// Called once with the bound port when the server is ready to accept connections
  /// (useful with port 0); runs on the thread that called start() or serve().
  std::function<void(int port)> on_listening;
};

/// Server runs the HTTP server on background threads, for embedding and tests.
class Server {
 public:
  /// Server() keeps the handler and options; nothing is bound until start().
  explicit Server(Handler handler, ServeOptions options = {});
  /// Server() with an asynchronous handler, called on the event loop (`workers` is unused).
  explicit Server(AsyncHandler handler, ServeOptions options = {});
  /// ~Server() stops the server as stop() does.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// start() binds address:port (0 picks a free port) and serves on background threads
  /// until stop(); it returns the bound port. Throws std::runtime_error with a one-line
  /// reason when it cannot bind, or when the server was already started.
  int start(const std::string& address, int port);

  /// stop() closes the listening socket and idle connections, then waits up to
  /// `shutdown_grace` for in-flight requests to be answered and returns. A request still
  /// running after the grace period is left to finish on a background thread (logged as
  /// `shutdown_grace_exceeded`). Idempotent.
  void stop();

  /// running() says whether the server is accepting connections: started, not stopped,
  /// and its accept loop has not failed.
  [[nodiscard]] bool running() const;

 private:
  // Shared with the threads that finish an overrun request after stop() gave up waiting.
  std::shared_ptr<detail::ServerState> state_;
};

/// serve() runs a server until SIGTERM or SIGINT, then shuts down gracefully and returns 0;
/// it returns 1 if it could not bind or the server failed. It blocks both signals in the
/// calling thread (threads it starts inherit that) and waits for them with sigtimedwait, so no
/// work runs in a signal handler. Call it before starting other threads, or block SIGTERM and
/// SIGINT in them, or a signal may be delivered to a thread that does not wait for it.
int serve(const std::string& address, int port, Handler handler, ServeOptions options = {});
/// serve() with an asynchronous handler, as Server(AsyncHandler) runs it.
int serve(const std::string& address, int port, AsyncHandler handler, ServeOptions options = {});

}  // namespace idempotency::http
