// TcpRelay: a TCP relay on 127.0.0.1 in front of a server, for the tests of a network that goes
// silent. silence() stops it forwarding either way while every socket stays open, which is what
// a client sees of a NAT or firewall that forgot the flow, a partitioned host, or a proxy that
// accepts bytes and stops answering; resume() forwards again, what waited included.
//
// Thread safety: silence() and resume() from any thread; one relay thread per connection.
#pragma once

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace idempotency::testing {

class TcpRelay {
 public:
  /// TcpRelay() listens on a free 127.0.0.1 port and relays each connection to `host`:`port`.
  TcpRelay(std::string host, std::string port)
      : upstream_host_(std::move(host)), upstream_port_(std::move(port)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listener_ < 0) throw std::runtime_error("relay: socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener_, 16) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(listener_);
      throw std::runtime_error("relay: cannot listen");
    }
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  ~TcpRelay() {
    stopping_ = true;
    acceptor_.join();
    std::vector<std::thread> pumps;
    {
      std::lock_guard lock(mu_);
      pumps.swap(pumps_);
    }
    for (auto& t : pumps) t.join();
    ::close(listener_);
  }

  /// port() is the port to connect to instead of the server's.
  [[nodiscard]] int port() const { return port_; }

  /// silence() stops forwarding in both directions, from the next byte on; sockets stay open.
  void silence() { silent_ = true; }

  /// resume() forwards again.
  void resume() { silent_ = false; }

 private:
  static constexpr int kSliceMs = 20;

  int connect_upstream() const {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(upstream_host_.c_str(), upstream_port_.c_str(), &hints, &found) != 0) {
      return -1;
    }
    int fd = -1;
    for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
      fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
        ::close(fd);
        fd = -1;
      }
    }
    ::freeaddrinfo(found);
    return fd;
  }

  void accept_loop() {
    while (!stopping_) {
      pollfd pfd{listener_, POLLIN, 0};
      if (::poll(&pfd, 1, kSliceMs) <= 0) continue;
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      const int server = connect_upstream();
      if (server < 0) {
        ::close(client);
        continue;
      }
      std::lock_guard lock(mu_);
      pumps_.emplace_back([this, client, server] { pump(client, server); });
    }
  }

  static bool write_all(int fd, const char* data, std::size_t size) {
    while (size > 0) {
      const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
      if (n <= 0) return false;
      data += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  }

  void pump(int client, int server) {
    std::array<char, 16384> buffer{};
    std::array<pollfd, 2> fds{pollfd{client, POLLIN, 0}, pollfd{server, POLLIN, 0}};
    bool open = true;
    while (open && !stopping_) {
      if (silent_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(kSliceMs));
        continue;
      }
      if (::poll(fds.data(), fds.size(), kSliceMs) <= 0) continue;
      if (silent_) continue;  // what arrived after silence() waits for resume()
      for (std::size_t k = 0; k < fds.size() && open; ++k) {
        if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = ::recv(fds[k].fd, buffer.data(), buffer.size(), 0);
        open = n > 0 && write_all(fds[1 - k].fd, buffer.data(), static_cast<std::size_t>(n));
      }
    }
    ::close(client);
    ::close(server);
  }

  std::string upstream_host_;
  std::string upstream_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> silent_{false};
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<std::thread> pumps_;  // guarded by mu_
  std::thread acceptor_;
};

}  // namespace idempotency::testing
