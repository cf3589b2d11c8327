// The three commands of a claim without the script, and what their replies answer.
#include "redis_fresh_claim.h"

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "idempotency/clock.h"
#include "idempotency/errors.h"
#include "idempotency/record.h"
#include "redis_connection.h"
#include "redis_internal.h"

namespace idempotency::redis_detail {
namespace {

// The three commands, their arguments viewing the strings they are made of.
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
  const std::vector<std::string_view> time{"TIME"};
};

// What a record the key already had answers. A DONE one is the replay: it exists only before
// its expires_at, by the server's clock (its key expires then). A claimed one is judged by the
// pure state machine at the server's `now` (TIME, sent after SET), and only an answer that
// writes nothing (a live holder, the caller's own live claim) is given here: it was already
// the answer when SET read the record, as each holds only while `now` is before an instant of
// the record. A fresh-form record's lease comes from PEXPIRETIME, a command of its own, which
// a write in between could have made another record's: it may answer that the key is held
// (which runs nothing) but never win it.
std::optional<ClaimResult> answer_stored(StoredRecord stored, const redisReply* time,
                                         std::string_view key, const ClaimRequest& request,
                                         std::chrono::milliseconds lease,
                                         std::chrono::milliseconds ttl) {
  Record& stored_record = stored.record;
  if (stored_record.state == RecordState::kDone) {
    return AlreadyDone{std::move(stored_record.result), std::move(stored_record.fingerprint),
                       from_millis(stored_record.expires_at)};
  }
  const std::optional<Millis> now = server_millis(time);
  if (!now) return std::nullopt;
  const Transition t = transition(
      std::move(stored_record),
      ClaimOp{request.claim_token, lease.count(), ttl.count(), request.fingerprint}, *now);
  if (t.changed || !t.record || !t.answer.claim) return std::nullopt;
  const Record& rec = *t.record;
  switch (*t.answer.claim) {
    case ClaimAnswer::kHeldByOther:
      return HeldByOther{from_millis(rec.lease_expiry), rec.fingerprint};
    case ClaimAnswer::kWon:
      if (stored.fresh_form) return std::nullopt;
      return Won{
          Claim{std::string(key), rec.fence, from_millis(rec.lease_expiry), request.claim_token}};
    case ClaimAnswer::kAlreadyDone:  // not from a claimed record
      break;
  }
  return std::nullopt;
}

// What the replies answer (`previous`, SET's: the value the key had; `time` null without TIME).
FreshAnswer answer(const redisReply* previous, const redisReply* expiry, const redisReply* time,
                   std::string_view key, const ClaimRequest& request,
                   std::chrono::milliseconds lease, std::chrono::milliseconds ttl) {
  FreshAnswer a;
  a.refused = refuses_fresh_claims(previous, expiry);
  if (previous == nullptr) return a;
  if (previous->type == REDIS_REPLY_STRING) {
    const std::int64_t key_expiry =
        expiry != nullptr && expiry->type == REDIS_REPLY_INTEGER ? expiry->integer : -1;
    std::optional<StoredRecord> stored = decode_stored_record(reply_view(previous), key_expiry);
    if (!stored) return a;
    a.met_claimed = stored->record.state == RecordState::kClaimed;
    a.answered = answer_stored(std::move(*stored), time, key, request, lease, ttl);
    return a;
  }
  if (previous->type == REDIS_REPLY_NIL && expiry != nullptr &&
      expiry->type == REDIS_REPLY_INTEGER && expiry->integer > 0) {
    a.answered = Won{Claim{std::string(key), 1, from_millis(expiry->integer - ttl.count()),
                           request.claim_token}};
  }
  return a;
}

}  // namespace

FreshAnswer claim_fresh(Pipelines& pipelines, std::string redis_key, std::string_view key,
                        const ClaimRequest& request, std::chrono::milliseconds lease,
                        std::chrono::milliseconds ttl, bool with_time) {
  const FreshCommands fresh(std::move(redis_key), request, lease, ttl);
  // SET, PEXPIRETIME, then TIME when asked: the last is the call's own command, those before
  // it its chain (redis_pipeline.h).
  Preceding expiry{fresh.expiry, nullptr};
  Preceding set{fresh.set, nullptr, with_time ? &expiry : nullptr};
  bool opened = false;
  std::size_t slot = Pipelines::kAny;
  const PipelineOutcome o =
      pipelines.call(with_time ? fresh.time : fresh.expiry, opened, slot, &set);
  // A failure the script call may repeat (never sent, or a stale connection) goes on to it;
  // any other (a timeout) ends the claim, as the script call's would.
  if (!o.reply && !retry_is_safe(o, opened, false, true)) throw StoreError(o.error);
  const redisReply* expiry_reply = with_time ? expiry.reply.get() : o.reply.get();
  const redisReply* time_reply = with_time ? o.reply.get() : nullptr;
  return answer(set.reply.get(), expiry_reply, time_reply, key, request, lease, ttl);
}

void claim_fresh_async(AsyncPipeline& pipeline, std::string redis_key, std::string key,
                       const ClaimRequest& request, std::chrono::milliseconds lease,
                       std::chrono::milliseconds ttl, bool with_time, FreshDone done) {
  struct Pending {
    std::string key;
    ClaimRequest request;
    std::chrono::milliseconds lease;
    std::chrono::milliseconds ttl;
    FreshDone done;
    ReplyPtr previous;  // SET's reply, or null when it failed
    ReplyPtr expiry;    // PEXPIRETIME's
    ReplyPtr time;      // TIME's, or null without it

    // The last command's outcome `o`, its reply going to `last`: the answer.
    void end(AsyncOutcome& o, ReplyPtr& last) {
      if (!o.outcome.reply && !retry_is_safe(o.outcome, o.fresh, o.unreachable, true)) {
        done(StoreFailure{std::move(o.outcome.error)});
        return;
      }
      last = std::move(o.outcome.reply);
      done(answer(previous.get(), expiry.get(), time.get(), key, request, lease, ttl));
    }
  };
  std::string set;
  std::string expiry;
  std::string time;
  {
    const FreshCommands fresh(std::move(redis_key), request, lease, ttl);
    if (!Connection::format(fresh.set, set) || !Connection::format(fresh.expiry, expiry) ||
        (with_time && !Connection::format(fresh.time, time))) {
      done(StoreFailure{"redis: out of memory"});
      return;
    }
  }
  auto pending = std::make_shared<Pending>(
      Pending{std::move(key), request, lease, ttl, std::move(done), nullptr, nullptr, nullptr});
  // Calls go out in order on the one connection, so the replies come in that order; the last
  // one's callback answers.
  pipeline.call(std::move(set),
                [pending](AsyncOutcome o) { pending->previous = std::move(o.outcome.reply); });
  pipeline.call(std::move(expiry), [pending, with_time](AsyncOutcome o) {
    if (with_time) {
      pending->expiry = std::move(o.outcome.reply);
    } else {
      pending->end(o, pending->expiry);
    }
  });
  if (with_time) {
    pipeline.call(std::move(time), [pending](AsyncOutcome o) { pending->end(o, pending->time); });
  }
}

}  // namespace idempotency::redis_detail
