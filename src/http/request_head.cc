#include "request_head.h"

#include <array>
#include <cstddef>
#include <string>

#include "idempotency/detail/ascii.h"

namespace idempotency::http::detail {
namespace {

using idempotency::detail::iequals_ascii;

// Beast's number for HTTP/1.1.
constexpr unsigned kHttp11 = 11;

// The bytes of `uri-host [ ":" port ]` (RFC 9110 §7.2, RFC 3986 §3.2.2): a reg-name's
// unreserved, pct-encoded and sub-delims, an IP literal's brackets and colons, the port's colon.
// Anything else (a space, "@", "/", "?") would let one Host name two places.
constexpr std::array<bool, 256> kHostChars = [] {
  std::array<bool, 256> table{};
  for (int c = '0'; c <= '9'; ++c) table[static_cast<std::size_t>(c)] = true;
  for (int c = 'a'; c <= 'z'; ++c) table[static_cast<std::size_t>(c)] = true;
  for (int c = 'A'; c <= 'Z'; ++c) table[static_cast<std::size_t>(c)] = true;
  for (const char c : std::string_view("-._~%!$&'()*+,;=:[]")) {
    table[static_cast<unsigned char>(c)] = true;
  }
  return table;
}();

bool is_host(std::string_view value) {
  for (const char c : value) {
    if (!kHostChars[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

// The part of an absolute-form target after "http://" or "https://" (the scheme in any case),
// or nullopt when the target does not start so.
std::optional<std::string_view> after_http_scheme(std::string_view target) {
  for (const std::string_view scheme :
       {std::string_view("http://"), std::string_view("https://")}) {
    if (target.size() >= scheme.size() && iequals_ascii(target.substr(0, scheme.size()), scheme)) {
      return target.substr(scheme.size());
    }
  }
  return std::nullopt;
}

// A Transfer-Encoding value other than `chunked` alone (RFC 9112 §6.1, §6.3): without chunked
// last the body's end cannot be known, chunked twice is not a framing at all (both 400); any
// other coding before it would reach the handler still applied, its name dropped with the
// field, so it is one this server does not understand (501).
std::optional<HeadRefusal> check_transfer_coding(std::string_view value) {
  if (iequals_ascii(value, "chunked")) return std::nullopt;
  const auto trimmed = [](std::string_view s) {
    const auto first = s.find_first_not_of(" \t");
    if (first == std::string_view::npos) return std::string_view();
    return s.substr(first, s.find_last_not_of(" \t") - first + 1);
  };
  const std::size_t last_comma = value.rfind(',');
  const std::string_view last =
      trimmed(last_comma == std::string_view::npos ? value : value.substr(last_comma + 1));
  if (!iequals_ascii(last, "chunked")) {
    return HeadRefusal{400, "a request's last transfer coding must be chunked"};
  }
  if (last_comma == std::string_view::npos) return std::nullopt;  // chunked, spaced
  for (std::size_t start = 0; start < last_comma;) {
    const std::size_t comma = value.find(',', start);
    if (iequals_ascii(trimmed(value.substr(start, comma - start)), "chunked")) {
      return HeadRefusal{400, "the chunked transfer coding applied twice"};
    }
    start = comma + 1;
  }
  return HeadRefusal{501, "only the chunked transfer coding is accepted"};
}

}  // namespace

std::optional<HeadRefusal> settle_head(pubsub::PushRequest& request, unsigned version) {
  // One pass over the fields: they are a handful, and this runs for every request.
  pubsub::Header* host = nullptr;
  std::size_t hosts = 0;
  for (auto& field : request.headers) {
    if (field.name.size() == 4 && iequals_ascii(field.name, "Host")) {
      host = &field;
      ++hosts;
    } else if (field.name.size() == 17 && iequals_ascii(field.name, "Transfer-Encoding")) {
      if (version < kHttp11) {
        return HeadRefusal{400, "Transfer-Encoding in an HTTP/1.0 request"};
      }
      if (const auto refusal = check_transfer_coding(field.value)) return refusal;
    }
  }
  if (hosts > 1) return HeadRefusal{400, "more than one Host field"};
  if (hosts == 0 && version >= kHttp11) {
    return HeadRefusal{400, "an HTTP/1.1 request without a Host field"};
  }
  if (host != nullptr && !is_host(host->value)) return HeadRefusal{400, "an invalid Host field"};

  std::string& target = request.path;
  if (!target.empty() && target.front() == '/') return std::nullopt;  // origin-form
  if (target == "*") {
    if (request.method == "OPTIONS") return std::nullopt;  // asterisk-form
    return HeadRefusal{400, "the target * is for OPTIONS alone"};
  }
  const auto uri = after_http_scheme(target);
  if (!uri) return HeadRefusal{400, "the request target is neither a path nor an http(s) URI"};
  const std::size_t authority_end = uri->find_first_of("/?");
  const std::string_view authority = uri->substr(0, authority_end);
  // An http URI names a host (RFC 9110 §4.2.1), and userinfo in one is an error (§4.2.4).
  if (authority.empty() || !is_host(authority)) {
    return HeadRefusal{400, "the request target's authority is not a valid host"};
  }
  std::string host_value(authority);
  std::string origin(authority_end == std::string_view::npos ? std::string_view()
                                                             : uri->substr(authority_end));
  if (origin.empty() || origin.front() == '?') origin.insert(0, 1, '/');
  // The target's authority is the request's host, whatever the Host field said (§3.2.2).
  if (host != nullptr) {
    host->value = std::move(host_value);
  } else {
    request.headers.push_back({"Host", std::move(host_value)});
  }
  target = std::move(origin);
  return std::nullopt;
}

}  // namespace idempotency::http::detail
