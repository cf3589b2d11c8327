// How the crash storm delivers its messages: through pubsub-push-sim, at least once, each at
// least twice (a duplicate after its ack), spread at random over several push endpoints (the
// instances behind one push URL: --balance), redelivered after every nack with back-off until
// acked, `concurrency` requests at a time.
//
// Thread safety: deliver() may be called from any thread; it blocks until the simulator ends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace idempotency::testing {

struct DeliveryPlan {
  std::string simulator;               ///< The pubsub-push-sim program.
  std::string work_dir;                ///< Where its input, events and output files go.
  std::vector<std::string> endpoints;  ///< http://127.0.0.1:PORT/push, one per instance.
  std::vector<std::string> message_ids;
  int concurrency = 32;
  std::uint32_t seed = 1;
};

struct DeliveryReport {
  int exit_code = -1;  ///< The simulator's: 0 when every message was acked.
  int messages = 0;
  int deliveries = 0;  ///< Requests sent.
  int acked = 0;       ///< Messages acked.
  int nacked = 0;      ///< Requests answered with a nack status or not answered in time.
  int min_deliveries_per_message = 0;
  std::string output;  ///< What the simulator printed, for a failure message.
};

/// deliver() pushes every message of `plan` until each is acked (or the simulator's
/// --run-timeout passes).
[[nodiscard]] DeliveryReport deliver(const DeliveryPlan& plan);

}  // namespace idempotency::testing
