#include "config.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "duration.h"
#include "idempotency/backend_registry.h"
#include "idempotency/detail/ascii.h"
#include "upstream_pool.h"

namespace idempotency::gateway {
namespace {

// A bad value: the message is the one line printed to stderr.
struct BadFlag : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::chrono::milliseconds duration_flag(const char* flag, const std::string& text,
                                        bool allow_zero) {
  auto d = parse_duration(text);
  if (!d) {
    throw BadFlag(std::string(flag) + ": '" + text +
                  "' is not a duration (use e.g. 500ms, 30s, 15m, 1h, 1h30m)");
  }
  if (!allow_zero && d->count() == 0) throw BadFlag(std::string(flag) + ": must be above zero");
  return *d;
}

std::size_t size_flag(const char* flag, const std::string& text) {
  auto size = parse_size(text);
  if (!size || *size == 0) {
    throw BadFlag(std::string(flag) + ": '" + text + "' is not a size in bytes (e.g. 10MiB)");
  }
  return *size;
}

KeySpec key_flag(const std::string& text) {
  if (text == "messageId") return {};
  if (text == "ordering-key") return {.kind = KeySpec::Kind::kOrderingKey};
  for (auto [prefix, kind] : {std::pair{std::string_view("attribute:"), KeySpec::Kind::kAttribute},
                              std::pair{std::string_view("header:"), KeySpec::Kind::kHeader}}) {
    if (text.rfind(prefix, 0) == 0) {
      std::string name = text.substr(prefix.size());
      if (name.empty()) throw BadFlag("--key: '" + text + "' names no " + std::string(prefix));
      return {.kind = kind, .name = std::move(name)};
    }
  }
  throw BadFlag("--key: '" + text +
                "' is not one of messageId, attribute:NAME, header:NAME, ordering-key");
}

void listen_flag(const std::string& text, Config& config) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw BadFlag("--listen: '" + text + "' is not HOST:PORT");
  }
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]:8080
  }
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const long value = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || value < 0 || value > 65535) {
    throw BadFlag("--listen: '" + port + "' is not a port number (0-65535)");
  }
  config.listen_host = host;
  config.listen_port = static_cast<int>(value);
}

// Cloud Run passes the port to listen on as $PORT.
std::string default_listen() {
  const char* port = std::getenv("PORT");  // NOLINT(concurrency-mt-unsafe): read at start
  return std::string("0.0.0.0:") + (port != nullptr && *port != '\0' ? port : "8080");
}

}  // namespace

std::variant<Config, ConfigExit> parse_config(int argc, const char* const* argv) {
  CLI::App app{
      "pubsub-idempotency-gateway: forwards each Pub/Sub push delivery (or Idempotency-Key "
      "request) to the upstream at most once per key. Every flag can also be set as "
      "IDEMPOTENCY_<FLAG> (e.g. IDEMPOTENCY_BACKEND).",
      "pubsub-idempotency-gateway"};
  Config config;
  std::string listen = default_listen();
  std::string key = "messageId";
  std::string lease = "30s";
  std::string heartbeat = "auto";
  std::string ttl = "1h";
  std::string purge_interval = "1m";
  std::string upstream_timeout = "30s";
  std::string upstream_connect_timeout = "5s";
  std::string wait_for = "0s";
  std::string header_timeout = "10s";
  std::string body_timeout = "60s";
  std::string idle_timeout = "60s";
  std::string max_header_bytes = "192KiB";
  std::string max_body = "16MiB";
  std::string max_response = "1MiB";
  std::string mode = "pubsub";

  app.add_option("--listen", listen, "HOST:PORT to serve on (default 0.0.0.0:$PORT or :8080)")
      ->envname("IDEMPOTENCY_LISTEN");
  app.add_option("--upstream", config.upstream, "the app's base URL, e.g. http://127.0.0.1:8081")
      ->envname("IDEMPOTENCY_UPSTREAM")
      ->required();
  app.add_option("--backend", config.backend, "backend URL: " + backend_url_forms())
      ->envname("IDEMPOTENCY_BACKEND")
      ->capture_default_str();
  app.add_option("--key", key, "messageId | attribute:NAME | header:NAME | ordering-key")
      ->envname("IDEMPOTENCY_KEY")
      ->capture_default_str();
  app.add_option("--key-prefix", config.key_prefix, "prepended to every key (a namespace)")
      ->envname("IDEMPOTENCY_KEY_PREFIX");
  app.add_option("--lease", lease,
                 "claim lease; a crashed holder's key frees this long after the crash (renewed "
                 "by --heartbeat; with --heartbeat 0 it must exceed the upstream's longest run)")
      ->envname("IDEMPOTENCY_LEASE")
      ->capture_default_str();
  app.add_option("--heartbeat", heartbeat,
                 "renew a held key's lease this often while the upstream works (auto: a third "
                 "of --lease; 0: never)")
      ->envname("IDEMPOTENCY_HEARTBEAT")
      ->capture_default_str();
  app.add_option("--ttl", ttl, "how long a completed key suppresses duplicates")
      ->envname("IDEMPOTENCY_TTL")
      ->capture_default_str();
  app.add_option("--purge-interval", purge_interval,
                 "how often expired records are deleted in the background (0: never)")
      ->envname("IDEMPOTENCY_PURGE_INTERVAL")
      ->capture_default_str();
  app.add_option("--upstream-timeout", upstream_timeout,
                 "deadline for the whole upstream exchange (connect, send, whole response)")
      ->envname("IDEMPOTENCY_UPSTREAM_TIMEOUT")
      ->capture_default_str();
  app.add_option("--upstream-connect-timeout", upstream_connect_timeout,
                 "deadline for connecting to the upstream")
      ->envname("IDEMPOTENCY_UPSTREAM_CONNECT_TIMEOUT")
      ->capture_default_str();
  app.add_option("--header-timeout", header_timeout,
                 "from a request's first byte to the end of its header")
      ->envname("IDEMPOTENCY_HEADER_TIMEOUT")
      ->capture_default_str();
  app.add_option("--body-timeout", body_timeout,
                 "from the end of the header to the end of the body")
      ->envname("IDEMPOTENCY_BODY_TIMEOUT")
      ->capture_default_str();
  app.add_option("--idle-timeout", idle_timeout, "how long an idle keep-alive connection stays")
      ->envname("IDEMPOTENCY_IDLE_TIMEOUT")
      ->capture_default_str();
  app.add_option("--max-connections", config.max_connections, "connections open at once")
      ->envname("IDEMPOTENCY_MAX_CONNECTIONS")
      ->capture_default_str();
  app.add_option("--max-header-bytes", max_header_bytes,
                 "largest request line + header (K/M suffixes); more is 431")
      ->envname("IDEMPOTENCY_MAX_HEADER_BYTES")
      ->capture_default_str();
  app.add_option("--max-body", max_body,
                 "largest request body (K/M/G suffixes); more is 413 from the header alone")
      ->envname("IDEMPOTENCY_MAX_BODY")
      ->capture_default_str();
  app.add_option("--max-response", max_response,
                 "largest upstream response body kept and stored (K/M/G suffixes)")
      ->envname("IDEMPOTENCY_MAX_RESPONSE")
      ->capture_default_str();
  app.add_option("--mode", mode, "pubsub | idempotency-key")
      ->envname("IDEMPOTENCY_MODE")
      ->capture_default_str();
  app.add_option("--wait-for", wait_for, "wait this long for a holder elsewhere before a 503")
      ->envname("IDEMPOTENCY_WAIT_FOR")
      ->capture_default_str();
  app.add_option("--workers", config.workers, "requests handled at once (store + upstream calls)")
      ->envname("IDEMPOTENCY_WORKERS")
      ->capture_default_str();
  app.add_option("--io-threads", config.io_threads, "threads reading and writing connections")
      ->envname("IDEMPOTENCY_IO_THREADS")
      ->capture_default_str();
  app.add_option("--oidc-audience", config.oidc_audience,
                 "verify Pub/Sub's OIDC token for this audience (off when empty)")
      ->envname("IDEMPOTENCY_OIDC_AUDIENCE");
  app.add_option("--oidc-email", config.oidc_emails,
                 "allowed push service account (repeatable; comma-separated in the env)")
      ->envname("IDEMPOTENCY_OIDC_EMAIL")
      ->delimiter(',');
  app.add_option("--jwks", config.jwks, "JWKS file or URL (default: Google's keys)")
      ->envname("IDEMPOTENCY_JWKS");
  app.add_flag("--allow-idempotency-disabled", config.allow_disabled,
               "serve even when GCP_PUBSUB_IDEMPOTENCY_DISABLED is set (test setups only)")
      ->envname("IDEMPOTENCY_ALLOW_IDEMPOTENCY_DISABLED");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return ConfigExit{.code = 0, .text = app.help()};
  } catch (const CLI::ParseError& e) {
    return ConfigExit{.code = 2, .text = e.what()};
  }

  try {
    listen_flag(listen, config);
    if (config.upstream.empty()) throw BadFlag("--upstream: must not be empty");
    try {
      (void)parse_upstream_url(config.upstream);
    } catch (const std::invalid_argument& e) {
      throw BadFlag(std::string("--upstream: ") + e.what());
    }
    if (config.backend.empty()) throw BadFlag("--backend: must not be empty");
    config.key = key_flag(key);
    config.lease = duration_flag("--lease", lease, false);
    config.heartbeat =
        heartbeat == "auto" ? config.lease / 3 : duration_flag("--heartbeat", heartbeat, true);
    if (config.heartbeat >= config.lease) {
      throw BadFlag("--heartbeat: must be shorter than --lease (or 0 to turn renewal off)");
    }
    config.ttl = duration_flag("--ttl", ttl, false);
    config.purge_interval = duration_flag("--purge-interval", purge_interval, true);
    if (config.purge_interval > kMaxTtl) throw BadFlag("--purge-interval: at most 366 days");
    config.upstream_timeout = duration_flag("--upstream-timeout", upstream_timeout, false);
    config.upstream_connect_timeout =
        duration_flag("--upstream-connect-timeout", upstream_connect_timeout, false);
    config.wait_for = duration_flag("--wait-for", wait_for, true);
    config.header_timeout = duration_flag("--header-timeout", header_timeout, false);
    config.body_timeout = duration_flag("--body-timeout", body_timeout, false);
    config.idle_timeout = duration_flag("--idle-timeout", idle_timeout, false);
    config.max_header_bytes = size_flag("--max-header-bytes", max_header_bytes);
    config.max_body = size_flag("--max-body", max_body);
    config.max_response = size_flag("--max-response", max_response);
    if (mode == "pubsub") {
      config.mode = Mode::kPubsub;
    } else if (mode == "idempotency-key") {
      config.mode = Mode::kIdempotencyKey;
      // Refused, not ignored: a gateway started with them would not do what they ask.
      if (key != "messageId") {
        throw BadFlag("--key: pubsub mode only; idempotency-key mode keys on Idempotency-Key");
      }
      if (config.wait_for.count() > 0) {
        throw BadFlag("--wait-for: pubsub mode only; idempotency-key mode answers 409 at once");
      }
    } else {
      throw BadFlag("--mode: '" + mode + "' is not pubsub or idempotency-key");
    }
    if (config.workers == 0) throw BadFlag("--workers: must be above zero");
    if (config.io_threads == 0) throw BadFlag("--io-threads: must be above zero");
    if (config.max_connections == 0) throw BadFlag("--max-connections: must be above zero");
    if (config.oidc_audience.empty() && (!config.oidc_emails.empty() || !config.jwks.empty())) {
      throw BadFlag("--oidc-email/--jwks: need --oidc-audience");
    }
    if (!config.oidc_audience.empty() && config.oidc_emails.empty()) {
      throw BadFlag("--oidc-audience: needs at least one --oidc-email");
    }
  } catch (const BadFlag& e) {
    return ConfigExit{.code = 2, .text = e.what()};
  }
  return config;
}

std::string backend_scheme(const std::string& url) { return url.substr(0, url.find(':')); }

bool jwks_is_url(std::string_view jwks) {
  using idempotency::detail::iequals_ascii;
  return iequals_ascii(jwks.substr(0, 7), "http://") ||
         iequals_ascii(jwks.substr(0, 8), "https://");
}

}  // namespace idempotency::gateway
