// PostgreSQL-specific tests: real server-clock expiry, multi-process races, faults
// (terminated backends, lost replies, timeouts), bad input, batching, key hygiene.
#include "idempotency/postgres_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "idempotency/clock.h"
#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "idempotency/open_backend.h"
#include "postgres_admin.h"
#include "postgres_internal.h"
#include "support/claim_matchers.h"
#include "support/eventually.h"
#include "support/server_clock_checks.h"
#include "support/test_servers.h"
#include "tcp_relay.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::Not;

using ConnDeleter = PgConnDeleter;
using ResultDeleter = PgResultDeleter;

// Listener is a raw libpq connection LISTENing on a backend's channel, to see exactly which
// notifications a statement sent: a marker NOTIFYed afterwards from another connection arrives
// after every notification committed before it, so reading up to the marker is complete.
class Listener {
 public:
  Listener(const std::string& url, const std::string& table)
      : conn_(PQconnectdb(url.c_str())),
        channel_("idempotency_" + key_fingerprint("\"" + table + "\"")) {
    if (PQstatus(conn_.get()) != CONNECTION_OK) {
      throw std::runtime_error(std::string("listener connect: ") + PQerrorMessage(conn_.get()));
    }
    const std::unique_ptr<PGresult, ResultDeleter> r(
        PQexec(conn_.get(), ("LISTEN " + channel_).c_str()));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) throw std::runtime_error("LISTEN failed");
  }
  // payloads_until_marker() NOTIFYs `marker` through `admin` and returns every payload that
  // arrived before it.
  std::vector<std::string> payloads_until_marker(Admin& admin, const std::string& marker) {
    admin.exec("NOTIFY " + channel_ + ", '" + marker + "'");
    std::vector<std::string> payloads;
    while (true) {
      pollfd pfd{PQsocket(conn_.get()), POLLIN, 0};
      if (::poll(&pfd, 1, 1000) <= 0) continue;
      if (PQconsumeInput(conn_.get()) == 0) throw std::runtime_error("listener lost");
      while (PGnotify* note = PQnotifies(conn_.get())) {
        const std::string payload = note->extra != nullptr ? note->extra : "";
        PQfreemem(note);
        if (payload == marker) return payloads;
        payloads.push_back(payload);
      }
    }
  }

 private:
  std::unique_ptr<PGconn, ConnDeleter> conn_;
  std::string channel_;
};

// with_option() adds a libpq option to a URL or a key/value conninfo.
std::string with_option(const std::string& conninfo, const std::string& key,
                        const std::string& value) {
  if (conninfo.find("://") == std::string::npos) return conninfo + " " + key + "=" + value;
  return conninfo + (conninfo.find('?') == std::string::npos ? "?" : "&") + key + "=" + value;
}

// Upstream is where a conninfo connects: its host and port, parsed by libpq.
struct Upstream {
  std::string host;
  std::string port;
};

std::optional<Upstream> upstream_of(const std::string& conninfo) {
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(conninfo.c_str(), &error);
  if (parsed == nullptr) {
    PQfreemem(error);
    return std::nullopt;
  }
  Upstream out{"localhost", "5432"};
  for (const PQconninfoOption* o = parsed; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || *o->val == '\0') continue;
    const std::string keyword = o->keyword;
    if (keyword == "hostaddr" || (keyword == "host" && out.host == "localhost")) out.host = o->val;
    if (keyword == "port") out.port = o->val;
  }
  PQconninfoFree(parsed);
  // One host only, and over TCP: the relay stands in front of it.
  if (out.host.find_first_of(",/") != std::string::npos ||
      out.port.find(',') != std::string::npos) {
    return std::nullopt;
  }
  return out;
}

// through() rewrites `conninfo` as a key/value string that connects to 127.0.0.1:`port` instead.
std::string through(const std::string& conninfo, int port) {
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(conninfo.c_str(), &error);
  std::string out = "host=127.0.0.1 port=" + std::to_string(port);
  for (const PQconninfoOption* o = parsed; o != nullptr && o->keyword != nullptr; ++o) {
    const std::string keyword = o->keyword;
    if (o->val == nullptr || *o->val == '\0' || keyword == "host" || keyword == "hostaddr" ||
        keyword == "port") {
      continue;
    }
    std::string value;
    for (const char* c = o->val; *c != '\0'; ++c) {
      if (*c == '\'' || *c == '\\') value += '\\';
      value += *c;
    }
    out += " " + keyword + "='" + value + "'";
  }
  PQconninfoFree(parsed);
  return out;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class PostgresLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = postgres_url();
    if (url_.empty()) {
      if (std::getenv("CI") != nullptr) GTEST_FAIL() << "CI is set but no PostgreSQL server";
      GTEST_SKIP() << "no PostgreSQL test server (set POSTGRES_URL)";
    }
    app_ = unique_name("idem_app");
    url_ = with_option(url_, "application_name", app_);
    table_ = unique_name("idem_pg");
  }

  std::unique_ptr<PostgresLock> make(PostgresOptions options = {}) {
    if (options.table == PostgresOptions{}.table) options.table = table_;
    return std::make_unique<PostgresLock>(url_, options);
  }

  std::string url_;
  std::string app_;
  std::string table_;
};

// Polls `claim` until it wins or `limit` passes; returns the winning claim.
std::optional<Claim> poll_until_won(LockBackend& backend, const std::string& key,
                                    milliseconds lease, milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto r = backend.claim(key, lease);
    if (const auto* w = std::get_if<Won>(&r)) return w->claim;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------
// Real expiry, judged by the server clock

TEST_F(PostgresLockTest, LeaseLapsesByServerClock) {
  // Long enough that the second claim, one call later, still finds it live on a slow box.
  constexpr milliseconds kLease(1000);
  auto backend = make();
  const auto start = std::chrono::steady_clock::now();
  const Claim first = won(backend->claim("lease-key", kLease));
  const HeldByOther h = held(backend->claim("lease-key", kLease));
  EXPECT_EQ(h.lease_expiry, first.lease_expiry);
  const auto second = poll_until_won(*backend, "lease-key", kLease, milliseconds(10'000));
  ASSERT_TRUE(second.has_value()) << "the lease never lapsed";
  EXPECT_GE(std::chrono::steady_clock::now() - start, kLease - milliseconds(50));
  EXPECT_EQ(second->fence, first.fence + 1);
  // The lapsed holder was fenced out by the reclaim.
  EXPECT_FALSE(backend->complete(first, "late"));
  EXPECT_TRUE(backend->complete(*second, "ok"));
}

TEST_F(PostgresLockTest, TtlEndsByServerClock) {
  // Long enough that the duplicate, one call after the complete, still finds it done.
  constexpr milliseconds kTtl(1000);
  auto backend = make(PostgresOptions{.backend = {.ttl = kTtl}});
  const Claim first = won(backend->claim("ttl-key", milliseconds(10'000)));
  const auto completed = std::chrono::steady_clock::now();
  ASSERT_TRUE(backend->complete(first, "stored"));
  EXPECT_EQ(done(backend->claim("ttl-key", milliseconds(10'000))).result, "stored");
  const auto again =
      poll_until_won(*backend, "ttl-key", milliseconds(10'000), milliseconds(10'000));
  ASSERT_TRUE(again.has_value()) << "the ttl never ended";
  EXPECT_GE(std::chrono::steady_clock::now() - completed, kTtl - milliseconds(50));
  EXPECT_EQ(again->fence, first.fence + 1);
}

TEST_F(PostgresLockTest, ReleaseByServerClockAdvancesFence) {
  auto backend = make();
  const Claim first = won(backend->claim("release-key", milliseconds(60'000)));
  backend->release(first);
  const Claim second = won(backend->claim("release-key", milliseconds(60'000)));
  EXPECT_EQ(second.fence, first.fence + 2);
  EXPECT_FALSE(backend->complete(first));
  EXPECT_TRUE(backend->complete(second));
}

TEST_F(PostgresLockTest, AReleasedClaimIsNotReaffirmedByItsTokenByServerClock) {
  auto backend = make();
  expect_released_claim_not_reaffirmed(*backend, "release-token-key");
}

// ---------------------------------------------------------------------------------------
// Races: several processes x threads

struct Tally {
  int won = 0;
  int done = 0;
  int held = 0;
  int errors = 0;
};

// run_children() forks `processes` children that wait for a common start signal, run
// `body(child, tally, won_keys)` and report through a pipe; returns the merged tallies.
template <class Body>
Tally run_children(int processes, Body body, std::vector<int>* won_keys) {
  int go[2];
  int report[2];
  EXPECT_EQ(::pipe(go), 0);
  EXPECT_EQ(::pipe(report), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(go[1]);
      ::close(report[0]);
      char c;
      while (::read(go[0], &c, 1) > 0) {
      }
      Tally tally;
      std::vector<int> keys;
      try {
        body(p, tally, keys);
      } catch (...) {
        tally.errors += 1000;
      }
      int header[5] = {tally.won, tally.done, tally.held, tally.errors,
                       static_cast<int>(keys.size())};
      std::string buf(reinterpret_cast<const char*>(header), sizeof(header));
      buf.append(reinterpret_cast<const char*>(keys.data()), keys.size() * sizeof(int));
      // One message per child; PIPE_BUF does not matter because the parent reads per child.
      const char* p_out = buf.data();
      std::size_t left = buf.size();
      while (left > 0) {
        const auto n = ::write(report[1], p_out, left);
        if (n <= 0) ::_exit(3);
        p_out += n;
        left -= static_cast<std::size_t>(n);
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ::close(report[1]);
  ::close(go[1]);  // start everyone at once
  std::string all;
  char buf[65536];
  while (true) {
    const auto n = ::read(report[0], buf, sizeof(buf));
    if (n <= 0) break;
    all.append(buf, static_cast<std::size_t>(n));
  }
  ::close(report[0]);
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  // The children's messages may interleave, so each child writes one message only after
  // its work; writes above PIPE_BUF could interleave, so parse defensively.
  Tally total;
  std::size_t pos = 0;
  while (pos + 5 * sizeof(int) <= all.size()) {
    int header[5];
    std::memcpy(header, all.data() + pos, sizeof(header));
    pos += sizeof(header);
    total.won += header[0];
    total.done += header[1];
    total.held += header[2];
    total.errors += header[3];
    for (int i = 0; i < header[4] && pos + sizeof(int) <= all.size(); ++i) {
      int k;
      std::memcpy(&k, all.data() + pos, sizeof(int));
      pos += sizeof(int);
      if (won_keys != nullptr) won_keys->push_back(k);
    }
  }
  EXPECT_EQ(pos, all.size()) << "garbled child reports";
  return total;
}

void count(const ClaimResult& r, Tally& t) {
  if (std::holds_alternative<Won>(r)) ++t.won;
  if (std::holds_alternative<AlreadyDone>(r)) ++t.done;
  if (std::holds_alternative<HeldByOther>(r)) ++t.held;
}

TEST_F(PostgresLockTest, ProcessesAndThreadsRaceOneKeyExactlyOneWins) {
  make();  // creates the table before the children race
  constexpr int kProcesses = 4;
  constexpr int kThreads = 4;
  const std::string url = url_;
  const std::string table = table_;
  const Tally t = run_children(
      kProcesses,
      [&](int /*child*/, Tally& tally, std::vector<int>& /*keys*/) {
        PostgresLock backend(url, PostgresOptions{.table = table, .pool_size = kThreads});
        std::vector<Tally> per(kThreads);
        std::vector<std::thread> threads;
        for (int i = 0; i < kThreads; ++i) {
          threads.emplace_back([&, i] {
            try {
              const auto r = backend.claim("one-key", milliseconds(30'000));
              count(r, per[static_cast<std::size_t>(i)]);
              if (const auto* w = std::get_if<Won>(&r)) {
                std::this_thread::sleep_for(milliseconds(50));
                if (!backend.complete(w->claim, "winner"))
                  ++per[static_cast<std::size_t>(i)].errors;
              }
            } catch (...) {
              ++per[static_cast<std::size_t>(i)].errors;
            }
          });
        }
        for (auto& th : threads) th.join();
        for (const auto& p : per) {
          tally.won += p.won;
          tally.done += p.done;
          tally.held += p.held;
          tally.errors += p.errors;
        }
      },
      nullptr);
  EXPECT_EQ(t.errors, 0);
  EXPECT_EQ(t.won, 1);
  EXPECT_EQ(t.won + t.done + t.held, kProcesses * kThreads);
}

TEST_F(PostgresLockTest, ThousandKeysRacedEachWonExactlyOnce) {
  make();
  constexpr int kProcesses = 3;
  constexpr int kThreads = 2;
  constexpr int kKeys = 1000;
  const std::string url = url_;
  const std::string table = table_;
  std::vector<int> won_keys;
  const auto start = std::chrono::steady_clock::now();
  const Tally t = run_children(
      kProcesses,
      [&](int child, Tally& tally, std::vector<int>& keys) {
        PostgresLock backend(url, PostgresOptions{.table = table, .pool_size = kThreads});
        std::vector<Tally> per(kThreads);
        std::vector<std::vector<int>> wins(kThreads);
        std::vector<std::thread> threads;
        for (int i = 0; i < kThreads; ++i) {
          threads.emplace_back([&, i] {
            auto& mine = per[static_cast<std::size_t>(i)];
            const int offset = (child * kThreads + i) * 97;  // different orders collide more
            for (int n = 0; n < kKeys; ++n) {
              const int k = (n + offset) % kKeys;
              try {
                const auto r = backend.claim("race-" + std::to_string(k), milliseconds(30'000));
                count(r, mine);
                if (const auto* w = std::get_if<Won>(&r)) {
                  wins[static_cast<std::size_t>(i)].push_back(k);
                  if (!backend.complete(w->claim)) ++mine.errors;
                }
              } catch (...) {
                ++mine.errors;
              }
            }
          });
        }
        for (auto& th : threads) th.join();
        for (std::size_t i = 0; i < per.size(); ++i) {
          tally.won += per[i].won;
          tally.done += per[i].done;
          tally.held += per[i].held;
          tally.errors += per[i].errors;
          keys.insert(keys.end(), wins[i].begin(), wins[i].end());
        }
      },
      &won_keys);
  EXPECT_EQ(t.errors, 0);
  EXPECT_EQ(t.won, kKeys);
  EXPECT_EQ(t.won + t.done + t.held, kProcesses * kThreads * kKeys);
  std::map<int, int> times;
  for (int k : won_keys) ++times[k];
  EXPECT_EQ(times.size(), static_cast<std::size_t>(kKeys));
  for (const auto& [k, n] : times) EXPECT_EQ(n, 1) << "key " << k;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(120));
}

// ---------------------------------------------------------------------------------------
// Faults

TEST_F(PostgresLockTest, TerminatedBackendIsReplacedOnNextCall) {
  auto backend = make(PostgresOptions{.pool_size = 2});
  Admin admin(postgres_url());
  const Claim a = won(backend->claim("term-a", milliseconds(60'000)));
  ASSERT_GE(admin.terminate(app_), 1);
  // A call may fail once while the pool notices; it must never report a false outcome.
  std::optional<Claim> b;
  for (int attempt = 0; attempt < 2 && !b; ++attempt) {
    try {
      b = won(backend->claim("term-b", milliseconds(60'000)));
    } catch (const StoreError&) {
    }
  }
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(backend->complete(a));
  EXPECT_TRUE(backend->complete(*b));
}

// A server restart or a failover kills every pooled connection at once. The one retry after a
// broken connection must go to a fresh one, not to the next dead one in the pool (before, the
// retry took another idle, dead connection and the call failed: TerminationsMidRun's last call,
// now and then).
TEST_F(PostgresLockTest, AfterEveryPooledConnectionIsTerminatedTheNextCallSucceeds) {
  constexpr int kCalls = 4;
  auto backend = make(PostgresOptions{.pool_size = kCalls});
  std::vector<Claim> claims;
  for (int i = 0; i < kCalls; ++i) {
    claims.push_back(won(backend->claim("busy-" + std::to_string(i), milliseconds(60'000))));
  }
  Admin admin(postgres_url());
  // Completes waiting for their records' row locks hold a connection each; let go, all four
  // sit idle. (A complete writes, so it waits for the lock; a duplicate claim would not, as it
  // reads its answer from the snapshot. The locks are another session's: within a transaction
  // pg_stat_activity would not change, and `admin` counts the connections.)
  Admin locker(postgres_url());
  locker.exec("BEGIN");
  locker.exec("SELECT count(*) FROM (SELECT 1 FROM \"" + table_ + "\" FOR UPDATE) AS locked");
  std::vector<std::jthread> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.emplace_back([&, i] { EXPECT_TRUE(backend->complete(claims[i])); });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (admin.connections(app_) < kCalls && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  locker.exec("COMMIT");
  calls.clear();  // joined
  ASSERT_EQ(admin.terminate(app_), kCalls);
  // Wait for the server processes to be gone, so that no call can still reach one of them.
  while (admin.connections(app_) > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(admin.connections(app_), 0);
  const Claim after = won(backend->claim("after-restart", milliseconds(60'000)));
  EXPECT_TRUE(backend->complete(after));
}

TEST_F(PostgresLockTest, TerminationsMidRunNeverGiveFalseOutcomes) {
  auto backend = make(PostgresOptions{.pool_size = 4});
  Admin admin(postgres_url());
  std::atomic<bool> stop{false};
  std::atomic<int> store_errors{0};
  std::atomic<int> wrong{0};
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; !stop.load(); ++n) {
        const std::string key = "mid-" + std::to_string(i) + "-" + std::to_string(n);
        try {
          const auto r = backend->claim(key, milliseconds(60'000));
          const auto* w = std::get_if<Won>(&r);
          if (w == nullptr) {
            ++wrong;  // a fresh key can only be won
            continue;
          }
          if (!backend->complete(w->claim)) ++wrong;
          ++ok;
        } catch (const StoreError&) {
          ++store_errors;
        }
      }
    });
  }
  // Each termination waits (bounded: 2 s a round) until a call has succeeded since the last
  // one, so that a slow reconnect on a loaded box is not mistaken for a pool that never
  // recovers.
  for (int round = 0; round < 10; ++round) {
    const int before = ok.load();
    std::this_thread::sleep_for(milliseconds(60));
    (void)eventually([&] { return ok.load() != before; }, std::chrono::seconds(2));
    admin.terminate(app_);
  }
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(ok.load(), 0);
  // Afterwards the pool has recovered: calls succeed.
  EXPECT_TRUE(backend->complete(won(backend->claim("after-storm", milliseconds(1000)))));
  RecordProperty("store_errors", store_errors.load());
}

// A waiter on another instance is woken by the NOTIFY that complete() sends (LISTEN), not by
// its timeout: it returns long before the minute it was allowed.
TEST_F(PostgresLockTest, WaitForChangeIsWokenByCompleteThroughListenNotify) {
  auto holder = make();
  auto waiter = make();
  const Claim c = won(holder->claim("notify-me", milliseconds(60'000)));
  std::jthread completer([&] {
    std::this_thread::sleep_for(milliseconds(200));  // let the waiter LISTEN first
    EXPECT_TRUE(holder->complete(c));
  });
  const auto start = std::chrono::steady_clock::now();
  waiter->wait_for_change("notify-me", std::chrono::minutes(1), std::stop_token{});
  // NOTIFY is delivered at commit, so a waiter woken by it sees the change.
  EXPECT_EQ(waiter->inspect("notify-me")->state, RecordState::kDone) << "woke before the change";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30))
      << "woken by NOTIFY, not by the one-minute timeout";
}

TEST_F(PostgresLockTest, WaitForChangeReturnsAtOnceForASettledRecordAndHonoursStop) {
  auto backend = make();
  const Claim c = won(backend->claim("settled", milliseconds(60'000)));
  EXPECT_TRUE(backend->complete(c));
  backend->wait_for_change("settled", std::chrono::minutes(1), std::stop_token{});  // DONE

  (void)won(backend->claim("held", milliseconds(60'000)));
  std::stop_source stop;
  std::jthread stopper([&] {
    std::this_thread::sleep_for(milliseconds(100));
    stop.request_stop();
  });
  backend->wait_for_change("held", std::chrono::minutes(1), stop.get_token());
  EXPECT_TRUE(stop.stop_requested());
  const PostgresWaitCounts counts = backend->wait_counts();
  EXPECT_EQ(counts.settled, 1U);
  EXPECT_EQ(counts.stopped, 1U);
  EXPECT_EQ(counts.notified + counts.timed_out + counts.unavailable, 0U);
  // A waiter that gives up takes its registration back.
  Admin admin(postgres_url());
  EXPECT_EQ(admin.exec("SELECT waiters FROM \"" + table_ + "\" WHERE key = 'held'::bytea"), "0");
}

// waiters_on() reads a key's registered-waiter count, "" when it has no row.
std::string waiters_on(Admin& admin, const std::string& table, const std::string& key) {
  return admin.exec("SELECT waiters FROM \"" + table + "\" WHERE key = '" + key + "'::bytea");
}

// A waiter registered on another instance is woken by the NOTIFY of complete() and of
// release(): told by the wait's end (notified, not timed out), never by how long it took.
// Skipping the NOTIFY when a waiter is counted would leave it to its one-minute timeout.
TEST_F(PostgresLockTest, ARegisteredWaiterIsWokenByCompleteAndByReleaseNotByItsTimeout) {
  auto holder = make();
  auto waiter = make();
  Admin admin(postgres_url());
  for (const bool complete : {true, false}) {
    const std::string key = complete ? "wake-by-complete" : "wake-by-release";
    const Claim c = won(holder->claim(key, milliseconds(60'000)));
    std::jthread waiting(
        [&] { waiter->wait_for_change(key, std::chrono::minutes(1), std::stop_token{}); });
    while (waiters_on(admin, table_, key) != "1") std::this_thread::sleep_for(milliseconds(5));
    if (complete) {
      EXPECT_TRUE(holder->complete(c));
    } else {
      holder->release(c);
    }
    waiting.join();
    EXPECT_EQ(waiters_on(admin, table_, key), "0") << "the woken waiter left its count behind";
  }
  const PostgresWaitCounts counts = waiter->wait_counts();
  EXPECT_EQ(counts.notified, 2U);
  EXPECT_EQ(counts.timed_out + counts.unavailable + counts.settled + counts.stopped, 0U);
}

// complete() and release() with nobody waiting send no NOTIFY (whose commit-time lock would
// serialise every commit); with a waiter counted they do, on the channel listened to here, so
// the silence is not a wrong channel's.
TEST_F(PostgresLockTest, NoNotifyWithoutAWaiterAndOneWithIt) {
  auto backend = make();
  auto waiter = make();
  Admin admin(postgres_url());
  Listener listener(postgres_url(), table_);
  EXPECT_TRUE(backend->complete(won(backend->claim("alone-1", milliseconds(60'000)))));
  backend->release(won(backend->claim("alone-2", milliseconds(60'000))));
  EXPECT_THAT(listener.payloads_until_marker(admin, "marker-1"), ::testing::IsEmpty());

  const Claim watched = won(backend->claim("watched", milliseconds(60'000)));
  std::jthread waiting(
      [&] { waiter->wait_for_change("watched", std::chrono::minutes(1), std::stop_token{}); });
  while (waiters_on(admin, table_, "watched") != "1") std::this_thread::sleep_for(milliseconds(5));
  EXPECT_TRUE(backend->complete(watched));
  waiting.join();
  EXPECT_THAT(listener.payloads_until_marker(admin, "marker-2"),
              ::testing::ElementsAre(key_fingerprint("watched")));
}

// A count left by a waiter that crashed (it never took its registration back) costs a NOTIFY,
// never an answer: the next complete still completes and notifies.
TEST_F(PostgresLockTest, AStaleWaiterCountOnlyCostsANotify) {
  auto backend = make();
  Admin admin(postgres_url());
  Listener listener(postgres_url(), table_);
  const Claim c = won(backend->claim("stale", milliseconds(60'000)));
  admin.exec("UPDATE \"" + table_ + "\" SET waiters = 3 WHERE key = 'stale'::bytea");
  EXPECT_TRUE(backend->complete(c));
  EXPECT_EQ(done(backend->claim("stale", milliseconds(60'000))).result, std::nullopt);
  EXPECT_THAT(listener.payloads_until_marker(admin, "marker"),
              ::testing::ElementsAre(key_fingerprint("stale")));
}

// A waiter on a lease that has lapsed by the server's clock does not wait: nothing would
// notify it, so the next claim (which wins) is due at once.
TEST_F(PostgresLockTest, AWaiterOnALapsedLeaseDoesNotWait) {
  auto backend = make();
  (void)won(backend->claim("lapsed", milliseconds(1)));
  Admin admin(postgres_url());
  admin.exec("SELECT pg_sleep(0.01)");  // past the lease by the server's clock
  backend->wait_for_change("lapsed", std::chrono::minutes(1), std::stop_token{});
  EXPECT_EQ(backend->wait_counts().settled, 1U);
  EXPECT_EQ(waiters_on(admin, table_, "lapsed"), "0");
}

// A waiter whose clock is behind the releaser's reads a just-released row's lease (ended at the
// release's instant) as live; its emptied token says it is not. Registered on it, the waiter
// would sleep its whole slice with nobody left to notify it; it claims again at once instead.
TEST_F(PostgresLockTest, AWaiterOnAReleasedRowDoesNotWaitWhenItsClockIsBehind) {
  auto holder_clock = std::make_shared<ManualClock>();
  auto waiter_clock = std::make_shared<ManualClock>(holder_clock->now() - std::chrono::seconds(1));
  PostgresOptions holder_options;  // named: GCC 12 -O2 misreads a temporary's shared_ptr here
  holder_options.backend = BackendOptions{.clock = holder_clock};
  holder_options.table = table_;
  PostgresOptions waiter_options;
  waiter_options.backend = BackendOptions{.clock = waiter_clock};
  waiter_options.table = table_;
  auto holder = make(std::move(holder_options));
  auto waiter = make(std::move(waiter_options));
  holder->release(won(holder->claim("released", milliseconds(60'000))));
  waiter->wait_for_change("released", std::chrono::seconds(2), std::stop_token{});
  const PostgresWaitCounts counts = waiter->wait_counts();
  EXPECT_EQ(counts.settled, 1U);
  EXPECT_EQ(counts.timed_out, 0U) << "waited on a released row";
  Admin admin(postgres_url());
  EXPECT_EQ(waiters_on(admin, table_, "released"), "0");
}

// Waiters listen on connections of their own, at most pool_size of them at once: with a pool
// of one, six waits at the same time open one listener and the other five poll, so the instance
// never holds more than two connections (its pooled one and the listener), not seven.
TEST_F(PostgresLockTest, ListeningConnectionsAreBoundedByThePoolSize) {
  auto holder = make();
  const std::string waiter_app = unique_name("idem_waiter");
  PostgresLock waiter(with_option(postgres_url(), "application_name", waiter_app),
                      PostgresOptions{.table = table_, .pool_size = 1});
  constexpr int kWaits = 6;
  for (int i = 0; i < kWaits; ++i) {
    (void)won(holder->claim("held-" + std::to_string(i), milliseconds(60'000)));
  }
  Admin admin(postgres_url());
  std::atomic<int> finished{0};
  int most = 0;
  {
    std::vector<std::jthread> waits;
    for (int i = 0; i < kWaits; ++i) {
      waits.emplace_back([&, i] {
        waiter.wait_for_change("held-" + std::to_string(i), milliseconds(1500), std::stop_token{});
        ++finished;
      });
    }
    while (finished.load() < kWaits) {
      most = std::max(most, admin.connections(waiter_app));
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
  EXPECT_LE(most, 2) << "listening connections beyond pool_size";
  const PostgresWaitCounts counts = waiter.wait_counts();
  EXPECT_GE(counts.polled, 1U);
  EXPECT_EQ(counts.polled + counts.timed_out, static_cast<std::uint64_t>(kWaits));
}

TEST_F(PostgresLockTest, RetriedClaimWithSameTokenReaffirms) {
  auto backend = make();
  Admin admin(postgres_url());
  const ClaimRequest request{.claim_token = "retry-token-0001", .fingerprint = "body-hash"};
  const Claim first = won(backend->claim("lost-reply", milliseconds(60'000), request));
  // The reply is "lost": the connection dies, the caller retries with the same token.
  admin.terminate(app_);
  ClaimResult retried;
  try {
    retried = backend->claim("lost-reply", milliseconds(60'000), request);
  } catch (const StoreError&) {
    retried = backend->claim("lost-reply", milliseconds(60'000), request);
  }
  const Claim again = won(retried);
  EXPECT_EQ(again.fence, first.fence);
  EXPECT_EQ(again.lease_expiry, first.lease_expiry);
  EXPECT_EQ(again.claim_token, "retry-token-0001");
  // Anyone else still finds it held.
  EXPECT_EQ(held(backend->claim("lost-reply", milliseconds(60'000))).fingerprint, "body-hash");
  EXPECT_TRUE(backend->complete(again, "r"));
  // After completion a retry with the same token is a duplicate, not a win.
  EXPECT_EQ(done(backend->claim("lost-reply", milliseconds(60'000), request)).result, "r");
}

// A claim whose answer writes nothing (held, the holder's own retry, a replay) is answered from
// the snapshot and leaves the row as it was: the same row version (xmin, ctid), so no lock, no
// WAL, no commit flush, no dead tuple. A claim that takes the key over writes it.
TEST_F(PostgresLockTest, AClaimWhoseAnswerWritesNothingLeavesTheRowAsItWas) {
  auto backend = make();
  Admin admin(postgres_url());
  const auto version = [&](const std::string& key) {
    return admin.exec("SELECT xmin::text || ' ' || ctid::text FROM \"" + table_ +
                      "\" WHERE key = '" + key + "'::bytea");
  };
  const ClaimRequest mine{.claim_token = "holder-token-0001"};
  const Claim first = won(backend->claim("k", milliseconds(60'000), mine));
  const std::string claimed = version("k");
  ASSERT_FALSE(claimed.empty());
  (void)held(backend->claim("k", milliseconds(60'000)));
  EXPECT_EQ(won(backend->claim("k", milliseconds(60'000), mine)).fence, first.fence);
  EXPECT_EQ(version("k"), claimed) << "a held key's claim rewrote the row";
  ASSERT_TRUE(backend->complete(first, "r"));
  const std::string completed = version("k");
  EXPECT_NE(completed, claimed);
  EXPECT_EQ(done(backend->claim("k", milliseconds(60'000))).result, "r");
  EXPECT_EQ(done(backend->claim("k", milliseconds(60'000), mine)).result, "r");
  EXPECT_EQ(version("k"), completed) << "a replay rewrote the row";

  const Claim released = won(backend->claim("r", milliseconds(60'000)));
  backend->release(released);
  const std::string before = version("r");
  EXPECT_EQ(won(backend->claim("r", milliseconds(60'000))).fence, released.fence + 2);
  EXPECT_NE(version("r"), before) << "a takeover did not write";
}

TEST_F(PostgresLockTest, StatementTimeoutIsStoreError) {
  // Not shorter: the claim after the ROLLBACK runs under it too, and must not time out.
  auto backend = make(PostgresOptions{.statement_timeout = milliseconds(2000)});
  Admin admin(postgres_url());
  admin.exec("BEGIN");
  admin.exec("LOCK TABLE \"" + table_ + "\" IN ACCESS EXCLUSIVE MODE");
  try {
    (void)backend->claim("timeout-key-abc", milliseconds(60'000));
    ADD_FAILURE() << "claim did not time out";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("57014"));
    EXPECT_THAT(e.what(), Not(HasSubstr("timeout-key-abc")));
  }
  admin.exec("ROLLBACK");
  EXPECT_TRUE(std::holds_alternative<Won>(backend->claim("timeout-key-abc", milliseconds(1000))));
}

// A connection that goes silent (the relay stops forwarding both ways and keeps its sockets
// open, as a NAT that forgot the flow or a proxy that stopped answering would) fails the call
// at statement_timeout + 5 s, where libpq alone waits as long as TCP does (about 15 minutes on
// a dead peer; for ever on a live proxy), and takes a heartbeat's renewer thread with it.
TEST_F(PostgresLockTest, ACallOnAConnectionGoneSilentFailsAtItsDeadlineAndTheConnectionGoes) {
  const auto upstream = upstream_of(url_);
  if (!upstream) GTEST_SKIP() << "POSTGRES_URL is not one TCP host";
  TcpRelay relay(upstream->host, upstream->port);
  PostgresOptions options;
  options.table = table_;
  options.pool_size = 1;
  options.statement_timeout = milliseconds(1000);
  PostgresLock backend(through(url_, relay.port()), options);
  (void)won(backend.claim("warm", milliseconds(60'000)));  // the pooled connection, used once
  relay.silence();
  auto claim = std::async(std::launch::async,
                          [&] { return backend.claim("silent-key-4711", milliseconds(60'000)); });
  // Generous: the deadline is 6 s. Past it the call is hung, as it would be for minutes.
  const bool ended = claim.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  relay.resume();  // so a call that still waits (the old code's) ends, and so does this test
  EXPECT_TRUE(ended) << "a claim on a silent connection was still waiting after 10 s";
  try {
    (void)claim.get();
    ADD_FAILURE() << "a claim on a silent connection returned an answer";
  } catch (const StoreError& e) {
    const std::string what = e.what();
    EXPECT_THAT(what, HasSubstr("no answer within 6000 ms"));
    EXPECT_THAT(what, HasSubstr("unknown"));
    EXPECT_THAT(what, Not(HasSubstr("silent-key-4711")));
    EXPECT_EQ(what.find_first_of("\r\n"), std::string::npos) << "not one line";
  }
  // The silent connection was closed, not pooled again: the next call opens a fresh one.
  EXPECT_TRUE(std::holds_alternative<Won>(backend.claim("after-silence", milliseconds(1000))));
}

TEST_F(PostgresLockTest, AKeyQuotedInAServerErrorNeverReachesTheMessage) {
  // The key must be hidden in every form the server may quote it, as text and as bytea: one
  // with a line break and a tab (the message is made one line), and one found inside its own
  // hex form ("313" in \x333133).
  auto backend = make();
  (void)backend->claim("creates-the-table", milliseconds(60'000));
  Admin admin(postgres_url());
  const std::string function = table_ + "_refuse";
  admin.exec("CREATE FUNCTION \"" + function +
             "\"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION "
             "'refused % %', convert_from(NEW.key, 'UTF8'), NEW.key; END $$");
  admin.exec("CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON \"" + table_ +
             "\" FOR EACH ROW EXECUTE FUNCTION \"" + function + "\"()");
  for (const std::string key : {"order-\n42\tcustomer-7", "313"}) {
    try {
      (void)backend->claim(key, milliseconds(60'000));
      ADD_FAILURE() << "the trigger did not refuse the claim";
    } catch (const StoreError& e) {
      const std::string what = e.what();
      EXPECT_THAT(what, HasSubstr("refused *** ***"));
      EXPECT_THAT(what, Not(HasSubstr("order")));
      EXPECT_THAT(what, Not(HasSubstr("customer")));
      EXPECT_THAT(what, Not(HasSubstr("\\x")));
      EXPECT_EQ(what.find_first_of("\r\n\t"), std::string::npos) << "not one line";
    }
  }
  admin.exec("DROP TABLE \"" + table_ + "\"");
  admin.exec("DROP FUNCTION \"" + function + "\"()");
}

TEST_F(PostgresLockTest, AnErrorAtCommitIsAStoreErrorInEitherPoolMode) {
  // A deferred constraint fails the transaction at its commit, after the statement's own
  // result: in transaction pool mode that comes in the Sync's results, and was dropped.
  for (const PostgresPoolMode mode : {PostgresPoolMode::kSession, PostgresPoolMode::kTransaction}) {
    table_ = unique_name("idem_pg");
    auto backend = make(PostgresOptions{.pool_mode = mode});
    (void)backend->claim("creates-the-table", milliseconds(60'000));
    Admin admin(postgres_url());
    const std::string function = table_ + "_at_commit";
    admin.exec("CREATE FUNCTION \"" + function +
               "\"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION "
               "'refused at commit'; END $$");
    admin.exec("CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT OR UPDATE ON \"" + table_ +
               "\" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION \"" + function +
               "\"()");
    try {
      (void)backend->claim("k", milliseconds(60'000));
      ADD_FAILURE() << "a claim whose commit failed was reported won";
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), HasSubstr("refused at commit"));
    }
    EXPECT_EQ(backend->inspect("k"), std::nullopt) << "nothing was written";
    admin.exec("DROP TABLE \"" + table_ + "\"");
    admin.exec("DROP FUNCTION \"" + function + "\"()");
  }
}

TEST_F(PostgresLockTest, PoolIsBounded) {
  auto backend = make(PostgresOptions{.pool_size = 2});
  Admin admin(postgres_url());
  std::atomic<int> max_seen{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < 40; ++n) {
        const auto r = backend->claim("pool-" + std::to_string(i) + "-" + std::to_string(n),
                                      milliseconds(1000));
        EXPECT_TRUE(std::holds_alternative<Won>(r));
      }
    });
  }
  for (int i = 0; i < 5; ++i) {
    max_seen = std::max(max_seen.load(), admin.connections(app_));
    std::this_thread::sleep_for(milliseconds(10));
  }
  for (auto& t : threads) t.join();
  max_seen = std::max(max_seen.load(), admin.connections(app_));
  EXPECT_GE(max_seen.load(), 1);
  EXPECT_LE(max_seen.load(), 2);
}

TEST_F(PostgresLockTest, PoolSizeInTheUrlBoundsTheConnections) {
  // open_backend() picks the backend by the URL's scheme, which a key/value conninfo lacks.
  if (url_.find("://") == std::string::npos) GTEST_SKIP() << "POSTGRES_URL is not a URL";
  // Eight threads would open the default pool's eight connections; the URL's two hold.
  auto backend = open_backend(with_option(with_option(url_, "table", table_), "pool_size", "2"));
  Admin admin(postgres_url());
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; !stop.load(); ++n) {
        const auto r = backend->claim("url-pool-" + std::to_string(i) + "-" + std::to_string(n),
                                      milliseconds(1000));
        EXPECT_TRUE(std::holds_alternative<Won>(r));
      }
    });
  }
  // Sample until both connections are open (however slowly a loaded box opens them), then a
  // while longer: never a third.
  int max_seen = 0;
  (void)eventually([&] {
    max_seen = std::max(max_seen, admin.connections(app_));
    return max_seen >= 2;
  });
  const auto after = std::chrono::steady_clock::now() + milliseconds(200);
  while (std::chrono::steady_clock::now() < after) {
    max_seen = std::max(max_seen, admin.connections(app_));
    std::this_thread::sleep_for(milliseconds(10));
  }
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(max_seen, 2);
}

// ---------------------------------------------------------------------------------------
// Bad input

TEST_F(PostgresLockTest, MalformedUrlNamesThePartNotThePassword) {
  const std::string secret = "s3cr3t-Pa55word";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"postgres://alice:" + secret + "@localhost:notaport/db", "port"},
      {"postgres://alice:" + secret + "@localhost:99999/db", "port"},
      {"mysql://alice:" + secret + "@localhost/db", "scheme"},
      {"postgres://alice:" + secret + "@localhost/db?sslmode=sometimes", "sslmode"},
      {"postgres://alice:" + secret + "@localhost/db?nonsense=1", "nonsense"},
      {"postgres://alice:" + secret + "@localhost/db?connect_timeout=soon", "connect_timeout"},
      {"host=localhost password=" + secret + " dbname", "dbname"},
      // Not taken for URLs, so libpq reads them as key=value strings and quotes the whole word.
      {"postgres:/alice:" + secret + "@db/app", "must begin with postgres://"},
      {" postgres://alice:" + secret + "@db/app", "must begin with postgres://"},
      {"\npostgres://alice:" + secret + "@db/app", "must begin with postgres://"},
      // A password with an unquoted space: libpq ends it at the space and quotes the next word.
      {"host=localhost password=first " + secret, "password"},
      {"host=localhost password=first " + secret + " dbname=app", "password"},
      {"postgres://alice@localhost/db?password=first&" + secret + "&sslmode=disable", "password"},
  };
  for (const auto& [url, part] : cases) {
    SCOPED_TRACE(part);
    try {
      PostgresLock backend(url, PostgresOptions{.table = table_});
      ADD_FAILURE() << "accepted: " << part;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(part));
      EXPECT_THAT(e.what(), Not(HasSubstr(secret)));
      EXPECT_THAT(e.what(), Not(HasSubstr("\n")));
    }
  }
}

// The size is checked before any connection is made, so this needs no server.
TEST(PostgresUrl, ABadPoolSizeIsOneLineThatNamesIt) {
  const std::string secret = "s3cr3t-Pa55word";
  for (const std::string size : {"0", "-1", "1001", "8x", "", "99999999999999999999"}) {
    SCOPED_TRACE(size);
    try {
      (void)open_backend("postgres://alice:" + secret + "@localhost/db?pool_size=" + size);
      ADD_FAILURE() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("pool_size= must be a whole number from 1 to 1000"));
      EXPECT_THAT(e.what(), Not(HasSubstr(secret)));
      EXPECT_THAT(e.what(), Not(HasSubstr("\n")));
    }
  }
}

TEST_F(PostgresLockTest, BadOptionsAreInvalidArgument) {
  EXPECT_THROW(make(PostgresOptions{.table = "x; DROP TABLE y"}), std::invalid_argument);
  EXPECT_THROW(make(PostgresOptions{.table = "a.b.c"}), std::invalid_argument);
  EXPECT_THROW(make(PostgresOptions{.table = "9lives"}), std::invalid_argument);
  EXPECT_THROW(make(PostgresOptions{.table = table_, .pool_size = 0}), std::invalid_argument);
  EXPECT_THROW(make(PostgresOptions{.table = table_, .purge_batch = 0}), std::invalid_argument);
  EXPECT_THROW((void)PostgresLock::schema("bad\"name"), std::invalid_argument);
  EXPECT_NO_THROW(make(PostgresOptions{.table = "public." + table_}));
}

TEST_F(PostgresLockTest, WrongPasswordIsStoreError) {
  std::string url = postgres_url();
  const auto scheme = url.find("://");
  const auto at = url.find('@');
  if (scheme == std::string::npos || at == std::string::npos || at < scheme) {
    GTEST_SKIP() << "POSTGRES_URL has no user-info to corrupt";
  }
  const std::string wrong = "wrong-Pa55word-123";
  const auto colon = url.find(':', scheme + 3);
  if (colon != std::string::npos && colon < at) {
    url.replace(colon + 1, at - colon - 1, wrong);
  } else {
    url.insert(at, ":" + wrong);
  }
  try {
    PostgresLock backend(url, PostgresOptions{.table = table_});
    GTEST_SKIP() << "the server does not check passwords (trust authentication)";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("password authentication failed"));
    EXPECT_THAT(e.what(), Not(HasSubstr(wrong)));
  }
}

TEST_F(PostgresLockTest, UnreachableServerIsStoreError) {
  const std::string url = "postgres://alice:Hidden-Pw-77@127.0.0.1:" + std::to_string(free_port()) +
                          "/db?connect_timeout=3";
  try {
    PostgresLock backend(url);
    ADD_FAILURE() << "connected to a closed port";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot connect"));
    EXPECT_THAT(e.what(), Not(HasSubstr("Hidden-Pw-77")));
  }
}

TEST_F(PostgresLockTest, MissingTableWithoutCreateIsStoreErrorUntilSchemaApplied) {
  try {
    make(PostgresOptions{.table = table_, .create_table = false});
    ADD_FAILURE() << "accepted a missing table";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr(table_));
  }
  Admin admin(postgres_url());
  admin.exec(PostgresLock::schema(table_));
  auto backend = make(PostgresOptions{.table = table_, .create_table = false});
  EXPECT_TRUE(backend->complete(won(backend->claim("schema-key", milliseconds(1000)))));
}

// No statement of the library asks for a COPY, but a broken server or proxy may answer with
// one: libpq then hands out a COPY result on every call, never the null that ends a query's
// results, so reading to the end must stop at it rather than spin on a thread for ever.
TEST(PostgresRoundTrip, ACopyAnswerEndsTheRoundTripInsteadOfSpinning) {
  const std::string url = postgres_url();
  ASSERT_FALSE(url.empty()) << "no PostgreSQL test server";
  PGconn* raw = PQconnectdb(url.c_str());
  ASSERT_EQ(PQstatus(raw), CONNECTION_OK) << PQerrorMessage(raw);
  ASSERT_TRUE(postgres_detail::make_nonblocking(raw));
  auto answer = std::async(std::launch::async, [raw] {
    return postgres_detail::exec_text(
        raw, "COPY (SELECT 1) TO STDOUT",
        postgres_detail::Deadline::for_statement(std::chrono::seconds(5)));
  });
  ASSERT_EQ(answer.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "spun on COPY results";
  const postgres_detail::ResultPtr r = answer.get();
  ASSERT_TRUE(r);
  EXPECT_EQ(PQresultStatus(r.get()), PGRES_COPY_OUT);
  PQfinish(raw);
}

// Makes `table` as versions before the waiters column did; returns its quoted name.
std::string create_table_without_waiters(Admin& admin, const std::string& table) {
  const std::string t = "\"" + table + "\"";
  admin.exec("CREATE TABLE " + t +
             " (key bytea PRIMARY KEY, state smallint NOT NULL CHECK (state IN (1, 2)), fence "
             "bigint NOT NULL CHECK (fence >= 1), lease_expiry bigint NOT NULL, expires_at "
             "bigint NOT NULL, claim_token bytea NOT NULL, result bytea, fingerprint bytea)");
  return t;
}

// A table made before the waiters column: with create_table the constructor adds it and keeps
// the rows; without, it refuses in one line that names the table and the column.
TEST_F(PostgresLockTest, AnOldTableGetsTheWaitersColumnOrAOneLineError) {
  Admin admin(postgres_url());
  const std::string t = create_table_without_waiters(admin, table_);
  admin.exec("INSERT INTO " + t +
             " VALUES ('old-done'::bytea, 2, 4, 0, 9000000000000, 'tok'::bytea, 'r'::bytea, NULL)");
  try {
    make(PostgresOptions{.table = table_, .create_table = false});
    ADD_FAILURE() << "accepted a table without the waiters column";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr(table_));
    EXPECT_THAT(e.what(), HasSubstr("waiters column"));
    EXPECT_THAT(e.what(), Not(HasSubstr("\n")));
  }
  auto backend = make();
  EXPECT_EQ(done(backend->claim("old-done", milliseconds(1000))).result, "r");
  EXPECT_EQ(waiters_on(admin, table_, "old-done"), "0");
  EXPECT_TRUE(backend->complete(won(backend->claim("new-key", milliseconds(1000)))));
  // Applying the printed schema by hand upgrades an old table the same way.
  const std::string other = unique_name("idem_pg_old");
  (void)create_table_without_waiters(admin, other);
  admin.exec(PostgresLock::schema(other));
  EXPECT_NO_THROW(make(PostgresOptions{.table = other, .create_table = false}));
}

// Adding the waiters column queues for ACCESS EXCLUSIVE behind any lock on the table (a pg_dump's
// long transaction), and every later statement on the table from every instance queues behind
// it. It gives up within its short lock_timeout instead: a reader meanwhile waits at most that,
// and the constructor fails in one line.
TEST_F(PostgresLockTest, AnOldTableUnderALongTransactionFailsTheStartInsteadOfStallingTheTable) {
  Admin admin(postgres_url());
  const std::string t = create_table_without_waiters(admin, table_);
  Admin dump(postgres_url());
  dump.exec("BEGIN");
  dump.exec("SELECT 1 FROM " + t + " LIMIT 1");
  auto starting = std::async(std::launch::async, [&] { return make(); });
  // Once the change queues for the table's lock (or has given up already), a reader comes.
  (void)eventually([&] {
    return starting.wait_for(milliseconds(0)) == std::future_status::ready ||
           admin.exec("SELECT count(*) FROM pg_locks WHERE relation = to_regclass('" + t +
                      "') AND NOT granted") != "0";
  });
  Admin reader(postgres_url());
  reader.exec("SET statement_timeout = 2000");
  EXPECT_NO_THROW(reader.exec("SELECT count(*) FROM " + t))
      << "a read queued behind the change for 2 s";
  const bool ended = starting.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  dump.exec("ROLLBACK");  // lets a change that still waits (the old code's) through
  EXPECT_TRUE(ended) << "the constructor still waited for the table after 10 s";
  try {
    (void)starting.get();
    ADD_FAILURE() << "the column was added under a long transaction";
  } catch (const StoreError& e) {
    const std::string what = e.what();
    EXPECT_THAT(what, HasSubstr(table_));
    EXPECT_THAT(what, HasSubstr("55P03"));
    EXPECT_EQ(what.find_first_of("\r\n"), std::string::npos) << "not one line";
  }
  // With the transaction over, the next start adds the column.
  auto backend = make();
  EXPECT_TRUE(backend->complete(won(backend->claim("after-upgrade", milliseconds(1000)))));
}

TEST_F(PostgresLockTest, KeyValueConninfoWorks) {
  // The same server, spelled as a libpq key/value string with a "://" inside a value.
  char* error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(postgres_url().c_str(), &error);
  ASSERT_NE(parsed, nullptr) << (error != nullptr ? error : "");
  std::string conninfo = "application_name='" + app_ + "' options='-c search_path=public'";
  for (const PQconninfoOption* o = parsed; o->keyword != nullptr; ++o) {
    if (o->val != nullptr && *o->val != '\0' && std::string(o->keyword) != "application_name") {
      conninfo += " " + std::string(o->keyword) + "='" + o->val + "'";
    }
  }
  PQconninfoFree(parsed);
  conninfo += " fallback_application_name='x://y'";
  PostgresLock backend(conninfo, PostgresOptions{.table = table_});
  EXPECT_TRUE(backend.complete(won(backend.claim("kv-key", milliseconds(1000)))));
}

TEST_F(PostgresLockTest, TablesAreIndependent) {
  auto one = make();
  auto two = make(PostgresOptions{.table = unique_name("idem_other")});
  EXPECT_TRUE(std::holds_alternative<Won>(one->claim("shared-key", milliseconds(1000))));
  EXPECT_TRUE(std::holds_alternative<Won>(two->claim("shared-key", milliseconds(1000))));
}

// A ManualClock that counts its readings, so a test can see a call read it.
class CountingClock final : public Clock {
 public:
  [[nodiscard]] TimePoint now() const override {
    reads.fetch_add(1);
    return clock.now();
  }
  ManualClock clock;
  mutable std::atomic<int> reads{0};
};

// An injected clock is read once the call has its connection. Read before the wait for one,
// a claim that waited longer than its lease was written with a lease already lapsed: won, and
// at once free to be taken over by the next claim, while its holder starts the work.
TEST_F(PostgresLockTest, AClaimThatWaitedForAConnectionStartsItsLeaseWhenItRuns) {
  constexpr milliseconds kShortLease(60'000);
  auto clock = std::make_shared<CountingClock>();
  PostgresOptions options;  // named: GCC 12 -O2 misreads a temporary's shared_ptr here
  options.backend = BackendOptions{.clock = clock};
  options.table = table_;
  options.pool_size = 1;
  auto backend = make(std::move(options));
  const Claim held = won(backend->claim("held", kShortLease));
  // The complete waits for its row's lock, another session's, on the pool's one connection.
  Admin admin(postgres_url());
  Admin locker(postgres_url());
  locker.exec("BEGIN");
  locker.exec("SELECT count(*) FROM (SELECT 1 FROM \"" + table_ + "\" FOR UPDATE) AS locked");
  std::jthread completing([&] { EXPECT_TRUE(backend->complete(held)); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  const std::string waiting_for_a_lock =
      "SELECT count(*) FROM pg_stat_activity WHERE application_name = '" + app_ +
      "' AND wait_event_type = 'Lock'";
  while (admin.exec(waiting_for_a_lock) != "1" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(admin.exec(waiting_for_a_lock), "1");
  // The claim queues for the connection. Reading the clock first (the defect), it does so at
  // once; give it half a second to, then move the clock past its lease while it waits.
  const int reads = clock->reads.load();
  std::optional<Claim> claimed;
  std::jthread claiming([&] { claimed = won(backend->claim("waited", kShortLease)); });
  const auto until = std::chrono::steady_clock::now() + milliseconds(500);
  while (clock->reads.load() == reads && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  clock->clock.advance(2 * kShortLease);
  locker.exec("COMMIT");
  completing.join();
  claiming.join();
  ASSERT_TRUE(claimed.has_value());
  EXPECT_EQ(claimed->lease_expiry, clock->clock.now() + kShortLease);
}

// ---------------------------------------------------------------------------------------
// Storage details

TEST_F(PostgresLockTest, PurgeExpiredDeletesInBatches) {
  auto clock = std::make_shared<ManualClock>();
  PostgresOptions options;  // named: GCC 12 -O2 misreads a temporary's shared_ptr here
  options.backend = BackendOptions{.ttl = milliseconds(1000), .clock = clock};
  options.table = table_;
  options.purge_batch = 7;
  auto backend = make(std::move(options));
  for (int i = 0; i < 50; ++i) {
    const Claim c = won(backend->claim("purge-" + std::to_string(i), milliseconds(1000)));
    ASSERT_TRUE(backend->complete(c));
  }
  for (int i = 0; i < 5; ++i) {
    (void)won(backend->claim("live-" + std::to_string(i), std::chrono::hours(1)));
  }
  EXPECT_EQ(backend->purge_expired(), 0U);
  clock->advance(milliseconds(2000));
  EXPECT_EQ(backend->purge_expired(), 50U);
  EXPECT_EQ(backend->purge_expired(), 0U);
  EXPECT_FALSE(backend->inspect("purge-3").has_value());
  EXPECT_TRUE(backend->inspect("live-3").has_value());
  // A purged key starts over at fence 1.
  EXPECT_EQ(won(backend->claim("purge-3", milliseconds(1000))).fence, 1);
}

TEST_F(PostgresLockTest, BinaryKeysResultsAndFingerprintsRoundTrip) {
  auto backend = make();
  const std::string key("k\0\xff\x01 key", 9);
  const std::string result("\0\x01\x02result\xfe", 10);
  const std::string fingerprint("fp\0x", 4);
  const Claim c = won(backend->claim(key, milliseconds(60'000), {.fingerprint = fingerprint}));
  ASSERT_TRUE(backend->complete(c, result));
  const AlreadyDone d = done(backend->claim(key, milliseconds(60'000)));
  EXPECT_EQ(d.result, result);
  EXPECT_EQ(d.fingerprint, fingerprint);
  const auto rec = backend->inspect(key);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->state, RecordState::kDone);
  EXPECT_EQ(rec->claim_token, c.claim_token);
  // An empty result is stored as empty bytes, not as "no result".
  const Claim e = won(backend->claim("empty-result", milliseconds(60'000)));
  ASSERT_TRUE(backend->complete(e, std::string()));
  EXPECT_EQ(done(backend->claim("empty-result", milliseconds(60'000))).result, std::string());
}

TEST_F(PostgresLockTest, NoRawKeyInAnyExceptionMessage) {
  auto backend = make();
  const std::string key = "customer-4242-secret-order";
  const Claim c = won(backend->claim(key, milliseconds(60'000)));
  Admin admin(postgres_url());
  admin.exec("DROP TABLE \"" + table_ + "\"");
  auto expect_clean = [&](auto&& call) {
    try {
      call();
      ADD_FAILURE() << "no StoreError";
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), Not(HasSubstr(key)));
      EXPECT_THAT(e.what(), HasSubstr(key_fingerprint(key)));
    }
  };
  expect_clean([&] { (void)backend->claim(key, milliseconds(1000)); });
  expect_clean([&] { (void)backend->complete(c, "x"); });
  expect_clean([&] { backend->release(c); });
  expect_clean([&] { (void)backend->inspect(key); });
  EXPECT_THROW((void)backend->purge_expired(), StoreError);
}

TEST_F(PostgresLockTest, SchemaIsPrintableDdl) {
  const std::string ddl = PostgresLock::schema("tenant.orders_idem");
  EXPECT_THAT(ddl, HasSubstr("CREATE TABLE IF NOT EXISTS \"tenant\".\"orders_idem\""));
  EXPECT_THAT(ddl, HasSubstr("key bytea PRIMARY KEY"));
  EXPECT_THAT(ddl, HasSubstr("waiters integer NOT NULL DEFAULT 0"));
  EXPECT_THAT(ddl, HasSubstr("CREATE INDEX IF NOT EXISTS \"orders_idem_expires_idx\""));
}

}  // namespace
}  // namespace idempotency::testing
