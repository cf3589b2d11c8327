#include "options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "duration.h"

namespace idempotency::push_sim {
namespace {

// A bad value: the message is the one line printed to stderr.
struct BadFlag : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr const char* kDescription =
    "pubsub-push-sim: delivers messages to push endpoints as Google Cloud Pub/Sub does, at "
    "least once: wrapped, unwrapped or Eventarc CloudEvents requests; only 102/200/201/202/204 "
    "ack, anything else (another status, a connection error, no answer within the ack "
    "deadline) is a nack, redelivered after back-off until acked or dead-lettered. Chaos knobs "
    "add duplicates, republishes, several subscriptions and ordering keys. It is a test tool: "
    "its own output (summary, --events, --dead-letter) names messageIds. Exit codes: 0 every "
    "message acked or dead-lettered; 1 some were neither by --run-timeout; 2 a bad flag.";

std::chrono::milliseconds duration_flag(const char* flag, const std::string& text) {
  auto d = gateway::parse_duration(text);
  if (!d) {
    throw BadFlag(std::string(flag) + ": '" + text +
                  "' is not a duration (use e.g. 500ms, 10s, 10m, 1h30m)");
  }
  return *d;
}

void rate_flag(const char* flag, double rate) {
  if (!(rate >= 0 && rate <= 1)) throw BadFlag(std::string(flag) + ": must be from 0 to 1");
}

std::string full_subscription_name(const std::string& name, const std::string& project) {
  if (name.rfind("projects/", 0) == 0) return name;
  return "projects/" + project + "/subscriptions/" + name;
}

void check_url(const std::string& flag, const std::string& url) {
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) {
    throw BadFlag(flag + ": '" + url + "' is not an http:// or https:// URL");
  }
}

Options validate(Options o, const std::vector<std::string>& endpoints,
                 const std::vector<std::string>& named, const std::string& form,
                 const std::string& retry, const std::string& ack_deadline,
                 const std::string& min_backoff, const std::string& max_backoff,
                 const std::string& run_timeout, const std::vector<std::string>& attributes,
                 bool backoff_given) {
  for (const auto& url : endpoints) check_url("--endpoint", url);
  if (o.balance) {
    if (endpoints.empty() || !named.empty()) {
      throw BadFlag("--balance: give the instances as --endpoint URLs (and no --subscription)");
    }
    o.subscriptions.push_back(
        {full_subscription_name("sub-1", o.project), endpoints.front(), endpoints});
  }
  for (std::size_t i = 0; i < endpoints.size() && !o.balance; ++i) {
    o.subscriptions.push_back(
        {full_subscription_name("sub-" + std::to_string(i + 1), o.project), endpoints[i], {}});
  }
  for (const auto& spec : named) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw BadFlag("--subscription: '" + spec + "' is not NAME=URL");
    }
    const std::string url = spec.substr(eq + 1);
    check_url("--subscription", url);
    o.subscriptions.push_back({full_subscription_name(spec.substr(0, eq), o.project), url, {}});
  }
  if (o.subscriptions.empty()) {
    throw BadFlag("--endpoint or --subscription: give at least one push endpoint");
  }
  for (std::size_t i = 0; i < o.subscriptions.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (o.subscriptions[i].name == o.subscriptions[j].name) {
        throw BadFlag("--subscription: '" + o.subscriptions[i].name + "' is named twice");
      }
    }
  }
  if (form == "wrapped") {
    o.form = Form::kWrapped;
  } else if (form == "unwrapped") {
    o.form = Form::kUnwrapped;
  } else if (form == "cloudevent") {
    o.form = Form::kCloudEvent;
  } else {
    throw BadFlag("--form: '" + form + "' is not one of wrapped, unwrapped, cloudevent");
  }
  if (retry == "immediate") {
    o.retry.kind = RetryPolicy::Kind::kImmediate;
  } else if (retry == "exponential") {
    o.retry.kind = RetryPolicy::Kind::kExponential;
  } else {
    throw BadFlag("--retry: '" + retry + "' is not one of immediate, exponential");
  }
  o.ack_deadline = duration_flag("--ack-deadline", ack_deadline);
  if (o.ack_deadline < std::chrono::seconds(10) || o.ack_deadline > std::chrono::seconds(600)) {
    throw BadFlag(
        "--ack-deadline: must be from 10s to 600s, as Pub/Sub allows (--time-scale "
        "makes a run faster)");
  }
  // Silently ignored, they would read as a schedule the run does not follow.
  if (backoff_given && o.retry.kind != RetryPolicy::Kind::kExponential) {
    throw BadFlag(
        "--min-backoff/--max-backoff: only with --retry exponential (the default is immediate, "
        "as Pub/Sub's)");
  }
  o.retry.min_backoff = duration_flag("--min-backoff", min_backoff);
  o.retry.max_backoff = duration_flag("--max-backoff", max_backoff);
  if (o.retry.min_backoff > std::chrono::seconds(600) ||
      o.retry.max_backoff > std::chrono::seconds(600)) {
    throw BadFlag("--min-backoff/--max-backoff: at most 600s, as Pub/Sub allows");
  }
  if (o.retry.min_backoff > o.retry.max_backoff) {
    throw BadFlag("--min-backoff: must not exceed --max-backoff");
  }
  o.run_timeout = duration_flag("--run-timeout", run_timeout);
  if (o.run_timeout.count() == 0) throw BadFlag("--run-timeout: must be above zero");
  if (!(o.time_scale > 0 && std::isfinite(o.time_scale))) {
    throw BadFlag("--time-scale: must be above zero (e.g. 0.01 runs a 10s deadline in 100ms)");
  }
  if (o.max_delivery_attempts != 0 &&
      (o.max_delivery_attempts < 5 || o.max_delivery_attempts > 100)) {
    throw BadFlag("--max-delivery-attempts: must be from 5 to 100, as Pub/Sub allows");
  }
  if (!o.dead_letter.empty() && o.max_delivery_attempts == 0) {
    throw BadFlag("--dead-letter: needs --max-delivery-attempts (the dead-letter policy)");
  }
  rate_flag("--duplicate-rate", o.duplicate_rate);
  rate_flag("--republish-rate", o.republish_rate);
  if (o.concurrency < 1) throw BadFlag("--concurrency: must be at least 1");
  if (o.messages < 1) throw BadFlag("--messages: must be at least 1");
  if (o.ordering_keys < 0) throw BadFlag("--ordering-keys: must not be negative");
  if (o.keys < 0) throw BadFlag("--keys: must not be negative");
  // The keys are drawn only for generated messages: with --input they would be ignored.
  if (!o.input.empty() && (o.keys > 0 || !o.key_attribute.empty())) {
    throw BadFlag(
        "--key-attribute/--keys: not with --input (give the attribute in the file's lines)");
  }
  if ((o.keys > 0) != !o.key_attribute.empty()) {
    throw BadFlag("--key-attribute and --keys: give both (e.g. --key-attribute po --keys 10)");
  }
  for (const auto& spec : attributes) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw BadFlag("--attribute: '" + spec + "' is not NAME=VALUE");
    }
    o.attributes.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
  }
  if (!o.oidc_jwks_out.empty() && o.oidc_audience.empty()) {
    throw BadFlag("--oidc-jwks-out: needs --oidc-audience (tokens are signed only then)");
  }
  return o;
}

}  // namespace

std::chrono::milliseconds scaled(std::chrono::milliseconds d, double time_scale) {
  if (d.count() == 0) return d;
  const double ms = static_cast<double>(d.count()) * time_scale;
  return std::chrono::milliseconds(std::max<std::int64_t>(1, std::llround(ms)));
}

std::variant<Options, OptionsExit> parse_options(int argc, const char* const* argv) {
  CLI::App app{kDescription, "pubsub-push-sim"};
  Options o;
  std::vector<std::string> endpoints;
  std::vector<std::string> named;
  std::vector<std::string> attributes;
  std::string form = "wrapped";
  std::string retry = "immediate";
  std::string ack_deadline = "10s";
  std::string min_backoff = "10s";
  std::string max_backoff = "600s";
  std::string run_timeout = "15m";
  std::uint64_t seed = 0;

  app.add_option("--endpoint", endpoints,
                 "push endpoint URL (repeatable: one subscription each, sub-1, sub-2, ...)");
  app.add_flag("--balance", o.balance,
               "the --endpoint URLs are instances behind one subscription (sub-1): each attempt "
               "goes to one at random, as a load balancer in front of Cloud Run instances");
  app.add_option("--subscription", named,
                 "NAME=URL: a named subscription and its push endpoint (repeatable)");
  app.add_option("--form", form, "wrapped | unwrapped | cloudevent (Eventarc, binary mode)")
      ->capture_default_str();
  auto* messages =
      app.add_option("--messages", o.messages, "messages to generate")->capture_default_str();
  app.add_option("--input", o.input,
                 "JSON-lines file of messages: {\"data\": text | \"data_base64\": b64, "
                 "\"attributes\": {...}, \"orderingKey\": ..., \"messageId\": optional}")
      ->excludes(messages);
  app.add_option("--attribute", attributes, "NAME=VALUE added to every message (repeatable)");
  app.add_option("--key-attribute", o.key_attribute,
                 "an attribute whose value is drawn from key-1 .. key-N (with --keys N)");
  app.add_option("--keys", o.keys, "how many values --key-attribute draws from");
  app.add_option("--ordering-keys", o.ordering_keys,
                 "give messages one of K ordering keys; per key one outstanding, in order (0: off)")
      ->capture_default_str();
  app.add_option("--ack-deadline", ack_deadline,
                 "the ack deadline, also the push request timeout: a request still open then is "
                 "closed and counted as a nack (10s-600s)")
      ->capture_default_str();
  app.add_option("--retry", retry,
                 "immediate (Pub/Sub's default: redelivered at once, behind the subscription's "
                 "push back-off, 100ms doubling per nack up to 60s, reset by an ack) | "
                 "exponential (from --min-backoff, doubling, up to --max-backoff)")
      ->capture_default_str();
  auto* min_backoff_option =
      app.add_option("--min-backoff", min_backoff, "first back-off after a nack (exponential only)")
          ->capture_default_str();
  auto* max_backoff_option =
      app.add_option("--max-backoff", max_backoff, "largest back-off (exponential only)")
          ->capture_default_str();
  app.add_option("--time-scale", o.time_scale,
                 "multiplies every back-off (the push back-off too) and the ack deadline (0.01: "
                 "100x faster)")
      ->capture_default_str();
  app.add_option("--max-delivery-attempts", o.max_delivery_attempts,
                 "dead-letter policy: after N attempts a message is dead-lettered (5-100; 0: no "
                 "policy, and no deliveryAttempt field)")
      ->capture_default_str();
  app.add_option("--dead-letter", o.dead_letter, "JSON-lines file for dead-lettered messages");
  app.add_option("--duplicate-rate", o.duplicate_rate,
                 "probability that a message is delivered once more (same messageId) after "
                 "its ack")
      ->capture_default_str();
  app.add_flag("--duplicate-concurrent", o.duplicate_concurrent,
               "send the --duplicate-rate copy at the same time as the first delivery instead "
               "of after the ack (unordered messages)");
  app.add_option("--republish-rate", o.republish_rate,
                 "probability that a message is published again with a new messageId")
      ->capture_default_str();
  app.add_option("--concurrency", o.concurrency, "outstanding requests per subscription")
      ->capture_default_str();
  app.add_option("--oidc-audience", o.oidc_audience,
                 "send an OIDC token (RS256, a key made for this run) for this audience");
  app.add_option("--oidc-email", o.oidc_email, "the token's service-account email")
      ->capture_default_str();
  app.add_option("--oidc-jwks-out", o.oidc_jwks_out,
                 "write the run's public key as a JWKS file for the verifier (e.g. the "
                 "gateway's --jwks)");
  auto* seed_option =
      app.add_option("--seed", seed, "seed for every random choice (default: a fresh one)");
  app.add_option("--project", o.project, "project in subscription and topic names")
      ->capture_default_str();
  app.add_option("--topic", o.topic, "topic name (CloudEvents ce-source)")->capture_default_str();
  app.add_flag("--json", o.json, "print the summary as one JSON object");
  app.add_option("--events", o.events,
                 "write one JSON line per delivery attempt to this file (for analysis)");
  app.add_option("--run-timeout", run_timeout,
                 "give up after this long (wall clock, not scaled); unsettled messages exit 1")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return OptionsExit{.code = 0, .text = app.help()};
  } catch (const CLI::ParseError& e) {
    return OptionsExit{.code = 2, .text = e.what()};
  }
  try {
    if (seed_option->count() > 0) o.seed = seed;
    const bool backoff_given = min_backoff_option->count() > 0 || max_backoff_option->count() > 0;
    return validate(std::move(o), endpoints, named, form, retry, ack_deadline, min_backoff,
                    max_backoff, run_timeout, attributes, backoff_given);
  } catch (const BadFlag& e) {
    return OptionsExit{.code = 2, .text = e.what()};
  }
}

}  // namespace idempotency::push_sim
