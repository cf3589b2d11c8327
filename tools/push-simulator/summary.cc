#include "summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace idempotency::push_sim {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank =
      static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  return values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
}

nlohmann::json summary_json(const Stats& s) {
  return {{"seed", s.seed},
          {"subscriptions", s.subscriptions},
          {"published", s.published},
          {"republished", s.republished},
          {"delivered", s.deliveries},
          {"duplicates", s.duplicates},
          {"acked", s.acked},
          {"nacked", s.nacked},
          {"deadline_expired", s.deadline_expired},
          {"late_answers", s.late_answers},
          {"dead_lettered", s.dead_lettered},
          {"acked_after_dead_letter", s.acked_after_dead_letter},
          {"unsettled", s.unsettled},
          {"answers", s.answers},
          {"latency_ms",
           {{"p50", percentile(s.ack_latency_ms, 50)}, {"p99", percentile(s.ack_latency_ms, 99)}}},
          {"elapsed_ms", s.elapsed_ms},
          {"timed_out", s.timed_out}};
}

std::string summary_text(const Stats& s) {
  std::string answers;
  for (const auto& [what, n] : s.answers) {
    answers += (answers.empty() ? "" : ", ") + what + " x" + std::to_string(n);
  }
  char text[1024];
  std::snprintf(
      text, sizeof text,
      "pubsub-push-sim summary (seed %llu)\n"
      "  published          %llu (%llu republished), to %llu subscription(s)\n"
      "  delivered          %llu attempts (%llu duplicates)\n"
      "  acked              %llu\n"
      "  nacked             %llu attempts\n"
      "  deadline-expired   %llu attempts (%llu late answers)\n"
      "  dead-lettered      %llu (%llu later acks ignored)\n"
      "  unsettled          %llu%s\n"
      "  publish->ack       p50 %.1f ms, p99 %.1f ms\n"
      "  elapsed            %.1f ms\n",
      static_cast<unsigned long long>(s.seed), static_cast<unsigned long long>(s.published),
      static_cast<unsigned long long>(s.republished),
      static_cast<unsigned long long>(s.subscriptions),
      static_cast<unsigned long long>(s.deliveries), static_cast<unsigned long long>(s.duplicates),
      static_cast<unsigned long long>(s.acked), static_cast<unsigned long long>(s.nacked),
      static_cast<unsigned long long>(s.deadline_expired),
      static_cast<unsigned long long>(s.late_answers),
      static_cast<unsigned long long>(s.dead_lettered),
      static_cast<unsigned long long>(s.acked_after_dead_letter),
      static_cast<unsigned long long>(s.unsettled), s.timed_out ? " (--run-timeout passed)" : "",
      percentile(s.ack_latency_ms, 50), percentile(s.ack_latency_ms, 99), s.elapsed_ms);
  return text + ("  answers            " + (answers.empty() ? "none" : answers) + "\n");
}

}  // namespace idempotency::push_sim
