// Strict decoding of the script's replies: any shape but the documented one is a StoreError,
// so a script changed by hand on the server can never be read as an outcome.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
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

std::optional<std::int64_t> parse_int(std::string_view s) {
  std::int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::optional<Millis> server_millis(const redisReply* time) {
  // Beyond this many seconds, the milliseconds would not fit in 64 bits.
  constexpr std::int64_t kMaxSeconds = std::numeric_limits<std::int64_t>::max() / 1000 - 1;
  if (time == nullptr || time->type != REDIS_REPLY_ARRAY || time->elements != 2) {
    return std::nullopt;
  }
  std::array<std::int64_t, 2> n{};
  for (std::size_t i = 0; i < n.size(); ++i) {
    const redisReply* e = time->element[i];
    if (e == nullptr || e->type != REDIS_REPLY_STRING) return std::nullopt;
    const std::optional<std::int64_t> v = parse_int(reply_view(e));
    if (!v || *v < 0) return std::nullopt;
    n[i] = *v;
  }
  if (n[0] > kMaxSeconds || n[1] >= 1'000'000) return std::nullopt;
  return n[0] * 1000 + n[1] / 1000;
}

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
  // The operation's name stays in the reply: a reply meant for another call is refused.
  if (!is_string(reply)) unexpected(op);
  const std::string_view text = reply_view(reply);
  if (text.size() != op.size() + 2 || !text.starts_with(op) || text[op.size()] != ':' ||
      (text.back() != '0' && text.back() != '1')) {
    unexpected(op);
  }
  return text.back() == '1';
}

bool decode_joined_complete(const redisReply* reply, std::size_t index) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || index >= reply->elements) {
    return false;
  }
  const redisReply* flag = reply->element[index];
  return flag != nullptr && flag->type == REDIS_REPLY_INTEGER && flag->integer == 1;
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

namespace {

// The header line's fields, split at single spaces: exactly N, none empty (the script's
// patterns admit nothing else).
template <std::size_t N>
std::optional<std::array<std::string_view, N>> header_fields(std::string_view header) {
  std::array<std::string_view, N> fields;
  for (std::size_t i = 0; i < N; ++i) {
    const std::size_t space = i + 1 < N ? header.find(' ') : header.size();
    if (space == std::string_view::npos || space == 0) return std::nullopt;
    fields[i] = header.substr(0, space);
    header.remove_prefix(std::min(space + 1, header.size()));
  }
  if (!header.empty()) return std::nullopt;
  return fields;
}

// A header number as the script reads it: a `(%d+)` capture is digits only, a `(%-?%d+)` one
// may start with a minus; `is_int` is the script's is_int (15 characters at most).
std::optional<std::int64_t> header_int(std::string_view field, bool may_be_negative, bool is_int) {
  if (field.empty() || (is_int && field.size() > 15)) return std::nullopt;
  if (!may_be_negative && (field[0] < '0' || field[0] > '9')) return std::nullopt;
  return parse_int(field);
}

}  // namespace

std::optional<StoredRecord> decode_stored_record(std::string_view value, std::int64_t key_expiry) {
  // redis_script.lua's three header lines, then token, fingerprint and result back to back:
  //   "<C|D> <fence> <lease_expiry> <expires_at> <token bytes> <fingerprint bytes> <result
  //   bytes>\n"; the fresh form "F <expires_at - lease_expiry> <token bytes> <fingerprint
  //   bytes>\n" (fence 1, CLAIMED, expires_at the key's expiry); or a complete's of it, "E
  //   <fence> <lease_expiry> <token bytes> <fingerprint bytes> <result bytes>\n" (DONE,
  //   expires_at the key's expiry). -1 bytes for an absent one.
  // Read no more leniently than the script reads them, so a record the script would call
  // malformed is never answered from here.
  const std::size_t eol = value.find('\n');
  if (value.size() < 2 || value[1] != ' ' || eol == std::string_view::npos) return std::nullopt;
  const std::string_view header = value.substr(2, eol - 2);
  StoredRecord stored;
  Record& rec = stored.record;
  std::int64_t token_len = 0;
  std::int64_t fingerprint_len = 0;
  std::int64_t result_len = -1;
  if (value[0] == 'F') {
    const auto f = header_fields<3>(header);
    if (!f) return std::nullopt;
    const auto offset = header_int((*f)[0], false, true);
    const auto token = header_int((*f)[1], false, false);
    const auto fingerprint = header_int((*f)[2], true, false);
    if (!offset || !token || !fingerprint || key_expiry < 0) return std::nullopt;
    stored.fresh_form = true;
    rec.state = RecordState::kClaimed;
    rec.fence = 1;
    rec.expires_at = key_expiry;
    rec.lease_expiry = key_expiry - *offset;
    token_len = *token;
    fingerprint_len = *fingerprint;
  } else if (value[0] == 'C' || value[0] == 'D' || value[0] == 'E') {
    // E is D without its expires_at, which is the key's expiry.
    const bool by_key = value[0] == 'E';
    std::array<std::string_view, 6> f;
    if (by_key) {
      const auto e = header_fields<5>(header);
      if (!e || key_expiry < 0) return std::nullopt;
      f = {(*e)[0], (*e)[1], std::string_view(), (*e)[2], (*e)[3], (*e)[4]};
    } else {
      const auto cd = header_fields<6>(header);
      if (!cd) return std::nullopt;
      f = *cd;
    }
    const auto fence = header_int(f[0], false, true);
    const auto lease = header_int(f[1], true, true);
    const auto expires_at = by_key ? std::optional(key_expiry) : header_int(f[2], true, true);
    const auto token = header_int(f[3], false, false);
    const auto fingerprint = header_int(f[4], true, false);
    const auto result = header_int(f[5], true, false);
    // The fence, as the script reads it: starting with 1 to 9.
    if (!fence || f[0][0] == '0' || !lease || !expires_at || !token || !fingerprint || !result) {
      return std::nullopt;
    }
    rec.state = value[0] == 'C' ? RecordState::kClaimed : RecordState::kDone;
    rec.fence = *fence;
    rec.lease_expiry = *lease;
    rec.expires_at = *expires_at;
    token_len = *token;
    fingerprint_len = *fingerprint;
    result_len = *result;
  } else {
    return std::nullopt;
  }
  if (fingerprint_len < -1 || result_len < -1) return std::nullopt;
  std::string_view rest = value.substr(eol + 1);
  // Each length checked on its own against what is left: their sum cannot overflow.
  bool fits = true;
  const auto take = [&rest, &fits](std::int64_t len) -> std::optional<std::string> {
    if (len < 0) return std::nullopt;
    if (static_cast<std::uint64_t>(len) > rest.size()) {
      fits = false;
      return std::nullopt;
    }
    std::string taken(rest.substr(0, static_cast<std::size_t>(len)));
    rest.remove_prefix(static_cast<std::size_t>(len));
    return taken;
  };
  std::optional<std::string> token = take(token_len);
  rec.fingerprint = take(fingerprint_len);
  rec.result = take(result_len);
  if (!fits || !rest.empty()) return std::nullopt;
  rec.claim_token = std::move(token).value_or("");
  return stored;
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
