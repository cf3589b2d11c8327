// AsyncPipeline: one Redis connection and the I/O thread that owns it, for calls whose callers
// do not wait (LockBackend::claim_async and complete_async). A call is queued with a callback
// and the caller returns; the thread sends everything queued in one write, reads the replies
// and hands each to its callback, in order (Redis answers in order). A callback may queue more
// calls: they go out with the next write, before the thread blocks on a read again. So N calls
// in flight cost about one send and one receive per batch, and no thread is woken per call —
// what a blocking caller cannot avoid (Pipeline, redis_pipeline.h, serves those without a hop).
//
// Thread safety: call() from any thread; callbacks run on the I/O thread, one at a time.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
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

  /// AsyncPipeline() starts the I/O thread, which opens a connection with `connect` when a
  /// call first needs one, and again after one failed.
  explicit AsyncPipeline(Pipelines::Connect connect);
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

 private:
  struct Call {
    std::string command;
    Done done;
    bool fresh = false;
  };
  // Everything the I/O thread uses, shared with it: a thread that outlives its pipeline (see
  // the destructor) still finds it.
  struct State;

  std::shared_ptr<State> state_;
  std::thread thread_;  // last: started once everything it uses exists
};

}  // namespace idempotency::redis_detail
