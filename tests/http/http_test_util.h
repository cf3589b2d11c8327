// Helpers for the HTTP server tests: a client, a gate a handler can wait on, and socket probes.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace idempotency::http::testing {

/// client_for() is a cpp-httplib client of 127.0.0.1:port whose every wait is bounded (5 s),
/// so a broken server fails a test instead of hanging it.
httplib::Client client_for(int port);

/// post_in_background() POSTs `body` to 127.0.0.1:port on a thread of its own, from a client
/// that keeps its connection (so a `Connection: close` that comes back is the server's own, not
/// its echo), and puts the answer in `result`; join the thread before reading it.
std::thread post_in_background(int port, std::optional<httplib::Result>& result,
                               std::string body = "slow");

/// Gate blocks waiters until opened; waits are bounded so a broken test cannot hang.
class Gate {
 public:
  /// open() releases every current and future waiter.
  void open();
  /// wait() returns true once the gate is open, false after `limit`.
  bool wait(std::chrono::milliseconds limit = std::chrono::seconds(5));

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

/// accepts_connections() says whether a TCP connect to 127.0.0.1:port succeeds.
bool accepts_connections(int port);

/// wait_until_refused() polls until connecting to 127.0.0.1:port fails, for at most 5 s;
/// it returns whether it did.
bool wait_until_refused(int port);

/// Listener is a listening loopback socket and its port.
struct Listener {
  int fd = -1;
  int port = 0;
};

/// listen_on_free_port() binds and listens on a free loopback port (fd -1 on failure);
/// close the socket to release it.
Listener listen_on_free_port();

}  // namespace idempotency::http::testing
