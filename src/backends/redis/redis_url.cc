// parse_redis_url(): `redis://[[user]:password@]host[:port][/db]`, and `rediss://` with the
// same location and TLS parameters (`ca`, `cert`, `key`, `sni`, `verify`); `redis+cluster://`
// and `rediss+cluster://` name one or more seed nodes of a Redis Cluster, comma-separated. Every
// error names the part that is wrong and never repeats the URL, which may carry a password.
#include <charconv>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include "idempotency/backend_url.h"
#include "idempotency/redis_lock.h"

namespace idempotency {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("malformed redis URL: " + what);
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s, const char* part) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size() || hex_digit(s[i + 1]) < 0 || hex_digit(s[i + 2]) < 0) {
      bad(std::string("bad percent-encoding in the ") + part);
    }
    out.push_back(static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2])));
    i += 2;
  }
  return out;
}

int parse_number(std::string_view s, int max, const char* part) {
  int v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end || v < 0 || v > max) {
    bad(std::string("the ") + part + " must be a number from 0 to " + std::to_string(max));
  }
  return v;
}

// The TLS settings of a `rediss://` URL's parameters; each is taken from `url`.
RedisTls take_tls(BackendUrl& url) {
  RedisTls tls;
  auto path = [&](const char* name, std::string& into) {
    if (std::optional<std::string> v = url.take(name)) {
      if (v->empty()) bad(std::string("the query parameter ") + name + "= needs a path");
      into = percent_decode(*v, (std::string(name) + "= path").c_str());
    }
  };
  path("ca", tls.ca_file);
  path("cert", tls.cert_file);
  path("key", tls.key_file);
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    bad("the query parameters cert= and key= go together");
  }
  if (std::optional<std::string> sni = url.take("sni")) {
    tls.server_name = percent_decode(*sni, "sni= name");
    if (tls.server_name.empty()) bad("the query parameter sni= needs a name");
  }
  if (std::optional<std::string> verify = url.take("verify")) {
    if (*verify != "full" && *verify != "ca") bad("the query parameter verify= must be full or ca");
    tls.verify_host = *verify == "full";
  }
  return tls;
}

// One `host[:port]` (an IPv6 host in brackets) of a URL's location.
RedisNode parse_node(std::string_view hostport) {
  RedisNode node;
  std::string_view port;
  if (!hostport.empty() && hostport.front() == '[') {  // [IPv6]:port
    const std::size_t close = hostport.find(']');
    if (close == std::string_view::npos) bad("the IPv6 host lacks its closing ']'");
    node.host = std::string(hostport.substr(1, close - 1));
    const std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad("unexpected text after the IPv6 host");
      port = after.substr(1);
      if (port.empty()) bad("the port is empty");
    }
  } else {
    const std::size_t colon = hostport.find(':');
    node.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = hostport.substr(colon + 1);
      if (port.empty()) bad("the port is empty");
    }
  }
  if (node.host.empty()) bad("the host is empty");
  for (char c : node.host) {
    if (c == '@' || c == '/' || c == ' ' || c == '[' || c == ']' || c == '%') {
      bad("the host contains an invalid character");
    }
  }
  if (!port.empty()) {
    node.port = parse_number(port, 65535, "port");
    if (node.port == 0) bad("the port must be from 1 to 65535");
  }
  return node;
}

}  // namespace

RedisEndpoint parse_redis_url(std::string_view url) {
  // The cluster schemes take the same location (with several nodes) and parameters.
  const bool cluster = url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://");
  std::string plain;
  if (cluster) {
    plain = std::string(url.substr(0, url.find('+'))) + std::string(url.substr(url.find(':')));
    url = plain;
  }
  const bool tls = url.substr(0, 9) == "rediss://";
  if (!tls && url.substr(0, 8) != "redis://") {
    bad("the scheme must be redis://, rediss://, redis+cluster:// or rediss+cluster://");
  }
  if (url.find('#') != std::string_view::npos) bad("fragments are not supported");
  // A '?' in the password would start the query early and put the password's tail in it.
  const std::size_t query = url.find('?');
  if (query != std::string_view::npos && url.find('@', query) != std::string_view::npos) {
    bad("'?' in the userinfo and '@' in the query must be percent-encoded");
  }
  BackendUrl parsed = BackendUrl::parse(url);
  RedisEndpoint ep;
  ep.cluster = cluster;
  if (tls) ep.tls = take_tls(parsed);
  if (std::optional<std::string> replicas = parsed.take("replicas")) {
    ep.replicas = parse_number(*replicas, 100, "replicas= count");
  }
  if (std::optional<std::string> pipelines = parsed.take("pipelines")) {
    if (ep.replicas > 0) bad("pipelines= is not used with replicas= (WAIT holds a connection)");
    ep.pipelines = static_cast<std::size_t>(parse_number(*pipelines, 64, "pipelines= count"));
  }
  if (!parsed.parameters().empty()) {
    // A parameter's name is safe to repeat (the userinfo ends before the query); a value is not.
    const std::string name = parsed.parameters().front().name.substr(0, 32);
    bad("the query parameter '" + name + "' is not known" +
        (tls ? " (rediss:// takes ca, cert, key, sni, verify, replicas and pipelines)"
             : " (redis:// takes replicas and pipelines; TLS parameters need rediss://)"));
  }
  std::string_view rest = parsed.location();

  // The userinfo ends at the LAST '@' before the path: a password may contain '@'.
  const std::size_t slash_before_at = rest.find('/');
  const std::size_t at = rest.substr(0, slash_before_at).rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const std::size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      bad("the userinfo must be user:password or :password");
    }
    ep.user = percent_decode(userinfo.substr(0, colon), "user name");
    ep.password = percent_decode(userinfo.substr(colon + 1), "password");
    if (ep.password.empty()) bad("the password is empty");
  }

  const std::size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) ep.db = parse_number(db, 1'000'000, "database number");
  }

  if (!cluster) {
    RedisNode node = parse_node(hostport);
    ep.host = std::move(node.host);
    ep.port = node.port;
    return ep;
  }
  if (slash != std::string_view::npos && !rest.substr(slash + 1).empty()) {
    bad("a cluster has only database 0: no /db in a redis+cluster:// URL");
  }
  while (true) {
    const std::size_t comma = hostport.find(',');
    ep.seeds.push_back(parse_node(hostport.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    hostport = hostport.substr(comma + 1);
  }
  ep.host = ep.seeds.front().host;
  ep.port = ep.seeds.front().port;
  return ep;
}

}  // namespace idempotency
