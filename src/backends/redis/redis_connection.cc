// One connection to a Redis node: the TCP connect (and TLS handshake) under one deadline, then
// commands formatted and written by us and parsed by hiredis's reader. On plain TCP a
// command costs what it cost when hiredis owned the socket: one send(2), with MSG_NOSIGNAL
// instead of hiredis's write(2) (which raised SIGPIPE on a closed connection, and guarding each
// call against that cost four signal syscalls; BENCHMARKS.md, Stores), then recv(2) into a
// stack buffer fed to the reader until a reply is whole, as hiredis's redisGetReply does.
#include "redis_connection.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idempotency/errors.h"
#include "redis_poll.h"

namespace idempotency::redis_detail {
namespace {

using SteadyClock = std::chrono::steady_clock;

// What one read asks for: hiredis's own buffer size, so a reply takes as many reads as before.
constexpr std::size_t kReadSize = std::size_t{16} * 1024;

// Closes a socket unless released.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&&) = delete;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

struct AddressesDeleter {
  void operator()(addrinfo* a) const noexcept { ::freeaddrinfo(a); }
};

// The longest RESP header: a type byte, a 64-bit length in decimal and CRLF.
constexpr std::size_t kMaxHeader = 1 + 20 + 2;

// Appends a RESP header: `type` ('*' an array, '$' a bulk string), `n` and CRLF.
void append_header(std::string& out, char type, std::size_t n) {
  std::array<char, kMaxHeader> header{};
  header[0] = type;
  char* end = std::to_chars(header.data() + 1, header.data() + header.size() - 2, n).ptr;
  *end++ = '\r';
  *end++ = '\n';
  out.append(header.data(), end);
}

// Waits for a non-blocking connect() to finish; "" when it succeeded, else why not.
std::string finish_connect(int fd, SteadyClock::time_point deadline) {
  const int ready = poll_until(fd, POLLOUT, deadline);
  if (ready < 0) return system_message(errno);
  if (ready == 0) return "timed out (connect_timeout)";
  int error = 0;
  socklen_t size = sizeof(error);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) return system_message(errno);
  return error == 0 ? "" : system_message(error);
}

// Connects to each address `host` resolves to in turn, until one answers or `deadline`
// passes; returns the connected, still non-blocking socket.
UniqueFd connect_tcp(const std::string& host, int port, const std::string& where,
                     SteadyClock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int resolved = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (resolved != 0) {
    throw StoreError("redis: cannot connect to " + where + ": " + ::gai_strerror(resolved));
  }
  const std::unique_ptr<addrinfo, AddressesDeleter> addresses(found);
  std::string why = "no address";
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    UniqueFd fd(
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.get() < 0) {
      why = system_message(errno);
      continue;
    }
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) return fd;
    why = errno == EINPROGRESS ? finish_connect(fd.get(), deadline) : system_message(errno);
    if (why.empty()) return fd;
    if (SteadyClock::now() >= deadline) break;
  }
  throw StoreError("redis: cannot connect to " + where + ": " + why);
}

// Makes `fd` blocking, with Nagle off and `timeout` on each send and receive.
void make_blocking(int fd, std::chrono::milliseconds timeout, const std::string& where) {
  const int flags = ::fcntl(fd, F_GETFL);
  const int no_delay = 1;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ||
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &no_delay, sizeof(no_delay)) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    throw StoreError("redis: cannot set up the connection to " + where + ": " +
                     system_message(errno));
  }
}

// How a failed plain send(2) or recv(2) with errno `error` failed.
IoResult plain_failure(int error) {
  if (error == EAGAIN || error == EWOULDBLOCK) return IoResult{.failure = IoFailure::kTimedOut};
  return errno_failure(error);
}

}  // namespace

std::unique_ptr<Connection> Connection::open(const std::string& host, int port,
                                             const ConnectionSettings& settings) {
  const auto deadline = SteadyClock::now() + settings.connect_timeout;
  const std::string where =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  UniqueFd fd = connect_tcp(host, port, where, deadline);
  std::unique_ptr<TlsSession> tls;
  if (settings.tls != nullptr) tls = settings.tls->handshake(fd.get(), host, where, deadline);
  make_blocking(fd.get(), settings.command_timeout, where);
  return std::unique_ptr<Connection>(
      new Connection(fd.release(), std::move(tls), settings.command_timeout));
}

Connection::Connection(int fd, std::unique_ptr<TlsSession> tls,
                       std::chrono::milliseconds command_timeout)
    : fd_(fd),
      tls_(std::move(tls)),
      reader_(redisReaderCreate()),
      command_timeout_(command_timeout) {
  if (!reader_) {
    tls_.reset();
    ::close(fd_);
    throw StoreError("redis: out of memory");
  }
}

Connection::~Connection() {
  if (tls_ && failure_ == IoFailure::kNone) tls_->close_notify();
  tls_.reset();  // before the socket it writes to is closed
  ::close(fd_);
}

bool Connection::has_unread_input() const noexcept {
  return reader_->pos < reader_->len || (tls_ && tls_->has_buffered_input());
}

void Connection::fail(IoFailure failure, const std::string& reason) {
  failure_ = failure;
  error_ = "redis: " + reason;
}

bool Connection::format(const std::vector<std::string_view>& args, std::string& out) {
  // RESP, an array of bulk strings, written straight into `out`: hiredis's
  // redisFormatCommandArgv sprintf's every length into a buffer of its own that is then
  // copied, which was a fifth of the client's user CPU per call with 8 calls in flight.
  std::size_t size = kMaxHeader;
  for (const std::string_view a : args) size += kMaxHeader + a.size() + 2;
  try {
    out.reserve(out.size() + size);
    append_header(out, '*', args.size());
    for (const std::string_view a : args) {
      append_header(out, '$', a.size());
      out.append(a);
      out.append("\r\n", 2);
    }
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

ReplyPtr Connection::command(const std::vector<std::string_view>& args) {
  if (failure_ != IoFailure::kNone) return nullptr;
  std::string formatted;
  if (!format(args, formatted)) {
    fail(IoFailure::kError, "out of memory");
    return nullptr;
  }
  if (!send(formatted)) return nullptr;
  return read_reply();
}

bool Connection::send(std::string_view bytes) {
  if (failure_ != IoFailure::kNone) return false;
  const char* data = bytes.data();
  std::size_t size = bytes.size();
  IoResult result;
  if (tls_) {
    result = tls_->write(data, size);
  } else {
    while (size > 0) {
      const ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        result = plain_failure(errno);
        break;
      }
      data += n;
      size -= static_cast<std::size_t>(n);
    }
  }
  if (result.failure == IoFailure::kNone) return true;
  if (result.failure == IoFailure::kTimedOut) {
    result.reason =
        "cannot send within " + std::to_string(command_timeout_.count()) + " ms (command_timeout)";
  }
  fail(result.failure, result.reason);
  return false;
}

ReplyPtr Connection::take_reply() {
  if (failure_ != IoFailure::kNone) return nullptr;
  void* reply = nullptr;
  if (redisReaderGetReply(reader_.get(), &reply) != REDIS_OK) {
    fail(IoFailure::kError, std::string("protocol error: ") + reader_->errstr);
    return nullptr;
  }
  return ReplyPtr(static_cast<redisReply*>(reply));
}

bool Connection::receive() {
  if (failure_ != IoFailure::kNone) return false;
  std::array<char, kReadSize> buffer;  // not zeroed: only what was read is fed
  IoResult result;
  if (tls_) {
    result = tls_->read(buffer.data(), buffer.size());
  } else {
    ssize_t n = 0;
    do {
      n = ::recv(fd_, buffer.data(), buffer.size(), 0);
    } while (n < 0 && errno == EINTR);
    if (n > 0) result.bytes = static_cast<std::size_t>(n);
    if (n == 0) result = server_closed();
    if (n < 0) result = plain_failure(errno);
  }
  if (result.failure == IoFailure::kTimedOut) {
    result.reason =
        "no reply within " + std::to_string(command_timeout_.count()) + " ms (command_timeout)";
  }
  if (result.failure != IoFailure::kNone) {
    fail(result.failure, result.reason);
    return false;
  }
  if (redisReaderFeed(reader_.get(), buffer.data(), result.bytes) != REDIS_OK) {
    fail(IoFailure::kError, std::string("protocol error: ") + reader_->errstr);
    return false;
  }
  return true;
}

ReplyPtr Connection::read_reply() {
  for (;;) {
    if (ReplyPtr reply = take_reply()) return reply;
    if (!receive()) return nullptr;
  }
}

}  // namespace idempotency::redis_detail
