// TLS for Redis connections (`rediss://`), on OpenSSL. A TlsContext holds what every
// connection of one RedisLock shares (trust anchors, client certificate, what to verify); a
// TlsSession is one connection's TLS state over a socket the caller owns. OpenSSL reaches the
// socket only through a BIO of ours that sends with MSG_NOSIGNAL, so a peer that closed the
// connection is an EPIPE, never a SIGPIPE, as on plain TCP (redis_connection.cc).
//
// Thread safety: a TlsContext is immutable once built; any number of threads may start
// sessions from it at once. A TlsSession is used by one thread at a time.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "idempotency/redis_lock.h"

namespace idempotency::redis_detail {

/// IoFailure says how a read or write on a connection failed.
enum class IoFailure {
  kNone,      ///< no failure
  kClosed,    ///< the peer closed or reset the connection (a pooled one may simply be stale)
  kTimedOut,  ///< `command_timeout` passed
  kError,     ///< anything else: a protocol or TLS error, a failed system call
};

/// IoResult is what a read or write did: `bytes` moved, or a failure and its reason (one
/// line, naming neither a key nor a secret).
struct IoResult {
  std::size_t bytes = 0;
  IoFailure failure = IoFailure::kNone;
  std::string reason;
};

/// system_message() is errno `error`'s message.
[[nodiscard]] std::string system_message(int error);

/// server_closed() is the failure of a connection the server closed (EOF).
[[nodiscard]] IoResult server_closed();

/// errno_failure() is the failure of a send or receive that failed with errno `error`:
/// kClosed for ECONNRESET / EPIPE (the peer reset or closed it), else kError.
[[nodiscard]] IoResult errno_failure(int error);

class TlsSession;

/// TlsContext is the TLS configuration one RedisLock's connections share.
class TlsContext {
 public:
  /// TlsContext() loads `tls.ca_file` (else the system's trust store) and, when given, the
  /// client certificate and key. Throws `StoreError` naming the URL parameter and the file
  /// that could not be loaded, with OpenSSL's reason (never the file's contents).
  explicit TlsContext(const RedisTls& tls);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  /// handshake() runs the TLS handshake on `fd`, a connected non-blocking socket to `host`
  /// (`where` is "host:port" for messages), giving up at `deadline`. The certificate must
  /// chain to the trust anchors and, unless `verify=ca`, name `sni=` or else `host` (an IP
  /// address is checked against the certificate's IP entries and sent as no SNI). Throws
  /// `StoreError` in one line naming `where` and the reason (e.g. "certificate verify failed:
  /// hostname mismatch"). The socket stays the caller's to close, after the session.
  [[nodiscard]] std::unique_ptr<TlsSession> handshake(
      int fd, const std::string& host, const std::string& where,
      std::chrono::steady_clock::time_point deadline) const;

 private:
  SSL_CTX* ctx_;
  std::string server_name_;
  bool verify_host_;
};

/// TlsSession is one connection's TLS state, on a blocking socket whose SO_RCVTIMEO /
/// SO_SNDTIMEO bound each read and write.
class TlsSession {
 public:
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  /// write() sends all of `data` (`size` bytes), or fails.
  [[nodiscard]] IoResult write(const char* data, std::size_t size);
  /// read() reads at least one and at most `size` bytes into `out`, or fails.
  [[nodiscard]] IoResult read(char* out, std::size_t size);
  /// has_buffered_input() says whether bytes already read from the socket wait in OpenSSL's
  /// buffers (decrypted or not), where poll() on the socket cannot see them.
  [[nodiscard]] bool has_buffered_input() const noexcept;
  /// close_notify() tells the server the connection ends (best effort, never blocks past
  /// SO_SNDTIMEO, never raises SIGPIPE).
  void close_notify() noexcept;

  /// The socket as our BIO sees it; public only so that the BIO's C callbacks can name it.
  struct Socket {
    int fd;
    bool eof = false;  // recv() returned 0: BIO_eof(), which OpenSSL asks before reporting EOF
  };

 private:
  friend class TlsContext;
  // Takes `ssl` and joins it to `fd` through our BIO.
  TlsSession(SSL* ssl, int fd);
  // The IoResult for an SSL_read/SSL_write that returned `status` with errno `saved_errno`
  // (a timeout's reason is left to the caller, which knows the timeout).
  [[nodiscard]] IoResult failed(int status, int saved_errno);

  SSL* ssl_;
  Socket socket_;
};

}  // namespace idempotency::redis_detail
