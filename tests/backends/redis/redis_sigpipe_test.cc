// A server that closes the connection mid-call: every call is a StoreError, never SIGPIPE, with
// SIGPIPE at its default disposition (which would kill the process) and unblocked; over plain
// TCP and over TLS (where OpenSSL's own socket BIO would write(2) and raise it). The client
// runs in a child forked before any thread exists (the server is this process, on its main
// thread), so a SIGPIPE shows as the child's death instead of the test binary's.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "idempotency/errors.h"
#include "idempotency/redis_lock.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;

// One accepted connection, plain or TLS: how the fake server reads and writes on it.
struct Peer {
  std::function<ssize_t(char*, std::size_t)> receive;
  std::function<void(const std::string&)> send;
};

// Reads one RESP command (an array of bulk strings) from `peer`; false at EOF or on an error.
bool read_command(const Peer& peer) {
  std::string buf;
  auto fill = [&](std::size_t want) {
    char chunk[4096];
    while (buf.size() < want) {
      const ssize_t n = peer.receive(chunk, sizeof(chunk));
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

struct SslCtxDeleter {
  void operator()(SSL_CTX* c) const noexcept { SSL_CTX_free(c); }
};
struct SslDeleter {
  void operator()(SSL* s) const noexcept { SSL_free(s); }
};

// The fake server: its first connection answers SCRIPT LOAD (so a RedisLock can be built),
// then closes the connection with a FIN followed by a RST, so the client's next send meets a
// socket reset in CLOSE_WAIT: EPIPE, which raises SIGPIPE without MSG_NOSIGNAL. Its second
// connection (the client's retry) reads a command and closes without answering. With a TLS
// context, it speaks TLS on both (the FIN and the RST under the TLS session, as a crash).
class ClosingServer {
 public:
  explicit ClosingServer(SSL_CTX* tls = nullptr)
      : listener_(::socket(AF_INET, SOCK_STREAM, 0)), tls_(tls) {
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

  [[nodiscard]] int port() const { return port_; }

  // serve() handles the two connections.
  void serve() {
    const int first = ::accept(listener_, nullptr, nullptr);
    if (first < 0) return;
    std::unique_ptr<SSL, SslDeleter> first_tls;
    const Peer peer = open_peer(first, first_tls);
    if (read_command(peer)) {
      const std::string sha(40, 'a');
      peer.send("$40\r\n" + sha + "\r\n");
    }
    ::shutdown(first, SHUT_WR);  // FIN: the client's socket goes to CLOSE_WAIT
    const linger reset{1, 0};
    ::setsockopt(first, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    ::close(first);  // RST: the next send on it is EPIPE
    const int second = ::accept(listener_, nullptr, nullptr);
    if (second < 0) return;
    std::unique_ptr<SSL, SslDeleter> second_tls;
    (void)read_command(open_peer(second, second_tls));  // mid-call: no reply ever comes
    ::close(second);
  }

 private:
  // open_peer() wraps an accepted socket (in a TLS session kept in `session`, with a TLS context).
  Peer open_peer(int fd, std::unique_ptr<SSL, SslDeleter>& session) const {
    if (tls_ == nullptr) {
      return Peer{
          [fd](char* out, std::size_t n) { return ::recv(fd, out, n, 0); },
          [fd](const std::string& s) { (void)::send(fd, s.data(), s.size(), MSG_NOSIGNAL); }};
    }
    session.reset(SSL_new(tls_));
    SSL* ssl = session.get();
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) != 1) {
      return Peer{[](char*, std::size_t) -> ssize_t { return -1; }, [](const std::string&) {}};
    }
    return Peer{[ssl](char* out, std::size_t n) -> ssize_t {
                  return SSL_read(ssl, out, static_cast<int>(n));
                },
                [ssl](const std::string& s) {
                  (void)SSL_write(ssl, s.data(), static_cast<int>(s.size()));
                }};
  }

  int listener_;
  SSL_CTX* tls_;
  int port_ = 0;
};

// expect_store_error_never_sigpipe() builds a RedisLock on `url` in a child process whose SIGPIPE
// kills it, and expects its claim to be a StoreError, while `server` handles the connections here.
void expect_store_error_never_sigpipe(ClosingServer& server, const std::string& url) {
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
      RedisLock lock(url, RedisOptions{.pool_size = 1,
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

TEST(RedisSigpipe, AServerClosingMidCallIsAStoreErrorNeverSigpipe) {
  ClosingServer server;
  expect_store_error_never_sigpipe(server, "redis://127.0.0.1:" + std::to_string(server.port()));
}

TEST(RedisSigpipe, ATlsServerClosingMidCallIsAStoreErrorNeverSigpipe) {
  // The fake server presents the fixture's server certificate (DNS:localhost, the test CA).
  const std::string fixture = redis_tls_url();
  ASSERT_FALSE(fixture.empty()) << "no Redis TLS fixture: run through ctest";
  const std::filesystem::path certs =
      std::filesystem::path(parse_redis_url(fixture).tls->ca_file).parent_path();
  const std::unique_ptr<SSL_CTX, SslCtxDeleter> tls(SSL_CTX_new(TLS_server_method()));
  ASSERT_EQ(SSL_CTX_use_certificate_chain_file(tls.get(), (certs / "server.crt").c_str()), 1);
  ASSERT_EQ(
      SSL_CTX_use_PrivateKey_file(tls.get(), (certs / "server.key").c_str(), SSL_FILETYPE_PEM), 1);
  ClosingServer server(tls.get());
  expect_store_error_never_sigpipe(server, "rediss://localhost:" + std::to_string(server.port()) +
                                               "?ca=" + (certs / "ca.crt").string());
}

}  // namespace
}  // namespace idempotency::testing
