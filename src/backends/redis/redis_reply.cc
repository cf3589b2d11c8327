// Strict decoding of the script's replies: any shape but the documented one is a StoreError,
// so a script changed by hand on the server can never be read as an outcome.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include "idempotency/clock.h"
#include "idempotency/errors.h"
#include "redis_internal.h"

namespace idempotency::redis_detail {
namespace {

[[noreturn]] void unexpected(std::string_view what) {
  throw StoreError("redis: unexpected reply to " + std::string(what) +
                   " (was the idempotency script changed on the server?)");
}

bool is_string(const redisReply* r) { return r != nullptr && r->type == REDIS_REPLY_STRING; }

bool has_tag(const redisReply* r, std::string_view tag, std::size_t elements) {
  return r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements == elements &&
         is_string(r->element[0]) && reply_view(r->element[0]) == tag;
}

std::optional<std::int64_t> parse_int(std::string_view s) {
  std::int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

// A number in the script's reply: an integer reply, as the script returns Lua numbers (exact
// below 2^53, and formatting them in Lua cost the server more than the rest of the reply).
std::int64_t int_element(const redisReply* r, std::string_view what) {
  if (r == nullptr || r->type != REDIS_REPLY_INTEGER) unexpected(what);
  return r->integer;
}

std::optional<std::string> optional_element(const redisReply* r, std::string_view what) {
  if (r != nullptr && r->type == REDIS_REPLY_NIL) return std::nullopt;
  if (!is_string(r)) unexpected(what);
  return std::string(reply_view(r));
}

}  // namespace

ClaimResult decode_claim_reply(const redisReply* reply, std::string_view key,
                               const std::string& claim_token) {
  constexpr std::string_view kWhat = "claim";
  if (has_tag(reply, "won", 3)) {
    const std::int64_t fence = int_element(reply->element[1], kWhat);
    const std::int64_t lease_expiry = int_element(reply->element[2], kWhat);
    if (fence < 1) unexpected(kWhat);
    return Won{Claim{std::string(key), fence, from_millis(lease_expiry), claim_token}};
  }
  if (has_tag(reply, "done", 4)) {
    return AlreadyDone{optional_element(reply->element[1], kWhat),
                       optional_element(reply->element[2], kWhat),
                       from_millis(int_element(reply->element[3], kWhat))};
  }
  if (has_tag(reply, "held", 3)) {
    return HeldByOther{from_millis(int_element(reply->element[1], kWhat)),
                       optional_element(reply->element[2], kWhat)};
  }
  unexpected(kWhat);
}

std::optional<TimePoint> decode_extend_reply(const redisReply* reply) {
  constexpr std::string_view kWhat = "extend";
  if (!has_tag(reply, kWhat, 2)) unexpected(kWhat);
  const redisReply* expiry = reply->element[1];
  if (expiry != nullptr && expiry->type == REDIS_REPLY_NIL) return std::nullopt;
  return from_millis(int_element(expiry, kWhat));
}

bool decode_flag_reply(const redisReply* reply, std::string_view op) {
  if (!has_tag(reply, op, 2)) unexpected(op);
  const redisReply* flag = reply->element[1];
  if (flag == nullptr || flag->type != REDIS_REPLY_INTEGER ||
      (flag->integer != 0 && flag->integer != 1)) {
    unexpected(op);
  }
  return flag->integer == 1;
}

std::optional<Record> decode_record(const redisReply* reply) {
  constexpr std::string_view kWhat = "inspect";
  if (reply != nullptr && reply->type == REDIS_REPLY_NIL) return std::nullopt;
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements != 7) {
    unexpected(kWhat);
  }
  for (std::size_t i = 0; i < 5; ++i) {
    if (!is_string(reply->element[i])) unexpected(kWhat);
  }
  auto number = [&](std::size_t i) {
    const auto n = parse_int(reply_view(reply->element[i]));
    if (!n) unexpected(kWhat);
    return *n;
  };
  Record rec;
  const std::string_view state = reply_view(reply->element[0]);
  if (state == "CLAIMED") {
    rec.state = RecordState::kClaimed;
  } else if (state == "DONE") {
    rec.state = RecordState::kDone;
  } else {
    unexpected(kWhat);
  }
  rec.fence = number(1);
  if (rec.fence < 1) unexpected(kWhat);
  rec.lease_expiry = number(2);
  rec.expires_at = number(3);
  rec.claim_token = std::string(reply_view(reply->element[4]));
  rec.result = optional_element(reply->element[5], kWhat);
  rec.fingerprint = optional_element(reply->element[6], kWhat);
  return rec;
}

std::optional<AlreadyDone> decode_done_record(std::string_view value) {
  // "D <fence> <lease_expiry> <expires_at> <token bytes> <fingerprint bytes> <result bytes>\n"
  // and the strings back to back (redis_script.lua); -1 bytes for an absent one. Read no more
  // leniently than the script reads it (its is_int: a sign, digits, 15 characters at most), so
  // a record the script would call malformed is never replayed from here.
  if (!value.starts_with("D ")) return std::nullopt;
  const std::size_t eol = value.find('\n');
  if (eol == std::string_view::npos) return std::nullopt;
  std::string_view header = value.substr(2, eol - 2);
  std::array<std::int64_t, 6> n{};
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::size_t space = i + 1 < n.size() ? header.find(' ') : header.size();
    if (space == std::string_view::npos) return std::nullopt;
    const std::string_view field = header.substr(0, space);
    if (field.empty() || field.size() > 15) return std::nullopt;
    const std::optional<std::int64_t> v = parse_int(field);
    if (!v) return std::nullopt;
    n[i] = *v;
    header.remove_prefix(std::min(space + 1, header.size()));
  }
  const auto [fence, lease, expires_at, token_len, fingerprint_len, result_len] = n;
  (void)lease;
  // The fence, as the script reads it: starting with 1 to 9.
  if (value[2] < '1' || value[2] > '9') return std::nullopt;
  if (fence < 1 || token_len < 0 || fingerprint_len < -1 || result_len < -1) return std::nullopt;
  std::string_view rest = value.substr(eol + 1);
  // Each length checked on its own against what is left: their sum cannot overflow.
  const auto take = [&rest](std::int64_t len, bool& fits) -> std::optional<std::string> {
    if (len < 0) return std::nullopt;
    if (static_cast<std::uint64_t>(len) > rest.size()) {
      fits = false;
      return std::nullopt;
    }
    std::string taken(rest.substr(0, static_cast<std::size_t>(len)));
    rest.remove_prefix(static_cast<std::size_t>(len));
    return taken;
  };
  bool fits = true;
  (void)take(token_len, fits);
  std::optional<std::string> fingerprint = take(fingerprint_len, fits);
  std::optional<std::string> result = take(result_len, fits);
  if (!fits || !rest.empty()) return std::nullopt;
  return AlreadyDone{std::move(result), std::move(fingerprint), from_millis(expires_at)};
}

bool refuses_fresh_claims(const redisReply* set, const redisReply* expiry) {
  // Before Redis 7: PEXPIRETIME is an unknown command and SET takes no NX with GET (a syntax
  // error, nothing written); an ACL may deny either. Other errors pass (LOADING, BUSY, OOM).
  const auto refused = [](const redisReply* r, std::string_view what) {
    return r != nullptr && r->type == REDIS_REPLY_ERROR &&
           (reply_view(r).starts_with(what) || reply_view(r).starts_with("NOPERM"));
  };
  return refused(expiry, "ERR unknown command") || refused(set, "ERR syntax error");
}

ReplyPtr reply_from_resp(std::string_view bytes) {
  ReaderPtr reader(redisReaderCreate());
  if (!reader) throw std::bad_alloc();
  if (redisReaderFeed(reader.get(), bytes.data(), bytes.size()) != REDIS_OK) {
    throw std::invalid_argument("RESP bytes rejected");
  }
  void* raw = nullptr;
  if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK) {
    throw std::invalid_argument("malformed RESP bytes");
  }
  ReplyPtr reply(static_cast<redisReply*>(raw));
  if (!reply) throw std::invalid_argument("incomplete RESP bytes");
  void* more = nullptr;
  const int status = redisReaderGetReply(reader.get(), &more);
  const ReplyPtr extra(static_cast<redisReply*>(more));
  if (status != REDIS_OK || extra) throw std::invalid_argument("more than one RESP reply");
  return reply;
}

}  // namespace idempotency::redis_detail
