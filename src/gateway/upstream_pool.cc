#include "upstream_pool.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace idempotency::gateway {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return std::string(s.substr(first, last - first + 1));
}

// The header names a `Connection` header lists are hop-by-hop for this message too.
std::set<std::string> connection_tokens(const std::vector<pubsub::Header>& headers) {
  std::set<std::string> tokens;
  for (const auto& h : headers) {
    if (!iequals(h.name, "Connection")) continue;
    std::size_t start = 0;
    while (start <= h.value.size()) {
      const auto comma = h.value.find(',', start);
      const auto end = comma == std::string::npos ? h.value.size() : comma;
      if (auto token = trim(std::string_view(h.value).substr(start, end - start)); !token.empty()) {
        tokens.insert(lower(token));
      }
      start = end + 1;
    }
  }
  return tokens;
}

std::chrono::microseconds as_micros(std::chrono::milliseconds d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d);
}

}  // namespace

bool is_hop_by_hop(std::string_view name) {
  // Host and Content-Length are not hop-by-hop, but the client writes its own for the new hop.
  for (std::string_view h :
       {"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
        "TE", "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Content-Length"}) {
    if (iequals(name, h)) return true;
  }
  return false;
}

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
  while (!path.empty() && path.back() == '/') path.pop_back();
  return {.origin = scheme + "://" + std::string(authority), .base_path = std::move(path)};
}

struct UpstreamPool::Impl {
  UpstreamUrl url;
  std::chrono::milliseconds timeout{0};
  std::size_t max_idle = 0;
  mutable std::mutex mutex;
  mutable std::vector<std::unique_ptr<httplib::Client>> idle;  // guarded by mutex

  [[nodiscard]] std::unique_ptr<httplib::Client> acquire() const {
    {
      std::lock_guard lock(mutex);
      if (!idle.empty()) {
        auto client = std::move(idle.back());
        idle.pop_back();
        return client;
      }
    }
    auto client = std::make_unique<httplib::Client>(url.origin);
    client->set_keep_alive(true);
    // Forward the bytes as they are: no re-encoding of the path, no decompression.
    client->set_url_encode(false);
    client->set_decompress(false);
    client->set_compress(false);
    const auto us = as_micros(timeout);
    const auto sec = static_cast<time_t>(us.count() / 1'000'000);
    const auto usec = static_cast<time_t>(us.count() % 1'000'000);
    client->set_connection_timeout(sec, usec);
    client->set_read_timeout(sec, usec);
    client->set_write_timeout(sec, usec);
    return client;
  }

  void give_back(std::unique_ptr<httplib::Client> client) const {
    std::lock_guard lock(mutex);
    if (idle.size() < max_idle) idle.push_back(std::move(client));
  }
};

UpstreamPool::UpstreamPool(UpstreamUrl url, std::chrono::milliseconds timeout, std::size_t max_idle)
    : impl_(std::make_unique<Impl>()) {
  impl_->url = std::move(url);
  impl_->timeout = timeout;
  impl_->max_idle = max_idle;
}

UpstreamPool::~UpstreamPool() = default;

UpstreamReply UpstreamPool::forward(const pubsub::PushRequest& request,
                                    std::optional<std::int64_t> fence) const {
  const auto start = std::chrono::steady_clock::now();
  httplib::Request out;
  out.method = request.method;
  out.path = impl_->url.base_path + (request.path.empty() ? "/" : request.path);
  const auto listed = connection_tokens(request.headers);
  for (const auto& h : request.headers) {
    if (is_hop_by_hop(h.name) || listed.count(lower(h.name)) != 0 ||
        iequals(h.name, kFenceHeader)) {
      continue;
    }
    out.headers.emplace(h.name, h.value);
  }
  if (fence) out.headers.emplace(kFenceHeader, std::to_string(*fence));
  out.body = request.body;

  auto client = impl_->acquire();
  httplib::Response in;
  httplib::Error error = httplib::Error::Success;
  const bool ok = client->send(out, in, error);
  UpstreamReply reply;
  reply.elapsed = std::chrono::steady_clock::now() - start;
  if (!ok) {
    const bool unreachable =
        error == httplib::Error::Connection || error == httplib::Error::ConnectionTimeout ||
        error == httplib::Error::BindIPAddress || error == httplib::Error::SSLConnection ||
        error == httplib::Error::SSLServerVerification;
    reply.kind = unreachable ? UpstreamReply::Kind::kUnreachable : UpstreamReply::Kind::kFailed;
    reply.error = httplib::to_string(error);
    return reply;  // the client is dropped with its broken connection
  }
  reply.response.status = in.status;
  reply.response.body = std::move(in.body);
  std::vector<pubsub::Header> headers_in;
  headers_in.reserve(in.headers.size());
  for (const auto& [name, value] : in.headers) headers_in.push_back({name, value});
  const auto listed_back = connection_tokens(headers_in);
  for (auto& h : headers_in) {
    if (is_hop_by_hop(h.name) || listed_back.count(lower(h.name)) != 0) continue;
    reply.response.headers.push_back(std::move(h));
  }
  impl_->give_back(std::move(client));
  return reply;
}

}  // namespace idempotency::gateway
