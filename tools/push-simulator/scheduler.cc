#include "scheduler.h"

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "codec.h"
#include "envelope.h"

namespace idempotency::push_sim {
namespace {

namespace asio = boost::asio;

std::string topic_name(const Options& o) { return "projects/" + o.project + "/topics/" + o.topic; }

bool chance(std::mt19937_64& random, double p) {
  return p > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(random) < p;
}

}  // namespace

Scheduler::Scheduler(asio::io_context& io, const Options& options, std::vector<SimMessage> messages,
                     std::mt19937_64& random, EventLog* events, std::ostream* dead_letter,
                     OidcSigner* signer)
    : io_(io),
      options_(options),
      messages_(std::move(messages)),
      random_(random),
      events_(events),
      dead_letter_(dead_letter),
      signer_(signer),
      run_timer_(io),
      drain_timer_(io) {
  const auto deadline = scaled(options.ack_deadline, options.time_scale);
  // The ack deadline is also Pub/Sub's push request timeout: the endpoint closes a request
  // still open then, so a handler that cancels work when its client goes away meets that here,
  // and a slow endpoint never holds more than --concurrency connections.
  const auto connect = std::min<std::chrono::milliseconds>(deadline, std::chrono::seconds(5));
  for (const auto& spec : options.subscriptions) {
    Sub sub{.spec = spec, .resume = std::make_unique<asio::steady_timer>(io)};
    const auto urls = spec.instances.empty() ? std::vector<std::string>{spec.url} : spec.instances;
    for (const auto& url : urls) {
      try {
        sub.instances.push_back(std::make_shared<Endpoint>(
            url, connect, deadline, static_cast<std::size_t>(options.concurrency)));
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("endpoint '" + url + "': " + e.what());
      }
    }
    subs_.push_back(std::move(sub));
  }
}

Scheduler::~Scheduler() = default;

void Scheduler::start() {
  started_ = Clock::now();
  stats_.subscriptions = subs_.size();
  // Republished copies: the same data and attributes under a new messageId, as a producer that
  // publishes one logical event twice.
  const std::size_t originals = messages_.size();
  for (std::size_t i = 0; i < originals; ++i) {
    if (chance(random_, options_.republish_rate)) {
      SimMessage copy = messages_[i];
      copy.id = new_message_id(random_);
      messages_.push_back(std::move(copy));
      ++stats_.republished;
    }
  }
  const auto now = std::chrono::system_clock::now();
  for (auto& m : messages_) m.publish_time = now;
  published_at_.assign(messages_.size(), started_);
  stats_.published = messages_.size();

  for (std::size_t m = 0; m < messages_.size(); ++m) {
    for (std::size_t s = 0; s < subs_.size(); ++s) {
      const bool duplicate = chance(random_, options_.duplicate_rate);
      tracks_.push_back(Track{.message = m, .sub = s});
      const std::size_t track = tracks_.size() - 1;
      add_chain(track, false, false);
      if (duplicate && options_.duplicate_concurrent && messages_[m].ordering_key.empty()) {
        add_chain(track, true, false);  // alongside the first delivery
      } else {
        tracks_[track].duplicate_after_ack = duplicate;
      }
    }
  }
  run_timer_.expires_after(options_.run_timeout);
  run_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    stats_.timed_out = true;
    stop();
  });
  for (std::size_t s = 0; s < subs_.size(); ++s) dispatch(s);
  check_done();
}

void Scheduler::add_chain(std::size_t track, bool duplicate, bool front_of_key) {
  chains_.push_back(Chain{.track = track, .duplicate = duplicate});
  const std::size_t chain = chains_.size() - 1;
  ++live_chains_;
  ++tracks_[track].live_chains;
  if (duplicate) ++stats_.duplicates;
  Sub& sub = subs_[tracks_[track].sub];
  const std::string& key = messages_[tracks_[track].message].ordering_key;
  if (key.empty()) {
    sub.ready.push_back(chain);
    return;
  }
  auto& queue = sub.keys[key];
  if (front_of_key) {
    queue.waiting.push_front(chain);
  } else {
    queue.waiting.push_back(chain);
  }
  release_key(sub, key);
}

// With message ordering one message per key is outstanding: the next is released only when the
// one before it is acked (or dead-lettered).
void Scheduler::release_key(Sub& sub, const std::string& key) {
  auto& queue = sub.keys[key];
  if (queue.busy || queue.waiting.empty()) return;
  queue.busy = true;
  sub.ready.push_back(queue.waiting.front());
  queue.waiting.pop_front();
}

void Scheduler::dispatch(std::size_t s) {
  Sub& sub = subs_[s];
  while (!stopped_ && sub.in_flight < options_.concurrency && !sub.ready.empty() && !paused(s)) {
    const std::size_t chain = sub.ready.front();
    sub.ready.pop_front();
    start_attempt(chain);
  }
}

// With the immediate policy the push back-off paces the subscription: while it pauses, nothing
// is sent, and a timer dispatches again when the pause ends.
bool Scheduler::paused(std::size_t s) {
  if (options_.retry.kind != RetryPolicy::Kind::kImmediate) return false;
  Sub& sub = subs_[s];
  if (Clock::now() >= sub.push_backoff.resume_at()) return false;
  if (!sub.resume_armed) {
    sub.resume_armed = true;
    sub.resume->expires_at(sub.push_backoff.resume_at());
    sub.resume->async_wait([this, s](boost::system::error_code ec) {
      subs_[s].resume_armed = false;
      if (!ec && !stopped_) dispatch(s);
    });
  }
  return true;
}

void Scheduler::start_attempt(std::size_t chain) {
  Track& track = tracks_[chains_[chain].track];
  // A dead-lettered message is never delivered again, nor one whose attempts are spent (a copy
  // of a message another copy acked).
  if (track.dead ||
      (options_.max_delivery_attempts > 0 && track.failures >= options_.max_delivery_attempts)) {
    end_chain(chain);
    return;
  }
  Sub& sub = subs_[track.sub];
  const SimMessage& message = messages_[track.message];
  const int number = track.failures + 1;
  ++stats_.deliveries;
  // Behind a balanced subscription, each attempt meets whichever instance the balancer picks
  // (drawn only then, so that an unbalanced run's seed replays as before).
  const std::size_t instance =
      sub.instances.size() == 1
          ? 0
          : std::uniform_int_distribution<std::size_t>(0, sub.instances.size() - 1)(random_);
  const Endpoint& endpoint = *sub.instances[instance];
  DeliveryContext context{
      .subscription = sub.spec.name, .topic = topic_name(options_), .path = endpoint.target()};
  if (options_.max_delivery_attempts > 0) context.delivery_attempt = number;
  if (signer_ != nullptr) context.bearer = signer_->token(std::chrono::system_clock::now());
  auto request =
      std::make_shared<const pubsub::PushRequest>(build_request(options_.form, message, context));

  auto attempt = std::make_shared<Attempt>();
  attempt->id = next_attempt_id_++;
  attempt->chain = chain;
  attempt->number = number;
  attempt->start = Clock::now();
  // Not after the endpoint's own timeout, which starts a moment later: the deadline's timer
  // fires first, and the close follows.
  attempt->deadline_at = attempt->start + scaled(options_.ack_deadline, options_.time_scale);
  attempt->deadline = std::make_unique<asio::steady_timer>(io_);
  open_[attempt->id] = attempt;
  ++sub.in_flight;

  attempt->deadline->expires_at(attempt->deadline_at);
  attempt->deadline->async_wait([this, attempt](boost::system::error_code ec) {
    if (!ec && !attempt->done && !stopped_) on_deadline(attempt);
  });
  endpoint.send(std::move(request), io_, [this, attempt](const AttemptResult& result) {
    if (!stopped_) on_answer(attempt, result);
  });
}

void Scheduler::on_deadline(const std::shared_ptr<Attempt>& attempt) {
  // Pub/Sub counts the delivery as nacked and redelivers; the endpoint closes the request at
  // the same deadline, and its slot is freed then (on_answer), so open requests never exceed
  // --concurrency.
  expire(attempt);
}

void Scheduler::expire(const std::shared_ptr<Attempt>& attempt) {
  if (attempt->expired) return;
  attempt->expired = true;
  ++stats_.deadline_expired;
  on_nack(attempt->chain, {.status = std::nullopt, .error = "ack deadline expired"});
}

void Scheduler::on_answer(const std::shared_ptr<Attempt>& attempt, const AttemptResult& result) {
  attempt->done = true;
  attempt->deadline->cancel();
  open_.erase(attempt->id);
  // The endpoint's timeout may be handled before the deadline's timer: the same expiry.
  if (!attempt->expired && !result.status && Clock::now() >= attempt->deadline_at) {
    expire(attempt);
  }
  const std::size_t chain = attempt->chain;
  const std::size_t s = tracks_[chains_[chain].track].sub;
  --subs_[s].in_flight;
  AttemptEvent event = event_of(*attempt, result);
  if (attempt->expired) {
    // Already a nack. An answer that raced the close is recorded, never acked.
    if (result.status) {
      ++stats_.answers[std::to_string(*result.status)];
      ++stats_.late_answers;
      event.late = true;
    } else {
      event.error = "ack deadline expired: the request was closed";
    }
    if (events_ != nullptr) events_->write(event);
    dispatch(s);
    check_done();
    return;
  }
  ++stats_.answers[result.status ? std::to_string(*result.status) : "error"];
  const Track& track = tracks_[chains_[chain].track];
  if (classify(result.status, false) == Verdict::kAck) {
    // An ack for a message another copy already dead-lettered settles nothing.
    event.acked = !track.dead;
    event.after_dead_letter = track.dead;
    if (events_ != nullptr) events_->write(event);
    on_ack(chain);
  } else {
    ++stats_.nacked;
    if (events_ != nullptr) events_->write(event);
    on_nack(chain, result);
  }
  dispatch(s);
}

void Scheduler::on_ack(std::size_t chain) {
  const std::size_t t = chains_[chain].track;
  Track& track = tracks_[t];
  subs_[track.sub].push_backoff.on_ack();
  if (track.dead) {
    ++stats_.acked_after_dead_letter;
  } else if (!track.acked) {
    track.acked = true;
    ++stats_.acked;
    const auto latency = Clock::now() - published_at_[track.message];
    stats_.ack_latency_ms.push_back(std::chrono::duration<double, std::milli>(latency).count());
    if (track.duplicate_after_ack && !chains_[chain].duplicate) {
      // Delivered again after its ack, ahead of the next message of its ordering key.
      add_chain(t, true, true);
    }
  }
  end_chain(chain);
}

void Scheduler::on_nack(std::size_t chain, const AttemptResult& outcome) {
  Track& track = tracks_[chains_[chain].track];
  const std::size_t s = track.sub;
  ++track.failures;
  subs_[s].push_backoff.on_nack(Clock::now(), options_.time_scale);
  if (track.dead) {  // another copy dead-lettered it: nothing left to deliver
    end_chain(chain);
    return;
  }
  if (options_.max_delivery_attempts > 0 && track.failures >= options_.max_delivery_attempts) {
    if (!track.acked) dead_letter(track, outcome);
    end_chain(chain);
    return;
  }
  after(scaled(backoff(options_.retry, track.failures), options_.time_scale), [this, chain, s] {
    subs_[s].ready.push_back(chain);
    dispatch(s);
  });
}

void Scheduler::end_chain(std::size_t chain) {
  Track& track = tracks_[chains_[chain].track];
  --track.live_chains;
  --live_chains_;
  const std::string& key = messages_[track.message].ordering_key;
  if (!key.empty()) {
    Sub& sub = subs_[track.sub];
    sub.keys[key].busy = false;
    release_key(sub, key);
    dispatch(track.sub);
  }
  check_done();
}

// `outcome` is the attempt whose nack (or expired deadline) spent the last delivery attempt.
void Scheduler::dead_letter(Track& track, const AttemptResult& outcome) {
  track.dead = true;
  ++stats_.dead_lettered;
  if (dead_letter_ == nullptr) return;
  const SimMessage& m = messages_[track.message];
  nlohmann::json line{{"subscription", subs_[track.sub].spec.name},
                      {"message", wrapped_message(m)},
                      {"deliveryAttempts", track.failures}};
  // The attributes Pub/Sub adds to a message it forwards to a dead-letter topic.
  line["message"]["attributes"]["CloudPubSubDeadLetterSourceDeliveryCount"] =
      std::to_string(track.failures);
  line["message"]["attributes"]["CloudPubSubDeadLetterSourceSubscription"] =
      subs_[track.sub].spec.name;
  if (outcome.status) {
    line["lastStatus"] = *outcome.status;
  } else {
    line["lastError"] = outcome.error.empty() ? "no answer" : outcome.error;
  }
  *dead_letter_ << line.dump() << '\n' << std::flush;
}

void Scheduler::check_done() {
  if (stopped_ || live_chains_ > 0) return;
  if (!draining_) {
    draining_ = true;
    stats_.elapsed_ms = since_start_ms(Clock::now());
    // Every open request is closed by its deadline: waiting one ack deadline is enough.
    drain_timer_.expires_after(scaled(options_.ack_deadline, options_.time_scale));
    drain_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) stop();
    });
  }
  if (open_.empty()) stop();
}

void Scheduler::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (!draining_) stats_.elapsed_ms = since_start_ms(Clock::now());
  io_.stop();
}

void Scheduler::after(std::chrono::milliseconds delay, std::function<void()> fn) {
  if (delay.count() == 0) {
    asio::post(io_, [this, fn = std::move(fn)] {
      if (!stopped_) fn();
    });
    return;
  }
  auto timer = std::make_shared<asio::steady_timer>(io_, delay);
  timer->async_wait([this, timer, fn = std::move(fn)](boost::system::error_code ec) {
    if (!ec && !stopped_) fn();
  });
}

double Scheduler::since_start_ms(Clock::time_point t) const {
  return std::chrono::duration<double, std::milli>(t - started_).count();
}

AttemptEvent Scheduler::event_of(const Attempt& attempt, const AttemptResult& result) const {
  const Chain& chain = chains_[attempt.chain];
  const Track& track = tracks_[chain.track];
  const SimMessage& m = messages_[track.message];
  return AttemptEvent{.subscription = subs_[track.sub].spec.name,
                      .message_id = m.id,
                      .ordering_key = m.ordering_key,
                      .attempt = attempt.number,
                      .duplicate = chain.duplicate,
                      .start_ms = since_start_ms(attempt.start),
                      .end_ms = since_start_ms(Clock::now()),
                      .status = result.status,
                      .error = result.error,
                      .deadline_expired = attempt.expired};
}

Stats Scheduler::finish() {
  for (const auto& [id, attempt] : open_) {
    AttemptEvent event = event_of(*attempt, {.status = std::nullopt, .error = "run ended"});
    event.abandoned = true;
    if (events_ != nullptr) events_->write(event);
  }
  open_.clear();
  stats_.unsettled = 0;
  for (const auto& track : tracks_) {
    if (!track.acked && !track.dead) ++stats_.unsettled;
  }
  return stats_;
}

}  // namespace idempotency::push_sim
