// A claim without the script: `SET key <record> NX PX <lease + ttl> GET` of the record's fresh
// form (redis_script.lua), then `PEXPIRETIME key` right behind it on the same connection, and
// `TIME` when asked. A fresh key gets its record, and its expiry less the ttl is the lease
// expiry on the server's clock, as the script would have answered; a DONE key returns its
// record, which is the replay. With TIME, a claimed record is judged by the pure state machine
// (record.h) at the server's clock, and a live holder, or the caller's own live claim, is
// answered here too, as it writes nothing. Anything else (a claim to take over) is for the
// script to decide. (NX with GET, and PEXPIRETIME, are Redis 7.)
//
// Thread safety: free functions over a shared connection (Pipelines, AsyncPipeline), which
// are safe from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "idempotency/backend.h"
#include "redis_async_pipeline.h"
#include "redis_pipeline.h"

namespace idempotency::redis_detail {

/// FreshAnswer is what the commands answered.
struct FreshAnswer {
  /// A win, a replay or (with TIME) a live holder; nullopt when the script must decide (a
  /// record to write, a failure a call may repeat, any other reply). The script re-affirms a
  /// fresh record of the same claim token that did get written, so nothing is lost or doubled.
  std::optional<ClaimResult> answered;
  /// The server refused the commands as such (before Redis 7, or an ACL): use the script.
  bool refused = false;
  /// The key held a claimed record (a holder, live or not): where one claim met one, the next
  /// is likely to, so RedisLock sends TIME along with it.
  bool met_claimed = false;
};

/// claim_fresh() sends the commands for `key` (stored as `redis_key`) in one write on
/// `pipelines`, TIME too when `with_time`. Throws `StoreError` when no connection opens, and
/// for a failure no call may repeat (a timeout), as a script call would end.
[[nodiscard]] FreshAnswer claim_fresh(Pipelines& pipelines, std::string redis_key,
                                      std::string_view key, const ClaimRequest& request,
                                      std::chrono::milliseconds lease,
                                      std::chrono::milliseconds ttl, bool with_time);

/// FreshDone gets an asynchronous fresh claim's answer, or the failure no call may repeat.
using FreshDone = std::function<void(std::variant<FreshAnswer, StoreFailure>)>;

/// claim_fresh_async() is claim_fresh() on `pipeline`, the commands one right after the other;
/// `done` runs on its I/O thread (here, when the commands cannot be formatted).
void claim_fresh_async(AsyncPipeline& pipeline, std::string redis_key, std::string key,
                       const ClaimRequest& request, std::chrono::milliseconds lease,
                       std::chrono::milliseconds ttl, bool with_time, FreshDone done);

}  // namespace idempotency::redis_detail
