// A server that closes the connection mid-call: every call is a StoreError, never SIGPIPE, with
// SIGPIPE at its default disposition (which would kill the process) and unblocked. The client
// runs in a child forked before any thread exists (the server is this process, on its main
// thread), so a SIGPIPE shows as the child's death instead of the test binary's.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

#include "idempotency/errors.h"
#include "idempotency/redis_lock.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;

// Reads one RESP command (an array of bulk strings) from `fd`; false at EOF or on an error.
bool read_command(int fd) {
  std::string buf;
  auto fill = [&](std::size_t want) {
    char chunk[4096];
    while (buf.size() < want) {
      const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) return false;
      buf.append(chunk, static_cast<std::size_t>(n));
    }
    return true;
  };
  auto line = [&](std::size_t from) -> std::size_t {
    std::size_t eol;
    while ((eol = buf.find("\r\n", from)) == std::string::npos) {
      if (!fill(buf.size() + 1)) return std::string::npos;
    }
    return eol;
  };
  std::size_t eol = line(0);
  if (eol == std::string::npos || buf[0] != '*') return false;
  const int count = std::stoi(buf.substr(1, eol - 1));
  std::size_t at = eol + 2;
  for (int i = 0; i < count; ++i) {
    eol = line(at);
    if (eol == std::string::npos || buf[at] != '$') return false;
    const std::size_t len = std::stoul(buf.substr(at + 1, eol - at - 1));
    at = eol + 2 + len + 2;
    if (!fill(at)) return false;
  }
  return true;
}

// The fake server: its first connection answers SCRIPT LOAD (so a RedisLock can be built),
// then closes the connection with a FIN followed by a RST, so the client's next send meets a
// socket reset in CLOSE_WAIT: EPIPE, which raises SIGPIPE without MSG_NOSIGNAL. Its second
// connection (the client's retry) reads a command and closes without answering.
class ClosingServer {
 public:
  ClosingServer() : listener_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener_, 4) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen";
    }
    port_ = ntohs(addr.sin_port);
    // accept() gives up after this, so a child that died early cannot hang the test.
    const timeval patience{30, 0};
    ::setsockopt(listener_, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof(patience));
  }
  ~ClosingServer() { ::close(listener_); }
  ClosingServer(const ClosingServer&) = delete;
  ClosingServer& operator=(const ClosingServer&) = delete;

  [[nodiscard]] std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

  // serve() handles the two connections.
  void serve() {
    const int first = ::accept(listener_, nullptr, nullptr);
    if (first < 0) return;
    if (read_command(first)) {
      const std::string sha(40, 'a');
      const std::string reply = "$40\r\n" + sha + "\r\n";
      (void)::send(first, reply.data(), reply.size(), MSG_NOSIGNAL);
    }
    ::shutdown(first, SHUT_WR);  // FIN: the client's socket goes to CLOSE_WAIT
    const linger reset{1, 0};
    ::setsockopt(first, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    ::close(first);  // RST: the next send on it is EPIPE
    const int second = ::accept(listener_, nullptr, nullptr);
    if (second < 0) return;
    (void)read_command(second);  // mid-call: the command arrives, no reply ever does
    ::close(second);
  }

 private:
  int listener_;
  int port_ = 0;
};

TEST(RedisSigpipe, AServerClosingMidCallIsAStoreErrorNeverSigpipe) {
  ClosingServer server;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child leaves by _exit only: it must never run gtest's teardown.
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_UNBLOCK, &pipe, nullptr);
    int code = 1;
    try {
      RedisLock lock(server.url(), RedisOptions{.pool_size = 1,
                                                .connect_timeout = milliseconds(5000),
                                                .command_timeout = milliseconds(5000)});
      // Let the FIN and the RST arrive before the next send (loopback: at once).
      std::this_thread::sleep_for(milliseconds(100));
      try {
        (void)lock.claim("sigpipe-key", milliseconds(60'000));
        code = 2;  // an outcome from a closed connection
      } catch (const StoreError&) {
        code = 0;
      }
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  server.serve();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_FALSE(WIFSIGNALED(status)) << "the client died of signal " << WTERMSIG(status)
                                    << (WTERMSIG(status) == SIGPIPE ? " (SIGPIPE)" : "");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: unknown, 2: an outcome, 3: the constructor failed";
}

}  // namespace
}  // namespace idempotency::testing
