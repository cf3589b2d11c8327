// Whether the server may evict records: read from INFO memory at start-up, and warned of.
#include <algorithm>
#include <string>
#include <string_view>

#include "idempotency/log.h"
#include "redis_internal.h"

namespace idempotency::redis_detail {
namespace {

// The value of `field` in INFO's `field:value` lines, or empty.
std::string_view info_field(std::string_view info, std::string_view field) {
  for (std::size_t at = 0; at < info.size();) {
    const std::size_t end = std::min(info.find('\n', at), info.size());
    std::string_view line = info.substr(at, end - at);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.size() > field.size() && line.starts_with(field) && line[field.size()] == ':') {
      return line.substr(field.size() + 1);
    }
    at = end + 1;
  }
  return {};
}

}  // namespace

void warn_if_evicting(const redisReply* info) noexcept {
  if (info == nullptr || info->type != REDIS_REPLY_STRING) {
    return;  // INFO refused (an ACL, a managed server): nothing to judge
  }
  const std::string_view text = reply_view(info);
  const std::string_view limit = info_field(text, "maxmemory");
  const std::string_view policy = info_field(text, "maxmemory_policy");
  if (limit.empty() || limit == "0" || policy.empty() || policy == "noeviction") return;
  try {
    log(LogRecord{Severity::kWarning,
                  "redis_may_evict",
                  "the server may evict keys under memory pressure (maxmemory with a policy "
                  "other than noeviction), and every record has an expiry: an evicted record "
                  "lets a held or done key be claimed again; set maxmemory-policy noeviction",
                  {{"maxmemory", std::string(limit)}, {"maxmemory_policy", std::string(policy)}}});
  } catch (...) {  // NOLINT(bugprone-empty-catch): a log line that cannot be built is dropped
  }
}

}  // namespace idempotency::redis_detail
