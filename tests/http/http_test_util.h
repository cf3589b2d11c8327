// Helpers for the HTTP server tests: a gate a handler can wait on, and socket probes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>

namespace idempotency::http::testing {

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

/// RawConnection is a client TCP connection to 127.0.0.1 that sends bytes exactly as given, for
/// the requests no well-behaved client library would send.
class RawConnection {
 public:
  /// RawConnection() connects to 127.0.0.1:port (is_open() says whether it did).
  explicit RawConnection(int port);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  [[nodiscard]] bool is_open() const { return fd_ >= 0; }
  /// send() writes all of `bytes`; false when the peer is gone.
  bool send(std::string_view bytes);
  /// read_until() reads until `marker` has arrived, the peer closed, or `limit` passed, and
  /// returns everything read so far on this connection.
  std::string read_until(std::string_view marker,
                         std::chrono::milliseconds limit = std::chrono::seconds(5));
  /// read_to_close() reads until the peer closes (or resets) the connection, or `limit`
  /// passes; it says whether the peer closed.
  bool read_to_close(std::chrono::milliseconds limit = std::chrono::seconds(5));
  /// received() is everything read so far.
  [[nodiscard]] const std::string& received() const { return received_; }

 private:
  // Reads what is available within `limit`; false on close, reset or timeout.
  bool read_some(std::chrono::milliseconds limit);

  int fd_ = -1;
  std::string received_;
  bool closed_ = false;
};

/// Listener is a listening loopback socket and its port.
struct Listener {
  int fd = -1;
  int port = 0;
};

/// listen_on_free_port() binds and listens on a free loopback port (fd -1 on failure);
/// close the socket to release it.
Listener listen_on_free_port();

}  // namespace idempotency::http::testing
