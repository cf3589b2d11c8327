#include "request_head.h"

#include <algorithm>
#include <cstddef>
#include <string>

#include "idempotency/detail/ascii.h"
#include "idempotency/detail/decimal.h"
#include "idempotency/detail/field_syntax.h"

namespace idempotency::http::detail {
namespace {

using idempotency::detail::iequals_ascii;
using idempotency::detail::is_decimal_digits;
using idempotency::detail::is_host;
using idempotency::detail::TransferCodings;

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

// RFC 9112 §6.1, §6.3: without chunked last the body's end cannot be known, and chunked twice
// is no framing at all (both 400). Any other coding before it would reach the handler still
// applied, its name gone with the field: one this server does not undo (501).
std::optional<HeadRefusal> judge(const TransferCodings& codings) {
  if (!codings.last_is_chunked()) {
    return HeadRefusal{400, "a request's last transfer coding must be chunked"};
  }
  if (codings.chunked() > 1) return HeadRefusal{400, "the chunked transfer coding applied twice"};
  if (codings.codings() > 1) {
    return HeadRefusal{501, "only the chunked transfer coding is accepted"};
  }
  return std::nullopt;
}

// Whether `segment` is "." or "..", each dot also as %2E (RFC 3986 §2.3: the same octet).
bool is_dot_segment(std::string_view segment) {
  std::size_t dots = 0;
  for (std::size_t i = 0; i < segment.size(); ++dots) {
    if (segment[i] == '.') {
      i += 1;
    } else if (segment.size() - i >= 3 && segment[i] == '%' && segment[i + 1] == '2' &&
               (segment[i + 2] == 'e' || segment[i + 2] == 'E')) {
      i += 3;
    } else {
      return false;
    }
  }
  return dots == 1 || dots == 2;
}

// RFC 3986 §5.2.4: a client removes dot segments before it sends a target. One that arrives
// anyway would reach the handler, and the app behind a proxy, under a path other than the
// one it names: `/../admin` under the gateway's base path `/api` is `/admin` to most servers.
// A segment is judged without its parameters (`..;x`), which Tomcat and Spring strip before
// they resolve dot segments. A fragment is no part of a target (RFC 9112 §3.2), and an app
// reads the path up to it: `/..#x` is `/..` there.
std::optional<HeadRefusal> judge_path(std::string_view target) {
  if (target.find('#') != std::string_view::npos) {
    return HeadRefusal{400, "a fragment (#) in the request target"};
  }
  const std::string_view path = target.substr(0, target.find('?'));
  for (std::size_t start = 0; start < path.size();) {
    const std::size_t end = std::min(path.find('/', start + 1), path.size());
    const std::string_view segment = path.substr(start + 1, end - start - 1);
    if (is_dot_segment(segment.substr(0, segment.find(';')))) {
      return HeadRefusal{400, "a . or .. segment in the request target"};
    }
    start = end;
  }
  return std::nullopt;
}

}  // namespace

std::optional<HeadRefusal> settle_head(pubsub::PushRequest& request, unsigned version) {
  // One pass over the fields: they are a handful, and this runs for every request.
  pubsub::Header* host = nullptr;
  std::size_t hosts = 0;
  std::size_t authorizations = 0;
  std::size_t content_lengths = 0;
  bool content_length_plain = true;
  std::optional<TransferCodings> codings;  // when there is a Transfer-Encoding field
  for (auto& field : request.headers) {
    if (field.name.size() == 4 && iequals_ascii(field.name, "Host")) {
      host = &field;
      ++hosts;
    } else if (field.name.size() == 13 && iequals_ascii(field.name, "Authorization")) {
      ++authorizations;
    } else if (field.name.size() == 14 && iequals_ascii(field.name, "Content-Length")) {
      ++content_lengths;
      content_length_plain = content_length_plain && is_decimal_digits(field.value);
    } else if (field.name.size() == 17 && iequals_ascii(field.name, "Transfer-Encoding")) {
      if (version < kHttp11) {
        return HeadRefusal{400, "Transfer-Encoding in an HTTP/1.0 request"};
      }
      if (!codings) codings.emplace();
      codings->add(field.value);
    }
  }
  if (codings) {
    if (auto refusal = judge(*codings)) return refusal;
  }
  // RFC 9110 §8.6 lets a recipient take `2, 2` or two equal fields as 2, but only by writing
  // the one value in their place; the handler would still see the list, and a server behind
  // it might read it otherwise. One field, one number, or nothing.
  if (content_lengths > 1) return HeadRefusal{400, "more than one Content-Length field"};
  if (!content_length_plain) return HeadRefusal{400, "a Content-Length that is not one number"};
  if (hosts > 1) return HeadRefusal{400, "more than one Host field"};
  // A singleton (RFC 9110 §11.6.2; its value has commas, so two cannot be one list): a handler
  // that checks the first and an app behind it that reads the last would judge two credentials.
  if (authorizations > 1) return HeadRefusal{400, "more than one Authorization field"};
  if (hosts == 0 && version >= kHttp11) {
    return HeadRefusal{400, "an HTTP/1.1 request without a Host field"};
  }
  if (host != nullptr && !is_host(host->value)) return HeadRefusal{400, "an invalid Host field"};

  std::string& target = request.path;
  if (!target.empty() && target.front() == '/') return judge_path(target);  // origin-form
  if (target == "*") {
    if (request.method == "OPTIONS") return std::nullopt;  // asterisk-form
    return HeadRefusal{400, "the target * is for OPTIONS alone"};
  }
  const auto uri = after_http_scheme(target);
  if (!uri) return HeadRefusal{400, "the request target is neither a path nor an http(s) URI"};
  const std::size_t authority_end = uri->find_first_of("/?");
  const std::string_view authority = uri->substr(0, authority_end);
  // An http URI names a host (RFC 9110 §4.2.1), and userinfo in one is an error (§4.2.4).
  if (authority.empty() || authority.front() == ':' || !is_host(authority)) {
    return HeadRefusal{400, "the request target's authority is not a valid host"};
  }
  if (authority_end != std::string_view::npos) {
    if (auto refusal = judge_path(uri->substr(authority_end))) return refusal;
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
