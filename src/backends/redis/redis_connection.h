// Connection: one blocking connection to one Redis node, over plain TCP or TLS. hiredis only
// parses replies (redisReader), and format() writes commands; the socket is
// ours, so every write is a send(2) with MSG_NOSIGNAL (a peer that closed the connection is an
// EPIPE, never a SIGPIPE) and TLS is a TlsSession in between. A Redis Cluster client can open
// one per node from the same ConnectionSettings.
//
// Thread safety: one thread at a time per Connection (the pool lends each to one caller).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "redis_internal.h"
#include "redis_tls.h"

namespace idempotency::redis_detail {

/// ConnectionSettings say how a connection is opened and how long its calls may take.
struct ConnectionSettings {
  /// Bounds the TCP connect (every address the host resolves to, in turn) and the TLS
  /// handshake together.
  std::chrono::milliseconds connect_timeout{2000};
  /// Bounds each send and each read of a command (SO_SNDTIMEO / SO_RCVTIMEO).
  std::chrono::milliseconds command_timeout{2000};
  /// nullptr: plain TCP. Otherwise TLS from this context, which must outlive the connection.
  const TlsContext* tls = nullptr;
};

/// Connection is one open connection to a Redis node.
class Connection {
 public:
  /// open() connects to `host`:`port` and, with `settings.tls`, completes the TLS handshake.
  /// Throws `StoreError` in one line naming host:port and why (refused, timed out, certificate
  /// verify failed: …).
  [[nodiscard]] static std::unique_ptr<Connection> open(const std::string& host, int port,
                                                        const ConnectionSettings& settings);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// command() sends one command and reads its reply. nullptr means the connection failed
  /// (failure() and error() say how) and must be discarded; an error *reply* is returned like
  /// any other reply.
  [[nodiscard]] ReplyPtr command(const std::vector<std::string_view>& args);

  /// format() appends `args` to `out` as one RESP command (an array of bulk strings); false
  /// when memory for it cannot be had.
  [[nodiscard]] static bool format(const std::vector<std::string_view>& args, std::string& out);
  /// send() writes `bytes` (commands already formatted) whole; false when the connection
  /// failed (failure() says how).
  [[nodiscard]] bool send(std::string_view bytes);
  /// take_reply() returns the next reply if it has been read whole, else nullptr (with
  /// failure() set when what was read is not RESP).
  [[nodiscard]] ReplyPtr take_reply();
  /// receive() reads what the server sent next, waiting up to `command_timeout`; false when
  /// the connection failed.
  [[nodiscard]] bool receive();

  /// failure() is kNone until a call fails; then it says how.
  [[nodiscard]] IoFailure failure() const noexcept { return failure_; }
  /// error() is the failure as one line starting "redis: ", naming neither key nor secret.
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  /// fd() is the socket, for poll() (a subscribed connection waiting for a message).
  [[nodiscard]] int fd() const noexcept { return fd_; }
  /// has_unread_input() says whether bytes past the last reply were already read (into the
  /// reply parser, or into OpenSSL's buffer), where poll() on fd() cannot see them.
  [[nodiscard]] bool has_unread_input() const noexcept;

 private:
  Connection(int fd, std::unique_ptr<TlsSession> tls, std::chrono::milliseconds command_timeout);

  [[nodiscard]] ReplyPtr read_reply();
  void fail(IoFailure failure, const std::string& reason);

  int fd_;
  std::unique_ptr<TlsSession> tls_;  // nullptr on plain TCP
  ReaderPtr reader_;
  std::chrono::milliseconds command_timeout_;
  IoFailure failure_ = IoFailure::kNone;
  std::string error_;
};

using ConnectionPtr = std::unique_ptr<Connection>;

}  // namespace idempotency::redis_detail
