#include "http_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>

#include <thread>

namespace idempotency::http::testing {

void Gate::open() {
  {
    std::lock_guard lock(mutex_);
    open_ = true;
  }
  cv_.notify_all();
}

bool Gate::wait(std::chrono::milliseconds limit) {
  std::unique_lock lock(mutex_);
  return cv_.wait_for(lock, limit, [&] { return open_; });
}

bool accepts_connections(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // NOLINTNEXTLINE: the sockets API takes a sockaddr*.
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

bool wait_until_refused(int port) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!accepts_connections(port)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

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

bool RawConnection::send(std::string_view bytes) {
  while (!bytes.empty()) {
    const auto n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool RawConnection::read_some(std::chrono::milliseconds limit) {
  if (closed_) return false;
  pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
  if (::poll(&p, 1, static_cast<int>(limit.count())) <= 0) return false;
  std::array<char, 16384> chunk{};
  const auto n = ::recv(fd_, chunk.data(), chunk.size(), 0);
  if (n <= 0) {
    closed_ = true;
    return false;
  }
  received_.append(chunk.data(), static_cast<std::size_t>(n));
  return true;
}

std::string RawConnection::read_until(std::string_view marker, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (received_.find(marker) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !read_some(left)) break;
  }
  return received_;
}

bool RawConnection::read_to_close(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!closed_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    read_some(left);
  }
  return true;
}

Listener listen_on_free_port() {
  Listener out;
  out.fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // NOLINTNEXTLINE: the sockets API takes a sockaddr*.
  auto* raw = reinterpret_cast<sockaddr*>(&addr);
  socklen_t length = sizeof(addr);
  if (::bind(out.fd, raw, sizeof(addr)) != 0 || ::listen(out.fd, 4) != 0 ||
      ::getsockname(out.fd, raw, &length) != 0) {
    ::close(out.fd);
    return {};
  }
  out.port = ntohs(addr.sin_port);
  return out;
}

}  // namespace idempotency::http::testing
