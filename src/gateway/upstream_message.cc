// The forwarded message: which headers cross the hop (RFC 9110 §7.6.1 and whatever
// `Connection` names), which values may be written at all, the request serialized for its one
// write, and the response parsed into a PushResponse.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "idempotency/detail/ascii.h"
#include "idempotency/detail/decimal.h"
#include "idempotency/detail/field_syntax.h"
#include "upstream_internal.h"

namespace idempotency::gateway {

namespace upstream_detail {
namespace {

// A request field longer than this is not forwarded (a response's whole header is held to 64 KiB
// by the exchange's header limit).
constexpr std::size_t kMaxFieldBytes = 65'000;

using idempotency::detail::iequals_ascii;
using idempotency::detail::is_field_name;
using idempotency::detail::is_field_value;
// A request target is sent as is; it must not end the request line early.
using idempotency::detail::is_request_target;
using idempotency::detail::same_field_name;
using idempotency::detail::trim_ows;

// The header names a `Connection` header lists are hop-by-hop for this message too. Views into
// the header values, which outlive every use: a message lists one or two, so no set and no copy.
using Tokens = std::vector<std::string_view>;

void add_connection_tokens(std::string_view name, std::string_view value, Tokens& tokens) {
  if (!iequals_ascii(name, "Connection")) return;
  std::size_t start = 0;
  while (start <= value.size()) {
    const auto comma = value.find(',', start);
    const auto end = comma == std::string_view::npos ? value.size() : comma;
    if (auto token = trim_ows(value.substr(start, end - start)); !token.empty()) {
      tokens.push_back(token);
    }
    start = end + 1;
  }
}

// Sorted once a header lists more than a few: a linear search per forwarded field would let a
// request of ~50k tokens and ~25k fields (within the header limit) cost a worker ~10^9
// comparisons.
constexpr std::size_t kTokensSearchedInOrder = 8;

// A field name as a CGI-style server reads it (same_field_name()): ASCII case aside, '_' as
// '-'. Both a name listed in Connection and a field may be spelled either way.
char folded(char c) noexcept { return idempotency::detail::ascii_lower(c == '_' ? '-' : c); }

bool folded_less(std::string_view a, std::string_view b) noexcept {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                      [](char x, char y) { return folded(x) < folded(y); });
}

bool folded_equal(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return folded(x) == folded(y); });
}

void index_tokens(Tokens& tokens) {
  if (tokens.size() > kTokensSearchedInOrder) std::sort(tokens.begin(), tokens.end(), folded_less);
}

bool is_listed(const Tokens& tokens, std::string_view name) {
  if (tokens.size() > kTokensSearchedInOrder) {
    return std::binary_search(tokens.begin(), tokens.end(), name, folded_less);
  }
  return std::any_of(tokens.begin(), tokens.end(),
                     [&](std::string_view token) { return folded_equal(token, name); });
}

}  // namespace

std::string one_line(std::string s) {
  std::replace_if(
      s.begin(), s.end(), [](char c) { return c == '\r' || c == '\n'; }, ' ');
  return s;
}

std::optional<std::string> build_request(const pubsub::PushRequest& in,
                                         std::optional<std::int64_t> fence, const UpstreamUrl& url,
                                         const Origin& origin, std::string& out) {
  if (!is_field_name(in.method)) return "the request method is not a token";
  // Compared as views: std::string == "..." is a memcmp whatever the sizes (GCC 12).
  const std::string_view method = in.method;
  if (method == "CONNECT") return "CONNECT is not forwarded";
  const std::string_view path = in.path.empty() ? std::string_view("/") : in.path;
  if (!is_request_target(path) || (!url.base_path.empty() && !is_request_target(url.base_path))) {
    return "the request target has a space or control character";
  }
  if (method == "TRACE" && !in.body.empty()) return "a TRACE request has no body";
  Tokens listed;
  for (const auto& h : in.headers) add_connection_tokens(h.name, h.value, listed);
  index_tokens(listed);
  const auto forwarded = [&](const pubsub::Header& h) {
    // The server in front rejects malformed headers; this is defense in depth, as is never
    // asking for 100-continue (the body goes with the header in one write).
    return !is_hop_by_hop(h.name) && !is_listed(listed, h.name) &&
           !same_field_name(h.name, kFenceHeader) && !iequals_ascii(h.name, "Expect") &&
           is_field_name(h.name) && is_field_value(h.value) && h.name.size() <= kMaxFieldBytes &&
           h.value.size() <= kMaxFieldBytes;
  };
  // The most the header can take: `METHOD SP base path SP HTTP/1.1 CRLF`, `Host: authority
  // CRLF`, the fields, the fence and Content-Length (each at most 20 digits) and the empty line.
  // Written through a cursor into that much room, then cut to what was written: an append a
  // piece (~20 of them) cost a capacity check and a call each. The body is appended after it.
  using namespace std::string_view_literals;
  constexpr std::size_t kMaxDecimal = 20;  // an int64 with its sign, or a uint64
  constexpr std::string_view kVersion = " HTTP/1.1\r\nHost: "sv;
  constexpr std::string_view kLength = "Content-Length: "sv;
  std::size_t size = in.method.size() + 1 + url.base_path.size() + path.size() + kVersion.size() +
                     origin.authority.size() + 2 + kFenceHeader.size() + 2 + kMaxDecimal + 2 +
                     kLength.size() + kMaxDecimal + 2 + 2;
  for (const auto& h : in.headers) size += h.name.size() + 2 + h.value.size() + 2;
  const std::size_t start = out.size();
  out.reserve(start + size + in.body.size());
  out.resize(start + size);
  char* at = out.data() + start;
  const auto put = [&at](std::string_view piece) {
    std::memcpy(at, piece.data(), piece.size());
    at += piece.size();
  };
  const auto put_decimal = [&at](auto n) { at = std::to_chars(at, at + kMaxDecimal, n).ptr; };

  // The field order is Host, the forwarded headers as they came, the fence, Content-Length.
  // `*` (OPTIONS of the server as a whole) is no path under a base: it goes as it is.
  put(method);
  put(" "sv);
  put(path == "*"sv ? ""sv : url.base_path);
  put(path);
  put(kVersion);
  put(origin.authority);
  put("\r\n"sv);
  for (const auto& h : in.headers) {
    if (!forwarded(h)) continue;
    put(h.name);
    put(": "sv);
    put(h.value);
    put("\r\n"sv);
  }
  if (fence) {
    put(kFenceHeader);
    put(": "sv);
    put_decimal(*fence);
    put("\r\n"sv);
  }
  // As Beast's prepare_payload(): a length for a body, and for an empty one where the method
  // defines a body's meaning.
  if (!in.body.empty() || method == "POST" || method == "PUT" || method == "OPTIONS") {
    put(kLength);
    put_decimal(in.body.size());
    put("\r\n"sv);
  }
  put("\r\n"sv);
  out.resize(static_cast<std::size_t>(at - out.data()));
  out.append(in.body);
  return std::nullopt;
}

namespace {

std::string_view view(beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

void drop_hop_by_hop(pubsub::PushResponse& response) {
  Tokens listed;
  for (const auto& h : response.headers) add_connection_tokens(h.name, h.value, listed);
  index_tokens(listed);
  // Every field is judged before any moves, as the listed names are views into field values;
  // a name the parser cannot produce marks the ones to drop (Beast refuses an empty field name
  // with bad_field).
  for (auto& h : response.headers) {
    if (is_hop_by_hop(h.name) || is_listed(listed, h.name)) h.name.clear();
  }
  std::erase_if(response.headers, [](const pubsub::Header& h) { return h.name.empty(); });
}

void add_missing_reason_space(beast::flat_buffer& buffer) {
  constexpr std::size_t kLine = 12;  // `HTTP/1.x DDD`
  const auto bytes = buffer.data();
  const std::string_view text(static_cast<const char*>(bytes.data()), bytes.size());
  if (text.size() < kLine + 2 || text.substr(kLine, 2) != "\r\n" || !text.starts_with("HTTP/1.") ||
      text[8] != ' ' || !idempotency::detail::is_decimal_digits(text.substr(9, 3)) ||
      buffer.size() == buffer.max_size()) {
    return;
  }
  // In place: one byte more, the rest moved up by it.
  const std::size_t size = buffer.size();
  buffer.prepare(1);  // may move the bytes: the line is found after it
  buffer.commit(1);
  char* line = static_cast<char*>(buffer.data().data());
  std::memmove(line + kLine + 1, line + kLine, size - kLine);
  line[kLine] = ' ';
}

void ResponseParser::on_request_impl(http::verb /*method*/, string_view /*method_string*/,
                                     string_view /*target*/, int /*version*/, error_code& /*ec*/) {
}  // a response parser never sees one

void ResponseParser::on_response_impl(int code, string_view /*reason*/, int /*version*/,
                                      error_code& /*ec*/) {
  response_.status = code;
  if (keep_content_) response_.headers.reserve(8);  // a typical response's, in one allocation
}

void ResponseParser::on_field_impl(http::field name, string_view name_string, string_view value,
                                   error_code& /*ec*/) {
  // A chunked body's trailer fields come after the header: dropped, not merged into it (RFC
  // 9110 §6.5.1 lets a recipient discard them), or a Content-Type or Set-Cookie sent after the
  // body would be stored and replayed to every duplicate as the response's own.
  if (is_header_done()) return;
  if (name == http::field::transfer_encoding) codings_.add(view(value));
  if (!keep_content_) return;
  response_.headers.push_back({std::string(view(name_string)), std::string(view(value))});
}

void ResponseParser::on_header_impl(error_code& /*ec*/) {}

bool ResponseParser::reusable() const {
  const bool coded = codings_.codings() > 0;
  if (coded && (!codings_.last_is_chunked() || content_length())) return false;
  // Neither field is allowed on these (RFC 9110 §8.6, RFC 9112 §6.1): a sender that writes
  // one may write the body it announces too. A HEAD or 304 response may carry them (the
  // length a GET would have had) and has no body.
  const int status = response_.status;
  if (status == 101) return false;  // the connection now speaks another protocol
  if (status / 100 == 1 || status == 204) return !coded && content_length().value_or(0) == 0;
  return true;
}

void ResponseParser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                                       error_code& /*ec*/) {
  // Within body_limit: the base parser refused a larger Content-Length before calling this.
  if (content_length && keep_content_) {
    response_.body.reserve(static_cast<std::size_t>(*content_length));
  }
}

std::size_t ResponseParser::on_body_impl(string_view body, error_code& /*ec*/) {
  if (keep_content_) response_.body.append(body.data(), body.size());
  return body.size();
}

void ResponseParser::on_chunk_header_impl(std::uint64_t /*size*/, string_view /*extensions*/,
                                          error_code& /*ec*/) {}

std::size_t ResponseParser::on_chunk_body_impl(std::uint64_t /*remain*/, string_view body,
                                               error_code& ec) {
  return on_body_impl(body, ec);
}

void ResponseParser::on_finish_impl(error_code& /*ec*/) {}

}  // namespace upstream_detail

bool is_hop_by_hop(std::string_view name) {
  // Host and Content-Length are not hop-by-hop, but the client writes its own for the new hop.
  // Matched by length first: this runs for every field of every request and response.
  // In the spelling with underscores too (`Transfer_Encoding`): see same_field_name().
  const auto is = [&](std::string_view h) { return idempotency::detail::same_field_name(name, h); };
  switch (name.size()) {
    case 2:
      return is("TE");
    case 4:
      return is("Host");
    case 7:
      return is("Trailer") || is("Upgrade");
    case 10:
      return is("Connection") || is("Keep-Alive");
    case 14:
      return is("Content-Length");
    case 16:
      return is("Proxy-Connection");
    case 17:
      return is("Transfer-Encoding");
    case 18:
      return is("Proxy-Authenticate");
    case 19:
      return is("Proxy-Authorization");
    default:
      return false;
  }
}

}  // namespace idempotency::gateway
