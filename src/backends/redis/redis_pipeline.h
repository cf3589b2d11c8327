// Pipeline: one Redis connection shared by every thread that calls through it. A call that
// finds the connection idle sends at once; calls made while replies are awaited queue up and go
// out together in one write before the next read, so N concurrent calls cost about one send and
// one receive per batch instead of N of each (on loopback the cost of a call is its system
// calls; BENCHMARKS.md, Stores). There is no I/O thread: the caller that holds the reader role
// reads replies in order, hands each to its caller, and when its own reply has come passes the
// role to a caller still waiting. Redis answers in order, so the n-th reply is the n-th
// command's.
//
// Pipelines: a fixed number of Pipelines, calls spread over them, a broken one replaced on the
// next call.
//
// Thread safety: every member of both is safe from any number of threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "redis_connection.h"
#include "redis_internal.h"
#include "redis_tls.h"

namespace idempotency::redis_detail {

/// PipelineOutcome is what one pipelined call got: its reply, or how the connection failed.
struct PipelineOutcome {
  /// The reply (an error reply as it is); nullptr when the connection failed first.
  ReplyPtr reply;
  /// kNone with a reply; else how the connection failed.
  IoFailure failure = IoFailure::kNone;
  /// Whether the command may have reached the server: false only when it provably was not
  /// sent (the connection had already failed), so that repeating it is safe whatever it is.
  bool maybe_sent = false;
  /// The failure in one line starting "redis: ".
  std::string error;
};

/// Preceding is a command sent right ahead of a call's own, and the reply it got; `next`, when
/// set, is one more, sent after this one and still ahead of the call's own.
struct Preceding {
  const std::vector<std::string_view>& args;
  ReplyPtr reply;
  Preceding* next = nullptr;
};

/// Pipeline is one connection that concurrent calls share.
class Pipeline {
 public:
  /// Pipeline() takes an open connection (AUTH and SELECT done).
  explicit Pipeline(ConnectionPtr connection);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /// call() sends `args` and returns its reply. Blocks until the reply has come or the
  /// connection failed; once a call has failed the pipeline is broken and every later call
  /// fails at once, unsent. With `before`, its command (and those chained by its `next`, in order)
  /// goes first, in the same write and right ahead of `args` on the connection, and each reply
  /// to its own `reply` (nullptr when the connection failed first).
  [[nodiscard]] PipelineOutcome call(const std::vector<std::string_view>& args,
                                     Preceding* before = nullptr);

  /// broken() says whether the connection has failed; the pipeline must then be replaced.
  [[nodiscard]] bool broken() const noexcept {
    return head_.load(std::memory_order_acquire) == kBroken;
  }

  /// queued() is how many calls wait to be sent (for tests that hold a batch open).
  [[nodiscard]] std::size_t queued() const noexcept;
  /// writes() is how many writes (batches) have gone out so far.
  [[nodiscard]] std::uint64_t writes() const noexcept {
    return writes_.load(std::memory_order_relaxed);
  }

 private:
  struct Pending;

  // head_'s values besides a queued Pending* (aligned, so never 1 or 2).
  static constexpr std::uintptr_t kIdle = 0;     // no caller holds the reader role
  static constexpr std::uintptr_t kReading = 1;  // a caller does, and nothing is queued
  static constexpr std::uintptr_t kBroken = 2;   // the connection failed, for good

  // The queued call that head_ or a `next` holds.
  static Pending* pending_at(std::uintptr_t at) noexcept;

  // The reader role's work: sends what is queued, reads replies until `me`'s has come, then
  // passes the role on, or ends every call with the connection's failure.
  void read_until(Pending& me);
  // Sends every queued call in one write, moving them in flight; false when that failed.
  bool flush();
  // Passes the reader role to a call in flight, or gives it up when nothing is in flight.
  void hand_over();
  // Ends every call in flight and queued with the failure, and breaks the pipeline.
  void fail_all();

  ConnectionPtr connection_;  // used only by the holder of the reader role
  // The queue and the reader role in one word, so that joining the queue and taking or giving
  // up the role are each one atomic step (no lock for callers to contend on): kIdle, kReading,
  // kBroken, or the newest queued call, whose `next` links to older ones down to kReading (the
  // caller that queues onto kIdle takes the role).
  std::atomic<std::uintptr_t> head_{kIdle};
  // Written once, before head_ becomes kBroken: the failure, as the calls in flight report it
  // and as the calls that never left do.
  std::string broken_error_;
  std::string unsent_error_;
  // The reader role's, and nothing it touches allocates but the batch, so a failure to
  // allocate ends every call instead of stranding them: the calls sent whose replies are not
  // yet read, oldest first, linked through Pending::after; the bytes flush() writes (kept for
  // their capacity); a failure of the pipeline's own (out of memory), besides the connection's.
  Pending* in_flight_front_ = nullptr;
  Pending* in_flight_back_ = nullptr;
  std::string batch_;
  IoFailure own_failure_ = IoFailure::kNone;
  std::atomic<std::uint64_t> writes_{0};
};

struct Script;  // redis_script_call.h
class Pipelines;

/// PipelinedCall is one operation's use of Pipelines, across its commands and its retry: the
/// pipeline it goes to (so SCRIPT LOAD after NOSCRIPT follows the EVALSHA, and a retry goes to
/// the replacement of a connection that failed), whether that one was opened for it, and how
/// the last command failed.
struct PipelinedCall {
  std::size_t slot = static_cast<std::size_t>(-1);  // Pipelines::kAny
  bool fresh = false;
  PipelineOutcome failed;
  bool unreachable = false;  // the failure was opening a connection
};

/// retry_is_safe() says whether a pipelined call that failed may be sent once more: when it
/// provably never left, or (a script call, `script`) found a connection opened before it
/// closed by the server — never when no connection could be opened (each try waits
/// connect_timeout). `fresh` says only that the call did not open the connection, so a close
/// in the middle of a batch also reads as stale and repeats a call that may have run: safe for
/// every script operation (a claim carries its token, the others a fence), never for others.
[[nodiscard]] inline bool retry_is_safe(const PipelineOutcome& failed, bool fresh, bool unreachable,
                                        bool script) noexcept {
  const bool stale = script && failed.failure == IoFailure::kClosed && !fresh;
  return (!failed.maybe_sent || stale) && !unreachable;
}

/// call_pipelined() sends `args` over `pipelines` (with `script`, `args` is its EVALSHA, and
/// the script is loaded after NOSCRIPT, redis_script_call.h): the reply, or nullptr with
/// `call.failed` saying why. A connection that cannot be opened is such a failure, never sent.
/// Throws `StoreError` only when SCRIPT LOAD is refused or reports another digest.
[[nodiscard]] ReplyPtr call_pipelined(Pipelines& pipelines,
                                      const std::vector<std::string_view>& args,
                                      const Script* script, PipelinedCall& call);

/// Pipelines spreads calls over a fixed number of Pipelines, opening each on first use and
/// again after it broke. One caller at a time opens a slot's connection; the callers that find
/// the slot broken meanwhile wait for that connect and share its outcome (the new pipeline, or
/// its failure), so a server coming back is not met by a connect per waiting thread, nor a dead
/// one waited on for a connect timeout per thread in turn.
class Pipelines {
 public:
  /// Opens a connection for a pipeline (throws `StoreError` when it cannot).
  using Connect = std::function<ConnectionPtr()>;

  /// Pipelines() will open up to `count` (at least 1) connections with `connect`, lazily; a
  /// broken one is replaced by the next call to its slot.
  Pipelines(std::size_t count, Connect connect);

  /// Which pipeline a call uses: kAny for the next in turn, or the one an earlier call of the
  /// same operation used (a retry then goes to that pipeline's replacement).
  static constexpr std::size_t kAny = static_cast<std::size_t>(-1);

  /// call() sends `args` (after `before`'s command, as Pipeline::call) on pipeline `slot`
  /// (kAny: the next in turn, and `slot` is set to the one chosen). `fresh` is set when that
  /// pipeline was opened after this call found the slot broken or empty, by it or by the call whose
  /// connect it waited for (a failure on it is not a stale connection). Throws `StoreError` when a
  /// connection cannot be opened, also to the callers that waited for that connect.
  [[nodiscard]] PipelineOutcome call(const std::vector<std::string_view>& args, bool& fresh,
                                     std::size_t& slot, Preceding* before = nullptr);

  /// reopening() is how many calls are replacing pipeline `slot` now, the one connecting and
  /// those waiting for its connect, each counted once it has decided to wait: for tests.
  [[nodiscard]] std::size_t reopening(std::size_t slot) const;

 private:
  struct Slot {
    // Shared to use the pipeline (no contention between callers), exclusive to replace it.
    std::shared_mutex mutex;
    std::shared_ptr<Pipeline> pipeline;  // guarded by mutex
    // Held while a connection is opened for the slot: the single flight.
    std::mutex connecting;
    // How many connects for the slot have failed, and the last one's error (guarded by
    // `connecting`): a caller that waited for a connect tells from the count whether it failed.
    std::atomic<std::uint64_t> failed_connects{0};
    std::string connect_error;
    std::atomic<std::size_t> reopening{0};  // calls in reopen(), for reopening()
  };

  // Replaces the slot's missing or broken pipeline (single flight, see above) and returns it.
  std::shared_ptr<Pipeline> reopen(Slot& slot, bool& fresh);

  Connect connect_;
  std::vector<Slot> slots_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace idempotency::redis_detail
