// The upstream's address: the URL the gateway is given, checked once at start-up, and the
// origin split into what the resolver, TLS and the Host header need.
#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <string>
#include <string_view>

#include "upstream_internal.h"

namespace idempotency::gateway {

namespace upstream_detail {

Origin parse_origin(std::string_view origin) {
  Origin out;
  if (origin.rfind("http://", 0) == 0) {
    origin.remove_prefix(7);
  } else if (origin.rfind("https://", 0) == 0) {
    origin.remove_prefix(8);
    out.tls = true;
  } else {
    return out;
  }
  out.authority = std::string(origin);
  std::string_view host = origin;
  std::string_view port;
  if (origin.rfind('[', 0) == 0) {
    const auto close = origin.find(']');
    if (close == std::string_view::npos) return out;
    host = origin.substr(1, close - 1);
    const auto rest = origin.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return out;
      port = rest.substr(1);
    }
  } else if (const auto colon = origin.rfind(':'); colon != std::string_view::npos) {
    host = origin.substr(0, colon);
    port = origin.substr(colon + 1);
  }
  if (host.empty() || host.find_first_of("/?#@ ") != std::string_view::npos) return out;
  if (port.empty()) {
    out.port = out.tls ? 443 : 80;
  } else {
    unsigned value = 0;
    for (char c : port) {
      if (std::isdigit(static_cast<unsigned char>(c)) == 0 || port.size() > 5) return out;
      value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value > 65535) return out;
    out.port = static_cast<std::uint16_t>(value);
  }
  out.host = std::string(host);
  boost::system::error_code ec;
  if (auto address = asio::ip::make_address(out.host, ec); !ec) out.address = address;
  out.valid = true;
  return out;
}

}  // namespace upstream_detail

UpstreamUrl parse_upstream_url(const std::string& url) {
  std::string_view rest(url);
  std::string scheme;
  if (rest.rfind("http://", 0) == 0) {
    scheme = "http";
    rest.remove_prefix(7);
  } else if (rest.rfind("https://", 0) == 0) {
    scheme = "https";
    rest.remove_prefix(8);
  } else {
    throw std::invalid_argument("the URL must start with http:// or https://");
  }
  const auto slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  std::string path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  if (authority.empty()) throw std::invalid_argument("the URL has no host");
  if (authority.find('@') != std::string_view::npos) {
    throw std::invalid_argument("the URL must not carry credentials");
  }
  if (path.find_first_of("?#") != std::string::npos) {
    throw std::invalid_argument("the URL must not have a query or fragment");
  }
  // host[:port] or [v6][:port]
  const auto close = authority.rfind(']');
  const auto colon = authority.rfind(':');
  if (colon != std::string_view::npos && (close == std::string_view::npos || colon > close)) {
    const std::string_view port = authority.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }) ||
        std::stoi(std::string(port)) > 65535) {
      throw std::invalid_argument("the URL's port is not a number from 0 to 65535");
    }
    if (colon == 0) throw std::invalid_argument("the URL has no host");
  }
  std::string origin = scheme + "://" + std::string(authority);
  // What every request will connect to, read as it will be then: a URL that passed the checks
  // above but not this one (`http://app?x`, `http://a b`) would make every request fail.
  if (!upstream_detail::parse_origin(origin).valid) {
    throw std::invalid_argument("the URL's host is not a host name or an address");
  }
  while (!path.empty() && path.back() == '/') path.pop_back();
  return {.origin = std::move(origin), .base_path = std::move(path)};
}

}  // namespace idempotency::gateway
