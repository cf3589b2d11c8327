// serve(): a Server in the foreground until SIGTERM or SIGINT, for a program's main().
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <ctime>
#include <exception>
#include <string>
#include <utility>

#include "idempotency/http.h"
#include "idempotency/log.h"

namespace idempotency::http {
namespace {

const char* signal_name(int signal) { return signal == SIGTERM ? "SIGTERM" : "SIGINT"; }

// Waits for one of `signals` (blocked in this thread) and returns it, or returns 0 when the
// server stops accepting on its own. Polls so that a failed accept loop is noticed.
int wait_for_signal(const sigset_t& signals, const Server& server) {
  const timespec poll{.tv_sec = 0, .tv_nsec = 200'000'000};
  while (server.running()) {
    const int signal = ::sigtimedwait(&signals, nullptr, &poll);
    if (signal > 0) return signal;
  }
  return 0;
}

// Consumes signals that arrived during shutdown, so restoring the caller's mask does not
// deliver them with their default action (terminating the process with a non-zero status).
void drain(const sigset_t& signals) {
  const timespec now{.tv_sec = 0, .tv_nsec = 0};
  for (;;) {
    const int signal = ::sigtimedwait(&signals, nullptr, &now);
    if (signal < 0 && errno != EINTR) return;  // EAGAIN: nothing left pending
  }
}

// Serves until a shutdown signal, for both kinds of handler.
template <class AnyHandler>
int serve_until_signal(const std::string& address, int port, AnyHandler handler,
                       ServeOptions options) {
  sigset_t signals;
  ::sigemptyset(&signals);
  ::sigaddset(&signals, SIGTERM);
  ::sigaddset(&signals, SIGINT);
  sigset_t previous;
  // Blocked before the server starts its threads, which inherit the mask: only
  // sigtimedwait() below ever receives these signals.
  ::pthread_sigmask(SIG_BLOCK, &signals, &previous);

  int result = 0;
  {
    Server server(std::move(handler), std::move(options));
    try {
      server.start(address, port);
    } catch (const std::exception& e) {
      log({.severity = Severity::kError,
           .event = "http_bind_failed",
           .message = "The HTTP server could not start.",
           .fields = {{"reason", e.what()}}});
      result = 1;
    }
    if (result == 0) {
      const int signal = wait_for_signal(signals, server);
      if (signal == 0) {
        log({.severity = Severity::kError,
             .event = "http_server_failed",
             .message = "The HTTP server stopped accepting connections on its own."});
        result = 1;
      } else {
        log({.severity = Severity::kInfo,
             .event = "shutdown_signal",
             .message = "Received a shutdown signal; shutting down gracefully.",
             .fields = {{"signal", signal_name(signal)}}});
      }
      server.stop();
    }
  }
  drain(signals);
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return result;
}

}  // namespace

int serve(const std::string& address, int port, Handler handler, ServeOptions options) {
  return serve_until_signal(address, port, std::move(handler), std::move(options));
}

int serve(const std::string& address, int port, AsyncHandler handler, ServeOptions options) {
  return serve_until_signal(address, port, std::move(handler), std::move(options));
}

}  // namespace idempotency::http
