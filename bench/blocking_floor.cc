// The floors of a blocking store call (blocking_floor.h). Both are measured without the
// library, so that they bound any client: a call that blocks its thread until the reply comes
// pays at least its system calls and one sleep and wake-up of that thread.
#include "blocking_floor.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include "measure.h"

namespace bench {
namespace {

// One RESP array of bulk strings.
std::string resp(std::initializer_list<std::string_view> args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (std::string_view a : args) {
    out += "$" + std::to_string(a.size()) + "\r\n";
    out.append(a);
    out += "\r\n";
  }
  return out;
}

// A blocking TCP connection to 127.0.0.1:port with TCP_NODELAY, as the library's are.
class Socket {
 public:
  explicit Socket(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(static_cast<std::uint16_t>(port));
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
    if (connect(fd_, reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0) {
      close(fd_);
      throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
    }
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Socket() { close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Sends `command` and waits for a reply that must be exactly `expected` (small replies
  // arrive whole on loopback; a short read is read on).
  void round_trip(const std::string& command, std::string_view expected) {
    if (send(fd_, command.data(), command.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(command.size())) {
      throw std::runtime_error("send() failed");
    }
    std::size_t got = 0;
    while (got < expected.size()) {
      const ssize_t n = recv(fd_, buf_ + got, sizeof buf_ - got, 0);
      if (n <= 0) throw std::runtime_error("the connection closed");
      got += static_cast<std::size_t>(n);
    }
    if (std::string_view(buf_, got) != expected) {
      throw std::runtime_error("unexpected reply from Redis: " + std::string(buf_, got));
    }
  }

 private:
  int fd_;
  char buf_[256]{};
};

// Two bare round trips a pair, a fresh key each: the claim's SET NX PX GET (nil: it is new)
// and a complete's SET XX PX (OK). No parsing beyond a byte compare, no allocation in the loop
// but the commands' strings. The loop runs on a thread of its own while measure_window() times
// it, as store_bench's drivers are timed.
void pair_floor(int port, double seconds) {
  Socket redis(port);
  std::random_device rd;
  const std::string prefix = "idempotency:floor-" + std::to_string(rd()) + "-";
  const std::string value = "0123456789abcdef0123456789abcdef";  // a token's size
  std::atomic<int> phase{0};                                     // 0 warm-up, 1 measured, 2 stop
  std::uint64_t pairs = 0;
  std::exception_ptr failure;  // a round trip's, rethrown once the window is over
  std::thread loop([&] {
    try {
      std::uint64_t i = 0;
      for (int p = 0; p != 2; p = phase.load(std::memory_order_relaxed)) {
        const std::string key = prefix + std::to_string(i++);
        redis.round_trip(resp({"SET", key, value, "NX", "PX", "3600000", "GET"}), "$-1\r\n");
        redis.round_trip(resp({"SET", key, value, "XX", "PX", "3600000"}), "+OK\r\n");
        if (p == 1) ++pairs;
      }
    } catch (...) {
      failure = std::current_exception();
    }
  });
  const auto [elapsed, cpu] = measure_window(phase, seconds);
  loop.join();
  if (failure) std::rethrow_exception(failure);
  std::printf(
      "{\"kind\":\"blocking_floor\",\"backend\":\"redis\",\"path\":\"pair\",\"threads\":1,"
      "\"pairs\":%llu,\"seconds\":%.3f,\"rate\":%.1f,\"client_cpu_us_per_pair\":%.2f,"
      "\"tool\":\"store_bench floor: SET NX PX GET then SET XX PX, blocking send/recv\"}\n",
      static_cast<unsigned long long>(pairs), elapsed, static_cast<double>(pairs) / elapsed,
      cpu * 1e6 / static_cast<double>(pairs));
  std::fflush(stdout);
}

// Pins the calling thread to `cpu`.
void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// Two threads hand a turn back and forth through a mutex and a condition variable, each
// sleeping until the other hands it back: every handover is one thread's futex wake-up of
// another and that one's sleep, as when the thread that reads a reply wakes the caller blocked
// on it. The CPU counted is both threads' (the waker's system call and the sleeper's sleep),
// as a client process pays both. Pinned to one core, no wake-up crosses cores (the cheapest).
void wake_floor(double seconds, bool pinned) {
  int cpu = -1;
  if (pinned) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    sched_getaffinity(0, sizeof mine, &mine);
    for (int c = 0; c < CPU_SETSIZE && cpu < 0; ++c) {
      if (CPU_ISSET(c, &mine)) cpu = c;
    }
  }
  std::mutex m;
  std::condition_variable cv;
  int turn = 0;               // 0: the first thread's, 1: the second's, -1: stop
  std::atomic<int> phase{0};  // 0 warm-up, 1 measured, 2 stop
  std::uint64_t handovers = 0;
  // Each thread hands the turn over outside the lock, so the one it wakes never finds the lock
  // still held and sleeps a second time on it: one sleep and one wake-up a handover.
  auto hand_over = [&](int to) {
    {
      const std::lock_guard lock(m);
      turn = to;
    }
    cv.notify_one();
  };
  std::thread second([&] {
    if (cpu >= 0) pin(cpu);
    for (;;) {
      {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return turn != 0; });
        if (turn < 0) return;
      }
      hand_over(0);
    }
  });
  std::thread first([&] {
    if (cpu >= 0) pin(cpu);
    for (int p = 0; p != 2; p = phase.load(std::memory_order_relaxed)) {
      hand_over(1);
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return turn == 0; });
      if (p == 1) handovers += 2;  // to the second thread and back
    }
    hand_over(-1);
  });
  const auto [elapsed, cpu_used] = measure_window(phase, seconds);
  first.join();
  second.join();
  std::printf(
      "{\"kind\":\"blocking_floor\",\"backend\":\"thread\",\"path\":\"wake\",\"pinned\":%s,"
      "\"wakes\":%llu,\"seconds\":%.3f,\"cpu_us_per_wake\":%.2f,"
      "\"tool\":\"store_bench floor: two threads hand a turn over a condition variable\"}\n",
      pinned ? "true" : "false", static_cast<unsigned long long>(handovers), elapsed,
      cpu_used * 1e6 / static_cast<double>(handovers));
  std::fflush(stdout);
}

}  // namespace

int blocking_floor(int port, double seconds) {
  pair_floor(port, seconds);
  wake_floor(seconds, true);
  wake_floor(seconds, false);
  return 0;
}

}  // namespace bench
