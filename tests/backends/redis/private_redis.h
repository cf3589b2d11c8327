// PrivateRedis: a redis-server of a test's own, on a free 127.0.0.1 port in a temporary
// directory, that the test can kill and restart on the same port with the same data.
//
// Thread safety: use from one thread.
#pragma once

#include <hiredis/hiredis.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace idempotency::testing {

/// Frees a hiredis context.
struct RedisContextDeleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
using RedisContextPtr = std::unique_ptr<redisContext, RedisContextDeleter>;

/// Frees a hiredis reply.
struct RedisReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

/// A raw hiredis connection for tests that inspect or tamper with the server directly.
class RawRedis {
 public:
  /// RawRedis() connects to `url` (redis://[user:password@]host:port[/db]); throws on failure.
  explicit RawRedis(const std::string& url,
                    std::chrono::milliseconds timeout = std::chrono::seconds(5));
  /// command() runs one command; throws std::runtime_error on a connection failure (an error
  /// reply is returned as a reply).
  RedisReplyPtr command(const std::vector<std::string>& args);
  /// text() runs a command and returns its string / status / error text, or the integer.
  std::string text(const std::vector<std::string>& args);
  /// time_ms() is the server's clock (TIME) in milliseconds since the epoch.
  long long time_ms();
  /// calls() is how many times the server ran `command` (lower case, as INFO commandstats
  /// names it) since it started or since CONFIG RESETSTAT.
  int calls(const std::string& command);

 private:
  RedisContextPtr ctx_;
};

class PrivateRedis {
 public:
  /// PrivateRedis() picks a port and a directory and starts the server with `extra_args`
  /// appended to its command line (e.g. {"--requirepass", "pw"}). Persistence is on
  /// (appendonly, fsync always), so a SIGKILL loses nothing that was acknowledged.
  explicit PrivateRedis(std::vector<std::string> extra_args = {});
  ~PrivateRedis();
  PrivateRedis(const PrivateRedis&) = delete;
  PrivateRedis& operator=(const PrivateRedis&) = delete;

  /// start() launches the server (again) on the same port and data and waits for PING.
  void start();
  /// kill() sends `sig` and waits for the server to exit.
  void kill(int sig);
  /// url() returns redis://[userinfo@]127.0.0.1:port[/db].
  [[nodiscard]] std::string url(std::string_view userinfo = "", int db = 0) const;
  [[nodiscard]] int port() const { return port_; }

 private:
  std::vector<std::string> extra_args_;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

/// free_port() returns a 127.0.0.1 TCP port nobody listens on (at the moment of the call).
int free_port();

}  // namespace idempotency::testing
