// AsyncPipeline: one Redis connection and the I/O thread that owns it, for calls whose callers
// do not wait (LockBackend::claim_async and complete_async). A call is queued with a callback
// and the caller returns; the thread sends everything queued in one write, reads the replies
// and hands each to its callback, in order (Redis answers in order). A callback may queue more
// calls: they go out with the next write, after every 32 replies handed out and before the
// thread blocks on a read again, so the server works on them while the rest's callbacks run.
// So N calls in flight cost a few sends and one receive per batch, and no thread is woken per
// call — what a blocking caller cannot avoid (Pipeline, redis_pipeline.h, serves those without
// a hop).
//
// Thread safety: call() from any thread; callbacks run on the I/O thread, one at a time.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "redis_connection.h"
#include "redis_pipeline.h"

namespace idempotency::redis_detail {

/// AsyncOutcome is what one asynchronous call got.
struct AsyncOutcome {
  /// The reply, or how the connection failed (PipelineOutcome's meaning).
  PipelineOutcome outcome;
  /// The connection was opened for the write that carried the call: a failure on it is not a
  /// stale connection's.
  bool fresh = false;
  /// No connection could be opened: never sent.
  bool unreachable = false;
};

/// AsyncPipeline is one connection served by its own I/O thread.
class AsyncPipeline {
 public:
  /// Called once with a call's outcome, on the I/O thread; must not throw.
  using Done = std::function<void(AsyncOutcome)>;

  /// Part is what one joined call adds to the command it shares (call_joined()).
  struct Part {
    std::string key;
    std::string arg;
  };
  /// Join makes the command (formatted, as call()'s) of the parts of call_joined() calls
  /// queued for one write, in order, at most kMaxJoined of them; false when it cannot (out of
  /// memory). Runs on the I/O thread.
  using Join = std::function<bool(std::span<const Part> parts, std::string& command)>;
  /// The most calls one joined command carries: a Redis script runs alone on the server, and
  /// 64 completes are about a millisecond of it.
  static constexpr std::size_t kMaxJoined = 64;
  /// Called once with the joined command's outcome and the call's place among its parts, on
  /// the I/O thread; must not throw.
  using JoinedDone = std::function<void(const AsyncOutcome& joined, std::size_t index)>;

  /// AsyncPipeline() starts the I/O thread, which opens a connection with `connect` when a
  /// call first needs one, and again after one failed. `join` (optional) serves
  /// call_joined().
  explicit AsyncPipeline(Pipelines::Connect connect, Join join = nullptr);
  /// ~AsyncPipeline() lets every call already made end (with its reply, or its connection's
  /// failure within the command timeout), then stops the thread. Calls made by callbacks
  /// meanwhile end at once, never sent. Destroyed by one of its own callbacks (on the I/O
  /// thread, as when a callback drops the last reference to the backend), it cannot wait for
  /// itself: every call still queued or in flight ends at once, a failure, before it returns,
  /// and the thread then ends on its own.
  ~AsyncPipeline();
  AsyncPipeline(const AsyncPipeline&) = delete;
  AsyncPipeline& operator=(const AsyncPipeline&) = delete;

  /// call() queues `command` (one or more commands, formatted as RESP: Connection::format)
  /// and returns; `done` gets its outcome later on the I/O thread (at once, on this thread,
  /// once the pipeline is stopping).
  void call(std::string command, Done done);

  /// call_joined() queues `part` and returns: the parts of the calls queued so for one write
  /// go out as one command (up to kMaxJoined parts each), made by the constructor's `join` and
  /// sent after that write's other calls, and `done` gets its outcome with this call's index
  /// among that command's parts. Many calls of one kind
  /// then cost the server one command (a Redis script call's own cost paid once, not per
  /// call). Without a `join`, `done` gets a failure at once, never sent.
  void call_joined(Part part, JoinedDone done);

 private:
  struct Call {
    std::string command;
    Done done;  // empty for a joined call, which has `joined`
    bool fresh = false;
    // The callers of a joined call (call_joined()), in the order of its parts.
    std::vector<JoinedDone> joined;
  };
  // Everything the I/O thread uses, shared with it: a thread that outlives its pipeline (see
  // the destructor) still finds it.
  struct State;

  std::shared_ptr<State> state_;
  std::thread thread_;  // last: started once everything it uses exists
};

}  // namespace idempotency::redis_detail
