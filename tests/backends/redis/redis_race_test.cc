// Several processes x threads race one key, then a thousand keys: each key is won exactly
// once. Children are fork()ed before this process starts any thread, and report over a pipe.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "idempotency/redis_lock.h"
#include "redis_test_util.h"

namespace idempotency::testing {
namespace {

constexpr int kProcesses = 4;
constexpr int kThreads = 4;

// Tallies one child sends: per outcome, and the indices of the keys it won.
struct Tally {
  std::int32_t won = 0, done = 0, held = 0;
  std::vector<std::int32_t> won_keys;
};

// Runs in a child: every thread claims every key (in its own order) and completes what it
// wins. Returns the tally.
Tally race(const std::string& url, const std::string& prefix, int keys, unsigned seed) {
  RedisLock lock(url, RedisOptions{.key_prefix = prefix, .pool_size = 3});
  std::vector<Tally> per_thread(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int> order(static_cast<std::size_t>(keys));
      for (int i = 0; i < keys; ++i) order[static_cast<std::size_t>(i)] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(seed * 31 + static_cast<unsigned>(t)));
      Tally& mine = per_thread[static_cast<std::size_t>(t)];
      for (int i : order) {
        ClaimResult r = lock.claim("key-" + std::to_string(i), std::chrono::minutes(1));
        if (auto* w = std::get_if<Won>(&r)) {
          ++mine.won;
          mine.won_keys.push_back(i);
          if (!lock.complete(w->claim)) std::abort();
        } else if (std::holds_alternative<AlreadyDone>(r)) {
          ++mine.done;
        } else {
          ++mine.held;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  Tally all;
  for (const Tally& t : per_thread) {
    all.won += t.won;
    all.done += t.done;
    all.held += t.held;
    all.won_keys.insert(all.won_keys.end(), t.won_keys.begin(), t.won_keys.end());
  }
  return all;
}

bool write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* data, std::size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Forks kProcesses children racing `keys` keys under one fresh prefix; returns their tallies.
std::vector<Tally> race_in_processes(int keys) {
  const std::string url = fixture_redis_url();
  const std::string prefix = unique_name("idem_race") + ":";
  std::vector<std::pair<pid_t, int>> children;
  for (int p = 0; p < kProcesses; ++p) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::close(fds[0]);
      int code = 0;
      try {
        Tally t = race(url, prefix, keys, static_cast<unsigned>(p + 1));
        const std::int32_t header[4] = {t.won, t.done, t.held,
                                        static_cast<std::int32_t>(t.won_keys.size())};
        if (!write_all(fds[1], header, sizeof header) ||
            !write_all(fds[1], t.won_keys.data(), t.won_keys.size() * sizeof(std::int32_t))) {
          code = 3;
        }
      } catch (...) {
        code = 2;
      }
      ::close(fds[1]);
      ::_exit(code);  // no gtest teardown, no atexit handlers in the child
    }
    ::close(fds[1]);
    children.emplace_back(pid, fds[0]);
  }
  std::vector<Tally> tallies;
  for (auto [pid, fd] : children) {
    Tally t;
    std::int32_t header[4] = {0, 0, 0, 0};
    const bool ok = read_all(fd, header, sizeof header);
    if (ok) {
      t.won = header[0];
      t.done = header[1];
      t.held = header[2];
      t.won_keys.resize(static_cast<std::size_t>(header[3]));
      EXPECT_TRUE(read_all(fd, t.won_keys.data(), t.won_keys.size() * sizeof(std::int32_t)));
    }
    ::close(fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "child " << pid << " failed with status " << status;
    EXPECT_TRUE(ok);
    tallies.push_back(std::move(t));
  }
  return tallies;
}

TEST(RedisRace, ProcessesAndThreadsRacingOneKeyAdmitExactlyOne) {
  std::vector<Tally> tallies = race_in_processes(1);
  int won = 0, others = 0;
  for (const Tally& t : tallies) {
    won += t.won;
    others += t.done + t.held;
  }
  EXPECT_EQ(won, 1);
  EXPECT_EQ(others, kProcesses * kThreads - 1);
}

TEST(RedisRace, AThousandKeysRacedByProcessesAndThreadsAreEachWonExactlyOnce) {
  constexpr int kKeys = 1000;
  std::vector<Tally> tallies = race_in_processes(kKeys);
  std::vector<int> wins(kKeys, 0);
  int calls = 0;
  for (const Tally& t : tallies) {
    calls += t.won + t.done + t.held;
    for (std::int32_t k : t.won_keys) {
      ASSERT_GE(k, 0);
      ASSERT_LT(k, kKeys);
      ++wins[static_cast<std::size_t>(k)];
    }
  }
  EXPECT_EQ(calls, kProcesses * kThreads * kKeys);
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_EQ(wins[static_cast<std::size_t>(k)], 1) << "key index " << k;
  }
}

}  // namespace
}  // namespace idempotency::testing
