// Server with an AsyncHandler: answered on the event loop or later from any thread, one answer
// per request however often the Responder is called, a 500 for a handler that throws or drops
// its Responder, keep-alive between asynchronous answers, and the shared event loop.
#include <gtest/gtest.h>
#include <httplib.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "http_test_util.h"
#include "idempotency/http.h"
#include "support/log_capture.h"

namespace idempotency::http {
namespace {

using testing::client_for;

// Test servers wait at most 1 s on an idle keep-alive connection, so stops stay quick.
ServeOptions quick_stop_options() {
  return ServeOptions{.keep_alive_timeout = std::chrono::seconds(1)};
}

TEST(AsyncHandler, AnswersOnTheEventLoop) {
  Server server(
      [](pubsub::PushRequest request, const Responder& respond) {
        respond(pubsub::PushResponse{.status = 202, .body = request.method + " " + request.path});
      },
      quick_stop_options());
  auto client = client_for(server.start("127.0.0.1", 0));
  auto result = client.Post("/push", "{}", "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 202);
  EXPECT_EQ(result->body, "POST /push");
}

TEST(AsyncHandler, AnswersLaterFromAnotherThreadAndKeepsTheConnection) {
  std::mutex mutex;
  std::vector<std::thread> answerers;
  Server server(
      [&](pubsub::PushRequest request, Responder respond) {
        std::lock_guard lock(mutex);
        answerers.emplace_back([request = std::move(request), respond = std::move(respond)] {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          respond(pubsub::PushResponse{.status = 200, .body = request.body});
        });
      },
      quick_stop_options());
  auto client = client_for(server.start("127.0.0.1", 0));
  client.set_keep_alive(true);
  for (const std::string body : {"one", "two", "three"}) {
    auto result = client.Post("/", body, "text/plain");
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 200);
    EXPECT_EQ(result->body, body);
  }
  server.stop();
  std::lock_guard lock(mutex);
  for (auto& t : answerers) t.join();
}

// An answer given after stop() began is the connection's last, and says so: a client that
// keeps connections would otherwise send its next request into a closed socket.
TEST(AsyncHandler, AnAnswerGivenAfterStopBeganSaysConnectionClose) {
  std::mutex mutex;
  std::optional<Responder> held;
  testing::Gate entered;
  Server server(
      [&](const pubsub::PushRequest&, Responder respond) {
        {
          std::lock_guard lock(mutex);
          held = std::move(respond);
        }
        entered.open();
      },
      quick_stop_options());
  const int port = server.start("127.0.0.1", 0);
  std::optional<httplib::Result> in_flight;
  std::thread request = testing::post_in_background(port, in_flight);
  ASSERT_TRUE(entered.wait());
  std::thread stopper([&] { server.stop(); });
  ASSERT_TRUE(testing::wait_until_refused(port));  // stop() has begun
  {
    std::lock_guard lock(mutex);
    (*held)(pubsub::PushResponse{.status = 200, .body = "finished"});
    held.reset();  // it holds the connection, which stop() waits for
  }
  request.join();
  stopper.join();
  ASSERT_TRUE(in_flight.has_value() && *in_flight) << "the in-flight request failed";
  EXPECT_EQ(in_flight->value().body, "finished");
  EXPECT_EQ(in_flight->value().get_header_value("Connection"), "close");
}

TEST(AsyncHandler, OnlyTheFirstAnswerIsSent) {
  Server server(
      [](const pubsub::PushRequest&, const Responder& respond) {
        respond(pubsub::PushResponse{.status = 200, .body = "first"});
        respond(pubsub::PushResponse{.status = 500, .body = "second"});
      },
      quick_stop_options());
  auto client = client_for(server.start("127.0.0.1", 0));
  client.set_keep_alive(true);
  for (int i = 0; i < 2; ++i) {
    auto result = client.Get("/");
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 200);
    EXPECT_EQ(result->body, "first");
  }
}

TEST(AsyncHandler, AThrowingHandlerIs500AndTheServerKeepsServing) {
  idempotency::testing::LogCapture logs;
  Server server(
      [](const pubsub::PushRequest& request, const Responder& respond) {
        if (request.path == "/throw") throw std::runtime_error("boom");
        respond(pubsub::PushResponse{.status = 200});
      },
      quick_stop_options());
  auto client = client_for(server.start("127.0.0.1", 0));
  auto thrown = client.Get("/throw");
  ASSERT_TRUE(thrown);
  EXPECT_EQ(thrown->status, 500);
  EXPECT_EQ(logs.count("handler_threw"), 1);
  auto fine = client.Get("/fine");
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->status, 200);
}

TEST(AsyncHandler, ADroppedResponderIs500NotAHang) {
  idempotency::testing::LogCapture logs;
  Server server([](const pubsub::PushRequest&, const Responder&) {}, quick_stop_options());
  auto client = client_for(server.start("127.0.0.1", 0));
  auto result = client.Get("/");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 500);
  EXPECT_EQ(logs.count("handler_dropped_request"), 1);
}

// Answers given while other requests await theirs go out at the end of the loop's pass, not at
// once (Connection::answer()): however they are put off, each reaches its own client, and each
// connection serves its next request after it.
TEST(AsyncHandler, AnswersGivenTogetherEachReachTheirOwnClient) {
  constexpr std::size_t kClients = 12;
  auto loop = std::make_shared<boost::asio::io_context>(1);
  ServeOptions options = quick_stop_options();
  options.event_loop = loop;
  std::vector<std::pair<std::string, Responder>> held;  // touched on the event loop alone
  Server server(
      [&](pubsub::PushRequest request, Responder respond) {
        held.emplace_back(std::move(request.body), std::move(respond));
        if (held.size() < kClients) return;
        // The last one in: all are answered, the latest first, on the loop but outside any
        // handler call (inside one, every answer is put off anyway).
        boost::asio::post(*loop, [&] {
          for (auto it = held.rbegin(); it != held.rend(); ++it) {
            it->second(pubsub::PushResponse{.status = 200, .body = "for " + it->first});
          }
          held.clear();
        });
      },
      options);
  const int port = server.start("127.0.0.1", 0);
  std::vector<std::thread> clients;
  std::vector<std::vector<std::string>> bodies(kClients);
  for (std::size_t c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto client = client_for(port);
      client.set_keep_alive(true);
      for (int round = 0; round < 2; ++round) {
        const auto result =
            client.Post("/", std::to_string(c) + "/" + std::to_string(round), "text/plain");
        bodies[c].push_back(result ? std::to_string(result->status) + " " + result->body
                                   : "no answer");
      }
    });
  }
  for (auto& t : clients) t.join();
  for (std::size_t c = 0; c < kClients; ++c) {
    EXPECT_EQ(bodies[c], (std::vector<std::string>{"200 for " + std::to_string(c) + "/0",
                                                   "200 for " + std::to_string(c) + "/1"}));
  }
}

TEST(AsyncHandler, RunsItsOwnAsynchronousWorkOnTheSharedEventLoop) {
  auto loop = std::make_shared<boost::asio::io_context>(1);
  ServeOptions options = quick_stop_options();
  options.event_loop = loop;
  std::thread::id loop_thread;
  std::thread::id timer_thread;
  std::mutex mutex;
  Server server(
      [&](const pubsub::PushRequest&, Responder respond) {
        {
          std::lock_guard lock(mutex);
          loop_thread = std::this_thread::get_id();
        }
        auto timer =
            std::make_shared<boost::asio::steady_timer>(*loop, std::chrono::milliseconds(5));
        timer->async_wait([&, timer, respond = std::move(respond)](boost::system::error_code) {
          {
            std::lock_guard lock(mutex);
            timer_thread = std::this_thread::get_id();
          }
          respond(pubsub::PushResponse{.status = 204});
        });
      },
      options);
  auto client = client_for(server.start("127.0.0.1", 0));
  auto result = client.Get("/");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 204);
  std::lock_guard lock(mutex);
  EXPECT_EQ(loop_thread, timer_thread) << "one event loop, one thread: no hop";
}

}  // namespace
}  // namespace idempotency::http
