// A claim without the script: `SET key <record> NX PX <lease + ttl> GET` of the record's fresh
// form (redis_script.lua), then `PEXPIRETIME key` right behind it on the same connection. A
// fresh key gets its record, and its expiry less the ttl is the lease expiry on the server's
// clock, as the script would have answered; a key already DONE returns its record, which is
// the replay. Anything else is for the script to decide. (NX with GET, and PEXPIRETIME, are
// Redis 7.)
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

/// FreshAnswer is what the two commands answered.
struct FreshAnswer {
  /// A win, or the replay of a DONE record; nullopt when the script must decide (a record in
  /// another state, a failure a call may repeat, any other reply). The script re-affirms a
  /// fresh record of the same claim token that did get written, so nothing is lost or doubled.
  std::optional<ClaimResult> answered;
  /// The server refused the commands as such (before Redis 7, or an ACL): use the script.
  bool refused = false;
};

/// claim_fresh() sends the two commands for `key` (stored as `redis_key`) in one write on
/// `pipelines`. Throws `StoreError` when no connection opens, and for a failure no call may
/// repeat (a timeout), as a script call would end.
[[nodiscard]] FreshAnswer claim_fresh(Pipelines& pipelines, std::string redis_key,
                                      std::string_view key, const ClaimRequest& request,
                                      std::chrono::milliseconds lease,
                                      std::chrono::milliseconds ttl);

/// FreshDone gets an asynchronous fresh claim's answer, or the failure no call may repeat.
using FreshDone = std::function<void(std::variant<FreshAnswer, StoreFailure>)>;

/// claim_fresh_async() is claim_fresh() on `pipeline`, the two commands one right after the
/// other; `done` runs on its I/O thread (here, when the commands cannot be formatted).
void claim_fresh_async(AsyncPipeline& pipeline, std::string redis_key, std::string key,
                       const ClaimRequest& request, std::chrono::milliseconds lease,
                       std::chrono::milliseconds ttl, FreshDone done);

}  // namespace idempotency::redis_detail
