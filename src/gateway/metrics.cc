#include "metrics.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace idempotency::gateway {
namespace {

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.9g", v);
  return buffer;
}

std::string with_label(const std::string& labels, const std::string& extra) {
  return "{" + labels + (labels.empty() ? "" : ",") + extra + "}";
}

}  // namespace

void Histogram::observe(std::chrono::steady_clock::duration d) {
  const double seconds = std::chrono::duration<double>(d).count();
  std::size_t bucket = 0;
  while (bucket < kBuckets.size() && seconds > kBuckets[bucket]) ++bucket;
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  sum_ns_.fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(ns, 0)),
                    std::memory_order_relaxed);
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  // One read of each counter, so the buckets, +Inf and _count agree within a scrape.
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < kBuckets.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    out += name + "_bucket" + with_label(labels, "le=\"" + number(kBuckets[i]) + "\"") + " " +
           std::to_string(cumulative) + "\n";
  }
  cumulative += counts_[kBuckets.size()].load(std::memory_order_relaxed);
  out += name + "_bucket" + with_label(labels, "le=\"+Inf\"") + " " + std::to_string(cumulative) +
         "\n";
  const std::string plain = labels.empty() ? "" : "{" + labels + "}";
  const double sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  out += name + "_sum" + plain + " " + number(sum) + "\n";
  out += name + "_count" + plain + " " + std::to_string(cumulative) + "\n";
}

Metrics::Metrics() {
  // Every outcome is exported from the start, so a rate() over it never sees a gap.
  for (std::size_t i = 0; i < outcomes_.size(); ++i) outcomes_[i].name = outcome::kAll[i];
  for (auto op : {"claim", "complete", "release"}) backend_errors_.try_emplace(op);
}

void Metrics::count(std::string_view outcome) {
  // A name that is none of the outcomes is "error", the last.
  for (auto& counter : outcomes_) {
    if (counter.name == outcome) {
      counter.count.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  outcomes_.back().count.fetch_add(1, std::memory_order_relaxed);
}

Histogram& Metrics::backend_latency(std::string_view operation) {
  if (operation == "claim") return claim_latency_;
  if (operation == "complete") return complete_latency_;
  return release_latency_;
}

void Metrics::backend_error(std::string_view operation) {
  // MeteredBackend names only the three operations the map holds from the start.
  if (auto it = backend_errors_.find(operation); it != backend_errors_.end()) {
    it->second.fetch_add(1, std::memory_order_relaxed);
  }
}

void Metrics::purge_pass(const PurgePass& pass) {
  std::lock_guard lock(mutex_);
  ++purge_passes_;
  if (!pass.error.empty()) ++purge_failures_;
  purged_records_ += pass.purged;
  last_purge_seconds_ = std::chrono::duration<double>(pass.took).count();
  if (pass.stored) stored_records_ = pass.stored;
}

std::string Metrics::render() const {
  std::string out;
  {
    std::lock_guard lock(mutex_);
    out +=
        "# HELP idempotency_gateway_requests_total Requests answered, by outcome.\n"
        "# TYPE idempotency_gateway_requests_total counter\n";
    std::array<const OutcomeCounter*, outcome::kAll.size()> by_name{};
    std::transform(outcomes_.begin(), outcomes_.end(), by_name.begin(),
                   [](const OutcomeCounter& c) { return &c; });
    std::sort(by_name.begin(), by_name.end(),
              [](const OutcomeCounter* a, const OutcomeCounter* b) { return a->name < b->name; });
    for (const OutcomeCounter* counter : by_name) {
      out += "idempotency_gateway_requests_total{outcome=\"" + std::string(counter->name) + "\"} " +
             std::to_string(counter->count.load(std::memory_order_relaxed)) + "\n";
    }
    out +=
        "# HELP idempotency_gateway_backend_errors_total Backend calls that failed, by "
        "operation.\n"
        "# TYPE idempotency_gateway_backend_errors_total counter\n";
    for (const auto& [name, value] : backend_errors_) {
      out += "idempotency_gateway_backend_errors_total{operation=\"" + name + "\"} " +
             std::to_string(value.load(std::memory_order_relaxed)) + "\n";
    }
    out +=
        "# HELP idempotency_gateway_purge_passes_total Background purge passes run.\n"
        "# TYPE idempotency_gateway_purge_passes_total counter\n"
        "idempotency_gateway_purge_passes_total " +
        std::to_string(purge_passes_) +
        "\n"
        "# HELP idempotency_gateway_purge_failures_total Background purge passes that failed.\n"
        "# TYPE idempotency_gateway_purge_failures_total counter\n"
        "idempotency_gateway_purge_failures_total " +
        std::to_string(purge_failures_) +
        "\n"
        "# HELP idempotency_gateway_purged_records_total Expired records deleted.\n"
        "# TYPE idempotency_gateway_purged_records_total counter\n"
        "idempotency_gateway_purged_records_total " +
        std::to_string(purged_records_) +
        "\n"
        "# HELP idempotency_gateway_purge_last_duration_seconds How long the last purge pass "
        "took.\n"
        "# TYPE idempotency_gateway_purge_last_duration_seconds gauge\n"
        "idempotency_gateway_purge_last_duration_seconds " +
        std::to_string(last_purge_seconds_) + "\n";
    if (stored_records_) {
      out +=
          "# HELP idempotency_gateway_stored_records Records the store held after the last "
          "purge pass (memory and SQLite only).\n"
          "# TYPE idempotency_gateway_stored_records gauge\n"
          "idempotency_gateway_stored_records " +
          std::to_string(*stored_records_) + "\n";
    }
  }
  out +=
      "# HELP idempotency_gateway_request_duration_seconds Time to answer a request.\n"
      "# TYPE idempotency_gateway_request_duration_seconds histogram\n";
  request_latency_.render(out, "idempotency_gateway_request_duration_seconds", "");
  out +=
      "# HELP idempotency_gateway_upstream_duration_seconds One exchange with the upstream.\n"
      "# TYPE idempotency_gateway_upstream_duration_seconds histogram\n";
  upstream_latency_.render(out, "idempotency_gateway_upstream_duration_seconds", "");
  out +=
      "# HELP idempotency_gateway_backend_duration_seconds One backend call, by operation.\n"
      "# TYPE idempotency_gateway_backend_duration_seconds histogram\n";
  const std::string name = "idempotency_gateway_backend_duration_seconds";
  claim_latency_.render(out, name, "operation=\"claim\"");
  complete_latency_.render(out, name, "operation=\"complete\"");
  release_latency_.render(out, name, "operation=\"release\"");
  return out;
}

}  // namespace idempotency::gateway
