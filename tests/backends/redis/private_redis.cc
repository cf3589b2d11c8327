#include "private_redis.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "idempotency/redis_lock.h"

extern char** environ;

namespace idempotency::testing {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot find a free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

RawRedis::RawRedis(const std::string& url, std::chrono::milliseconds timeout) {
  const RedisEndpoint ep = parse_redis_url(url);
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  ctx_.reset(redisConnectWithTimeout(ep.host.c_str(), ep.port, tv));
  if (!ctx_ || ctx_->err != 0) throw std::runtime_error("RawRedis: cannot connect");
  redisSetTimeout(ctx_.get(), tv);
  if (!ep.password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!ep.user.empty()) auth.push_back(ep.user);
    auth.push_back(ep.password);
    command(auth);
  }
  if (ep.db != 0) command({"SELECT", std::to_string(ep.db)});
}

RedisReplyPtr RawRedis::command(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  RedisReplyPtr r(static_cast<redisReply*>(
      redisCommandArgv(ctx_.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
  if (!r) throw std::runtime_error(std::string("RawRedis: ") + ctx_->errstr);
  return r;
}

std::string RawRedis::text(const std::vector<std::string>& args) {
  RedisReplyPtr r = command(args);
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  if (r->type == REDIS_REPLY_NIL) return "(nil)";
  if (r->str != nullptr) return std::string(r->str, r->len);
  return "(array)";
}

long long RawRedis::time_ms() {
  RedisReplyPtr r = command({"TIME"});
  return std::stoll(std::string(r->element[0]->str)) * 1000 +
         std::stoll(std::string(r->element[1]->str)) / 1000;
}

int RawRedis::calls(const std::string& command) {
  const std::string stats = text({"INFO", "commandstats"});
  const std::string tag = "cmdstat_" + command + ":calls=";
  const std::size_t at = stats.find(tag);
  return at == std::string::npos ? 0 : std::stoi(stats.substr(at + tag.size()));
}

PrivateRedis::PrivateRedis(std::vector<std::string> extra_args)
    : extra_args_(std::move(extra_args)) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "idem-redis-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  port_ = free_port();
  start();
}

PrivateRedis::~PrivateRedis() {
  if (pid_ > 0) kill(SIGKILL);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void PrivateRedis::start() {
  std::vector<std::string> args = {"/usr/bin/redis-server",
                                   "--port",
                                   std::to_string(port_),
                                   "--bind",
                                   "127.0.0.1",
                                   "--dir",
                                   dir_,
                                   "--daemonize",
                                   "no",
                                   "--logfile",
                                   dir_ + "/redis.log",
                                   "--appendonly",
                                   "yes",
                                   "--appendfsync",
                                   "always",
                                   "--save",
                                   "",
                                   "--enable-debug-command",
                                   "local"};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The server writes to its log file, and holds none of this process's descriptors: a test
  // that dies without its destructors (a sanitizer's halt_on_error) would otherwise leave it
  // holding ctest's output pipe, and ctest waiting on it until its timeout.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  const int spawned = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    pid_ = -1;
    throw std::runtime_error("cannot spawn /usr/bin/redis-server");
  }
  // Wait for the port to answer (an auth-protected server answers NOAUTH, which is enough).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    timeval tv{0, 200'000};
    RedisContextPtr c(redisConnectWithTimeout("127.0.0.1", port_, tv));
    if (c && c->err == 0) {
      redisSetTimeout(c.get(), tv);
      RedisReplyPtr r(static_cast<redisReply*>(redisCommand(c.get(), "PING")));
      if (r && (r->type == REDIS_REPLY_STATUS ||
                (r->type == REDIS_REPLY_ERROR &&
                 std::string(r->str).find("LOADING") == std::string::npos))) {
        return;
      }
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("redis-server exited at start (see its log in " + dir_ + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("redis-server did not answer PING within 10 s");
}

void PrivateRedis::kill(int sig) {
  if (pid_ <= 0) return;
  ::kill(pid_, sig);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

std::string PrivateRedis::url(std::string_view userinfo, int db) const {
  std::string u = "redis://";
  if (!userinfo.empty()) u += std::string(userinfo) + "@";
  u += "127.0.0.1:" + std::to_string(port_);
  if (db != 0) u += "/" + std::to_string(db);
  return u;
}

}  // namespace idempotency::testing
