// The crash storm: four processes on one backend (four gateways in front of the sink, or four
// cloud_run_worker instances calling it), a short lease, every message pushed at least twice at
// high concurrency over all four (through pubsub-push-sim --balance), while a chaos loop SIGKILLs
// one of them every 0.5-1 s and restarts it on its port. The sink (effect_sink) records every
// effect with its fence and sender and refuses stale fences. At the end: every message acked, none
// lost, no two calls for one key at the sink at once, accepted fences rising per key, and every
// repeated effect explained by a kill inside the documented crash window (storm_analysis.h).
//
// Every assertion is an invariant of the run; none is about how long anything took. The run
// goes on in waves of messages until the chaos loop has killed enough processes, at most one
// wave per 600 ms: a slower machine still sees every kill, a faster one sends no more messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "chaos_loop.h"
#include "gateway/gateway_client.h"
#include "process_fleet.h"
#include "storm_analysis.h"
#include "storm_delivery.h"
#include "support/child_process.h"
#include "support/temp_dir.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

constexpr int kProcesses = 4;
// A kill every 0.5-1 s: the brief's 1-2 s scaled down, so that several kills land in a run of a
// thousand-odd messages per storm.
constexpr auto kMinPause = std::chrono::milliseconds(500);
constexpr auto kMaxPause = std::chrono::milliseconds(1000);
constexpr int kMinKills = 6;
// Waves of messages go on until the chaos loop has made its kills, at most one wave per
// kWavePeriod: a faster machine does not send more messages, only quicker ones.
constexpr int kWaveMessages = 200;
constexpr auto kWavePeriod = std::chrono::milliseconds(600);
constexpr int kMaxWaves = 100;  // a hang guard, far above what kMinKills needs
constexpr auto kLease = "1s";
constexpr int kLeaseMs = 1000;

using StormParam = std::tuple<std::string, std::string>;  // backend, fleet

class CrashStorm : public ::testing::TestWithParam<StormParam> {
 protected:
  void SetUp() override {
    const auto& backend = std::get<0>(GetParam());
    if (backend == "sqlite") {
      backend_url_ = "sqlite://" + dir_.file("idem.db");
    } else if (backend == "redis") {
      backend_url_ = redis_url();
    } else {
      backend_url_ = postgres_url();
    }
    if (backend_url_.empty()) {
      // NOLINTNEXTLINE(concurrency-mt-unsafe): read before any thread starts
      if (std::getenv("CI") != nullptr) GTEST_FAIL() << "CI is set but no " << backend << " server";
      GTEST_SKIP() << "no " << backend << " test server";
    }
    sink_ =
        std::make_unique<ChildProcess>(STORM_SINK_PATH, std::vector<std::string>{"--work-ms", "10"},
                                       std::vector<std::pair<std::string, std::string>>{});
  }

  [[nodiscard]] std::string effect_url(const std::string& incarnation) const {
    return "http://127.0.0.1:" + std::to_string(sink_->port()) + "/effect/" + incarnation;
  }

  // One gateway: its upstream is the sink, under a path naming this incarnation.
  std::unique_ptr<ChildProcess> start_gateway(int port, const std::string& incarnation,
                                              const std::string& log) const {
    return std::make_unique<ChildProcess>(
        STORM_GATEWAY_PATH,
        std::vector<std::string>{"--listen", "127.0.0.1:" + std::to_string(port), "--upstream",
                                 effect_url(incarnation), "--backend", backend_url_, "--key-prefix",
                                 prefix_, "--lease", kLease},
        std::vector<std::pair<std::string, std::string>>{}, log);
  }

  // One cloud_run_worker: its supplier is the sink, under a path naming this incarnation.
  std::unique_ptr<ChildProcess> start_worker(int port, const std::string& incarnation,
                                             const std::string& log) const {
    return std::make_unique<ChildProcess>(
        STORM_WORKER_PATH, std::vector<std::string>{},
        std::vector<std::pair<std::string, std::string>>{{"HOST", "127.0.0.1"},
                                                         {"PORT", std::to_string(port)},
                                                         {"IDEMPOTENCY_BACKEND", backend_url_},
                                                         {"SUPPLIER_URL", effect_url(incarnation)},
                                                         {"LEASE_MS", std::to_string(kLeaseMs)}},
        log);
  }

  TempDir dir_;
  std::string backend_url_;
  std::string prefix_ = unique_name("storm") + ":";
  std::unique_ptr<ChildProcess> sink_;
};

TEST_P(CrashStorm, EveryMessageIsAckedAndEveryRepeatedEffectIsExplainedByAKill) {
  const auto& [backend, fleet_kind] = GetParam();
  const bool gateways = fleet_kind == "gateways";
  ProcessFleet fleet(kProcesses, dir_.path().string(),
                     [&](int port, const std::string& incarnation, const std::string& log) {
                       return gateways ? start_gateway(port, incarnation, log)
                                       : start_worker(port, incarnation, log);
                     });
  std::vector<std::string> endpoints;
  for (int slot = 0; slot < fleet.size(); ++slot) {
    endpoints.push_back("http://127.0.0.1:" + std::to_string(fleet.port(slot)) + "/push");
  }

  const std::uint32_t seed = std::random_device{}();
  std::vector<std::string> message_ids;
  DeliveryReport total;
  total.min_deliveries_per_message = -1;
  {
    ChaosLoop chaos(fleet, kMinPause, kMaxPause, seed);
    for (int wave = 0; wave < kMaxWaves && (wave == 0 || chaos.kills() < kMinKills); ++wave) {
      const auto wave_start = std::chrono::steady_clock::now();
      DeliveryPlan plan{.simulator = STORM_SIMULATOR_PATH,
                        .work_dir = dir_.path().string(),
                        .endpoints = endpoints,
                        .seed = seed + static_cast<std::uint32_t>(wave)};
      for (int n = 0; n < kWaveMessages; ++n) {
        plan.message_ids.push_back(prefix_ + "w" + std::to_string(wave) + "-m" + std::to_string(n));
      }
      const DeliveryReport report = deliver(plan);
      message_ids.insert(message_ids.end(), plan.message_ids.begin(), plan.message_ids.end());
      total.messages += report.messages;
      total.deliveries += report.deliveries;
      total.acked += report.acked;
      total.nacked += report.nacked;
      total.min_deliveries_per_message =
          total.min_deliveries_per_message < 0
              ? report.min_deliveries_per_message
              : std::min(total.min_deliveries_per_message, report.min_deliveries_per_message);
      ASSERT_EQ(report.exit_code, 0) << "wave " << wave << ":\n" << report.output;
      ASSERT_EQ(report.acked, report.messages) << "wave " << wave << ":\n" << report.output;
      ASSERT_EQ(chaos.failure(), "");
      std::this_thread::sleep_until(wave_start + kWavePeriod);
    }
    chaos.stop();
    ASSERT_EQ(chaos.failure(), "");
  }

  const auto kills = fleet.kills();
  const auto effects = parse_effects(send(sink_->port(), "GET", "/effects").body);
  const StormVerdict verdict = judge_storm(message_ids, effects, kills);
  std::printf(
      "[ storm ] %s %s (seed %u): messages=%d deliveries=%d nacked=%d acked=%d kills=%zu "
      "effects=%d duplicates=%d (explained %d: %d after the sink's answer, %d mid-call; "
      "unexplained %d) lost=%d overlaps=%d refused_stale_fences=%d fence_order_violations=%d\n",
      backend.c_str(), fleet_kind.c_str(), seed, total.messages, total.deliveries, total.nacked,
      total.acked, kills.size(), verdict.effects, verdict.duplicates,
      verdict.explained_after_answer + verdict.explained_mid_call, verdict.explained_after_answer,
      verdict.explained_mid_call, verdict.unexplained, verdict.lost, verdict.overlaps,
      verdict.refused, verdict.fence_order_violations);
  std::fflush(stdout);

  EXPECT_EQ(total.acked, total.messages);
  EXPECT_GE(total.min_deliveries_per_message, 2) << "every message is delivered at least twice";
  EXPECT_GE(static_cast<int>(kills.size()), kMinKills);
  EXPECT_EQ(verdict.lost, 0);
  EXPECT_EQ(verdict.overlaps, 0);
  EXPECT_EQ(verdict.unexplained, 0);
  EXPECT_EQ(verdict.fence_order_violations, 0);
  for (const auto& problem : verdict.problems) ADD_FAILURE() << problem;
}

INSTANTIATE_TEST_SUITE_P(Backends, CrashStorm,
                         ::testing::Combine(::testing::Values("sqlite", "redis", "postgres"),
                                            ::testing::Values("gateways", "workers")),
                         [](const ::testing::TestParamInfo<StormParam>& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace idempotency::testing
