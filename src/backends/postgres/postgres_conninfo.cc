// PostgreSQL connection strings: what may be a password in one (so no message repeats it, not
// even libpq's own when the string is malformed), and the checks libpq would only make at
// connect time.
#include <libpq-fe.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <set>
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

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// keywords() is every connection keyword this libpq knows (host, dbname, password, …).
const std::set<std::string, std::less<>>& keywords() {
  static const std::set<std::string, std::less<>> all = [] {
    std::set<std::string, std::less<>> out;
    const ConninfoPtr defaults(PQconndefaults());
    if (defaults) {
      for (const PQconninfoOption* o = defaults.get(); o->keyword != nullptr; ++o) {
        out.emplace(o->keyword);
      }
    }
    return out;
  }();
  return all;
}

// keyword_at() says whether a libpq keyword starts at `pos`, followed by `=` (spaces allowed
// before it) or, unless `needs_equals`, by a space or the end.
bool keyword_at(std::string_view text, std::size_t pos, bool needs_equals) {
  std::size_t end = pos;
  while (end < text.size() && is_word(text[end])) ++end;
  if (end == pos || !keywords().contains(text.substr(pos, end - pos))) return false;
  std::size_t next = end;
  while (next < text.size() && is_space(text[next])) ++next;
  if (next < text.size() && text[next] == '=') return true;
  return !needs_equals && (end == text.size() || is_space(text[end]));
}

// A stretch of a connection string that may hold a password or part of one: [begin, end).
struct Stretch {
  std::size_t begin;
  std::size_t end;
};

// password_key() says whether `key` (a key/value key, or a URL query parameter's name) names
// a password.
bool password_key(std::string_view key) { return key == "password" || key == "sslpassword"; }

// secret_stretches() finds every stretch of `text` that may hold (part of) a password, however
// malformed the string: a URL's user-info (even with a scheme libpq does not take as a URL's,
// or with something before it), and each password's value in key/value form or in a URL's query,
// stretched over what follows up to the next libpq keyword (a value with an unquoted space, or
// an unescaped `&`, runs on past where libpq ends it).
std::vector<Stretch> secret_stretches(std::string_view text) {
  std::vector<Stretch> out;
  const std::size_t n = text.size();
  // A URL's user-info: after `scheme:` and any slashes, up to the last `@` before the next `/`.
  std::size_t i = 0;
  while (i < n && is_space(text[i])) ++i;
  std::size_t scheme_end = i;
  while (scheme_end < n && (is_word(text[scheme_end]) || text[scheme_end] == '+' ||
                            text[scheme_end] == '-' || text[scheme_end] == '.')) {
    ++scheme_end;
  }
  if (scheme_end > i && scheme_end < n && text[scheme_end] == ':') {
    std::size_t start = scheme_end + 1;
    while (start < n && text[start] == '/') ++start;
    const std::size_t authority_end = std::min(text.find('/', start), n);
    const std::size_t at = text.substr(start, authority_end - start).rfind('@');
    if (at != std::string_view::npos) out.push_back({start, start + at});
  }
  // A URL query's password: up to the next `&keyword=`.
  for (std::size_t pos = text.find("password="); pos != std::string_view::npos;
       pos = text.find("password=", pos + 1)) {
    std::size_t name = pos;
    if (name >= 3 && text.substr(name - 3, 3) == "ssl") name -= 3;
    if (name == 0 || (text[name - 1] != '?' && text[name - 1] != '&')) continue;
    const std::size_t begin = pos + 9;
    std::size_t end = begin;
    while (end < n && !(text[end] == '&' && keyword_at(text, end + 1, true))) ++end;
    out.push_back({begin, end});
  }
  // Key/value form: `key = value` pairs, a value unquoted (to a space, `\` escaping) or in
  // single quotes (`\` escaping); a word without `=` stands alone.
  i = 0;
  while (i < n) {
    while (i < n && is_space(text[i])) ++i;
    const std::size_t key_begin = i;
    while (i < n && !is_space(text[i]) && text[i] != '=') ++i;
    const std::string_view key = text.substr(key_begin, i - key_begin);
    std::size_t j = i;
    while (j < n && is_space(text[j])) ++j;
    if (j >= n || text[j] != '=') continue;
    i = j + 1;
    while (i < n && is_space(text[i])) ++i;
    const std::size_t value_begin = i;
    const bool quoted = i < n && text[i] == '\'';
    if (quoted) {
      ++i;
      while (i < n && text[i] != '\'') i += text[i] == '\\' ? 2 : 1;
      i = std::min(i, n);
      if (password_key(key)) out.push_back({value_begin + 1, i});
      if (i < n) ++i;
      continue;
    }
    while (i < n && !is_space(text[i])) i += text[i] == '\\' ? 2 : 1;
    i = std::min(i, n);
    if (!password_key(key)) continue;
    // What follows, up to the next keyword, may be the rest of a password with a space in it.
    std::size_t end = i;
    while (true) {
      std::size_t next = end;
      while (next < n && is_space(text[next])) ++next;
      if (next >= n || keyword_at(text, next, false)) break;
      end = next;
      while (end < n && !is_space(text[end])) ++end;
    }
    out.push_back({value_begin, end});
    i = end;
  }
  return out;
}

// masked() returns `text` with every secret stretch replaced by `***`, so that whatever libpq
// quotes from it while rejecting it cannot be a password.
std::string masked(std::string_view text) {
  std::vector<bool> hidden(text.size(), false);
  for (const Stretch& s : secret_stretches(text)) {
    for (std::size_t k = s.begin; k < s.end && k < text.size(); ++k) hidden[k] = true;
  }
  std::string out;
  out.reserve(text.size());
  for (std::size_t k = 0; k < text.size(); ++k) {
    if (!hidden[k]) {
      out += text[k];
    } else if (k == 0 || !hidden[k - 1]) {
      out += "***";
    }
  }
  return out;
}

// malformed() is the message for a connection string libpq rejected. libpq's own message quotes
// the part it could not parse (a whole URL, or a word that may be half of a password with a
// space in it), so it is taken from parsing a masked copy, never from the string itself.
std::string malformed(const std::string& text, const std::vector<std::string>& secrets) {
  const std::string copy = masked(text);
  char* raw_error = nullptr;
  const ConninfoPtr options(PQconninfoParse(copy.c_str(), &raw_error));
  const PqString error(raw_error);
  std::string message = "malformed PostgreSQL connection string: ";
  if (options || !error) {
    // Only a password's stretch made it malformed.
    return message +
           "a password cannot be read as written (percent-encode it in a URL; in key=value form "
           "quote a value with a space or a quote: password='...')";
  }
  message += tidy(error.get(), secrets);
  // A URL libpq did not take as one (a missing slash, something before it) is read as a
  // key=value string, which says nothing about URLs.
  const auto first = copy.find_first_not_of(" \t\n\r\f\v");
  const auto colon = copy.find(':');
  if (url_scheme(text).empty() && first != std::string::npos && colon != std::string::npos &&
      colon < copy.find_first_of("= \t\n\r\f\v", first)) {
    message += " (a URL must begin with postgres:// or postgresql://, with nothing before it)";
  }
  return message;
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
    if (!value.empty() && (value.front() == '\'' || value.front() == '"')) {
      const char quote = value.front();  // a quoted value runs to its closing quote, spaces and all
      value.remove_prefix(1);
      value = value.substr(0, value.find(quote));
    } else {
      value = value.substr(0, value.find_first_of(" &'\""));
    }
    if (!value.empty()) out.emplace_back(value);
  }
  // And wherever a malformed string may hold one (a URL's user-info libpq did not take for a
  // URL's, a password run on past a space), with what follows a colon alone (user:password).
  for (const Stretch& stretch : secret_stretches(conninfo)) {
    const auto text = conninfo.substr(stretch.begin, stretch.end - stretch.begin);
    if (text.empty()) continue;
    out.emplace_back(text);
    if (const auto colon = text.find(':');
        colon != std::string_view::npos && colon + 1 < text.size()) {
      out.emplace_back(text.substr(colon + 1));
    }
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
    if (!error)
      throw std::invalid_argument("malformed PostgreSQL connection string: out of memory");
    throw std::invalid_argument(malformed(text, secrets));
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
