// The parameterized suites every backend runs: the contract (every row of the transition
// table and the seed's scenarios), the differential test against the pure function, and
// the concurrency test. tests/contract/instantiate.cc instantiates them per backend.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <iostream>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "idempotency/backend.h"
#include "idempotency/clock.h"
#include "idempotency/log.h"
#include "idempotency/reclaimer.h"
#include "support/backend_factory.h"

namespace idempotency::testing {

/// with_reclaimer() is `factory` run with a Reclaimer purging every millisecond: the
/// "<Name>Reclaimed" instantiation of the contract and differential suites, which shows that
/// purging never changes an answer.
inline BackendFactory with_reclaimer(BackendFactory factory) {
  factory.name += "Reclaimed";
  factory.reclaim_interval = std::chrono::milliseconds(1);
  return factory;
}

/// The suites' clock: a ManualClock whose every move (set or advance) then runs `on_move`.
class SuiteClock final : public Clock {
 public:
  [[nodiscard]] TimePoint now() const override { return clock_.now(); }
  void set(TimePoint t) {
    clock_.set(t);
    if (on_move) on_move();
  }
  void advance(std::chrono::milliseconds d) {
    clock_.advance(d);
    if (on_move) on_move();
  }
  /// Set before any backend is made; called on the thread that moved the clock.
  std::function<void()> on_move;

 private:
  ManualClock clock_;
};

/// A fresh backend on a manual clock, per test. Under `with_reclaimer`, every backend it makes
/// has a Reclaimer running hot beside it, and each clock move returns only once every such
/// reclaimer has completed a pass that started after the move: a record is then gone exactly
/// from its expires_at, as on a store that reaps at expiry, and the answers stay deterministic.
class BackendTest : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override {
    if (reclaimed()) {
      clock_->on_move = [this] { let_reclaimers_run(2); };
      // At a 1 ms interval most passes outlast the interval: purge_behind is expected here,
      // and would bury everything else on stderr. (A failed pass fails the test instead.)
      set_log_sink([](const LogRecord& r) {
        if (r.event != "purge_behind") std::cerr << format_json_line(r) + '\n';
      });
    }
    backend_ = make();
  }

  void TearDown() override {
    if (!reclaimed()) return;
    report_failed_passes();
    reclaimers_.clear();  // stops their threads, so that nothing logs through the sink below
    set_log_sink({});
  }

  std::shared_ptr<LockBackend> make(std::chrono::milliseconds ttl = kDefaultTtl) {
    std::shared_ptr<LockBackend> backend =
        GetParam().make(BackendOptions{.ttl = ttl, .clock = clock_});
    if (reclaimed()) reclaimers_.emplace_back(backend, GetParam().reclaim_interval);
    return backend;
  }

  /// reclaimed() is true when the backends run with a Reclaimer (the "…Reclaimed" suites).
  [[nodiscard]] bool reclaimed() const { return GetParam().reclaim_interval.count() > 0; }

  /// reaps_at_expiry() is true when a record is gone from its expires_at on: the store reaps it
  /// itself, or (reclaimed) a purge pass deleted it before the clock move returned.
  [[nodiscard]] bool reaps_at_expiry() const { return GetParam().reaps_at_expiry || reclaimed(); }

  /// reclaimer_purged() counts the records every reclaimer of this test deleted so far.
  [[nodiscard]] std::size_t reclaimer_purged() {
    std::size_t total = 0;
    for (auto& r : reclaimers_) {
      std::lock_guard lock(r.progress.mutex);
      total += r.progress.purged;
    }
    return total;
  }

  /// let_reclaimers_run() waits until every reclaimer has completed `passes` more passes (the
  /// first may have started before the call; the rest started after it). The wait is bounded
  /// as a hang guard, not a timing assertion; a failed pass fails the test. No-op unreclaimed.
  void let_reclaimers_run(std::size_t passes) {
    for (auto& r : reclaimers_) {
      std::unique_lock lock(r.progress.mutex);
      const std::size_t target = r.progress.passes + passes;
      if (!r.progress.changed.wait_for(lock, std::chrono::seconds(60),
                                       [&] { return r.progress.passes >= target; })) {
        ADD_FAILURE() << "a reclaimer completed fewer than " << passes << " passes in 60 s";
      }
    }
    report_failed_passes();
  }

  std::shared_ptr<SuiteClock> clock_ = std::make_shared<SuiteClock>();
  std::shared_ptr<LockBackend> backend_;

 private:
  // Fails the test once for each purge pass that failed since the last report: a pass that
  // races the suite's own calls must still succeed.
  void report_failed_passes() {
    for (auto& r : reclaimers_) {
      std::lock_guard lock(r.progress.mutex);
      for (const std::string& error : r.progress.errors) {
        ADD_FAILURE() << "a purge pass failed: " << error;
      }
      r.progress.errors.clear();
    }
  }

  // A Reclaimer and what its passes did, as reported by its on_pass.
  struct Reclaimed {
    struct Progress {
      std::mutex mutex;
      std::condition_variable changed;
      std::size_t passes = 0;
      std::size_t purged = 0;
      std::vector<std::string> errors;
    };
    Reclaimed(std::shared_ptr<LockBackend> backend, std::chrono::milliseconds interval)
        : reclaimer(std::move(backend),
                    {.interval = interval, .on_pass = [this](const PurgePass& p) {
                       {
                         std::lock_guard lock(progress.mutex);
                         ++progress.passes;
                         progress.purged += p.purged;
                         if (!p.error.empty()) progress.errors.push_back(p.error);
                       }
                       progress.changed.notify_all();
                     }}) {}
    Progress progress;  // declared first: outlives the reclaimer's thread
    Reclaimer reclaimer;
  };
  std::list<Reclaimed> reclaimers_;  // a list: a Reclaimed never moves once its thread runs
};

/// IDEMPOTENCY_INSTANTIATE(prefix, suite, factory) instantiates `suite` over the one backend
/// the BackendFactory expression `factory` describes, its tests named
/// "<prefix>/<suite>.<test>/<factory's name>". `prefix` may itself be a macro: it is expanded
/// before gtest's macro pastes it.
#define IDEMPOTENCY_INSTANTIATE(prefix, suite, factory)               \
  INSTANTIATE_TEST_SUITE_P(prefix, suite, ::testing::Values(factory), \
                           [](const auto& info) { return info.param.name; })

/// IDEMPOTENCY_INSTANTIATE_ALL(prefix, factory) instantiates the four shared suites (contract,
/// differential, concurrency, cross-instance) over one backend variant, e.g. a store reached
/// over TLS or through a pooler, where only the transport differs.
#define IDEMPOTENCY_INSTANTIATE_ALL(prefix, factory)         \
  IDEMPOTENCY_INSTANTIATE(prefix, BackendContract, factory); \
  IDEMPOTENCY_INSTANTIATE(prefix, Differential, factory);    \
  IDEMPOTENCY_INSTANTIATE(prefix, Concurrency, factory);     \
  IDEMPOTENCY_INSTANTIATE(prefix, CrossInstance, factory)

class BackendContract : public BackendTest {};
class Differential : public BackendTest {};
class Concurrency : public BackendTest {};

/// Two instances over one store, as two processes sharing it have.
class CrossInstance : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override {
    auto twins = GetParam().make_twins(BackendOptions{.clock = clock_});
    a_ = std::move(twins.first);
    b_ = std::move(twins.second);
  }
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::unique_ptr<LockBackend> a_;
  std::unique_ptr<LockBackend> b_;
};

}  // namespace idempotency::testing
