// How the crash storm delivers its messages: at least once, each at least `copies` times,
// spread at random over several push endpoints (the instances behind one push URL), retried
// after every nack until acked, `concurrency` requests at a time.
//
// Thread safety: deliver() may be called from any thread; it blocks until every message is
// acked or `give_up_after` passes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace idempotency::testing {

struct DeliveryPlan {
  std::vector<std::string> endpoints;  ///< http://127.0.0.1:PORT/push, one per instance.
  std::vector<std::string> message_ids;
  int concurrency = 32;
  int copies = 2;  ///< Every message is pushed this many times at least: duplicates.
  std::uint32_t seed = 1;
  std::chrono::milliseconds give_up_after{std::chrono::minutes(2)};
};

struct DeliveryReport {
  int messages = 0;
  int deliveries = 0;  ///< Requests sent.
  int acked = 0;       ///< Messages acked.
  int nacked = 0;      ///< Requests answered with a nack status or not answered at all.
  int min_deliveries_per_message = 0;
};

/// deliver() pushes every message of `plan` until each is acked (or the plan gives up).
[[nodiscard]] DeliveryReport deliver(const DeliveryPlan& plan);

}  // namespace idempotency::testing
