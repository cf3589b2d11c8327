#include "redis_async_pipeline.h"

#include <deque>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace idempotency::redis_detail {
namespace {

// Callbacks must not throw (Done's contract); one that does loses only its own outcome, never
// the I/O thread, which every other call waits on.
void finish(AsyncPipeline::Done& done, AsyncOutcome outcome) noexcept {
  try {
    done(std::move(outcome));
  } catch (...) {  // NOLINT(bugprone-empty-catch): see above
  }
}

AsyncOutcome never_sent(std::string error, bool unreachable) {
  return {
      .outcome = {.failure = IoFailure::kClosed, .maybe_sent = false, .error = std::move(error)},
      .unreachable = unreachable};
}

}  // namespace

struct AsyncPipeline::State {
  explicit State(Pipelines::Connect c) : connect(std::move(c)) {}

  void run();
  // Moves what is queued to `taken`.
  void take_queued();
  // Sends `taken` in one write, moving it in flight; on failure ends every call in flight.
  void send(bool fresh);
  // Hands every reply read whole to its call; false when the connection failed.
  bool deliver();
  // Ends every call in flight with the connection's failure and drops the connection.
  void fail_in_flight();
  // Ends every call in flight with `failure` and `error` (maybe sent, each).
  void end_in_flight(IoFailure failure, const std::string& error);
  // Ends every call queued, taken or in flight at once, and closes the connection: the
  // pipeline is being destroyed on this thread, by one of these callbacks.
  void end_now();

  // Each call leaves its container before its callback runs, and the loops go back to the
  // containers after each one: a callback may queue calls, or end everything (end_now()).
  static Call take_front(std::deque<Call>& calls) {
    Call c = std::move(calls.front());
    calls.pop_front();
    return c;
  }
  // Ends the first of `calls` with `outcome`.
  static void finish_front(std::deque<Call>& calls, AsyncOutcome outcome) {
    Call c = take_front(calls);
    finish(c.done, std::move(outcome));
  }

  std::mutex mutex;
  std::condition_variable wake;
  std::vector<Call> queued;  // guarded by mutex
  bool stopping = false;     // guarded by mutex

  // The I/O thread's own.
  Pipelines::Connect connect;
  ConnectionPtr connection;
  std::deque<Call> taken;  // out of `queued`, not yet sent
  std::deque<Call> in_flight;
  std::string batch;
};

AsyncPipeline::AsyncPipeline(Pipelines::Connect connect)
    : state_(std::make_shared<State>(std::move(connect))),
      thread_([state = state_] { state->run(); }) {}

AsyncPipeline::~AsyncPipeline() {
  {
    const std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_one();
  if (thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
    return;
  }
  // A callback of ours is destroying us (its owner's last reference went with it). The thread
  // cannot join itself: what it would still deliver ends now, while what those callbacks use
  // exists, and the thread, holding the state, returns from that callback to nothing left to do.
  state_->end_now();
  thread_.detach();
}

void AsyncPipeline::call(std::string command, Done done) {
  {
    std::unique_lock lock(state_->mutex);
    if (!state_->stopping) {
      state_->queued.push_back({std::move(command), std::move(done)});
      lock.unlock();
      state_->wake.notify_one();
      return;
    }
  }
  finish(done, never_sent("redis: not sent, the backend is shutting down", false));
}

void AsyncPipeline::State::take_queued() {
  for (Call& c : queued) taken.push_back(std::move(c));
  queued.clear();
}

void AsyncPipeline::State::run() {
  for (;;) {
    {
      std::unique_lock lock(mutex);
      wake.wait(lock, [&] { return stopping || !queued.empty(); });
      if (queued.empty()) return;  // stopping, and nothing is in flight here
      take_queued();
    }
    bool fresh = false;
    if (!connection) {
      try {
        connection = connect();
        fresh = true;
      } catch (const std::exception& e) {  // StoreError: refused, timed out; or out of memory
        const std::string error = e.what();
        while (!taken.empty()) finish_front(taken, never_sent(error, true));
        continue;
      }
    }
    send(fresh);
    while (!in_flight.empty()) {
      if (!connection->receive() || !deliver()) {
        fail_in_flight();
        break;
      }
      // What queued meanwhile (the callbacks' next calls too) goes out before the next read.
      {
        const std::lock_guard lock(mutex);
        take_queued();
      }
      if (!taken.empty()) send(false);
    }
  }
}

void AsyncPipeline::State::send(bool fresh) {
  try {
    for (Call& c : taken) {
      c.fresh = fresh;
      batch.append(c.command);
    }
    // A deque's insertion at its end has no effect when it throws std::bad_alloc (and Call's
    // move never throws), so on failure none of `taken` is in flight.
    in_flight.insert(in_flight.end(), std::make_move_iterator(taken.begin()),
                     std::make_move_iterator(taken.end()));
  } catch (const std::bad_alloc&) {
    batch.clear();
    while (!taken.empty()) finish_front(taken, never_sent("redis: out of memory", false));
    return;
  }
  taken.clear();
  const bool sent = connection->send(batch);
  batch.clear();
  if (!sent) fail_in_flight();
}

bool AsyncPipeline::State::deliver() {
  while (!in_flight.empty()) {
    ReplyPtr reply = connection->take_reply();
    if (!reply) return connection->failure() == IoFailure::kNone;
    Call c = take_front(in_flight);
    finish(c.done, {.outcome = {.reply = std::move(reply)}, .fresh = c.fresh});
  }
  return true;
}

void AsyncPipeline::State::fail_in_flight() {
  const IoFailure failure = connection->failure();
  const std::string error = connection->error();
  connection.reset();
  end_in_flight(failure == IoFailure::kNone ? IoFailure::kError : failure, error);
}

void AsyncPipeline::State::end_in_flight(IoFailure failure, const std::string& error) {
  // A callback's next call is queued, never put in flight here: these are the ones sent.
  while (!in_flight.empty()) {
    Call c = take_front(in_flight);
    finish(c.done,
           {.outcome = {.failure = failure, .maybe_sent = true, .error = error}, .fresh = c.fresh});
  }
}

void AsyncPipeline::State::end_now() {
  {
    const std::lock_guard lock(mutex);
    take_queued();
  }
  connection.reset();  // closed while what it uses (a TLS context) exists
  // kError, not kClosed: a closed connection is retried, and nothing may be retried now.
  end_in_flight(IoFailure::kError, "redis: the backend was destroyed with the call in flight");
  while (!taken.empty()) {
    finish_front(taken, never_sent("redis: not sent, the backend is shutting down", false));
  }
}

}  // namespace idempotency::redis_detail
