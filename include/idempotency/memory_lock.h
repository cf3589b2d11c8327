// InMemoryLock: the in-process backend, for tests, local development and single-process use.
//
// It is a first-class implementation of the port (not a mock): the same transition
// function, lazy expiry on every read, expired records reclaimed a few at a time by every
// write that adds one, and the same contract suite as every other backend.
// It is not shared between processes and does not survive a restart.
//
// Thread safety: safe from any number of threads; keys are sharded so threads working on
// different keys rarely contend.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "idempotency/backend.h"
#include "idempotency/record.h"

namespace idempotency {

/// InMemoryLock keeps records packed in sharded open-addressing tables (~130 bytes each plus
/// the key), hashed with SipHash keyed at random per store.
class InMemoryLock final : public LockBackend {
 public:
  /// InMemoryLock() builds an empty store. Throws `std::invalid_argument` for a bad ttl.
  explicit InMemoryLock(BackendOptions options = {});
  ~InMemoryLock() override;

  /// entry_count() returns how many records exist, after dropping the expired ones.
  [[nodiscard]] std::size_t entry_count();

  /// stored_count() returns how many records are held, expired ones not yet reclaimed
  /// included: what the store costs in memory. Every write that adds a record reclaims a few
  /// expired ones, so it stays within about twice the live records without `purge_expired()`.
  [[nodiscard]] std::size_t stored_count() const;

 protected:
  ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
                       const ClaimRequest& request) override;
  bool do_complete(const Claim& claim, std::optional<std::string> result) override;
  void do_release(const Claim& claim) override;
  std::optional<TimePoint> do_extend(const Claim& claim, std::chrono::milliseconds lease) override;
  std::size_t do_purge_expired() override;
  std::optional<Record> do_inspect(std::string_view key) override;
  std::optional<std::size_t> do_stored_records() override { return stored_count(); }
  // Every call is a short critical section in this process: an event loop may make it inline.
  [[nodiscard]] bool do_may_block() const noexcept override { return false; }

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace idempotency
