// FaultyBackend: wraps any backend and injects faults, as leveldb's SpecialEnv wraps Env.
// Flags are atomics so a test may flip them while other threads run.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "idempotency/errors.h"
#include "idempotency/forwarding_backend.h"

namespace idempotency::testing {

class FaultyBackend final : public ForwardingBackend {
 public:
  explicit FaultyBackend(LockBackend& inner) : ForwardingBackend(inner) {}

  /// complete() throws StoreError (after doing nothing) while set.
  std::atomic<bool> fail_complete{false};
  /// complete() answers false, as if a newer claim fenced this one out, while set.
  std::atomic<bool> fence_out_complete{false};
  /// release() throws StoreError while set.
  std::atomic<bool> fail_release{false};
  /// release() throws something that is not a std::exception (an int) while set, as a
  /// third-party driver might.
  std::atomic<bool> fail_release_oddly{false};
  /// claim() throws StoreError before reaching the store while set.
  std::atomic<bool> fail_claim{false};
  /// claim() reaches the store, then throws as if the reply was lost, while set.
  std::atomic<bool> drop_claim_reply{false};
  /// complete() reaches the store, then throws as if the reply was lost, while set.
  std::atomic<bool> drop_complete_reply{false};

  std::atomic<int> claims{0};
  std::atomic<int> completes{0};
  std::atomic<int> releases{0};
  std::atomic<int> extends{0};
  /// How many complete() calls are waiting at the gate now.
  std::atomic<int> completes_held{0};

  /// hold_completes() makes every complete() wait, before reaching the store, until
  /// let_completes_go().
  void hold_completes() {
    std::lock_guard lock(gate_mutex_);
    gate_closed_ = true;
  }
  void let_completes_go() {
    {
      std::lock_guard lock(gate_mutex_);
      gate_closed_ = false;
    }
    gate_.notify_all();
  }

 protected:
  ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
                       const ClaimRequest& request) override {
    ++claims;
    if (fail_claim) throw StoreError("injected: claim failed");
    ClaimResult r = ForwardingBackend::do_claim(key, lease, request);
    if (drop_claim_reply) throw StoreError("injected: claim reply lost");
    return r;
  }
  bool do_complete(const Claim& claim, std::optional<std::string> result) override {
    {
      std::unique_lock lock(gate_mutex_);
      if (gate_closed_) {
        ++completes_held;
        gate_.wait(lock, [this] { return !gate_closed_; });
        --completes_held;
      }
    }
    ++completes;
    if (fail_complete) throw StoreError("injected: complete failed");
    if (fence_out_complete) return false;
    const bool ok = ForwardingBackend::do_complete(claim, std::move(result));
    if (drop_complete_reply) throw StoreError("injected: complete reply lost");
    return ok;
  }
  std::optional<TimePoint> do_extend(const Claim& claim, std::chrono::milliseconds lease) override {
    ++extends;
    return ForwardingBackend::do_extend(claim, lease);
  }
  void do_release(const Claim& claim) override {
    ++releases;
    if (fail_release) throw StoreError("injected: release failed");
    if (fail_release_oddly) throw 42;  // NOLINT(hicpp-exception-baseclass): the point
    ForwardingBackend::do_release(claim);
  }

 private:
  std::mutex gate_mutex_;
  std::condition_variable gate_;
  bool gate_closed_ = false;
};

}  // namespace idempotency::testing
