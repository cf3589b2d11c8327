// The gateway's configuration: its flags (each also settable as IDEMPOTENCY_<FLAG>), checked
// once at start so a mistake exits 2 with one line naming the flag, before any port is bound.
//
// Thread safety: parse_config() is a pure function of its arguments and the environment.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace idempotency::gateway {

/// How requests are deduplicated.
enum class Mode {
  kPubsub,          ///< Pub/Sub push deliveries, keyed by the message; duplicates acked 204.
  kIdempotencyKey,  ///< HTTP API requests carrying an `Idempotency-Key` header (Stripe-like).
};

/// Where the pubsub mode takes the key from (`--key`).
struct KeySpec {
  enum class Kind { kMessageId, kAttribute, kHeader, kOrderingKey };
  Kind kind = Kind::kMessageId;
  /// The attribute or header name for kAttribute / kHeader.
  std::string name;
};

/// Config is the validated command line.
struct Config {
  std::string listen_host = "0.0.0.0";
  int listen_port = 8080;
  std::string upstream;
  std::string backend = "sqlite:///var/lib/idempotency/idem.db";
  KeySpec key;
  std::string key_prefix;
  /// Short, because the heartbeat renews it: a crashed gateway's message is retried one
  /// lease later.
  std::chrono::milliseconds lease = std::chrono::seconds(30);
  /// How often a held key's lease is renewed while the upstream works; zero: never.
  std::chrono::milliseconds heartbeat = std::chrono::seconds(10);
  std::chrono::milliseconds ttl = std::chrono::hours(1);
  /// How often expired records are deleted in the background; zero turns it off.
  std::chrono::milliseconds purge_interval = std::chrono::minutes(1);
  /// The whole exchange with the upstream: connect, send, and read the whole response.
  std::chrono::milliseconds upstream_timeout = std::chrono::seconds(30);
  /// Establishing a connection to the upstream (capped by upstream_timeout).
  std::chrono::milliseconds upstream_connect_timeout = std::chrono::seconds(5);
  std::chrono::milliseconds wait_for{0};
  /// The HTTP edge's bounds; see http::ServeOptions for what each one means.
  std::chrono::milliseconds header_timeout = std::chrono::seconds(10);
  std::chrono::milliseconds body_timeout = std::chrono::seconds(60);
  std::chrono::milliseconds idle_timeout = std::chrono::seconds(60);
  std::size_t max_connections = 4096;
  std::size_t max_header_bytes = std::size_t{192} * 1024;
  std::size_t max_body = std::size_t{16} * 1024 * 1024;
  /// The largest upstream response body kept (and, in idempotency-key mode, stored).
  std::size_t max_response = std::size_t{1} << 20;
  std::size_t workers = 16;
  std::size_t io_threads = 1;
  Mode mode = Mode::kPubsub;
  std::string oidc_audience;
  std::vector<std::string> oidc_emails;
  /// A JWKS file path, or an http(s) URL; empty: Google's keys.
  std::string jwks;
  /// Serve even when GCP_PUBSUB_IDEMPOTENCY_DISABLED is set (every push reaches the upstream
  /// unguarded): for test setups only.
  bool allow_disabled = false;
};

/// ConfigExit says the process should exit now: after --help (code 0, text for stdout) or a
/// bad flag (code 2, one line for stderr).
struct ConfigExit {
  int code = 2;
  std::string text;
};

/// backend_scheme() is the backend URL's scheme alone ("sqlite"), for logs: the URL may hold a
/// password.
[[nodiscard]] std::string backend_scheme(const std::string& url);

/// jwks_is_url() says whether a --jwks value is an http(s) URL, its scheme in any case, as
/// the verifier reads one; anything else names a file.
[[nodiscard]] bool jwks_is_url(std::string_view jwks);

/// parse_config() reads the command line and the IDEMPOTENCY_* (and PORT) environment.
[[nodiscard]] std::variant<Config, ConfigExit> parse_config(int argc, const char* const* argv);

}  // namespace idempotency::gateway
