// effect_sink: the fenced, recording side effect the crash storm and the zombie test call.
//
// An effect is `POST /effect/<sender>`: its key is the Idempotency-Key header, else the push
// envelope's message.messageId; its fence is X-Idempotency-Fence. The sink keeps the highest
// fence it accepted per key and refuses (409) an effect whose fence is not above it, as a sink
// keyed on the fence should. Every effect is recorded, accepted or refused, with the sender
// (the path segment after /effect/: the tests name the process there), the time it arrived and
// the time it was answered, read from CLOCK_MONOTONIC (std::chrono::steady_clock), which every
// process on the machine shares, so the tests can line effects up against their kills.
//
// An effect "works" for a random 0..--work-ms milliseconds after it arrives and is decided at
// the end of that work: the fence check is the write, made when the effect lands.
//
// Control, for the zombie test:
//   POST /hold?key=K&decide=before|after   the next effect for K is held until released; it is
//                                          decided before the wait (it landed, its answer is
//                                          late) or after it (the write itself lands late)
//   GET  /held?key=K                       "1" while an effect for K is being held
//   POST /release?key=K                    lets the held effect for K go on
//   GET  /effects                          every effect so far, one JSON object per line
// Prints "listening on PORT" once bound to 127.0.0.1 (a free port); exits 0 on SIGTERM.
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Effect {
  std::string key;
  std::int64_t fence = 0;
  std::string sender;
  std::int64_t arrived_ns = 0;
  std::int64_t answered_ns = 0;
  bool accepted = false;
};

// A hold armed for one key's next effect.
struct Hold {
  bool decide_first = false;  // decide=before: decided (landed), then its answer held
  bool holding = false;       // an effect is waiting on it now
  bool released = false;
};

class Sink {
 public:
  explicit Sink(int max_work_ms) : max_work_ms_(max_work_ms) {}

  // Performs one effect; returns the HTTP status to answer.
  int perform(const std::string& key, std::int64_t fence, const std::string& sender) {
    Effect effect{.key = key, .fence = fence, .sender = sender, .arrived_ns = now_ns()};
    std::unique_lock lock(mutex_);
    std::size_t recorded = 0;
    const auto hold = holds_.find(key);
    if (hold != holds_.end() && !hold->second.holding && !hold->second.released) {
      Hold& h = hold->second;
      h.holding = true;
      if (h.decide_first) recorded = decide(effect);
      changed_.wait(lock, [&] { return h.released; });
      if (!h.decide_first) recorded = decide(effect);
      holds_.erase(hold);
    } else {
      lock.unlock();
      work();
      lock.lock();
      recorded = decide(effect);
    }
    effects_[recorded].answered_ns = now_ns();
    return effects_[recorded].accepted ? 200 : 409;
  }

  void arm(const std::string& key, bool decide_first) {
    std::lock_guard lock(mutex_);
    holds_[key] = Hold{.decide_first = decide_first};
  }

  bool holding(const std::string& key) {
    std::lock_guard lock(mutex_);
    const auto it = holds_.find(key);
    return it != holds_.end() && it->second.holding;
  }

  void release(const std::string& key) {
    std::lock_guard lock(mutex_);
    if (auto it = holds_.find(key); it != holds_.end()) it->second.released = true;
    changed_.notify_all();
  }

  std::string dump() {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& e : effects_) {
      out += nlohmann::json{{"key", e.key},
                            {"fence", e.fence},
                            {"sender", e.sender},
                            {"arrived_ns", e.arrived_ns},
                            {"answered_ns", e.answered_ns},
                            {"accepted", e.accepted}}
                 .dump();
      out += '\n';
    }
    return out;
  }

 private:
  // The fence check: the write itself. Records the effect, in decision order, and returns
  // where. Called with mutex_ held.
  std::size_t decide(Effect effect) {
    auto [it, fresh] = highest_.try_emplace(effect.key, effect.fence);
    effect.accepted = fresh || effect.fence > it->second;
    if (effect.accepted) it->second = effect.fence;
    effects_.push_back(std::move(effect));
    return effects_.size() - 1;
  }

  void work() {
    if (max_work_ms_ <= 0) return;
    thread_local std::mt19937 random(std::random_device{}());
    std::uniform_int_distribution<int> ms(0, max_work_ms_);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms(random)));
  }

  const int max_work_ms_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::int64_t> highest_;  // guarded by mutex_
  std::map<std::string, Hold> holds_;            // guarded by mutex_
  std::vector<Effect> effects_;                  // guarded by mutex_; in decision order
};

// The effect's key: the Idempotency-Key header, else the push envelope's messageId.
std::optional<std::string> key_of(const httplib::Request& request) {
  if (request.has_header("Idempotency-Key")) return request.get_header_value("Idempotency-Key");
  const auto body = nlohmann::json::parse(request.body, nullptr, false);
  if (!body.is_object() || !body.contains("message") || !body["message"].is_object()) {
    return std::nullopt;
  }
  const auto& message = body["message"];
  if (!message.contains("messageId") || !message["messageId"].is_string()) return std::nullopt;
  return message["messageId"].get<std::string>();
}

std::optional<std::int64_t> fence_of(const httplib::Request& request) {
  const std::string text = request.get_header_value("X-Idempotency-Fence");
  char* end = nullptr;
  const long long fence = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || fence < 1) return std::nullopt;
  return fence;
}

}  // namespace

int main(int argc, char** argv) {
  int max_work_ms = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--work-ms") == 0 && i + 1 < argc) {
      max_work_ms = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--work-ms N]\n", argv[0]);
      return 2;
    }
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Sink sink(max_work_ms);
  httplib::Server server;
  // cpp-httplib holds a thread per open connection: enough for every keep-alive connection
  // four gateways' upstream pools may hold, so none waits behind an idle one.
  server.new_task_queue = [] { return new httplib::ThreadPool(256); };
  server.Post(R"(/effect/([^/]+).*)",
              [&](const httplib::Request& request, httplib::Response& response) {
                const auto key = key_of(request);
                const auto fence = fence_of(request);
                if (!key || !fence) {
                  response.status = 400;
                  response.set_content("an effect needs a key and a fence\n", "text/plain");
                  return;
                }
                response.status = sink.perform(*key, *fence, request.matches[1]);
              });
  server.Post("/hold", [&](const httplib::Request& request, httplib::Response& response) {
    sink.arm(request.get_param_value("key"), request.get_param_value("decide") == "before");
    response.status = 204;
  });
  server.Get("/held", [&](const httplib::Request& request, httplib::Response& response) {
    response.set_content(sink.holding(request.get_param_value("key")) ? "1" : "0", "text/plain");
  });
  server.Post("/release", [&](const httplib::Request& request, httplib::Response& response) {
    sink.release(request.get_param_value("key"));
    response.status = 204;
  });
  server.Get("/effects", [&](const httplib::Request&, httplib::Response& response) {
    response.set_content(sink.dump(), "application/x-ndjson");
  });

  const int port = server.bind_to_any_port("127.0.0.1");
  if (port <= 0) return 1;
  std::thread serving([&] { server.listen_after_bind(); });
  std::printf("listening on %d\n", port);
  std::fflush(stdout);
  int received = 0;
  sigwait(&signals, &received);
  // A held effect may still be waiting: leave at once rather than join its thread.
  std::_Exit(0);
}
