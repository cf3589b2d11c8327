// The parameterized suites every backend runs: the contract (every row of the transition
// table and the seed's scenarios), the differential test against the pure function, and
// the concurrency test. tests/contract/instantiate.cc instantiates them per backend.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "idempotency/backend.h"
#include "idempotency/clock.h"
#include "support/backend_factory.h"

namespace idempotency::testing {

/// A fresh backend on a manual clock, per test.
class BackendTest : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override { backend_ = make(); }

  std::unique_ptr<LockBackend> make(std::chrono::milliseconds ttl = kDefaultTtl) {
    return GetParam().make(BackendOptions{.ttl = ttl, .clock = clock_});
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::unique_ptr<LockBackend> backend_;
};

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
