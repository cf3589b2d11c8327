// RedisLock's options checked, and a connection's session opened.
#include "redis_open.h"

#include <hiredis/hiredis.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "idempotency/errors.h"
#include "redis_internal.h"

namespace idempotency::redis_detail {

RedisOptions validated(RedisOptions o) {
  if (o.pool_size == 0) throw std::invalid_argument("RedisOptions::pool_size must be >= 1");
  if (o.pool_wait < std::chrono::milliseconds::zero()) {
    throw std::invalid_argument("RedisOptions::pool_wait must be >= 0");
  }
  if (o.connect_timeout <= std::chrono::milliseconds::zero()) {
    throw std::invalid_argument("RedisOptions::connect_timeout must be positive");
  }
  if (o.command_timeout <= std::chrono::milliseconds::zero()) {
    throw std::invalid_argument("RedisOptions::command_timeout must be positive");
  }
  return o;
}

ConnectionPtr open_session(const RedisNode& node, const RedisEndpoint& endpoint,
                           const RedisOptions& options, const TlsContext* tls) {
  ConnectionPtr c = Connection::open(node.host, node.port,
                                     {.connect_timeout = options.connect_timeout,
                                      .command_timeout = options.command_timeout,
                                      .tls = tls});
  const auto step = [&c](const std::vector<std::string_view>& args, std::string_view what) {
    ReplyPtr r = c->command(args);
    if (!r) throw StoreError(c->error());
    if (is_error_reply(r.get())) throw_reply_error(r.get(), what);
  };
  if (!endpoint.password.empty()) {
    std::vector<std::string_view> auth = {"AUTH"};
    if (!endpoint.user.empty()) auth.push_back(endpoint.user);
    auth.push_back(endpoint.password);
    step(auth, "AUTH failed");
  }
  if (endpoint.db != 0) step({"SELECT", std::to_string(endpoint.db)}, "SELECT failed");
  return c;
}

}  // namespace idempotency::redis_detail
