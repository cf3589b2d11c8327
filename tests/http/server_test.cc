// Server: the adapter round trip, keep-alive, limits, the exception barrier, the bounded
// worker pool, graceful stop and bind errors, through cpp-httplib's own client.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "http_test_util.h"
#include "idempotency/http.h"
#include "support/log_capture.h"

namespace idempotency::http {
namespace {

using testing::client_for;
using testing::Gate;
using ::testing::HasSubstr;
using testing::wait_until_refused;

// Test servers wait at most 1 s on an idle keep-alive connection, so stops stay quick.
ServeOptions test_options() {
  return ServeOptions{.workers = 4, .keep_alive_timeout = std::chrono::seconds(1)};
}

pubsub::PushResponse ok(std::string body = "ok") {
  return pubsub::PushResponse{.status = 200, .headers = {}, .body = std::move(body)};
}

TEST(HttpServer, RoundTripsMethodHeadersBodyAndStatus) {
  std::mutex mutex;
  std::vector<pubsub::PushRequest> seen;
  Server server(
      [&](const pubsub::PushRequest& request) {
        std::lock_guard lock(mutex);
        seen.push_back(request);
        return pubsub::PushResponse{
            .status = 202,
            .headers = {{"X-Reply", "r1"}, {"Content-Type", "application/json"}},
            .body = R"({"seen":")" + request.method + "\"}"};
      },
      test_options());
  const int port = server.start("127.0.0.1", 0);
  auto client = client_for(port);

  auto post = client.Post("/push?token=1", httplib::Headers{{"X-Custom", "a b"}},
                          R"({"message":{}})", "application/json");
  ASSERT_TRUE(post) << httplib::to_string(post.error());
  EXPECT_EQ(post->status, 202);
  EXPECT_EQ(post->get_header_value("X-Reply"), "r1");
  EXPECT_EQ(post->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(post->body, R"({"seen":"POST"})");

  for (const std::string method : {"GET", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
    httplib::Request request;
    request.method = method;
    request.path = "/any/path";
    if (method == "PUT" || method == "PATCH" || method == "DELETE") request.body = "payload";
    auto result = client.send(request);
    ASSERT_TRUE(result) << method;
    EXPECT_EQ(result->status, 202) << method;
    EXPECT_EQ(result->body, R"({"seen":")" + method + "\"}");
  }

  std::lock_guard lock(mutex);
  ASSERT_EQ(seen.size(), 6U);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].body, R"({"message":{}})");
  EXPECT_EQ(seen[0].header("x-custom"), "a b");
  EXPECT_EQ(seen[0].header("Content-Type"), "application/json");
  // cpp-httplib's peer-address pseudo-headers are not request headers.
  EXPECT_FALSE(seen[0].header("REMOTE_ADDR").has_value());
  EXPECT_FALSE(seen[0].header("LOCAL_PORT").has_value());
  EXPECT_EQ(seen[2].method, "PUT");
  EXPECT_EQ(seen[2].body, "payload");
  EXPECT_EQ(seen[4].method, "DELETE");
  EXPECT_EQ(seen[4].body, "payload");
}

TEST(HttpServer, KeepAliveServesTwoRequestsOnOneConnection) {
  Server server([](const pubsub::PushRequest&) { return ok(); }, test_options());
  const int port = server.start("127.0.0.1", 0);
  auto client = client_for(port);
  client.set_keep_alive(true);
  std::atomic<int> sockets{0};
  client.set_socket_options([&](int) { ++sockets; });

  auto first = client.Post("/", "one", "text/plain");
  auto second = client.Post("/", "two", "text/plain");
  ASSERT_TRUE(first);
  ASSERT_TRUE(second);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(second->status, 200);
  EXPECT_EQ(sockets.load(), 1);
  client.stop();
}

TEST(HttpServer, BodyOverTheLimitIs413WithoutCallingTheHandler) {
  std::atomic<int> calls{0};
  auto options = test_options();
  options.max_body_bytes = 1024;
  Server server(
      [&](const pubsub::PushRequest&) {
        ++calls;
        return ok();
      },
      options);
  const int port = server.start("127.0.0.1", 0);

  {
    auto client = client_for(port);
    auto result = client.Post("/", std::string(2048, 'x'), "text/plain");
    ASSERT_TRUE(result) << httplib::to_string(result.error());
    EXPECT_EQ(result->status, 413);
  }
  {
    // Chunked: no Content-Length, so only the bounded read can catch it.
    auto client = client_for(port);
    auto result = client.Post(
        "/",
        [](std::size_t offset, httplib::DataSink& sink) {
          if (offset >= 4096) {
            sink.done();
            return true;
          }
          const std::string chunk(512, 'y');
          return sink.write(chunk.data(), chunk.size());
        },
        "text/plain");
    // The server may close before the client finishes sending; either way no handler call.
    if (result) {
      EXPECT_EQ(result->status, 413);
    }
  }
  {
    auto client = client_for(port);
    auto result = client.Post("/", std::string(1024, 'z'), "text/plain");
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 200);
  }
  EXPECT_EQ(calls.load(), 1);
}

TEST(HttpServer, ThrowingHandlerAnswers500AndTheServerKeepsServing) {
  idempotency::testing::LogCapture logs;
  std::atomic<int> calls{0};
  Server server(
      [&](const pubsub::PushRequest&) -> pubsub::PushResponse {
        if (++calls == 1) throw std::runtime_error("store unreachable\nsecond line");
        return ok();
      },
      test_options());
  const int port = server.start("127.0.0.1", 0);
  auto client = client_for(port);

  auto failed = client.Post("/", "a", "text/plain");
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, 500);
  EXPECT_EQ(std::count(failed->body.begin(), failed->body.end(), '\n'), 1);
  EXPECT_THAT(failed->body, ::testing::Not(HasSubstr("store unreachable")));

  auto next = client.Post("/", "b", "text/plain");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(logs.count("handler_threw"), 1);
  EXPECT_THAT(logs.all_text(), HasSubstr("store unreachable"));
  EXPECT_THAT(logs.all_text(), ::testing::Not(HasSubstr("second line")));
}

TEST(HttpServer, BoundedPoolMakesTheThirdRequestWaitForAFreeWorker) {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> events;
  std::array<Gate, 3> gates;
  const auto record = [&](const std::string& event) {
    {
      std::lock_guard lock(mutex);
      events.push_back(event);
    }
    changed.notify_all();
  };
  const auto count_entered = [&] {
    return std::count_if(events.begin(), events.end(),
                         [](const std::string& e) { return e.starts_with("enter"); });
  };
  auto options = test_options();
  options.workers = 2;
  Server server(
      [&](const pubsub::PushRequest& request) {
        const int n = std::stoi(request.body);
        record("enter " + request.body);
        gates.at(n).wait();
        record("exit " + request.body);
        return ok();
      },
      options);
  const int port = server.start("127.0.0.1", 0);
  const auto send = [port](int n) {
    auto client = client_for(port);
    auto result = client.Post("/", std::to_string(n), "text/plain");
    EXPECT_TRUE(result && result->status == 200) << n;
  };

  std::thread first(send, 0);
  std::thread second(send, 1);
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(
        changed.wait_for(lock, std::chrono::seconds(5), [&] { return count_entered() == 2; }));
  }
  gates[2].open();
  std::thread third(send, 2);
  // Give an unbounded server every chance to start the third request; not a timing assertion.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  {
    std::lock_guard lock(mutex);
    EXPECT_EQ(count_entered(), 2);
  }
  gates[0].open();
  third.join();
  gates[1].open();
  first.join();
  second.join();

  std::lock_guard lock(mutex);
  const auto at = [&](const std::string& e) {
    return std::find(events.begin(), events.end(), e) - events.begin();
  };
  EXPECT_LT(at("exit 0"), at("enter 2"));
  EXPECT_LT(at("exit 2"), at("exit 1"));
  EXPECT_EQ(events.size(), 6U);
}

TEST(HttpServer, StopLetsTheInFlightRequestFinishAndRefusesNewConnections) {
  Gate entered;
  Gate release;
  Server server(
      [&](const pubsub::PushRequest&) {
        entered.open();
        release.wait();
        return ok("finished");
      },
      test_options());
  const int port = server.start("127.0.0.1", 0);

  std::optional<httplib::Result> in_flight;
  std::thread request = testing::post_in_background(port, in_flight);
  ASSERT_TRUE(entered.wait());
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    server.stop();
    stopped = true;
  });
  // stop() closes the listening socket before it waits: new connections are refused while
  // the request is still inside the handler.
  EXPECT_TRUE(wait_until_refused(port));
  EXPECT_FALSE(stopped.load());
  release.open();
  request.join();
  stopper.join();

  ASSERT_TRUE(in_flight.has_value() && *in_flight) << "the in-flight request failed";
  const auto& response = in_flight->value();
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, "finished");
  EXPECT_EQ(response.get_header_value("Connection"), "close");
  EXPECT_FALSE(server.running());
  auto late = client_for(port).Post("/", "late", "text/plain");
  EXPECT_FALSE(late);
}

TEST(HttpServer, StopGivesUpAfterTheGracePeriod) {
  idempotency::testing::LogCapture logs;
  Gate release;
  Gate entered;
  auto options = test_options();
  options.shutdown_grace = std::chrono::milliseconds(100);
  auto server = std::make_unique<Server>(
      [&](const pubsub::PushRequest&) {
        entered.open();
        release.wait();
        return ok();
      },
      options);
  const int port = server->start("127.0.0.1", 0);
  std::thread request([&] { (void)client_for(port).Post("/", "slow", "text/plain"); });
  ASSERT_TRUE(entered.wait());
  server->stop();
  EXPECT_EQ(logs.count("shutdown_grace_exceeded"), 1);
  server.reset();  // the overrunning request keeps its own reference to the server state
  release.open();
  request.join();
}

TEST(HttpServer, BindingAPortInUseThrowsAClearError) {
  const auto listener = testing::listen_on_free_port();
  ASSERT_GE(listener.fd, 0);
  Server server([](const pubsub::PushRequest&) { return ok(); }, test_options());
  try {
    (void)server.start("127.0.0.1", listener.port);
    ADD_FAILURE() << "start() bound a port in use";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(listener.port)));
    EXPECT_THAT(e.what(), HasSubstr("in use"));
  }
  ::close(listener.fd);

  // Nor can a second server take the port of a running one.
  Server first([](const pubsub::PushRequest&) { return ok(); }, test_options());
  const int port = first.start("127.0.0.1", 0);
  Server second([](const pubsub::PushRequest&) { return ok(); }, test_options());
  EXPECT_THROW((void)second.start("127.0.0.1", port), std::runtime_error);
}

TEST(HttpServer, StartTwiceThrowsAndStopIsIdempotent) {
  Server server([](const pubsub::PushRequest&) { return ok(); }, test_options());
  server.stop();  // before start: nothing to do
  const int port = server.start("127.0.0.1", 0);
  EXPECT_GT(port, 0);
  EXPECT_TRUE(server.running());
  EXPECT_THROW((void)server.start("127.0.0.1", 0), std::runtime_error);
  server.stop();
  server.stop();
  EXPECT_FALSE(server.running());
}

}  // namespace
}  // namespace idempotency::http
