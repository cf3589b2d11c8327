// serve(): a child process serves until SIGTERM, finishes the request in flight and exits 0.
#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "http_test_util.h"
#include "idempotency/http.h"

namespace idempotency::http {
namespace {

// Reads exactly `size` bytes from `fd`, waiting at most 5 s in all.
bool read_exactly(int fd, void* out, std::size_t size) {
  auto* bytes = static_cast<char*>(out);
  std::size_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (got < size) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    const auto n = ::read(fd, bytes + got, size - got);
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

// Waits at most 5 s for `child` to exit and returns its wait status, or -1 (after killing it).
int wait_for_exit(pid_t child) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(child, &status, WNOHANG) == child) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  return -1;
}

TEST(HttpServe, SigtermFinishesTheRequestInFlightAndExitsZero) {
  std::array<int, 2> ready{};    // child -> parent: the bound port
  std::array<int, 2> entered{};  // child -> parent: the handler has started
  std::array<int, 2> release{};  // parent -> child: the handler may answer
  ASSERT_EQ(::pipe(ready.data()), 0);
  ASSERT_EQ(::pipe(entered.data()), 0);
  ASSERT_EQ(::pipe(release.data()), 0);

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const auto handler = [&](const pubsub::PushRequest&) {
      const char e = 'E';
      (void)!::write(entered[1], &e, 1);
      char r = 0;
      (void)read_exactly(release[0], &r, 1);
      return pubsub::PushResponse{.status = 200, .headers = {}, .body = "finished"};
    };
    ServeOptions options{
        .workers = 2,
        .keep_alive_timeout = std::chrono::seconds(1),
        .shutdown_grace = std::chrono::seconds(5),
        .on_listening = [&](int port) { (void)!::write(ready[1], &port, sizeof(port)); }};
    ::_exit(serve("127.0.0.1", 0, handler, options));
  }

  int port = 0;
  ASSERT_TRUE(read_exactly(ready[0], &port, sizeof(port)));
  std::optional<httplib::Result> in_flight;
  std::thread request([&] {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(std::chrono::seconds(5));
    in_flight.emplace(client.Post("/", "slow", "text/plain"));
  });
  char e = 0;
  ASSERT_TRUE(read_exactly(entered[0], &e, 1));
  ASSERT_EQ(::kill(child, SIGTERM), 0);
  // The child stops listening while the handler still waits for the release byte.
  EXPECT_TRUE(testing::wait_until_refused(port));
  const char r = 'R';
  ASSERT_EQ(::write(release[1], &r, 1), 1);
  request.join();

  ASSERT_TRUE(in_flight.has_value() && *in_flight) << "the in-flight request failed";
  EXPECT_EQ(in_flight->value().status, 200);
  EXPECT_EQ(in_flight->value().body, "finished");
  const int status = wait_for_exit(child);
  ASSERT_NE(status, -1) << "the child did not exit";
  ASSERT_TRUE(WIFEXITED(status)) << "wait status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (auto fd : {ready[0], ready[1], entered[0], entered[1], release[0], release[1]}) ::close(fd);
}

TEST(HttpServe, ReturnsOneWhenItCannotBind) {
  const auto listener = testing::listen_on_free_port();
  ASSERT_GE(listener.fd, 0);
  EXPECT_EQ(serve("127.0.0.1", listener.port,
                  [](const pubsub::PushRequest&) { return pubsub::PushResponse{}; }),
            1);
  ::close(listener.fd);
}

}  // namespace
}  // namespace idempotency::http
