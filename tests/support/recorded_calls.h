// RecordedCall: one claim / complete / release / extend call of a LockBackend and the answer it
// got; run_together() makes several at once, blocking ones each from a thread of its own and
// asynchronous ones through claim_async / complete_async, as concurrent callers of a backend do.
//
// Thread safety: run_together() may be called from any thread; a RecordedCall is a value.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "idempotency/backend.h"

namespace idempotency::testing {

enum class CallKind : std::uint8_t { kClaim, kComplete, kRelease, kExtend };

/// kAsync: claim_async / complete_async (release and extend have none: blocking).
enum class CallVia : std::uint8_t { kBlocking, kAsync };

/// RecordedCall is one call on one key, and what the backend answered.
struct RecordedCall {
  CallKind kind = CallKind::kClaim;
  CallVia via = CallVia::kBlocking;
  /// The index of the backend to call, in run_together()'s `backends`.
  std::size_t backend = 0;
  std::string key;
  /// A claim's token; empty: the backend makes one.
  std::string token;
  /// A claim's or an extend's lease, in milliseconds.
  std::int64_t lease = 0;
  std::optional<std::string> fingerprint;
  /// What complete, release and extend act on.
  Claim claim;
  std::optional<std::string> result;
  /// The answers: claim's, complete's and extend's.
  std::optional<ClaimResult> claimed;
  bool completed = false;
  std::optional<TimePoint> extended;
  /// Set instead of an answer when the call threw or delivered a StoreFailure.
  std::string error;

  /// describe() names the call and its arguments, for failure messages.
  [[nodiscard]] std::string describe() const {
    static constexpr const char* kNames[] = {"claim", "complete", "release", "extend"};
    std::string s = std::string(kNames[static_cast<int>(kind)]) +
                    (via == CallVia::kAsync ? " (async)" : "") + " by backend " +
                    std::to_string(backend) + " of key #" + std::to_string(key.size()) + " '" +
                    key + "'";
    if (kind == CallKind::kClaim) {
      return s + " token '" + token + "' lease " + std::to_string(lease) +
             (fingerprint ? " fingerprint '" + *fingerprint + "'" : " no fingerprint");
    }
    s += " fence " + std::to_string(claim.fence) + " token '" + claim.claim_token + "'";
    if (kind == CallKind::kComplete) s += result ? " result '" + *result + "'" : " no result";
    return s;
  }
};

namespace recorded_calls_detail {

// The calls of one run_together(), shared with the asynchronous ones' callbacks, which may
// outlive it when one never ends.
struct Batch {
  std::vector<RecordedCall> calls;
  std::mutex mutex;
  std::condition_variable ended;
  std::size_t pending = 0;

  void end_one() {
    {
      std::lock_guard lock(mutex);
      --pending;
    }
    ended.notify_all();
  }
};

inline void run_blocking(RecordedCall& c, LockBackend& backend) {
  const std::chrono::milliseconds lease(c.lease);
  try {
    switch (c.kind) {
      case CallKind::kClaim:
        c.claimed = backend.claim(c.key, lease, {c.token, c.fingerprint});
        break;
      case CallKind::kComplete:
        c.completed = backend.complete(c.claim, c.result);
        break;
      case CallKind::kRelease:
        backend.release(c.claim);
        break;
      case CallKind::kExtend:
        c.extended = backend.extend(c.claim, lease);
        break;
    }
  } catch (const std::exception& e) {
    c.error = e.what();
  }
}

// Sends batch->calls[i] by claim_async / complete_async; its callback records the answer.
inline void start_async(const std::shared_ptr<Batch>& batch, std::size_t i, LockBackend& backend) {
  RecordedCall& c = batch->calls[i];
  {
    std::lock_guard lock(batch->mutex);
    ++batch->pending;
  }
  auto record = [batch, i](auto outcome, auto answer) {
    RecordedCall& call = batch->calls[i];
    if (auto* f = std::get_if<StoreFailure>(&outcome)) {
      call.error = f->message;
    } else {
      answer(call, outcome);
    }
    batch->end_one();
  };
  try {
    if (c.kind == CallKind::kClaim) {
      backend.claim_async(c.key, std::chrono::milliseconds(c.lease), {c.token, c.fingerprint},
                          [record](AsyncClaimResult r) {
                            record(std::move(r), [](RecordedCall& call, AsyncClaimResult& o) {
                              call.claimed = std::move(std::get<ClaimResult>(o));
                            });
                          });
    } else {
      backend.complete_async(c.claim, c.result, [record](AsyncCompleteResult r) {
        record(std::move(r), [](RecordedCall& call, AsyncCompleteResult& o) {
          call.completed = std::get<bool>(o);
        });
      });
    }
  } catch (const std::exception& e) {  // thrown before the call was made: no callback comes
    c.error = e.what();
    batch->end_one();
  }
}

}  // namespace recorded_calls_detail

/// run_together() makes `calls`, each on `backends[call.backend]`: with `threads`, each from a
/// thread of its own, all started at once; else one after another from this thread (the
/// asynchronous ones then still overlap: each returns once sent). Returns them with their
/// answers once every call has ended, or nullopt when an asynchronous one has not ended within
/// `timeout` (a hang guard).
inline std::optional<std::vector<RecordedCall>> run_together(
    std::vector<RecordedCall> calls, const std::vector<LockBackend*>& backends, bool threads,
    std::chrono::seconds timeout = std::chrono::seconds(60)) {
  using recorded_calls_detail::Batch;
  auto batch = std::make_shared<Batch>();
  batch->calls = std::move(calls);
  auto one = [&](std::size_t i) {
    RecordedCall& c = batch->calls[i];
    LockBackend& backend = *backends.at(c.backend);
    if (c.via == CallVia::kAsync && (c.kind == CallKind::kClaim || c.kind == CallKind::kComplete)) {
      recorded_calls_detail::start_async(batch, i, backend);
    } else {
      recorded_calls_detail::run_blocking(c, backend);
    }
  };
  if (threads) {
    std::latch go(static_cast<std::ptrdiff_t>(batch->calls.size()));
    std::vector<std::jthread> running;
    running.reserve(batch->calls.size());
    for (std::size_t i = 0; i < batch->calls.size(); ++i) {
      running.emplace_back([&go, &one, i] {
        go.arrive_and_wait();
        one(i);
      });
    }
  } else {
    for (std::size_t i = 0; i < batch->calls.size(); ++i) one(i);
  }
  std::unique_lock lock(batch->mutex);
  if (!batch->ended.wait_for(lock, timeout, [&] { return batch->pending == 0; })) {
    return std::nullopt;
  }
  return std::move(batch->calls);
}

}  // namespace idempotency::testing
