// The simulator's command line: every flag, its default, and the checks a value must pass
// before anything is sent.
//
// Thread safety: pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace idempotency::push_sim {

/// How a message reaches an endpoint.
enum class Form {
  kWrapped,     ///< The default push envelope, JSON.
  kUnwrapped,   ///< Payload unwrapping with write-metadata: raw data body, x-goog-pubsub-* headers.
  kCloudEvent,  ///< Eventarc, CloudEvents binary mode: ce-* headers, MessagePublishedData body.
};

/// Pub/Sub's retry policy for nacked messages. Immediate (Pub/Sub's default) redelivers at once,
/// paced only by the subscription-wide push back-off (PushBackoff, retry.h); exponential waits
/// from min_backoff, doubling, up to max_backoff.
struct RetryPolicy {
  enum class Kind { kImmediate, kExponential };
  Kind kind = Kind::kImmediate;
  std::chrono::milliseconds min_backoff{10'000};
  std::chrono::milliseconds max_backoff{600'000};
};

/// One push subscription: every message of the run is delivered to each.
struct Subscription {
  std::string name;  ///< The full name, projects/P/subscriptions/S.
  std::string url;   ///< The push endpoint.
  /// With --balance: the instances behind the push endpoint (`url` is the first); each attempt
  /// goes to one of them at random, as a load balancer in front of Cloud Run instances does.
  std::vector<std::string> instances;
};

/// Options is one run, as the flags describe it (see parse_options() for the defaults).
struct Options {
  std::vector<Subscription> subscriptions;
  bool balance = false;  ///< Every --endpoint is an instance of one subscription.
  Form form = Form::kWrapped;
  int messages = 10;
  std::string input;  ///< A JSON-lines file of messages instead of generated ones.
  std::vector<std::pair<std::string, std::string>> attributes;
  std::string key_attribute;  ///< With `keys`: an attribute drawn from key-1 .. key-N.
  int keys = 0;
  int ordering_keys = 0;  ///< 0: no message ordering.
  std::chrono::milliseconds ack_deadline{10'000};
  RetryPolicy retry;
  double time_scale = 1.0;
  int max_delivery_attempts = 0;  ///< 0: no dead-letter policy (no deliveryAttempt either).
  std::string dead_letter;        ///< Where dead-lettered messages are written (JSON lines).
  double duplicate_rate = 0;
  bool duplicate_concurrent = false;
  double republish_rate = 0;
  int concurrency = 64;
  std::string oidc_audience;
  std::string oidc_email = "pubsub-push-sim@sim-project.iam.gserviceaccount.com";
  std::string oidc_jwks_out;
  std::optional<std::uint64_t> seed;
  std::string project = "sim-project";
  std::string topic = "sim-topic";
  bool json = false;
  std::string events;
  std::chrono::milliseconds run_timeout{900'000};
};

/// OptionsExit: the run ends before it starts: --help (code 0, text on stdout) or a bad flag
/// (code 2, `text` the one line for stderr).
struct OptionsExit {
  int code = 2;
  std::string text;
};

/// parse_options() reads the command line and checks every value against Pub/Sub's own limits.
[[nodiscard]] std::variant<Options, OptionsExit> parse_options(int argc, const char* const* argv);

/// scaled() is `d` multiplied by the run's --time-scale, at least 1 ms when `d` is not zero.
[[nodiscard]] std::chrono::milliseconds scaled(std::chrono::milliseconds d, double time_scale);

}  // namespace idempotency::push_sim
