#include "support/raw_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdlib>

namespace idempotency::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

RawConnection::RawConnection(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // NOLINTNEXTLINE: the sockets API takes a sockaddr*.
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

RawConnection::~RawConnection() {
  if (fd_ >= 0) ::close(fd_);
}

bool RawConnection::send(std::string_view bytes) const {
  while (!bytes.empty()) {
    const auto n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

const std::string& RawConnection::read_until(std::string_view marker, milliseconds limit,
                                             std::size_t from) {
  const auto deadline = Clock::now() + limit;
  while (received_.find(marker, from) == std::string::npos && read_some(deadline)) {
  }
  return received_;
}

bool RawConnection::read_to_close(milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (read_some(deadline)) {
  }
  return closed_;
}

int RawConnection::status() const {
  if (received_.rfind("HTTP/1.1 ", 0) != 0 || received_.size() < 12) return -1;
  return std::atoi(received_.substr(9, 3).c_str());
}

bool RawConnection::read_some(Clock::time_point deadline) {
  if (closed_ || fd_ < 0) return false;
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return false;
  pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
  if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
  std::array<char, 65536> chunk{};
  const auto n = ::recv(fd_, chunk.data(), chunk.size(), 0);
  if (n <= 0) {
    closed_ = true;  // EOF, or a reset
    return false;
  }
  received_.append(chunk.data(), static_cast<std::size_t>(n));
  return true;
}

}  // namespace idempotency::testing
