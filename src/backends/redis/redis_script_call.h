// The lock's script call on one connection, the same for one node and for a Redis Cluster:
// EVALSHA; after NOSCRIPT (the server lost its script cache), SCRIPT LOAD and EVALSHA once
// more; then, when asked, a follow-up command (WAIT) on the same connection.
//
// Thread safety: pure functions over a connection that the caller holds alone.
#pragma once

#include <hiredis/hiredis.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/connection_pool.h"
#include "idempotency/errors.h"
#include "redis_async_pipeline.h"
#include "redis_connection.h"
#include "redis_internal.h"

namespace idempotency::redis_detail {

/// Script is what an EVALSHA runs: the source, for SCRIPT LOAD after NOSCRIPT, and the digest
/// the server reported for it at start-up.
struct Script {
  std::string_view source;
  std::string_view sha;
};

/// loaded_digest() reads SCRIPT LOAD's reply: the digest. Throws `StoreError` for an error
/// reply or a reply of any other shape.
[[nodiscard]] std::string loaded_digest(const redisReply* reply);

/// evalsha() sends `args` (an EVALSHA of `script.sha`) through `command`, a callable that
/// sends one command and returns its reply or nullptr when the connection failed. After
/// NOSCRIPT it loads `script.source` (SCRIPT LOAD, which must report `script.sha`) and sends
/// `args` once more. Returns the script's reply (an error reply as it is), or nullptr when the
/// connection failed. Throws `StoreError` when SCRIPT LOAD is refused or reports another digest.
template <class Command>
[[nodiscard]] ReplyPtr evalsha(Command&& command, const std::vector<std::string_view>& args,
                               const Script& script) {
  ReplyPtr r = command(args);
  if (r && is_error_reply(r.get(), "NOSCRIPT")) {
    const ReplyPtr loaded = command({"SCRIPT", "LOAD", script.source});
    if (!loaded) return nullptr;
    if (loaded_digest(loaded.get()) != script.sha) {
      throw StoreError("redis: the server reports another digest for the script");
    }
    r = command(args);
  }
  return r;
}

/// call_script() sends `args` (an EVALSHA of `script.sha`) on `lease`'s connection. After
/// NOSCRIPT it loads
/// `script.source` there (SCRIPT LOAD, which must report `script.sha`) and sends `args` once
/// more. With `then` (e.g. WAIT), once the script's reply is not an error, `then` follows on
/// the same connection and its reply goes to `*then_reply`.
///
/// Returns the script's reply (an error reply as it is), or nullptr when the connection failed
/// first (its `failure()` says how). Throws `StoreError` when SCRIPT LOAD is refused or
/// reports another digest, and when `then` fails: the lease is then broken (`Lease::broken`),
/// and nothing is retried, since the script ran.
[[nodiscard]] ReplyPtr call_script(store_detail::ConnectionPool<ConnectionPtr>::Lease& lease,
                                   const std::vector<std::string_view>& args, const Script& script,
                                   const std::vector<std::string_view>& then = {},
                                   ReplyPtr* then_reply = nullptr);

/// EvalDone gets an asynchronous script call's reply (an error reply as it is), or nullptr and
/// the failure's message.
using EvalDone = std::function<void(ReplyPtr reply, std::string error)>;

/// evalsha_async() is evalsha() over `pipeline`: `command` is the EVALSHA of `script.sha`,
/// formatted (Connection::format), and `done` runs on the I/O thread. A failed call is sent
/// once more when retry_is_safe() says so; after NOSCRIPT, SCRIPT LOAD of `script.source` is
/// queued right ahead of the same EVALSHA (calls go out in order, so its reply need not be
/// awaited: the EVALSHA says whether it took). `script` must outlive the call.
void evalsha_async(AsyncPipeline& pipeline, std::string command, const Script& script,
                   EvalDone done);

}  // namespace idempotency::redis_detail
