// The two commands of a claim without the script, and what their replies answer.
#include "redis_fresh_claim.h"

#include <hiredis/hiredis.h>

#include <memory>
#include <utility>
#include <vector>

#include "idempotency/clock.h"
#include "idempotency/errors.h"
#include "redis_connection.h"
#include "redis_internal.h"

namespace idempotency::redis_detail {
namespace {

// The two commands, their arguments viewing the strings they are made of.
struct FreshCommands {
  FreshCommands(std::string redis_key, const ClaimRequest& request, std::chrono::milliseconds lease,
                std::chrono::milliseconds ttl)
      : key(std::move(redis_key)),
        record("F " + std::to_string(ttl.count()) + " " +
               std::to_string(request.claim_token.size()) + " " +
               (request.fingerprint ? std::to_string(request.fingerprint->size()) : "-1") + "\n" +
               request.claim_token + request.fingerprint.value_or("")),
        px(std::to_string((lease + ttl).count())),
        set{"SET", key, record, "NX", "PX", px, "GET"},
        expiry{"PEXPIRETIME", key} {}
  FreshCommands(const FreshCommands&) = delete;
  FreshCommands& operator=(const FreshCommands&) = delete;

  std::string key;
  std::string record;
  std::string px;
  std::vector<std::string_view> set;     // views of the three above
  std::vector<std::string_view> expiry;  // a view of the key
};

// What the two replies answer (`previous`, SET's: the value the key had).
FreshAnswer answer(const redisReply* previous, const redisReply* expiry, std::string_view key,
                   const std::string& claim_token, std::chrono::milliseconds ttl) {
  FreshAnswer a;
  a.refused = refuses_fresh_claims(previous, expiry);
  if (previous == nullptr) return a;
  if (previous->type == REDIS_REPLY_STRING) {
    if (auto done = decode_done_record(reply_view(previous))) a.answered = std::move(*done);
    return a;
  }
  if (previous->type == REDIS_REPLY_NIL && expiry != nullptr &&
      expiry->type == REDIS_REPLY_INTEGER && expiry->integer > 0) {
    a.answered =
        Won{Claim{std::string(key), 1, from_millis(expiry->integer - ttl.count()), claim_token}};
  }
  return a;
}

}  // namespace

FreshAnswer claim_fresh(Pipelines& pipelines, std::string redis_key, std::string_view key,
                        const ClaimRequest& request, std::chrono::milliseconds lease,
                        std::chrono::milliseconds ttl) {
  const FreshCommands fresh(std::move(redis_key), request, lease, ttl);
  Preceding set{fresh.set, nullptr};
  bool opened = false;
  std::size_t slot = Pipelines::kAny;
  const PipelineOutcome o = pipelines.call(fresh.expiry, opened, slot, &set);
  // A failure the script call may repeat (never sent, or a stale connection) goes on to it;
  // any other (a timeout) ends the claim, as the script call's would.
  if (!o.reply && !retry_is_safe(o, opened, false, true)) throw StoreError(o.error);
  return answer(set.reply.get(), o.reply.get(), key, request.claim_token, ttl);
}

void claim_fresh_async(AsyncPipeline& pipeline, std::string redis_key, std::string key,
                       const ClaimRequest& request, std::chrono::milliseconds lease,
                       std::chrono::milliseconds ttl, FreshDone done) {
  struct Pending {
    std::string key;
    std::string claim_token;
    std::chrono::milliseconds ttl;
    FreshDone done;
    ReplyPtr previous;  // SET's reply, or null when it failed
  };
  std::string set;
  std::string expiry;
  {
    const FreshCommands fresh(std::move(redis_key), request, lease, ttl);
    if (!Connection::format(fresh.set, set) || !Connection::format(fresh.expiry, expiry)) {
      done(StoreFailure{"redis: out of memory"});
      return;
    }
  }
  auto pending = std::make_shared<Pending>(
      Pending{std::move(key), request.claim_token, ttl, std::move(done), nullptr});
  // Calls go out in order on the one connection, so the second reply comes after the first.
  pipeline.call(std::move(set),
                [pending](AsyncOutcome o) { pending->previous = std::move(o.outcome.reply); });
  pipeline.call(std::move(expiry), [pending](AsyncOutcome o) {
    Pending& p = *pending;
    if (!o.outcome.reply && !retry_is_safe(o.outcome, o.fresh, o.unreachable, true)) {
      p.done(StoreFailure{std::move(o.outcome.error)});
      return;
    }
    p.done(answer(p.previous.get(), o.outcome.reply.get(), p.key, p.claim_token, p.ttl));
  });
}

}  // namespace idempotency::redis_detail
