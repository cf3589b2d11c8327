#include "idempotency/backend_url.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace idempotency {

BackendUrl::BackendUrl(std::string scheme, std::string location,
                       std::vector<UrlParameter> parameters)
    : scheme_(std::move(scheme)),
      location_(std::move(location)),
      parameters_(std::move(parameters)) {}

BackendUrl BackendUrl::parse(std::string_view url) {
  const auto sep = url.find("://");
  if (sep == std::string_view::npos) {
    throw std::invalid_argument("backend URL must look like SCHEME://…");
  }
  // RFC 3986's scheme: what comes before a later "://" (a mistyped URL's user:password@host,
  // say) is not one, and is never echoed in an error as one.
  const std::string_view scheme = url.substr(0, sep);
  const auto scheme_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '-' || c == '.';
  };
  if (scheme.empty() ||
      !((scheme[0] >= 'a' && scheme[0] <= 'z') || (scheme[0] >= 'A' && scheme[0] <= 'Z')) ||
      !std::all_of(scheme.begin(), scheme.end(), scheme_char)) {
    throw std::invalid_argument(
        "backend URL must look like SCHEME://…, a scheme of letters, digits, '+', '-' or '.'");
  }
  const std::string_view rest = url.substr(sep + 3);
  const auto q = rest.find('?');
  std::vector<UrlParameter> parameters;
  std::string_view query = q == std::string_view::npos ? std::string_view() : rest.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (param.empty()) continue;
    const auto eq = param.find('=');
    parameters.push_back(UrlParameter{
        std::string(param.substr(0, eq)),
        std::string(eq == std::string_view::npos ? std::string_view() : param.substr(eq + 1))});
  }
  return BackendUrl(std::string(url.substr(0, sep)), std::string(rest.substr(0, q)),
                    std::move(parameters));
}

std::optional<std::string> BackendUrl::take(std::string_view name) {
  std::optional<std::string> value;
  for (const auto& p : parameters_) {
    if (p.name == name) value = p.value;
  }
  std::erase_if(parameters_, [&](const UrlParameter& p) { return p.name == name; });
  return value;
}

void BackendUrl::refuse_rest(std::string_view message) const {
  if (!parameters_.empty()) throw std::invalid_argument(std::string(message));
}

std::string BackendUrl::str() const {
  std::string out = scheme_ + "://" + location_;
  char sep = '?';
  for (const auto& p : parameters_) {
    out += sep;
    out += p.name;
    out += '=';
    out += p.value;
    sep = '&';
  }
  return out;
}

}  // namespace idempotency
