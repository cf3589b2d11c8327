// One command on a blocking hiredis connection, written by us and read by hiredis: hiredis
// 0.14 writes with write(2), which raises SIGPIPE on a connection the server has closed, and
// guarding each call against that cost four signal syscalls next to its one write and one read
// (BENCHMARKS.md, Stores). send(2) with MSG_NOSIGNAL reports EPIPE instead, and the process's
// signal dispositions stay the user's.
#include <hiredis/hiredis.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "redis_internal.h"

namespace idempotency::redis_detail {
namespace {

struct FormattedDeleter {
  void operator()(char* p) const noexcept { redisFreeCommand(p); }
};

// Marks the connection failed the way hiredis does (its own setter is not exported), so callers
// and the pool's reuse check read `err` / `errstr` alike whichever side failed. errno is kept.
void fail(redisContext* c, int type, const char* what) {
  const int saved = errno;
  c->err = type;
  std::snprintf(c->errstr, sizeof(c->errstr), "%s", what);
  errno = saved;
}

// Sends all of `data`; SO_SNDTIMEO (hiredis's command timeout) bounds each send.
bool send_all(redisContext* c, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(c->fd, data, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;  // EAGAIN: the send timed out (SO_SNDTIMEO)
      std::array<char, 128> text{};
      // GNU strerror_r returns its message (maybe static), not necessarily in `text`.
      const char* message = strerror_r(error, text.data(), text.size());
      errno = error;
      fail(c, REDIS_ERR_IO, message);
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

ReplyPtr command(redisContext* c, const std::vector<std::string_view>& args) {
  if (c->err != 0) return nullptr;
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* raw = nullptr;
  const int size =
      redisFormatCommandArgv(&raw, static_cast<int>(argv.size()), argv.data(), lens.data());
  const std::unique_ptr<char, FormattedDeleter> formatted(raw);
  if (size < 0 || !formatted) {
    fail(c, REDIS_ERR_OOM, "Out of memory");
    return nullptr;
  }
  if (!send_all(c, formatted.get(), static_cast<std::size_t>(size))) return nullptr;
  // Nothing is left in hiredis's output buffer, so redisGetReply only reads (read(2), which
  // never raises SIGPIPE), under SO_RCVTIMEO, and sets `err` on EOF, a timeout or an error.
  void* reply = nullptr;
  if (redisGetReply(c, &reply) != REDIS_OK) return nullptr;
  return ReplyPtr(static_cast<redisReply*>(reply));
}

}  // namespace idempotency::redis_detail
