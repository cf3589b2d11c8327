// Metrics: the gateway's counters and latency histograms, rendered in the Prometheus text
// exposition format (version 0.0.4) for GET /metrics.
//
// Labels are a fixed, small set (outcomes, backend operations): never a key, path or header.
//
// Thread safety: every member function may be called from any number of threads at once.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "idempotency/pubsub/outcome.h"
#include "idempotency/reclaimer.h"

namespace idempotency::gateway {

/// The outcomes counted in `idempotency_gateway_requests_total{outcome=...}`, by both modes.
/// Where a mode's outcome means what one of the library's `pubsub::DeliveryOutcome`s means, the
/// label is the library's name for it, so the vocabulary cannot drift apart.
namespace outcome {
/// Forwarded and the upstream answered 2xx.
inline constexpr std::string_view kHandled = pubsub::to_string(pubsub::DeliveryOutcome::kHandled);
/// Shared the response of a delivery running on this instance (pubsub mode).
inline constexpr std::string_view kJoined = pubsub::to_string(pubsub::DeliveryOutcome::kJoined);
/// Done before, nothing stored to replay: 204.
inline constexpr std::string_view kDuplicate =
    pubsub::to_string(pubsub::DeliveryOutcome::kDuplicate);
/// Done before: the stored response sent again.
inline constexpr std::string_view kReplayed = pubsub::to_string(pubsub::DeliveryOutcome::kReplayed);
/// Held by another instance: 503 with Retry-After (pubsub mode).
inline constexpr std::string_view kContention =
    pubsub::to_string(pubsub::DeliveryOutcome::kContention);
inline constexpr std::string_view kConflict = "conflict";              ///< in flight: 409
inline constexpr std::string_view kMismatch = "fingerprint_mismatch";  ///< key reuse: 422
/// The upstream said it failed (non-2xx): released at once.
inline constexpr std::string_view kNackUpstream = "nack_upstream";
/// The upstream provably did not act (refused, never sent): released at once.
inline constexpr std::string_view kNackUnreachable = "nack_upstream_unreachable";
/// Sent, then no answer (timeout, reset): may still be acting, so held until the lease lapses.
inline constexpr std::string_view kNackNoAnswer = "nack_upstream_no_answer";
inline constexpr std::string_view kBackendError = "backend_error";  ///< store
inline constexpr std::string_view kBadRequest = "bad_request";      ///< malformed, no key
inline constexpr std::string_view kUnauthorized = "unauthorized";   ///< OIDC refused
inline constexpr std::string_view kPassthrough = "passthrough";     ///< not deduplicated
inline constexpr std::string_view kError = "error";                 ///< anything else
/// Every outcome, the commonest first (the order Metrics::count() tries them) and kError, where
/// a name that is none of them is counted, last.
inline constexpr std::array kAll = {kHandled,         kJoined,       kDuplicate,    kReplayed,
                                    kContention,      kConflict,     kMismatch,     kNackUpstream,
                                    kNackUnreachable, kNackNoAnswer, kBackendError, kBadRequest,
                                    kUnauthorized,    kPassthrough,  kError};
}  // namespace outcome

/// Histogram counts observations into fixed latency buckets (seconds). Lock-free: every
/// request observes several, from every worker at once.
class Histogram {
 public:
  static constexpr std::array<double, 12> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                      0.1,   0.25,   0.5,   1,    2.5,   10};
  /// observe() records one duration.
  void observe(std::chrono::steady_clock::duration d);
  /// render() appends the `_bucket`, `_sum` and `_count` lines for `name{labels}`.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  // Per bucket, not cumulative; the last one counts what is over the largest bound.
  std::array<std::atomic<std::uint64_t>, kBuckets.size() + 1> counts_{};
  std::atomic<std::uint64_t> sum_ns_{0};
};

/// Metrics is the gateway's registry.
class Metrics {
 public:
  Metrics();
  /// count() adds one request with `outcome` (one of `outcome::k*`; anything else counts as
  /// `error`).
  void count(std::string_view outcome);
  /// request_latency() is the time from receiving a request to answering it (health checks
  /// and /metrics excluded).
  Histogram& request_latency() { return request_latency_; }
  /// upstream_latency() is one exchange with the upstream, success or not.
  Histogram& upstream_latency() { return upstream_latency_; }
  /// backend_latency() is one backend call: "claim", "complete" or "release".
  Histogram& backend_latency(std::string_view operation);
  /// backend_error() counts a backend call ("claim", "complete" or "release") that threw.
  void backend_error(std::string_view operation);
  /// purge_pass() records one background purge pass (`idem::Reclaimer`).
  void purge_pass(const PurgePass& pass);
  /// render() returns the whole exposition.
  [[nodiscard]] std::string render() const;

 private:
  mutable std::mutex mutex_;
  // Every known outcome and operation is in these from the start, and they never change shape
  // after construction, so counting is a lookup and an atomic add with no lock.
  struct OutcomeCounter {
    std::string_view name;
    std::atomic<std::uint64_t> count{0};
  };
  // In outcome::kAll's order: count() scans them (a length compared, then the text), which costs
  // a request less than a map's string comparisons down its tree; render() sorts them by name.
  std::array<OutcomeCounter, outcome::kAll.size()> outcomes_;
  std::map<std::string, std::atomic<std::uint64_t>, std::less<>> backend_errors_;
  std::uint64_t purge_passes_ = 0;             // guarded by mutex_
  std::uint64_t purge_failures_ = 0;           // guarded by mutex_
  std::uint64_t purged_records_ = 0;           // guarded by mutex_
  double last_purge_seconds_ = 0;              // guarded by mutex_
  std::optional<std::size_t> stored_records_;  // guarded by mutex_
  Histogram request_latency_;
  Histogram upstream_latency_;
  Histogram claim_latency_;
  Histogram complete_latency_;
  Histogram release_latency_;
};

}  // namespace idempotency::gateway
