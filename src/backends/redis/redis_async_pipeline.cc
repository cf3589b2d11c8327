#include "redis_async_pipeline.h"

#include <algorithm>
#include <cstddef>
#include <deque>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <span>
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

// finish() for a joined call.
void finish_joined(AsyncPipeline::JoinedDone& done, const AsyncOutcome& joined,
                   std::size_t index) noexcept {
  try {
    done(joined, index);
  } catch (...) {  // NOLINT(bugprone-empty-catch): as finish()
  }
}

// What a call still in flight, or a joined call's caller not yet handed its outcome, gets when
// the pipeline is destroyed by a callback: kError, not kClosed, since a closed connection is
// retried, and nothing may be retried now.
AsyncOutcome destroyed_outcome() {
  return {.outcome = {.failure = IoFailure::kError,
                      .maybe_sent = true,
                      .error = "redis: the backend was destroyed with the call in flight"}};
}

AsyncOutcome never_sent(std::string error, bool unreachable) {
  return {
      .outcome = {.failure = IoFailure::kClosed, .maybe_sent = false, .error = std::move(error)},
      .unreachable = unreachable};
}

}  // namespace

struct AsyncPipeline::State {
  State(Pipelines::Connect c, Join j) : connect(std::move(c)), join(std::move(j)) {}

  void run();
  // Moves what is queued to `taken`, the joined calls as one call at its end.
  void take_queued();
  // Makes calls of the joined calls taken (at most kMaxJoined each) at the end of `taken`:
  // each one's command from `join`, its outcome handed to each of its callers.
  void join_taken();
  // Sends `taken` in one write, moving it in flight; on failure ends every call in flight.
  void send(bool fresh);
  // Takes what is queued and sends it, on the connection already open.
  void send_queued();
  // What deliver() did: handed out every reply read whole, stopped at its `most`, or met the
  // connection's failure.
  enum class Delivered { kAll, kMore, kFailed };
  // Hands the replies read whole to their calls, at most `most`.
  Delivered deliver(std::size_t most);
  // Replies read together are handed out this many at a time, and what their callbacks queued
  // is sent before the next ones run: the server works on it meanwhile. Sent only once a whole
  // batch's callbacks ran, the calls go in waves, each side idle while the other works
  // (redis-server ~0.7 of a core busy at 64 pairs in flight; BENCHMARKS.md).
  static constexpr std::size_t kSlice = 32;
  // Ends every call in flight with the connection's failure and drops the connection.
  void fail_in_flight();
  // Ends every call in flight with `failure` and `error` (maybe sent, each).
  void end_in_flight(IoFailure failure, const std::string& error);
  // Ends every call queued, taken or in flight at once, and closes the connection: the
  // pipeline is being destroyed on this thread, by one of these callbacks.
  void end_now();
  // Ends `c` with `outcome`: its callback, or each of a joined call's.
  void end_call(Call c, AsyncOutcome outcome);
  // Hands `outcome` to each of `dones` from `first` on (a joined call's callers; `dones` is
  // left empty) in turn, with its index from `first`. One of their callbacks may destroy the
  // pipeline (end_now()), which then ends those not yet handed theirs.
  void end_joined(std::vector<JoinedDone>& dones, std::size_t first, const AsyncOutcome& outcome);

  // Each call leaves its container before its callback runs, and the loops go back to the
  // containers after each one: a callback may queue calls, or end everything (end_now()).
  static Call take_front(std::deque<Call>& calls) {
    Call c = std::move(calls.front());
    calls.pop_front();
    return c;
  }
  // Ends the first of `calls` with `outcome`.
  void finish_front(std::deque<Call>& calls, AsyncOutcome outcome) {
    end_call(take_front(calls), std::move(outcome));
  }

  std::mutex mutex;
  std::condition_variable wake;
  std::vector<Call> queued;  // guarded by mutex
  // call_joined()'s calls, each a part and its callback at one index.
  std::vector<Part> parts_queued;        // guarded by mutex
  std::vector<JoinedDone> dones_queued;  // guarded by mutex
  bool stopping = false;                 // guarded by mutex

  // The I/O thread's own.
  Pipelines::Connect connect;
  Join join;
  std::vector<Part> parts_taken;  // out of `parts_queued`, not yet joined
  std::vector<JoinedDone> dones_taken;
  ConnectionPtr connection;
  std::deque<Call> taken;  // out of `queued`, not yet sent
  std::deque<Call> in_flight;
  std::string batch;
  // The joined call's callers that end_joined() is handing their outcome, and the next one's
  // place: what end_now() must end when a callback destroys the pipeline meanwhile.
  std::vector<JoinedDone> ending;
  std::size_t ending_first = 0;
  std::size_t ending_next = 0;
  bool ended = false;  // end_now() ran: nothing may be retried, the backend is going
};

AsyncPipeline::AsyncPipeline(Pipelines::Connect connect, Join join)
    : state_(std::make_shared<State>(std::move(connect), std::move(join))),
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

void AsyncPipeline::call_joined(Part part, JoinedDone done) {
  if (state_->join) {
    std::unique_lock lock(state_->mutex);
    if (!state_->stopping) {
      state_->parts_queued.push_back(std::move(part));
      try {
        state_->dones_queued.push_back(std::move(done));
      } catch (...) {
        state_->parts_queued.pop_back();  // the two stay the same length
        throw;
      }
      lock.unlock();
      state_->wake.notify_one();
      return;
    }
  }
  const AsyncOutcome unsent = never_sent(
      state_->join ? "redis: not sent, the backend is shutting down" : "redis: nothing joins calls",
      false);
  finish_joined(done, unsent, 0);
}

void AsyncPipeline::State::take_queued() {
  for (Call& c : queued) taken.push_back(std::move(c));
  queued.clear();
  // Swapped, not copied: each side keeps a vector's capacity for its next batch.
  if (!dones_queued.empty()) {
    parts_taken.swap(parts_queued);
    dones_taken.swap(dones_queued);
  }
}

void AsyncPipeline::State::join_taken() {
  if (dones_taken.empty()) return;
  // Its own from here: a callback run below (out of memory) may destroy the pipeline, whose
  // end_now() takes and joins what is queued then.
  std::vector<Part> parts;
  std::vector<JoinedDone> dones;
  parts.swap(parts_taken);
  dones.swap(dones_taken);
  std::size_t from = 0;
  try {
    while (from < dones.size()) {
      const std::size_t count = std::min(kMaxJoined, dones.size() - from);
      Call c;
      if (!join(std::span<const Part>(parts).subspan(from, count), c.command)) break;
      c.joined.reserve(count);
      for (std::size_t i = from; i < from + count; ++i) {
        c.joined.push_back(std::move(dones[i]));  // reserved: no throw
      }
      try {
        taken.push_back(std::move(c));  // no effect when it throws (Call's move never throws)
      } catch (const std::bad_alloc&) {
        for (std::size_t i = 0; i < count; ++i) dones[from + i] = std::move(c.joined[i]);
        throw;
      }
      from += count;
    }
  } catch (const std::bad_alloc&) {  // the calls not in `taken` end below, never sent
  }
  if (from < dones.size()) {
    end_joined(dones, from,
               ended ? destroyed_outcome() : never_sent("redis: out of memory", false));
  }
  // The buffers back, for the next batch's capacity.
  parts.clear();
  dones.clear();
  if (parts_taken.empty()) parts_taken.swap(parts);
  if (dones_taken.empty()) dones_taken.swap(dones);
}

void AsyncPipeline::State::end_call(Call c, AsyncOutcome outcome) {
  if (c.done) {
    finish(c.done, std::move(outcome));
  } else {
    end_joined(c.joined, 0, outcome);
  }
}

void AsyncPipeline::State::end_joined(std::vector<JoinedDone>& dones, std::size_t first,
                                      const AsyncOutcome& outcome) {
  ending.swap(dones);  // empty: end_now() empties it before anything else may end a call
  ending_first = first;
  ending_next = first;
  while (ending_next < ending.size()) {
    const std::size_t at = ending_next++;
    JoinedDone done = std::move(ending[at]);
    finish_joined(done, outcome, at - first);
  }
  ending.clear();
}

void AsyncPipeline::State::run() {
  for (;;) {
    {
      std::unique_lock lock(mutex);
      wake.wait(lock, [&] { return stopping || !queued.empty() || !dones_queued.empty(); });
      if (queued.empty() && dones_queued.empty()) return;  // stopping, nothing in flight here
      take_queued();
    }
    join_taken();
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
      if (!connection->receive()) {
        fail_in_flight();
        break;
      }
      for (Delivered d = Delivered::kMore; d == Delivered::kMore && connection;) {
        d = deliver(kSlice);
        if (d == Delivered::kFailed) {
          fail_in_flight();
          break;
        }
        send_queued();  // the callbacks' next calls too, before the next slice and read
      }
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

void AsyncPipeline::State::send_queued() {
  {
    const std::lock_guard lock(mutex);
    take_queued();
  }
  join_taken();
  if (!taken.empty()) send(false);
}

AsyncPipeline::State::Delivered AsyncPipeline::State::deliver(std::size_t most) {
  for (std::size_t n = 0; !in_flight.empty(); ++n) {
    if (n == most) return Delivered::kMore;
    ReplyPtr reply = connection->take_reply();
    if (!reply) {
      return connection->failure() == IoFailure::kNone ? Delivered::kAll : Delivered::kFailed;
    }
    Call c = take_front(in_flight);
    const bool fresh = c.fresh;
    end_call(std::move(c), {.outcome = {.reply = std::move(reply)}, .fresh = fresh});
  }
  return Delivered::kAll;
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
    const bool fresh = c.fresh;
    end_call(std::move(c),
             {.outcome = {.failure = failure, .maybe_sent = true, .error = error}, .fresh = fresh});
  }
}

void AsyncPipeline::State::end_now() {
  {
    const std::lock_guard lock(mutex);
    take_queued();
  }
  ended = true;
  join_taken();        // its calls end with `taken`'s below
  connection.reset();  // closed while what it uses (a TLS context) exists
  const AsyncOutcome destroyed = destroyed_outcome();
  if (ending_next < ending.size()) {  // a joined call's callers end_joined() has not reached
    std::vector<JoinedDone> rest;
    rest.swap(ending);  // so that end_joined() stops, and the calls below may use it
    for (std::size_t i = ending_next; i < rest.size(); ++i) {
      JoinedDone done = std::move(rest[i]);
      finish_joined(done, destroyed, i - ending_first);
    }
  }
  end_in_flight(destroyed.outcome.failure, destroyed.outcome.error);
  while (!taken.empty()) {
    finish_front(taken, never_sent("redis: not sent, the backend is shutting down", false));
  }
}

}  // namespace idempotency::redis_detail
