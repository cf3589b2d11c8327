// The plain-text HTTP request format of the envelope fixtures and the fuzzer's inputs.
//
//   POST / HTTP/1.1          <- request line: the method is its first word
//   Name: value              <- headers, one a line, value trimmed of spaces and tabs
//                            <- an empty line (LF or CRLF)
//   body bytes, verbatim     <- everything after the empty line
//
// Lenient by design (the fuzzer feeds it anything): a line without ':' is skipped and input
// without an empty line is all head, no body.
//
// Thread safety: pure function.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "idempotency/pubsub/message.h"

namespace idempotency::pubsub::testing {

inline std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

/// parse_http_text() splits fixture text into method, headers and body.
inline PushRequest parse_http_text(std::string_view text) {
  PushRequest request;
  std::size_t split = text.size();
  std::size_t body_at = text.size();
  if (auto crlf = text.find("\r\n\r\n"); crlf != std::string_view::npos) {
    split = crlf;
    body_at = crlf + 4;
  }
  if (auto lf = text.find("\n\n"); lf != std::string_view::npos && lf < split) {
    split = lf;
    body_at = lf + 2;
  }
  request.body = std::string(text.substr(body_at));

  std::string_view head = text.substr(0, split);
  bool first = true;
  while (!head.empty()) {
    const std::size_t end = head.find('\n');
    std::string_view line = trim_ows(head.substr(0, end));
    head.remove_prefix(end == std::string_view::npos ? head.size() : end + 1);
    if (first) {
      first = false;
      request.method = std::string(line.substr(0, line.find(' ')));
      continue;
    }
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    request.headers.push_back({std::string(trim_ows(line.substr(0, colon))),
                               std::string(trim_ows(line.substr(colon + 1)))});
  }
  return request;
}

}  // namespace idempotency::pubsub::testing
