#include "redis_async_pipeline.h"

#include <exception>
#include <iterator>
#include <new>
#include <utility>

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

AsyncPipeline::AsyncPipeline(Pipelines::Connect connect)
    : connect_(std::move(connect)), thread_([this] { run(); }) {}

AsyncPipeline::~AsyncPipeline() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void AsyncPipeline::call(std::string command, Done done) {
  {
    std::unique_lock lock(mutex_);
    if (!stopping_) {
      queued_.push_back({std::move(command), std::move(done)});
      lock.unlock();
      wake_.notify_one();
      return;
    }
  }
  finish(done, never_sent("redis: not sent, the backend is shutting down", false));
}

void AsyncPipeline::run() {
  std::vector<Call> taken;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
      if (queued_.empty()) return;  // stopping, and nothing is in flight here
      taken.swap(queued_);
    }
    bool fresh = false;
    if (!connection_) {
      try {
        connection_ = connect_();
        fresh = true;
      } catch (const std::exception& e) {  // StoreError: refused, timed out; or out of memory
        for (Call& c : taken) finish(c.done, never_sent(e.what(), true));
        taken.clear();
        continue;
      }
    }
    send(taken, fresh);
    while (!in_flight_.empty()) {
      if (!connection_->receive() || !deliver()) {
        fail_in_flight();
        break;
      }
      // What queued meanwhile (the callbacks' next calls too) goes out before the next read.
      {
        const std::lock_guard lock(mutex_);
        taken.swap(queued_);
      }
      if (!taken.empty()) send(taken, false);
    }
  }
}

void AsyncPipeline::send(std::vector<Call>& calls, bool fresh) {
  for (Call& c : calls) c.fresh = fresh;
  try {
    for (const Call& c : calls) batch_.append(c.command);
    // A deque's insertion at its end has no effect when it throws std::bad_alloc (and Call's
    // move never throws), so on failure none of `calls` is in flight.
    in_flight_.insert(in_flight_.end(), std::make_move_iterator(calls.begin()),
                      std::make_move_iterator(calls.end()));
  } catch (const std::bad_alloc&) {
    batch_.clear();
    for (Call& c : calls) finish(c.done, never_sent("redis: out of memory", false));
    calls.clear();
    return;
  }
  calls.clear();
  const bool sent = connection_->send(batch_);
  batch_.clear();
  if (!sent) fail_in_flight();
}

bool AsyncPipeline::deliver() {
  while (!in_flight_.empty()) {
    ReplyPtr reply = connection_->take_reply();
    if (!reply) return connection_->failure() == IoFailure::kNone;
    Call c = std::move(in_flight_.front());
    in_flight_.pop_front();
    finish(c.done, {.outcome = {.reply = std::move(reply)}, .fresh = c.fresh});
  }
  return true;
}

void AsyncPipeline::fail_in_flight() {
  const IoFailure failure = connection_->failure();
  const std::string error = connection_->error();
  connection_.reset();
  // Moved out first: a callback's next call is queued, never added to these.
  std::deque<Call> ended;
  ended.swap(in_flight_);
  for (Call& c : ended) {
    finish(c.done,
           {.outcome = {.failure = failure == IoFailure::kNone ? IoFailure::kError : failure,
                        .maybe_sent = true,
                        .error = error},
            .fresh = c.fresh});
  }
}

}  // namespace idempotency::redis_detail
