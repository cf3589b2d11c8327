// The script call shared by RedisLock's single-node path and ClusterRouter.
#include "redis_script_call.h"

#include <hiredis/hiredis.h>

#include <string>
#include <string_view>
#include <vector>

#include "idempotency/errors.h"

namespace idempotency::redis_detail {

std::string loaded_digest(const redisReply* reply) {
  if (is_error_reply(reply)) {
    throw StoreError("redis: SCRIPT LOAD failed: " + std::string(reply_view(reply)));
  }
  if (reply->type != REDIS_REPLY_STRING || reply->len != 40) {
    throw StoreError("redis: unexpected reply to SCRIPT LOAD");
  }
  return std::string(reply_view(reply));
}

ReplyPtr call_script(store_detail::ConnectionPool<ConnectionPtr>::Lease& lease,
                     const std::vector<std::string_view>& args, const Script& script,
                     const std::vector<std::string_view>& then, ReplyPtr* then_reply) {
  Connection& conn = *lease.get();
  ReplyPtr r = evalsha([&conn](const std::vector<std::string_view>& a) { return conn.command(a); },
                       args, script);
  if (!r) return nullptr;
  if (!then.empty() && !is_error_reply(r.get())) {
    *then_reply = conn.command(then);
    if (!*then_reply) {
      std::string error = conn.error();
      lease.broken();
      throw StoreError(error);
    }
  }
  return r;
}

}  // namespace idempotency::redis_detail
