#include "http_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <utility>

namespace idempotency::http::testing {

httplib::Client client_for(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(5));
  client.set_write_timeout(std::chrono::seconds(5));
  return client;
}

std::thread post_in_background(int port, std::optional<httplib::Result>& result, std::string body) {
  return std::thread([port, &result, body = std::move(body)] {
    auto client = client_for(port);
    client.set_keep_alive(true);
    result.emplace(client.Post("/", body, "text/plain"));
  });
}

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
