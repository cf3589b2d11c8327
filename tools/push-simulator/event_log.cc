#include "event_log.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace idempotency::push_sim {

EventLog::EventLog(const std::string& path) {
  if (path.empty()) return;
  out_.emplace(path, std::ios::trunc);
  if (!*out_) throw std::runtime_error("--events: cannot open '" + path + "' for writing");
}

void EventLog::write(const AttemptEvent& e) {
  if (!out_) return;
  nlohmann::json line{{"subscription", e.subscription},
                      {"messageId", e.message_id},
                      {"attempt", e.attempt},
                      {"duplicate", e.duplicate},
                      {"start_ms", e.start_ms},
                      {"end_ms", e.end_ms},
                      {"acked", e.acked},
                      {"deadline_expired", e.deadline_expired},
                      {"late", e.late},
                      {"after_dead_letter", e.after_dead_letter},
                      {"abandoned", e.abandoned}};
  if (!e.ordering_key.empty()) line["orderingKey"] = e.ordering_key;
  if (e.status) {
    line["status"] = *e.status;
  } else {
    line["status"] = nullptr;
    line["error"] = e.error;
  }
  *out_ << line.dump() << '\n' << std::flush;
}

}  // namespace idempotency::push_sim
