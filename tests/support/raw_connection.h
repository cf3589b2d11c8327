// RawConnection: a client TCP connection to 127.0.0.1 that sends bytes exactly as given, for
// the requests no well-behaved HTTP client library would send (bare CR, obs-fold, NUL, slow
// headers) and for reading exactly what a server answered.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace idempotency::testing {

class RawConnection {
 public:
  /// RawConnection() connects to 127.0.0.1:port (is_open() says whether it did).
  explicit RawConnection(int port);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  [[nodiscard]] bool is_open() const { return fd_ >= 0; }
  [[nodiscard]] int fd() const { return fd_; }
  /// send() writes all of `bytes`; false when the peer is gone.
  bool send(std::string_view bytes) const;
  /// read_until() reads until `marker` occurs at or after `from` in what was received, the
  /// peer closes, or `limit` passes; it returns everything received so far.
  const std::string& read_until(std::string_view marker,
                                std::chrono::milliseconds limit = std::chrono::seconds(5),
                                std::size_t from = 0);
  /// read_to_close() reads until the peer closes or resets the connection, or `limit` passes;
  /// it says whether the peer closed.
  bool read_to_close(std::chrono::milliseconds limit = std::chrono::seconds(5));
  /// received() is everything read so far.
  [[nodiscard]] const std::string& received() const { return received_; }
  /// status() is the status code of the first response line read, or -1.
  [[nodiscard]] int status() const;

 private:
  // Reads what arrives before `deadline`; false on close, reset or timeout.
  bool read_some(std::chrono::steady_clock::time_point deadline);

  int fd_ = -1;
  std::string received_;
  bool closed_ = false;
};

}  // namespace idempotency::testing
