// The script call shared by RedisLock's single-node path and ClusterRouter.
#include "redis_script_call.h"

#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
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

namespace {

// One asynchronous EVALSHA across its retry and a reload of the script.
struct AsyncEval {
  AsyncEval(AsyncPipeline& p, std::string c, const Script& s, EvalDone d)
      : pipeline(p), command(std::move(c)), script(s), done(std::move(d)) {}
  AsyncPipeline& pipeline;
  std::string command;  // sent again as it is
  Script script;
  EvalDone done;
  bool retried = false;
  bool reloaded = false;
};

void submit(std::shared_ptr<AsyncEval> op);

void on_reply(std::shared_ptr<AsyncEval> op, AsyncOutcome o) {
  ReplyPtr r = std::move(o.outcome.reply);
  if (r) {
    if (!op->reloaded && is_error_reply(r.get(), "NOSCRIPT")) {
      op->reloaded = true;
      std::string load;
      if (Connection::format({"SCRIPT", "LOAD", op->script.source}, load)) {
        op->pipeline.call(std::move(load), [](const AsyncOutcome&) {});
        submit(std::move(op));
        return;
      }
    }
    op->done(std::move(r), {});
    return;
  }
  if (!op->retried && retry_is_safe(o.outcome, o.fresh, o.unreachable, true)) {
    op->retried = true;
    submit(std::move(op));
    return;
  }
  op->done(nullptr, std::move(o.outcome.error));
}

void submit(std::shared_ptr<AsyncEval> op) {
  AsyncPipeline& pipeline = op->pipeline;
  std::string command = op->command;  // the op keeps its own, for a retry
  pipeline.call(std::move(command), [op = std::move(op)](AsyncOutcome o) mutable {
    on_reply(std::move(op), std::move(o));
  });
}

}  // namespace

void evalsha_async(AsyncPipeline& pipeline, std::string command, const Script& script,
                   EvalDone done) {
  submit(std::make_shared<AsyncEval>(pipeline, std::move(command), script, std::move(done)));
}

}  // namespace idempotency::redis_detail
