// Scheduler: Pub/Sub's delivery loop for one run, on one Asio event loop. Every message goes to
// every subscription; each (subscription, message) is delivered until acked or, with a
// dead-letter policy, dead-lettered once its delivery attempts (1 + nacks + expired deadlines,
// counted over all its copies, as Pub/Sub counts them per message) reach
// --max-delivery-attempts; it is settled once, acked or dead-lettered, never both. A nack waits
// its back-off (with the immediate policy, the subscription's push back-off). The ack deadline
// is also the request timeout: a request still open then is closed and counted as a nack. Per
// subscription at most --concurrency requests are open (a slot is freed when its request is
// closed, not when its deadline nacks it); per ordering key one message is outstanding, in
// publish order.
//
// Thread safety: not thread-safe; everything runs on the io_context's one thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "endpoint.h"
#include "event_log.h"
#include "message_source.h"
#include "oidc_signer.h"
#include "options.h"
#include "retry.h"
#include "summary.h"

namespace idempotency::push_sim {

/// Scheduler runs one simulation.
class Scheduler {
 public:
  /// Scheduler() takes the run's messages (publish times are set by start()). `events`,
  /// `dead_letter` and `signer` may be null. Throws std::invalid_argument for a bad endpoint URL.
  Scheduler(boost::asio::io_context& io, const Options& options, std::vector<SimMessage> messages,
            std::mt19937_64& random, EventLog* events, std::ostream* dead_letter,
            OidcSigner* signer);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// start() publishes every message and starts delivering; the io_context stops once every
  /// message is settled and every request closed (at the latest one ack deadline later), or
  /// when --run-timeout passes. Call once, then run the io_context.
  void start();

  /// finish() records the requests still open as abandoned and returns the run's counts. Call
  /// after the io_context stopped.
  [[nodiscard]] Stats finish();

 private:
  using Clock = std::chrono::steady_clock;

  struct Track {  // one message on one subscription
    std::size_t message = 0;
    std::size_t sub = 0;
    // Nacks and expired deadlines of every copy: the next request's deliveryAttempt is one
    // more (a copy sent without either, a duplicate, does not count, as in Pub/Sub's rule).
    int failures = 0;
    int live_chains = 0;
    bool acked = false;
    bool dead = false;
    bool duplicate_after_ack = false;
  };
  struct Chain {  // one obligation to deliver, until acked or given up
    std::size_t track = 0;
    bool duplicate = false;
  };
  struct Attempt {
    std::uint64_t id = 0;
    std::size_t chain = 0;
    int number = 0;
    Clock::time_point start;
    Clock::time_point deadline_at;
    bool expired = false;
    bool done = false;
    std::unique_ptr<boost::asio::steady_timer> deadline;
  };
  struct KeyQueue {
    std::deque<std::size_t> waiting;
    bool busy = false;
  };
  struct Sub {
    Subscription spec;
    std::vector<std::shared_ptr<Endpoint>> instances;  ///< One, or --balance's several.
    int in_flight = 0;  ///< Requests open (sent and not yet answered or closed).
    std::deque<std::size_t> ready;
    std::map<std::string, KeyQueue> keys;
    PushBackoff push_backoff;  ///< Paces deliveries with the immediate retry policy.
    std::unique_ptr<boost::asio::steady_timer> resume;  ///< Wakes dispatch() after a pause.
    bool resume_armed = false;
  };

  void add_chain(std::size_t track, bool duplicate, bool front_of_key);
  void release_key(Sub& sub, const std::string& key);
  void dispatch(std::size_t sub);
  void start_attempt(std::size_t chain);
  void on_answer(const std::shared_ptr<Attempt>& attempt, const AttemptResult& result);
  void on_deadline(const std::shared_ptr<Attempt>& attempt);
  void expire(const std::shared_ptr<Attempt>& attempt);
  void on_ack(std::size_t chain);
  void on_nack(std::size_t chain, const AttemptResult& outcome);
  void end_chain(std::size_t chain);
  void dead_letter(Track& track, const AttemptResult& outcome);
  [[nodiscard]] bool paused(std::size_t sub);
  void check_done();
  void stop();
  void after(std::chrono::milliseconds delay, std::function<void()> fn);
  [[nodiscard]] double since_start_ms(Clock::time_point t) const;
  AttemptEvent event_of(const Attempt& attempt, const AttemptResult& result) const;

  boost::asio::io_context& io_;
  const Options& options_;
  std::vector<SimMessage> messages_;
  std::vector<Clock::time_point> published_at_;
  std::mt19937_64& random_;
  EventLog* events_;
  std::ostream* dead_letter_;
  OidcSigner* signer_;
  std::vector<Sub> subs_;
  std::vector<Track> tracks_;
  std::vector<Chain> chains_;
  std::map<std::uint64_t, std::shared_ptr<Attempt>> open_;  // requests without an answer yet
  std::uint64_t next_attempt_id_ = 1;
  int live_chains_ = 0;
  bool draining_ = false;
  bool stopped_ = false;
  Clock::time_point started_;
  Stats stats_;
  boost::asio::steady_timer run_timer_;
  boost::asio::steady_timer drain_timer_;
};

}  // namespace idempotency::push_sim
