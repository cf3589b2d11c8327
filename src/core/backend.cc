#include "idempotency/backend.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "idempotency/detail/async_outcome.h"
#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "idempotency/log.h"
#include "token.h"

namespace idempotency {
namespace {

std::string seconds_text(std::chrono::milliseconds d) {
  return std::to_string(std::chrono::duration<double>(d).count());
}

}  // namespace

void validate_lease(std::chrono::milliseconds lease) {
  if (lease <= std::chrono::milliseconds::zero()) {
    throw std::invalid_argument("lease must be positive, got " + seconds_text(lease) + " s");
  }
  if (lease > kMaxLease) {
    throw std::invalid_argument("lease of " + seconds_text(lease) + " s exceeds the limit of " +
                                seconds_text(kMaxLease) + " s");
  }
}

void validate_heartbeat(std::chrono::milliseconds heartbeat, std::chrono::milliseconds lease) {
  if (heartbeat.count() == 0) return;
  if (heartbeat < std::chrono::milliseconds::zero() || heartbeat >= lease) {
    throw std::invalid_argument("heartbeat of " + seconds_text(heartbeat) +
                                " s must be zero (off) or positive and shorter than the lease of " +
                                seconds_text(lease) + " s");
  }
}

void validate_ttl(std::chrono::milliseconds ttl) {
  if (ttl <= std::chrono::milliseconds::zero()) {
    throw std::invalid_argument("ttl must be positive, got " + seconds_text(ttl) + " s");
  }
  if (ttl > kMaxTtl) {
    throw std::invalid_argument("ttl of " + seconds_text(ttl) + " s exceeds the limit of " +
                                seconds_text(kMaxTtl) + " s");
  }
}

std::optional<TimePoint> extend_result(const Transition& t) {
  if (!t.answer.ok || !t.record) return std::nullopt;
  return from_millis(t.record->lease_expiry);
}

ClaimResult claim_result(std::string_view key, Record record, ClaimAnswer answer) {
  switch (answer) {
    case ClaimAnswer::kWon:
      return Won{Claim{std::string(key), record.fence, from_millis(record.lease_expiry),
                       std::move(record.claim_token)}};
    case ClaimAnswer::kAlreadyDone:
      return AlreadyDone{std::move(record.result), std::move(record.fingerprint),
                         from_millis(record.expires_at)};
    case ClaimAnswer::kHeldByOther:
      break;
  }
  return HeldByOther{from_millis(record.lease_expiry), std::move(record.fingerprint)};
}

LockBackend::LockBackend(const BackendOptions& options) : ttl_(options.ttl) {
  validate_ttl(options.ttl);
}

ClaimResult LockBackend::claim(std::string_view key, std::chrono::milliseconds lease,
                               ClaimRequest request) {
  validate_key(key);
  validate_lease(lease);
  warn_sizing_once(lease);
  if (request.claim_token.empty()) request.claim_token = detail::new_claim_token();
  return do_claim(key, lease, request);
}

void LockBackend::fit_result(const Claim& claim, std::optional<std::string>& result) const {
  const std::size_t limit = max_result_bytes();
  if (!result || result->size() <= limit) return;
  log(LogRecord{Severity::kWarning,
                "result_too_large",
                "the result is longer than this store keeps; the key is completed without it, "
                "and later claims find it done with no result",
                {{"key_fingerprint", key_fingerprint(claim.key)},
                 {"bytes", std::to_string(result->size())},
                 {"max_bytes", std::to_string(limit)}}});
  result.reset();
}

bool LockBackend::complete(const Claim& claim, std::optional<std::string> result) {
  validate_key(claim.key);
  fit_result(claim, result);
  return do_complete(claim, std::move(result));
}

void LockBackend::claim_async(std::string_view key, std::chrono::milliseconds lease,
                              ClaimRequest request, ClaimDone done) {
  validate_key(key);
  validate_lease(lease);
  warn_sizing_once(lease);
  if (request.claim_token.empty()) request.claim_token = detail::new_claim_token();
  do_claim_async(key, lease, std::move(request), std::move(done));
}

void LockBackend::complete_async(const Claim& claim, std::optional<std::string> result,
                                 CompleteDone done) {
  validate_key(claim.key);
  fit_result(claim, result);
  do_complete_async(claim, std::move(result), std::move(done));
}

// By value, as the overrides that send the call keep them: the default only reads them.
void LockBackend::do_claim_async(
    std::string_view key, std::chrono::milliseconds lease,
    ClaimRequest request,  // NOLINT(performance-unnecessary-value-param)
    ClaimDone done) {      // NOLINT(performance-unnecessary-value-param)
  done(detail::outcome_of<ClaimResult>([&] { return do_claim(key, lease, request); }));
}

// As do_claim_async().
void LockBackend::do_complete_async(
    const Claim& claim, std::optional<std::string> result,
    CompleteDone done) {  // NOLINT(performance-unnecessary-value-param)
  done(detail::outcome_of<bool>([&] { return do_complete(claim, std::move(result)); }));
}

void LockBackend::release(const Claim& claim) {
  validate_key(claim.key);
  do_release(claim);
}

std::optional<TimePoint> LockBackend::extend(const Claim& claim, std::chrono::milliseconds lease) {
  validate_key(claim.key);
  validate_lease(lease);
  return do_extend(claim, lease);
}

std::size_t LockBackend::purge_expired() { return do_purge_expired(); }

std::optional<std::size_t> LockBackend::stored_records() { return do_stored_records(); }

std::optional<Record> LockBackend::inspect(std::string_view key) {
  validate_key(key);
  return do_inspect(key);
}

std::optional<Record> LockBackend::do_inspect(std::string_view /*key*/) { throw NotInspectable(); }

void LockBackend::wait_for_change(std::string_view key, std::chrono::milliseconds timeout,
                                  const std::stop_token& stop) {
  validate_key(key);
  if (timeout <= std::chrono::milliseconds::zero() || stop.stop_requested()) return;
  do_wait_for_change(key, timeout, stop);
}

void LockBackend::do_wait_for_change(std::string_view /*key*/, std::chrono::milliseconds timeout,
                                     const std::stop_token& stop) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  (void)cv.wait_for(lock, stop, timeout, [] { return false; });
}

void LockBackend::warn_sizing_once(std::chrono::milliseconds lease) {
  // A load first: an exchange on every claim would bounce this line between every core.
  if (lease + ttl_ > kMaxHolderLifetime || sizing_warned_.load(std::memory_order_relaxed) ||
      sizing_warned_.exchange(true)) {
    return;
  }
  log(LogRecord{
      Severity::kWarning,
      "sizing_invariant",
      "lease + ttl does not exceed the longest a holder can live (Cloud Run's 3600 s cap): a "
      "zombie holder may outlive its record and escape fencing",
      {{"lease_s", seconds_text(lease)},
       {"ttl_s", seconds_text(ttl_)},
       {"max_holder_lifetime_s", seconds_text(kMaxHolderLifetime)}}});
}

}  // namespace idempotency
