// RedisLock internals shared by its sources and its tests (never installed): ownership of
// hiredis's replies and reply parser, the embedded script and the strict decoders of its
// replies.
//
// Thread safety: pure functions and value types.
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "idempotency/backend.h"
#include "idempotency/errors.h"
#include "idempotency/record.h"

namespace idempotency::redis_detail {

/// The Lua script (redis_script.lua), compiled in.
extern const std::string_view kScript;

/// Frees a hiredis reply tree.
struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

/// Frees a hiredis reply parser.
struct ReaderDeleter {
  void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
};
using ReaderPtr = std::unique_ptr<redisReader, ReaderDeleter>;

/// reply_view() is a string, status or error reply's text (a view into the reply).
[[nodiscard]] inline std::string_view reply_view(const redisReply* r) noexcept {
  return {r->str, r->len};
}

/// is_error_reply() says whether `r` is an error reply whose text starts with `prefix` (any
/// error reply for an empty prefix).
[[nodiscard]] inline bool is_error_reply(const redisReply* r,
                                         std::string_view prefix = {}) noexcept {
  return r->type == REDIS_REPLY_ERROR && reply_view(r).starts_with(prefix);
}

/// server_message() is the error reply `r`'s text without what Redis (6.2 and later) quotes of
/// the command's arguments after an unknown command (`, with args beginning with: …`), where
/// a key would be.
[[nodiscard]] inline std::string_view server_message(const redisReply* r) noexcept {
  const std::string_view text = reply_view(r);
  return text.substr(0, text.find(", with args beginning with:"));
}

/// throw_reply_error() throws `StoreError` with the server's message for the error reply `r`
/// after `context`, without any echo of our arguments.
[[noreturn]] inline void throw_reply_error(const redisReply* r, std::string_view context) {
  throw StoreError("redis: " + std::string(context) + ": " + std::string(server_message(r)));
}

/// server_millis() is the server's clock in epoch milliseconds from a TIME reply (seconds,
/// microseconds); nullopt for a reply of any other shape or out of range.
[[nodiscard]] std::optional<Millis> server_millis(const redisReply* time);

/// warn_if_evicting() logs `redis_may_evict` when `info` (the server's INFO memory) shows a
/// memory limit with a policy other than noeviction; nothing for any other reply.
void warn_if_evicting(const redisReply* info) noexcept;

/// parse_int() reads a whole decimal integer (an optional minus, digits); nullopt for anything
/// else, an empty string, or a value beyond 64 bits.
[[nodiscard]] std::optional<std::int64_t> parse_int(std::string_view s);

/// decode_claim_reply() turns the script's reply to a claim into a `ClaimResult` for `key`
/// and `claim_token`. Throws `StoreError` for a reply of any other shape: never a guess.
[[nodiscard]] ClaimResult decode_claim_reply(const redisReply* reply, std::string_view key,
                                             const std::string& claim_token);

/// decode_flag_reply() reads the script's `"op:1"` or `"op:0"` reply to complete or release.
/// Throws `StoreError` for a reply of any other shape.
[[nodiscard]] bool decode_flag_reply(const redisReply* reply, std::string_view op);

/// decode_joined_complete() reads the reply to a `complete_many` of several keys (the script's
/// integers, one a key): whether the key at `index` was completed by it. False for a 0, and for
/// any other reply (an error, NOSCRIPT, another shape): the key's own complete then decides.
[[nodiscard]] bool decode_joined_complete(const redisReply* reply, std::size_t index);

/// decode_extend_reply() reads the script's `{"extend", lease_expiry | nil}` reply: the new
/// lease expiry, or nullopt when the extend was refused. Throws `StoreError` for any other
/// shape.
[[nodiscard]] std::optional<TimePoint> decode_extend_reply(const redisReply* reply);

/// decode_record() reads the script's reply to inspect: nullopt for no record, else the
/// record. Throws `StoreError` for a reply of any other shape.
[[nodiscard]] std::optional<Record> decode_record(const redisReply* reply);

/// StoredRecord is a record as a claim's `SET NX GET` returned it.
struct StoredRecord {
  Record record;
  /// Whether it was in the fresh form, whose expiry (and so its lease) came from the key's
  /// PEXPIRETIME, read by a command of its own.
  bool fresh_form = false;
};

/// decode_stored_record() reads a record in its string form (redis_script.lua), as SET NX GET
/// returns it; `key_expiry` is the key's PEXPIRETIME (-1 when unknown), read only for the two
/// forms whose expires_at it is (F and E). nullopt for a value the script would call malformed,
/// or one of those forms without an expiry: the script then judges it.
[[nodiscard]] std::optional<StoredRecord> decode_stored_record(std::string_view value,
                                                               std::int64_t key_expiry);

/// refuses_fresh_claims() says whether the replies to a claim's `SET NX PX GET` and
/// `PEXPIRETIME` (either null when it did not come) show a server that refuses those commands
/// as such (before Redis 7, or an ACL), rather than a passing error.
[[nodiscard]] bool refuses_fresh_claims(const redisReply* set, const redisReply* expiry);

/// reply_from_resp() parses one complete RESP reply from `bytes` (for tests of the
/// decoders). Throws `std::invalid_argument` when `bytes` is not exactly one reply.
[[nodiscard]] ReplyPtr reply_from_resp(std::string_view bytes);

}  // namespace idempotency::redis_detail
