// The run's counters and their two renderings: text for people, one JSON object for scripts.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace idempotency::push_sim {

/// Stats counts a run. A "message" below is one message on one subscription.
struct Stats {
  std::uint64_t seed = 0;
  std::uint64_t subscriptions = 0;
  std::uint64_t published = 0;         ///< Messages published, republished copies included.
  std::uint64_t republished = 0;       ///< Copies with a new messageId (--republish-rate).
  std::uint64_t deliveries = 0;        ///< Requests sent (attempts).
  std::uint64_t duplicates = 0;        ///< Extra deliveries of one messageId (--duplicate-rate).
  std::uint64_t acked = 0;             ///< Messages acked (never also dead-lettered).
  std::uint64_t nacked = 0;            ///< Attempts answered with a non-ack status or failed.
  std::uint64_t deadline_expired = 0;  ///< Attempts unanswered within the ack deadline.
  std::uint64_t late_answers = 0;      ///< Answers that came after their deadline.
  std::uint64_t dead_lettered = 0;     ///< Messages dead-lettered.
  /// Ack answers for a message already dead-lettered (another copy spent its attempts while
  /// this one ran): Pub/Sub had forwarded it, so the ack settles nothing; not in `acked`.
  std::uint64_t acked_after_dead_letter = 0;
  std::uint64_t unsettled = 0;                   ///< Messages neither acked nor dead-lettered.
  std::map<std::string, std::uint64_t> answers;  ///< Per status ("200") or "error".
  std::vector<double> ack_latency_ms;            ///< Publish to first ack, per acked message.
  double elapsed_ms = 0;
  bool timed_out = false;  ///< --run-timeout ended the run.
};

/// percentile() is the p-th percentile (0..100, nearest rank) of `values`; 0 when empty.
[[nodiscard]] double percentile(std::vector<double> values, double p);

/// summary_text() is the summary for people, several lines.
[[nodiscard]] std::string summary_text(const Stats& stats);

/// summary_json() is the summary as one JSON object (the same numbers, snake_case names).
[[nodiscard]] nlohmann::json summary_json(const Stats& stats);

}  // namespace idempotency::push_sim
