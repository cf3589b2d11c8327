// ForwardingBackend: the base of LockBackend decorators (metrics, fault injection, …), as
// leveldb's EnvWrapper is of Env's. Every operation goes to the wrapped backend's storage work
// unchanged, so a decorator overrides only what it changes and cannot forget the rest (a
// forgotten wait_for_change would quietly turn a Redis or PostgreSQL waiter into a sleeper).
// The decorator's own public calls validate their input; the wrapped backend is reached below
// its validation, so nothing is validated twice.
//
//   class Timed : public idempotency::ForwardingBackend {
//     using ForwardingBackend::ForwardingBackend;
//     ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
//                          const ClaimRequest& request) override {
//       auto started = std::chrono::steady_clock::now();
//       auto result = ForwardingBackend::do_claim(key, lease, request);
//       record(std::chrono::steady_clock::now() - started);
//       return result;
//     }
//   };
//
// Thread safety: as safe as the wrapped backend.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include "idempotency/backend.h"

namespace idempotency {

/// ForwardingBackend forwards every operation to the backend it wraps, with the same ttl.
class ForwardingBackend : public LockBackend {
 public:
  /// ForwardingBackend() wraps `inner` and shares its ownership.
  explicit ForwardingBackend(std::shared_ptr<LockBackend> inner);
  /// ForwardingBackend() wraps `inner`, which must outlive it.
  explicit ForwardingBackend(LockBackend& inner);

  /// inner() is the wrapped backend.
  [[nodiscard]] LockBackend& inner() const noexcept { return *inner_; }

 protected:
  ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
                       const ClaimRequest& request) override;
  bool do_complete(const Claim& claim, std::optional<std::string> result) override;
  void do_release(const Claim& claim) override;
  std::optional<TimePoint> do_extend(const Claim& claim, std::chrono::milliseconds lease) override;
  std::size_t do_purge_expired() override;
  std::optional<Record> do_inspect(std::string_view key) override;
  std::optional<std::size_t> do_stored_records() override;
  [[nodiscard]] std::size_t do_max_result_bytes() const noexcept override {
    return inner_->max_result_bytes();
  }
  [[nodiscard]] bool do_may_block() const noexcept override { return inner_->may_block(); }
  void do_wait_for_change(std::string_view key, std::chrono::milliseconds timeout,
                          const std::stop_token& stop) override;

 private:
  std::shared_ptr<LockBackend> inner_;  // owning, or aliasing a reference (no owner)
};

}  // namespace idempotency
