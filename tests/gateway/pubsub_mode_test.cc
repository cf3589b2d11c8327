// The pubsub mode's metrics, in process: every request is counted once, from its typed
// outcome. Outcomes that share a status (four kinds of 503) or a header are counted apart, and
// the counting function is never shown a response, so the push status table can change
// without the counters miscounting.
#include "pubsub_mode.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <cctype>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/memory_lock.h"
#include "metered_backend.h"
#include "metrics.h"
#include "support/base64.h"
#include "support/faulty_backend.h"
#include "support/joiners.h"
#include "support/log_capture.h"
#include "support/sending_backend.h"
#include "upstream_pool.h"

namespace idempotency::gateway {
namespace {

using namespace std::chrono_literals;
using pubsub::DeliveryOutcome;
using pubsub::OutcomeEvent;
using pubsub::PushRequest;
using testing::FaultyBackend;
using testing::SendingBackend;

// --- the mapping, without a single response -------------------------------------------------

static_assert(std::is_same_v<decltype(&metric_outcome), std::string_view (*)(const OutcomeEvent&)>,
              "the metric is a function of the typed outcome alone: no status, no header");

// --- the backend's calls, timed and counted on both paths --------------------------------------

TEST(MeteredBackend, AsynchronousCallsAreForwardedTimedAndTheirFailuresCounted) {
  auto memory = std::make_shared<InMemoryLock>();
  auto faulty = std::make_shared<FaultyBackend>(*memory);
  auto metrics = std::make_shared<Metrics>();
  MeteredBackend metered(std::make_shared<SendingBackend>(faulty), metrics);
  EXPECT_TRUE(metered.sends_async()) << "the gateway's event loop may call it itself";
  EXPECT_FALSE(MeteredBackend(memory, metrics).sends_async());

  std::optional<AsyncClaimResult> claimed;
  metered.claim_async("k", 60s, {}, [&](AsyncClaimResult r) { claimed = std::move(r); });
  ASSERT_TRUE(claimed && std::holds_alternative<ClaimResult>(*claimed));
  const Claim claim = std::get<Won>(std::get<ClaimResult>(*claimed)).claim;
  faulty->fail_complete = true;
  std::optional<AsyncCompleteResult> completed;
  metered.complete_async(claim, "r", [&](AsyncCompleteResult r) { completed = std::move(r); });
  ASSERT_TRUE(completed && std::holds_alternative<StoreFailure>(*completed));
  EXPECT_EQ(faulty->claims, 1);
  EXPECT_EQ(faulty->completes, 1);

  const std::string text = metrics->render();
  const std::string duration = "idempotency_gateway_backend_duration_seconds_count";
  EXPECT_NE(text.find(duration + "{operation=\"claim\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find(duration + "{operation=\"complete\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("idempotency_gateway_backend_errors_total{operation=\"complete\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("idempotency_gateway_backend_errors_total{operation=\"claim\"} 0\n"),
            std::string::npos)
      << text;
}

TEST(PubsubMetricOutcome, EveryTypedOutcomeHasItsCounter) {
  const PushRequest request;
  auto label = [&](DeliveryOutcome o, const std::exception* error = nullptr) {
    return metric_outcome(OutcomeEvent{.outcome = o, .request = &request, .error = error});
  };
  EXPECT_EQ(label(DeliveryOutcome::kHandled), "handled");
  EXPECT_EQ(label(DeliveryOutcome::kJoined), "joined");
  EXPECT_EQ(label(DeliveryOutcome::kDuplicate), "duplicate");
  EXPECT_EQ(label(DeliveryOutcome::kReplayed), "replayed");
  EXPECT_EQ(label(DeliveryOutcome::kContention), "contention");
  EXPECT_EQ(label(DeliveryOutcome::kStoreError), "backend_error");
  EXPECT_EQ(label(DeliveryOutcome::kMalformed), "bad_request");
  EXPECT_EQ(label(DeliveryOutcome::kNoKey), "bad_request");
  EXPECT_EQ(label(DeliveryOutcome::kUnauthenticated), "unauthorized");
  EXPECT_EQ(label(DeliveryOutcome::kUnguarded), "handled");
  EXPECT_EQ(label(DeliveryOutcome::kOutcomeUnknown), "nack_upstream_no_answer");

  const UpstreamNack unreachable(UpstreamFailure::kUnreachable, 503, "refused");
  const UpstreamNack rejected(UpstreamFailure::kRejected, 500, "answered 404");
  const pubsub::Nack foreign(503, "not the forward step's");
  const OutcomeUnknown silent("no answer");
  const std::runtime_error other("bad_alloc, say");
  EXPECT_EQ(label(DeliveryOutcome::kHandlerNacked, &unreachable), "nack_upstream_unreachable");
  EXPECT_EQ(label(DeliveryOutcome::kHandlerNacked, &rejected), "nack_upstream");
  EXPECT_EQ(label(DeliveryOutcome::kHandlerNacked, &foreign), "error");
  EXPECT_EQ(label(DeliveryOutcome::kHandlerNacked), "error");
  EXPECT_EQ(label(DeliveryOutcome::kHandlerFailed, &other), "error");
  EXPECT_EQ(label(DeliveryOutcome::kHandlerFailed, &silent), "nack_upstream_no_answer")
      << "unguarded, a silent upstream is answered as a failure; it is still a silent upstream";
}

TEST(PubsubMetricOutcome, SharedLabelsAreTheLibrarysNamesAndStayWhatDashboardsRead) {
  EXPECT_EQ(outcome::kHandled, pubsub::to_string(DeliveryOutcome::kHandled));
  EXPECT_EQ(outcome::kJoined, pubsub::to_string(DeliveryOutcome::kJoined));
  EXPECT_EQ(outcome::kDuplicate, pubsub::to_string(DeliveryOutcome::kDuplicate));
  EXPECT_EQ(outcome::kReplayed, pubsub::to_string(DeliveryOutcome::kReplayed));
  EXPECT_EQ(outcome::kContention, pubsub::to_string(DeliveryOutcome::kContention));
  for (auto [label, exported] :
       std::map<std::string_view, std::string_view>{{outcome::kHandled, "handled"},
                                                    {outcome::kJoined, "joined"},
                                                    {outcome::kDuplicate, "duplicate"},
                                                    {outcome::kReplayed, "replayed"},
                                                    {outcome::kContention, "contention"}}) {
    EXPECT_EQ(label, exported) << "a renamed label breaks every dashboard that reads it";
  }
}

// --- the handler, in process ----------------------------------------------------------------

// A loopback upstream that answers every request with `status`, or, while `hang` is set,
// reads it and says nothing until the client gives up; it counts what it was sent.
class Upstream {
 public:
  Upstream() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (listener_ < 0 ||
        ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener_, 64) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      throw std::runtime_error("bind/listen 127.0.0.1");
    }
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~Upstream() {
    stop_ = true;
    acceptor_.join();
    std::lock_guard lock(mutex_);
    connections_.clear();  // joins every connection thread
    ::close(listener_);
  }
  Upstream(const Upstream&) = delete;
  Upstream& operator=(const Upstream&) = delete;

  [[nodiscard]] std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::atomic<int> status{200};
  std::atomic<bool> hang{false};
  /// While set, a request is held until it is cleared, then answered.
  std::atomic<bool> gate{false};
  std::atomic<int> requests{0};

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd fd{listener_, POLLIN, 0};
      if (::poll(&fd, 1, 10) <= 0) continue;
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      std::lock_guard lock(mutex_);
      connections_.emplace_back([this, client] {
        serve(client);
        ::close(client);
      });
    }
  }

  // Waits up to 10 ms for the client; false once it has closed or the server stops.
  bool client_still_there(int client) const {
    pollfd fd{client, POLLIN, 0};
    if (::poll(&fd, 1, 10) > 0) {
      char byte = 0;
      if (::recv(client, &byte, 1, MSG_PEEK) <= 0) return false;
    }
    return !stop_;
  }

  void serve(int client) {
    std::string request;
    char buffer[4096];
    std::size_t end = std::string::npos;
    std::size_t body = 0;
    while (end == std::string::npos || request.size() < end + body) {
      if (!client_still_there(client)) return;
      const auto n = ::recv(client, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n <= 0) continue;
      request.append(buffer, static_cast<std::size_t>(n));
      if (end == std::string::npos && (end = request.find("\r\n\r\n")) != std::string::npos) {
        end += 4;
        std::string head = request.substr(0, end);
        for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (const auto at = head.find("content-length:"); at != std::string::npos) {
          body = std::stoul(head.substr(at + 15));
        }
      }
    }
    ++requests;
    if (hang) {
      while (client_still_there(client)) {
      }
      return;
    }
    while (gate && client_still_there(client)) {
    }
    const std::string answer = "HTTP/1.1 " + std::to_string(status.load()) +
                               " X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    (void)::send(client, answer.data(), answer.size(), MSG_NOSIGNAL);
  }

  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<std::jthread> connections_;
};

// A port nothing listens on: bound, then closed.
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  (void)::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  (void)::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

PushRequest push(const std::string& id, const nlohmann::json& attributes = nullptr,
                 const std::string& authorization = "Bearer ok") {
  nlohmann::json message = {{"messageId", id}, {"data", testing::base64("order " + id)}};
  if (!attributes.is_null()) message["attributes"] = attributes;
  PushRequest r;
  r.path = "/push";
  r.headers = {{"Content-Type", "application/json"}, {"Authorization", authorization}};
  r.body =
      nlohmann::json{{"message", message}, {"subscription", "projects/p/subscriptions/o"}}.dump();
  return r;
}

// requests_total by outcome, as /metrics exports it.
std::map<std::string, int> counters(const Metrics& metrics) {
  std::map<std::string, int> out;
  const std::string text = metrics.render();
  const std::string prefix = "idempotency_gateway_requests_total{outcome=\"";
  for (auto at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1)) {
    const auto name_end = text.find('"', at + prefix.size());
    const auto value_end = text.find('\n', name_end);
    out[text.substr(at + prefix.size(), name_end - at - prefix.size())] =
        std::stoi(text.substr(name_end + 3, value_end - name_end - 3));
  }
  return out;
}

// Each outcome is counted under its own name, however many there are before it in the list
// count() scans; a name that is not an outcome counts as "error".
TEST(GatewayMetrics, EachOutcomeCountsUnderItsOwnNameAndAnUnknownOneAsError) {
  Metrics metrics;
  const std::vector<std::string_view> all = {
      outcome::kHandled,      outcome::kJoined,       outcome::kDuplicate,
      outcome::kReplayed,     outcome::kContention,   outcome::kConflict,
      outcome::kMismatch,     outcome::kNackUpstream, outcome::kNackUnreachable,
      outcome::kNackNoAnswer, outcome::kBackendError, outcome::kBadRequest,
      outcome::kUnauthorized, outcome::kPassthrough,  outcome::kError};
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (std::size_t n = 0; n <= i; ++n) metrics.count(all[i]);  // the i-th counted i + 1 times
  }
  metrics.count("no_such_outcome");
  metrics.count("handle");  // a prefix of a name is another name
  const auto counted = counters(metrics);
  EXPECT_EQ(counted.size(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    const int extra = all[i] == outcome::kError ? 2 : 0;
    EXPECT_EQ(counted.at(std::string(all[i])), static_cast<int>(i + 1) + extra) << all[i];
  }
}

// Parameter: with an authenticator (the blocking path: authenticating may fetch keys) or
// without (the asynchronous path on the event loop).
class PubsubModeMetrics : public ::testing::TestWithParam<bool> {
 protected:
  // The event loop upstream exchanges run on, and the workers store calls may run on.
  std::shared_ptr<boost::asio::io_context> loop_ = std::make_shared<boost::asio::io_context>(1);
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> keep_ =
      boost::asio::make_work_guard(*loop_);
  std::jthread loop_thread_{[loop = loop_] { loop->run(); }};
  boost::asio::thread_pool workers_{4};

  ~PubsubModeMetrics() override {
    workers_.join();
    keep_.reset();
    loop_thread_.join();
  }

  testing::LogCapture logs_;
  std::shared_ptr<InMemoryLock> store_ = std::make_shared<InMemoryLock>();
  std::shared_ptr<FaultyBackend> backend_ = std::make_shared<FaultyBackend>(*store_);
  std::shared_ptr<Metrics> metrics_ = std::make_shared<Metrics>();
  Upstream upstream_;
  std::map<std::string, int> before_ = counters(*metrics_);

  // The upstream's deadline. Exchanges that must succeed (connect, answer) get a long one,
  // whatever the machine's load; only those where the upstream hangs, which end at it, get
  // kHang.
  static constexpr std::chrono::milliseconds kAnswered = 10s;
  static constexpr std::chrono::milliseconds kHang = 1s;

  http::Handler handler(const std::string& upstream_url, KeySpec key = {},
                        std::chrono::milliseconds timeout = kAnswered) {
    Config config;
    config.key = std::move(key);
    config.lease = 60s;
    GatewayDeps deps{.backend = backend_,
                     .upstream = std::make_shared<const UpstreamPool>(
                         parse_upstream_url(upstream_url),
                         UpstreamOptions{.connect_timeout = timeout, .timeout = timeout}),
                     .metrics = metrics_,
                     .loop = loop_,
                     .run_blocking = [this](std::function<void()> work) {
                       boost::asio::post(workers_, std::move(work));
                     }};
    if (GetParam()) {
      deps.authenticate = [](const PushRequest& r) -> std::optional<std::string> {
        if (r.header("authorization") == "Bearer ok") return std::nullopt;
        return "token refused";
      };
    }
    // Each request sent and its answer awaited, as the HTTP server would write it.
    return [async = make_pubsub_handler(config, deps)](const PushRequest& request) {
      auto answer = std::make_shared<std::promise<pubsub::PushResponse>>();
      auto future = answer->get_future();
      async(std::make_shared<const PushRequest>(request),
            [answer](pubsub::PushResponse response) { answer->set_value(std::move(response)); });
      return future.get();
    };
  }
  http::Handler handler(KeySpec key = {}, std::chrono::milliseconds timeout = kAnswered) {
    return handler(upstream_.url(), std::move(key), timeout);
  }

  // What moved since the last call: outcome -> how many more.
  std::map<std::string, int> counted() {
    std::map<std::string, int> moved;
    const auto now = counters(*metrics_);
    for (const auto& [name, value] : now) {
      if (value != before_[name]) moved[name] = value - before_[name];
    }
    before_ = now;
    return moved;
  }
  using Moved = std::map<std::string, int>;
};

TEST_P(PubsubModeMetrics, EveryPathIsCountedOnceUnderItsOwnOutcome) {
  auto handle = handler();
  EXPECT_EQ(handle(push("m-1")).status, 200);
  EXPECT_EQ(counted(), (Moved{{"handled", 1}}));
  EXPECT_EQ(handle(push("m-1")).status, 204);
  EXPECT_EQ(counted(), (Moved{{"duplicate", 1}}));

  (void)store_->claim("m-2", 15min);  // another instance holds it
  EXPECT_EQ(handle(push("m-2")).status, 503);
  EXPECT_EQ(counted(), (Moved{{"contention", 1}}));

  backend_->fail_claim = true;
  EXPECT_EQ(handle(push("m-3")).status, 503);
  EXPECT_EQ(counted(), (Moved{{"backend_error", 1}}));
  backend_->fail_claim = false;

  upstream_.status = 404;
  EXPECT_EQ(handle(push("m-4")).status, 500);
  EXPECT_EQ(counted(), (Moved{{"nack_upstream", 1}}));
  upstream_.status = 200;

  upstream_.hang = true;
  EXPECT_EQ(handler({}, kHang)(push("m-5")).status, 503);
  EXPECT_EQ(counted(), (Moved{{"nack_upstream_no_answer", 1}}));
  upstream_.hang = false;

  PushRequest malformed = push("m-6");
  malformed.body = R"({"message": {"messageId": "m-6", "data": "***"}})";
  EXPECT_EQ(handle(malformed).status, 400);
  EXPECT_EQ(counted(), (Moved{{"bad_request", 1}}));

  if (GetParam()) {
    EXPECT_EQ(handle(push("m-7", nullptr, "Bearer forged")).status, 401);
    EXPECT_EQ(counted(), (Moved{{"unauthorized", 1}}));
  }

  auto by_attribute = handler(KeySpec{.kind = KeySpec::Kind::kAttribute, .name = "po_id"});
  EXPECT_EQ(by_attribute(push("m-8")).status, 400);
  EXPECT_EQ(counted(), (Moved{{"bad_request", 1}}));

  auto unreachable = handler("http://127.0.0.1:" + std::to_string(closed_port()));
  EXPECT_EQ(unreachable(push("m-9")).status, 503);
  EXPECT_EQ(counted(), (Moved{{"nack_upstream_unreachable", 1}}));
}

// The old count read the answer back: a 503 without Retry-After was "backend_error". A
// delivery that joined one whose upstream went silent gets exactly that answer, yet the store
// never failed: counted from its typed outcome, it is what it is.
TEST_P(PubsubModeMetrics, ADeliveryJoinedToASilentUpstreamIsCountedAsNoAnswerNotAStoreError) {
  auto handle = handler({}, kHang);
  upstream_.hang = true;
  std::jthread owner([&] { EXPECT_EQ(handle(push("m-10")).status, 503); });
  while (upstream_.requests.load() == 0) std::this_thread::sleep_for(1ms);
  std::jthread joiner([&] { EXPECT_EQ(handle(push("m-10")).status, 503); });
  owner.join();
  joiner.join();
  auto moved = counted();
  EXPECT_EQ(moved["backend_error"], 0);
  EXPECT_GE(moved["nack_upstream_no_answer"], 1);
  // One too late to join meets the key still held: contention, also not a store error.
  EXPECT_EQ(moved["nack_upstream_no_answer"] + moved["contention"], 2);
  EXPECT_EQ(upstream_.requests.load(), 1);
}

TEST_P(PubsubModeMetrics, ADeliveryJoinedToARunningOneIsCountedJoined) {
  auto handle = handler();
  upstream_.gate = true;
  std::jthread owner([&] { EXPECT_EQ(handle(push("m-11")).status, 200); });
  while (upstream_.requests.load() == 0) std::this_thread::sleep_for(1ms);
  auto join = [&] { EXPECT_TRUE(pubsub::is_ack(handle(push("m-11")).status)); };
  std::vector<std::jthread> joiner = testing::start_joiners(join, 1);
  upstream_.gate = false;
  owner.join();
  joiner.clear();
  auto moved = counted();
  EXPECT_EQ(moved["handled"], 1);
  EXPECT_EQ(moved["joined"], 1) << "counted as " << (moved["duplicate"] == 1 ? "a duplicate" : "?");
  EXPECT_EQ(upstream_.requests.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Paths, PubsubModeMetrics, ::testing::Bool(), [](const auto& info) {
  return info.param ? "BlockingWithAuthenticator" : "Asynchronous";
});

}  // namespace
}  // namespace idempotency::gateway
