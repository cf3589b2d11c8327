// The Datastore REST wire format: values, timestamps, and error replies classified for retry.
#include "datastore_wire.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "idempotency/clock.h"
#include "idempotency/detail/ascii.h"

namespace idempotency::datastore_detail {

using auth::detail::HttpResponse;
using Json = nlohmann::json;

bool is_reserved_name(std::string_view s) {
  return s.size() >= 4 && s.substr(0, 2) == "__" && s.substr(s.size() - 2) == "__";
}

// RFC 3339 with milliseconds, UTC; clamped to the years Datastore timestamps cover.
std::string format_timestamp(Millis ms) {
  constexpr Millis kMin = -62135596800000;  // 0001-01-01T00:00:00Z
  constexpr Millis kMax = 253402300799999;  // 9999-12-31T23:59:59.999Z
  return format_rfc3339(from_millis(std::clamp(ms, kMin, kMax)));
}

std::string replace_all(std::string text, std::string_view what, std::string_view with) {
  if (what.empty()) return text;
  for (std::size_t pos = text.find(what); pos != std::string::npos;
       pos = text.find(what, pos + with.size())) {
    text.replace(pos, what.size(), with);
  }
  return text;
}

namespace {

// `text` as protobuf's text format quotes it, in which Google's messages may name a key:
// quotes, backslashes and control bytes escaped, and with `escape_utf8` every byte from 0x80
// in octal too (CEscape; without it, Utf8SafeCEscape).
std::string c_escaped(std::string_view text, bool escape_utf8) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '"':
      case '\'':
      case '\\':
        out += '\\';
        out += ch;
        break;
      default:
        if (c < 0x20 || c == 0x7f || (escape_utf8 && c >= 0x80)) {
          out += '\\';
          out += static_cast<char>('0' + (c >> 6));
          out += static_cast<char>('0' + ((c >> 3) & 7));
          out += static_cast<char>('0' + (c & 7));
        } else {
          out += ch;
        }
    }
  }
  return out;
}

}  // namespace

std::string redact_keys(std::string message, std::span<const std::string_view> secrets) {
  // The list cut first: a short key replaced first could break up the words that find it.
  constexpr std::string_view kGroups = "entity group";
  const auto at =
      std::search(message.begin(), message.end(), kGroups.begin(), kGroups.end(),
                  [](char a, char b) { return idempotency::detail::ascii_lower(a) == b; });
  if (at != message.end()) {
    message.erase(at, message.end());
    message += "entity groups: <not shown>";
  }
  // Each secret as it is and as Google may quote it, longest first: a key replaced inside a
  // longer form of itself would leave the rest of that form behind.
  std::vector<std::string> forms;
  for (const std::string_view secret : secrets) {
    if (secret.empty()) continue;
    forms.emplace_back(secret);
    forms.push_back(c_escaped(secret, true));
    forms.push_back(c_escaped(secret, false));
  }
  std::sort(forms.begin(), forms.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& form : forms) message = replace_all(std::move(message), form, "<key>");
  return message;
}

RpcFailure classify(const HttpResponse& r) {
  RpcFailure f;
  f.http = r.status;
  if (r.too_large) {
    f.status = "REPLY_TOO_LARGE";
    f.message = r.transport_error;
    return f;
  }
  if (!r.transport_error.empty()) {
    // No reply: the request may or may not have been applied; a retry of the whole
    // transaction finds out (a claim re-affirms itself by its token).
    f.status = "UNAVAILABLE";
    f.message = "transport: " + r.transport_error;
    f.retryable = true;
    return f;
  }
  try {
    const Json j = Json::parse(r.body);
    const Json& e = j.at("error");
    f.status = e.value("status", "");
    f.message = e.value("message", "");
  } catch (const Json::exception&) {
    f.message = "unparsable error reply";
  }
  if (f.status.empty()) {
    switch (r.status) {
      case 409:
        f.status = "ABORTED";
        break;
      case 429:
        f.status = "RESOURCE_EXHAUSTED";
        break;
      case 503:
        f.status = "UNAVAILABLE";
        break;
      case 504:
        f.status = "DEADLINE_EXCEEDED";
        break;
      case 500:
        f.status = "INTERNAL";
        break;
      default:
        f.status = "HTTP_" + std::to_string(r.status);
        break;
    }
  }
  f.retryable = f.status == "ABORTED" || f.status == "UNAVAILABLE" ||
                f.status == "DEADLINE_EXCEEDED" || f.status == "INTERNAL" ||
                f.status == "RESOURCE_EXHAUSTED" || r.status == 429 || r.status == 500 ||
                r.status == 502 || r.status == 503 || r.status == 504;
  return f;
}

// Decodes a blobValue. The proto3 JSON mapping writes bytes as standard base64 with padding
// but has readers accept the URL-safe alphabet and missing padding too, so this does.
// (auth::detail::base64_decode stays as it is: the tolerance is for this wire format.)
bool decode_blob(std::string text, std::string& out) {
  std::size_t padding = 0;
  while (!text.empty() && text.back() == '=') {
    text.pop_back();
    ++padding;
  }
  if (padding > 2 || text.size() % 4 == 1 || text.find('=') != std::string::npos) return false;
  for (char& c : text) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  return auth::detail::base64_decode(text, out);
}

std::int64_t json_int(const Json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  const auto s = v.get<std::string>();
  std::int64_t out = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || p != s.data() + s.size()) throw std::invalid_argument("not an integer");
  return out;
}

}  // namespace idempotency::datastore_detail
