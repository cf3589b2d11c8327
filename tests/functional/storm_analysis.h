// What a crash storm proves, computed from what the sink recorded and when processes were
// killed: no message lost, no two calls for one key at once, fences rising at the sink, and
// every repeated effect explained by a kill inside the documented window.
//
// The window: a process that dies after its effect and before `complete` leaves the key
// claimed; once its lease lapses, a redelivery runs the work again with fence + 1 (README,
// "Exactly-once outcome across a crash"). A repeated effect is explained when the process that
// made the earlier one was killed before the later one began. It is counted as "after the
// answer" when the kill came after the sink had answered that earlier call (the window between
// the upstream's answer and `complete`), and as "mid-call" when the process died while its
// call was still at the sink, which the sink performs all the same.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "process_fleet.h"

namespace idempotency::testing {

/// One call the sink received, as it recorded it.
struct EffectRecord {
  std::string key;
  std::int64_t fence = 0;
  std::string sender;  ///< The incarnation that sent it.
  std::int64_t arrived_ns = 0;
  std::int64_t answered_ns = 0;
  bool accepted = false;  ///< false: refused as a stale fence (409).
};

/// parse_effects() reads the sink's GET /effects answer (one JSON object per line).
[[nodiscard]] std::vector<EffectRecord> parse_effects(const std::string& ndjson);

/// StormVerdict counts what a storm did and what went wrong; `problems` describes each defect.
struct StormVerdict {
  int messages = 0;
  int effects = 0;  ///< Accepted effects.
  int refused = 0;  ///< Calls refused for a stale fence.
  int duplicates = 0;
  int explained_after_answer = 0;
  int explained_mid_call = 0;
  int unexplained = 0;
  int lost = 0;      ///< Messages without an accepted effect.
  int overlaps = 0;  ///< Pairs of calls for one key that were at the sink at once.
  int fence_order_violations = 0;
  std::vector<std::string> problems;
};

/// judge_storm() checks the sink's `effects` (in the order the sink decided them) for the
/// messages `message_ids` against the `kills` made during the run.
[[nodiscard]] StormVerdict judge_storm(const std::vector<std::string>& message_ids,
                                       const std::vector<EffectRecord>& effects,
                                       const std::vector<KillRecord>& kills);

}  // namespace idempotency::testing
