// Datastore key names and the datastore:// URL: which keys are stored under their own name and
// which under a hash, and how a URL becomes DatastoreOptions.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "datastore_wire.h"
#include "idempotency/backend_url.h"
#include "idempotency/datastore_lock.h"
#include "idempotency/detail/hex.h"
#include "idempotency/detail/sha256.h"

namespace idempotency {
namespace {

using datastore_detail::is_reserved_name;
using datastore_detail::kDefaultDatabaseName;

constexpr const char* kHashPrefix = "sha256:";

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (std::size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000)) return false;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace

std::string datastore_key_name(std::string_view key) {
  const bool usable = !key.empty() && key.size() <= 1500 &&
                      key.find('\0') == std::string_view::npos && is_valid_utf8(key) &&
                      !is_reserved_name(key) && key.substr(0, 7) != kHashPrefix;
  if (usable) return std::string(key);
  const detail::Sha256Digest digest = detail::sha256(key);
  return kHashPrefix + detail::to_hex(digest.data(), digest.size());
}

DatastoreOptions parse_datastore_url(std::string_view url, DatastoreOptions base) {
  if (!url.starts_with("datastore://")) {
    throw std::invalid_argument("a Datastore URL starts with datastore://");
  }
  BackendUrl parsed = BackendUrl::parse(url);
  const std::string_view rest = parsed.location();
  const auto slash = rest.find('/');
  base.project = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) {
    std::string_view ns = rest.substr(slash + 1);
    if (!ns.empty() && ns.back() == '/') ns.remove_suffix(1);
    if (ns.find('/') != std::string_view::npos) {
      throw std::invalid_argument("a Datastore URL has at most one path segment (the namespace)");
    }
    base.namespace_id = std::string(ns);
  }
  if (auto kind = parsed.take("kind")) base.kind = std::move(*kind);
  if (auto database = parsed.take("database")) {
    base.database = *database == kDefaultDatabaseName ? std::string() : std::move(*database);
  }
  parsed.refuse_rest("unknown Datastore URL parameter (expected kind or database)");
  return base;
}

}  // namespace idempotency
