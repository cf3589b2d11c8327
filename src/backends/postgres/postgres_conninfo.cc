// PostgreSQL connection strings: what may be a password in one (so no message repeats it),
// and the checks libpq would only make at connect time.
#include <libpq-fe.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "idempotency/detail/decimal.h"
#include "postgres_internal.h"

namespace idempotency::postgres_detail {
namespace {

using idempotency::detail::is_decimal_digits;

struct ConninfoDeleter {
  void operator()(PQconninfoOption* o) const noexcept { PQconninfoFree(o); }
};
struct FreememDeleter {
  void operator()(char* p) const noexcept { PQfreemem(p); }
};
using ConninfoPtr = std::unique_ptr<PQconninfoOption, ConninfoDeleter>;
using PqString = std::unique_ptr<char, FreememDeleter>;

// url_scheme() returns the scheme when `conninfo` is a URL (`scheme://…`), else "" (a
// key/value string may contain "://" inside a value).
std::string_view url_scheme(std::string_view conninfo) {
  const auto end = conninfo.find("://");
  if (end == std::string_view::npos || end == 0) return {};
  const auto scheme = conninfo.substr(0, end);
  for (char c : scheme) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '+' || c == '-' || c == '.';
    if (!ok) return {};
  }
  return scheme;
}

}  // namespace

void redact(std::string& text, const std::string& secret) {
  if (secret.empty()) return;
  for (auto pos = text.find(secret); pos != std::string::npos; pos = text.find(secret, pos)) {
    text.replace(pos, secret.size(), "***");
  }
}

std::vector<std::string> secrets_of(std::string_view conninfo) {
  std::vector<std::string> out;
  if (const auto scheme = url_scheme(conninfo); !scheme.empty()) {
    const auto rest = conninfo.substr(scheme.size() + 3);
    const auto authority = rest.substr(0, rest.find_first_of("/?"));
    if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
      const auto userinfo = authority.substr(0, at);
      if (const auto colon = userinfo.find(':'); colon != std::string_view::npos) {
        out.emplace_back(userinfo.substr(colon + 1));
      }
      out.emplace_back(userinfo);
    }
  }
  for (auto pos = conninfo.find("password="); pos != std::string_view::npos;
       pos = conninfo.find("password=", pos + 1)) {
    auto value = conninfo.substr(pos + 9);
    if (!value.empty() && (value.front() == '\'' || value.front() == '"')) value.remove_prefix(1);
    value = value.substr(0, value.find_first_of(" &'\""));
    if (!value.empty()) out.emplace_back(value);
  }
  return out;
}

std::string tidy(std::string text, const std::vector<std::string>& secrets) {
  // Longest first: one inside another (a password within a key, a key within its own hex
  // form) would otherwise break the longer one's match and leave the rest of it in the text.
  std::vector<const std::string*> longest_first;
  longest_first.reserve(secrets.size());
  for (const auto& s : secrets) longest_first.push_back(&s);
  std::stable_sort(
      longest_first.begin(), longest_first.end(),
      [](const std::string* a, const std::string* b) { return a->size() > b->size(); });
  for (const std::string* s : longest_first) redact(text, *s);
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

void validate_conninfo(std::string_view conninfo, const std::vector<std::string>& secrets) {
  const std::string text(conninfo);
  if (const auto scheme = url_scheme(text); !scheme.empty()) {
    if (scheme != "postgres" && scheme != "postgresql") {
      throw std::invalid_argument(
          "PostgreSQL URL has an unsupported scheme (expected postgres:// or postgresql://)");
    }
  }
  char* raw_error = nullptr;
  ConninfoPtr options(PQconninfoParse(text.c_str(), &raw_error));
  PqString error(raw_error);
  if (!options) {
    throw std::invalid_argument(
        "malformed PostgreSQL connection string: " +
        (error ? tidy(error.get(), secrets) : std::string("out of memory")));
  }
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr || *o->val == '\0') continue;
    const std::string_view keyword = o->keyword;
    const std::string_view value = o->val;
    if (keyword == "port") {
      std::string_view rest = value;
      while (true) {
        const auto comma = rest.find(',');
        const auto port = rest.substr(0, comma);
        if (!port.empty() &&
            (!is_decimal_digits(port) || port.size() > 5 || std::stoi(std::string(port)) < 1 ||
             std::stoi(std::string(port)) > 65535)) {
          throw std::invalid_argument(
              "malformed PostgreSQL connection string: the port must be a number from 1 to "
              "65535");
        }
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    } else if (keyword == "connect_timeout" && !is_decimal_digits(value)) {
      throw std::invalid_argument(
          "malformed PostgreSQL connection string: connect_timeout must be whole seconds");
    } else if (keyword == "sslmode" && value != "disable" && value != "allow" &&
               value != "prefer" && value != "require" && value != "verify-ca" &&
               value != "verify-full") {
      throw std::invalid_argument(
          "malformed PostgreSQL connection string: unknown sslmode (expected disable, allow, "
          "prefer, require, verify-ca or verify-full)");
    }
  }
}

}  // namespace idempotency::postgres_detail
