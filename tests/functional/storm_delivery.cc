// Interim: a minimal in-process push delivery, until the push simulator can spread one
// subscription over several endpoints.
#include "storm_delivery.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "gateway/gateway_client.h"

namespace idempotency::testing {
namespace {

bool is_ack(int status) {
  return status == 102 || status == 200 || status == 201 || status == 202 || status == 204;
}

}  // namespace

DeliveryReport deliver(const DeliveryPlan& plan) {
  using Clock = std::chrono::steady_clock;
  struct Pending {
    std::size_t message;
    Clock::time_point not_before;
  };
  std::mutex mutex;
  std::deque<Pending> queue;
  std::vector<int> sent(plan.message_ids.size(), 0);
  std::vector<bool> acked(plan.message_ids.size(), false);
  int open_streams = 0;
  DeliveryReport report{.messages = static_cast<int>(plan.message_ids.size())};
  for (int copy = 0; copy < plan.copies; ++copy) {
    for (std::size_t m = 0; m < plan.message_ids.size(); ++m) {
      queue.push_back({m, Clock::now()});
      ++open_streams;
    }
  }
  const auto deadline = Clock::now() + plan.give_up_after;
  std::vector<std::thread> workers;
  for (int w = 0; w < plan.concurrency; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 random(plan.seed + static_cast<std::uint32_t>(w));
      std::uniform_int_distribution<std::size_t> endpoint(0, plan.endpoints.size() - 1);
      std::uniform_int_distribution<int> backoff_ms(50, 250);
      for (;;) {
        Pending next{};
        {
          std::lock_guard lock(mutex);
          if (open_streams == 0 || Clock::now() > deadline) return;
          if (queue.empty() || queue.front().not_before > Clock::now()) {
            next.message = plan.message_ids.size();  // nothing due yet
          } else {
            next = queue.front();
            queue.pop_front();
          }
        }
        if (next.message == plan.message_ids.size()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
        const std::string& url = plan.endpoints[endpoint(random)];
        const auto port_at = url.rfind(':');
        const int port = std::stoi(url.substr(port_at + 1));
        const int status = post(port, envelope(plan.message_ids[next.message]));
        std::lock_guard lock(mutex);
        ++report.deliveries;
        ++sent[next.message];
        if (is_ack(status)) {
          acked[next.message] = true;
          --open_streams;
        } else {
          ++report.nacked;
          queue.push_back(
              {next.message, Clock::now() + std::chrono::milliseconds(backoff_ms(random))});
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  report.acked = static_cast<int>(std::count(acked.begin(), acked.end(), true));
  report.min_deliveries_per_message =
      sent.empty() ? 0 : *std::min_element(sent.begin(), sent.end());
  return report;
}

}  // namespace idempotency::testing
