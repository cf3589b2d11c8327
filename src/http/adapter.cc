#include "adapter.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <exception>
#include <string_view>
#include <utility>

#include "idempotency/log.h"

namespace idempotency::http::detail {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

// cpp-httplib 0.11 stores the peer and local addresses among the request headers.
bool is_pseudo_header(std::string_view name) {
  static constexpr std::array<std::string_view, 4> kPseudo = {"REMOTE_ADDR", "REMOTE_PORT",
                                                              "LOCAL_ADDR", "LOCAL_PORT"};
  return std::any_of(kPseudo.begin(), kPseudo.end(),
                     [&](std::string_view p) { return iequals(name, p); });
}

// Log fields are one line and short: an exception message is cut at its first line break.
std::string one_line(std::string_view text) {
  constexpr std::size_t kMax = 200;
  auto end = text.find_first_of("\r\n");
  text = text.substr(0, std::min({end, kMax, text.size()}));
  return std::string(text);
}

pubsub::PushResponse internal_error() {
  return pubsub::PushResponse{.status = 500,
                              .headers = {{"Content-Type", "text/plain; charset=utf-8"}},
                              .body = "internal error\n"};
}

}  // namespace

pubsub::PushRequest to_push_request(const httplib::Request& request, std::string body) {
  pubsub::PushRequest out;
  out.method = request.method;
  out.path = request.target.empty() ? request.path : request.target;
  out.headers.reserve(request.headers.size());
  for (const auto& [name, value] : request.headers) {
    if (!is_pseudo_header(name)) out.headers.push_back({name, value});
  }
  out.body = std::move(body);
  return out;
}

void apply_response(const pubsub::PushResponse& response, httplib::Response& out) {
  if (response.status < 100 || response.status > 599) {
    log({.severity = Severity::kError,
         .event = "handler_bad_status",
         .message = "The handler returned an invalid HTTP status; answering 500.",
         .fields = {{"status", std::to_string(response.status)}}});
    const auto error = internal_error();
    apply_response(error, out);
    return;
  }
  out.status = response.status;
  for (const auto& header : response.headers) {
    if (iequals(header.name, "Content-Length") || iequals(header.name, "Transfer-Encoding")) {
      continue;
    }
    // set_header() drops a name or value containing CR or LF, so no header can be injected.
    out.set_header(header.name, header.value);
  }
  out.body = response.body;
}

pubsub::PushResponse call_handler(const Handler& handler,
                                  const pubsub::PushRequest& request) noexcept {
  std::string what;
  try {
    return handler(request);
  } catch (const std::exception& e) {
    what = one_line(e.what());
  } catch (...) {
    what = "a non-standard exception";
  }
  log({.severity = Severity::kError,
       .event = "handler_threw",
       .message = "The push handler threw; answering 500.",
       .fields = {{"method", one_line(request.method)}, {"what", what}}});
  return internal_error();
}

BodyRead read_body(const httplib::ContentReader& reader, const httplib::Response& response,
                   std::size_t max_bytes, std::string& body) {
  bool too_large = false;
  const bool ok = reader([&](const char* data, std::size_t length) {
    if (length > max_bytes - body.size()) {
      too_large = true;
      return false;
    }
    body.append(data, length);
    return true;
  });
  if (ok) return BodyRead::kOk;
  return too_large || response.status == 413 ? BodyRead::kTooLarge : BodyRead::kFailed;
}

void error_response(int status, const std::string& line, httplib::Response& out) {
  out.status = status;
  out.set_header("Connection", "close");
  out.set_content(line + "\n", "text/plain; charset=utf-8");
}

}  // namespace idempotency::http::detail
