#include "storm_analysis.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace idempotency::testing {
namespace {

std::string describe(const EffectRecord& e) {
  return e.sender + " fence " + std::to_string(e.fence) + " [" + std::to_string(e.arrived_ns) +
         ", " + std::to_string(e.answered_ns) + "]";
}

// Counts the calls for one key that were at the sink at the same time.
void check_overlaps(const std::string& key, std::vector<const EffectRecord*> calls,
                    StormVerdict& verdict) {
  std::sort(calls.begin(), calls.end(),
            [](const auto* a, const auto* b) { return a->arrived_ns < b->arrived_ns; });
  for (std::size_t i = 1; i < calls.size(); ++i) {
    if (calls[i]->arrived_ns < calls[i - 1]->answered_ns) {
      ++verdict.overlaps;
      verdict.problems.push_back("key " + key + ": " + describe(*calls[i - 1]) + " overlaps " +
                                 describe(*calls[i]));
    }
  }
}

// Each accepted effect after the first for a key is a duplicate: explained by a kill of the
// earlier effect's process before the later effect began.
void check_duplicates(const std::string& key, const std::vector<const EffectRecord*>& accepted,
                      const std::map<std::string, KillRecord>& kill_of, StormVerdict& verdict) {
  for (std::size_t i = 1; i < accepted.size(); ++i) {
    const EffectRecord& earlier = *accepted[i - 1];
    const EffectRecord& later = *accepted[i];
    ++verdict.duplicates;
    const auto kill = kill_of.find(earlier.sender);
    if (kill == kill_of.end() || kill->second.sent_ns > later.arrived_ns) {
      ++verdict.unexplained;
      verdict.problems.push_back("key " + key + ": " + describe(later) + " repeats " +
                                 describe(earlier) + ", whose process was not killed before it");
    } else if (kill->second.sent_ns >= earlier.answered_ns) {
      ++verdict.explained_after_answer;
    } else {
      ++verdict.explained_mid_call;
    }
  }
}

}  // namespace

std::vector<EffectRecord> parse_effects(const std::string& ndjson) {
  std::vector<EffectRecord> out;
  std::istringstream lines(ndjson);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    out.push_back({.key = j.at("key").get<std::string>(),
                   .fence = j.at("fence").get<std::int64_t>(),
                   .sender = j.at("sender").get<std::string>(),
                   .arrived_ns = j.at("arrived_ns").get<std::int64_t>(),
                   .answered_ns = j.at("answered_ns").get<std::int64_t>(),
                   .accepted = j.at("accepted").get<bool>()});
  }
  return out;
}

StormVerdict judge_storm(const std::vector<std::string>& message_ids,
                         const std::vector<EffectRecord>& effects,
                         const std::vector<KillRecord>& kills) {
  StormVerdict verdict;
  verdict.messages = static_cast<int>(message_ids.size());
  std::map<std::string, KillRecord> kill_of;  // an incarnation dies once
  for (const auto& k : kills) kill_of.emplace(k.incarnation, k);

  // Per key, in the sink's decision order.
  std::map<std::string, std::vector<const EffectRecord*>> calls;
  std::map<std::string, std::vector<const EffectRecord*>> accepted;
  for (const auto& e : effects) {
    calls[e.key].push_back(&e);
    if (e.accepted) {
      ++verdict.effects;
      accepted[e.key].push_back(&e);
    } else {
      ++verdict.refused;
    }
  }
  for (const auto& [key, list] : accepted) {
    for (std::size_t i = 1; i < list.size(); ++i) {
      if (list[i]->fence <= list[i - 1]->fence) {
        ++verdict.fence_order_violations;
        verdict.problems.push_back("key " + key + ": accepted " + describe(*list[i]) + " after " +
                                   describe(*list[i - 1]));
      }
    }
    check_duplicates(key, list, kill_of, verdict);
  }
  for (const auto& [key, list] : calls) check_overlaps(key, list, verdict);
  for (const auto& id : message_ids) {
    if (accepted.count(id) == 0) {
      ++verdict.lost;
      verdict.problems.push_back("message " + id + " has no accepted effect");
    }
  }
  return verdict;
}

}  // namespace idempotency::testing
