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
  /// meanwhile end at once, never sent.
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

  void run();
  // Sends `calls` in one write, moving them in flight; on failure ends every call in flight.
  void send(std::vector<Call>& calls, bool fresh);
  // Hands every reply read whole to its call; false when the connection failed.
  bool deliver();
  // Ends every call in flight with the connection's failure and drops the connection.
  void fail_in_flight();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Call> queued_;  // guarded by mutex_
  bool stopping_ = false;     // guarded by mutex_

  // The I/O thread's own.
  Pipelines::Connect connect_;
  ConnectionPtr connection_;
  std::deque<Call> in_flight_;
  std::string batch_;

  std::thread thread_;  // last: started once everything it uses exists
};

}  // namespace idempotency::redis_detail
