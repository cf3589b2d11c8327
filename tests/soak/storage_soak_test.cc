// Storage soak: under a steady stream of distinct keys for several ttl periods, what a store
// holds levels off at about rate × ttl instead of growing with every key ever seen. One program
// per store (a CTest test needs one server fixture at most): the library on memory (the store's
// own sweep, no thread) and on PostgreSQL (a Reclaimer), and the gateway on SQLite
// (--purge-interval). Seconds-scale lease, ttl and interval; every sample is printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "idempotency/backend.h"
#include "support/claim_matchers.h"

#if defined(SOAK_MEMORY)
#include "idempotency/memory_lock.h"
#elif defined(SOAK_POSTGRES)
#include <libpq-fe.h>

#include "idempotency/postgres_lock.h"
#include "idempotency/reclaimer.h"
#include "support/test_servers.h"
#elif defined(SOAK_GATEWAY)
#include <sqlite3.h>

#include <filesystem>

#include "gateway/gateway_client.h"
#include "support/child_process.h"
#include "support/temp_dir.h"
#endif

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Calls `one(i)` with distinct i at no more than `per_second`, for `duration`, on a thread of
// its own. The pace is kept by sleeping whenever the stream is ahead of its schedule; a slot
// missed by more than kMaxLag (a stalled or loaded box) is dropped rather than sent in a burst
// later, so the rate the assertions assume is never exceeded.
class SteadyLoad {
 public:
  static constexpr milliseconds kMaxLag{50};

  SteadyLoad(int per_second, milliseconds duration, std::function<void(int)> one)
      : thread_([=, this] {
          const auto start = Clock::now();
          for (int i = 0;; ++i) {
            const auto due = start + std::chrono::microseconds(static_cast<std::int64_t>(i) *
                                                               1'000'000 / per_second);
            if (due - start >= duration) break;
            const auto now = Clock::now();
            if (now < due) {
              std::this_thread::sleep_until(due);
            } else if (now - due > kMaxLag) {
              continue;
            }
            one(i);
            ++done_;
          }
          finished_ = true;
        }) {}
  ~SteadyLoad() { thread_.join(); }
  SteadyLoad(const SteadyLoad&) = delete;
  SteadyLoad& operator=(const SteadyLoad&) = delete;

  [[nodiscard]] bool finished() const { return finished_; }
  [[nodiscard]] int done() const { return done_; }

 private:
  std::atomic<int> done_{0};
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

// One measurement of the store while the load runs.
struct Sample {
  double at_s;
  std::int64_t records;
  std::int64_t bytes;    // file size or RSS; 0 when not measured
  std::int64_t sent{0};  // keys the load had sent by then (set by sample_while)
};

// Samples `measure` every `every` until the load finishes, printing each line.
std::vector<Sample> sample_while(const SteadyLoad& load, milliseconds every,
                                 const std::function<Sample(double)>& measure,
                                 const char* bytes_name) {
  std::vector<Sample> samples;
  const auto start = Clock::now();
  while (!load.finished()) {
    std::this_thread::sleep_for(every);
    const double at = std::chrono::duration<double>(Clock::now() - start).count();
    samples.push_back(measure(at));
    samples.back().sent = load.done();
    // A sample the store could not give (-1) would pass every bound the tests set.
    EXPECT_GE(samples.back().records, 0) << "t=" << at << " s: the store could not be read";
    std::printf("  t=%5.2fs  sent=%6lld  records=%7lld  %s=%9lld\n", at,
                static_cast<long long>(samples.back().sent),
                static_cast<long long>(samples.back().records), bytes_name,
                static_cast<long long>(samples.back().bytes));
  }
  std::fflush(stdout);
  return samples;
}

// The largest record count seen after the first `skip_s` seconds (the ramp-up).
std::int64_t steady_max(const std::vector<Sample>& samples, double skip_s,
                        std::int64_t Sample::*field) {
  std::int64_t most = 0;
  for (const auto& s : samples) {
    if (s.at_s >= skip_s) most = std::max(most, s.*field);
  }
  return most;
}

// Reclaimed: from `window_s` on, no sample holds more than the keys sent in the `window_s`
// before it (plus `extra`), where a store that kept every key would hold all it was ever sent.
// Judged against what the load really sent, which on a loaded box (a sanitizer build, other
// jobs) falls short of its rate and catches up later: a fixed rate × ttl would then misjudge.
void expect_bounded_by_recent(const std::vector<Sample>& samples, double window_s,
                              std::int64_t extra, const char* what) {
  int judged = 0;
  for (const auto& s : samples) {
    if (s.at_s < window_s) continue;
    // What had been sent by the last sample a whole window earlier (at most what had been
    // sent a window ago, so the count below is never less than the window's sends).
    std::int64_t before = 0;
    for (const auto& earlier : samples) {
      if (earlier.at_s <= s.at_s - window_s) before = earlier.sent;
    }
    EXPECT_LE(s.records, s.sent - before + extra)
        << what << " at t=" << s.at_s << " s: more than the " << s.sent - before
        << " keys sent in the " << window_s << " s before";
    ++judged;
  }
  EXPECT_GE(judged, 2) << what << ": the run is too short for a " << window_s << " s window";
}

// Levelled off: the second half of the run holds no more than the first steady stretch allows
// for noise, where an unreclaimed store would have grown by half its total.
// (The PostgreSQL program measures no size that should level off, so it has no use for it.)
[[maybe_unused]] void expect_levels_off(const std::vector<Sample>& samples, double ramp_s,
                                        double end_s, std::int64_t Sample::*field, double slack,
                                        const char* what) {
  const double mid = (ramp_s + end_s) / 2;
  std::int64_t first = 0;
  std::int64_t second = 0;
  for (const auto& s : samples) {
    if (s.at_s >= ramp_s && s.at_s < mid) first = std::max(first, s.*field);
    if (s.at_s >= mid) second = std::max(second, s.*field);
  }
  ASSERT_GT(first, 0) << what << ": no steady samples";
  EXPECT_LE(static_cast<double>(second), static_cast<double>(first) * slack)
      << what << " kept growing: " << first << " in the first steady half, " << second
      << " in the second";
}

#if defined(SOAK_MEMORY)

std::int64_t rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

TEST(StorageSoak, MemoryLevelsOffWithoutAThread) {
  constexpr int kRate = 10'000;  // claim + complete pairs a second
  constexpr milliseconds kTtl{300};
  constexpr milliseconds kRun{3'000};  // ten ttl periods
  auto backend = std::make_shared<InMemoryLock>(BackendOptions{.ttl = kTtl});
  std::printf("memory: %d distinct keys/s, ttl %lld ms, no purge call, for %lld ms\n", kRate,
              static_cast<long long>(kTtl.count()), static_cast<long long>(kRun.count()));
  SteadyLoad load(kRate, kRun, [&](int i) {
    (void)backend->complete(won(backend->claim("k" + std::to_string(i), milliseconds(100))));
  });
  const auto samples = sample_while(
      load, milliseconds(100),
      [&](double at) {
        return Sample{at, static_cast<std::int64_t>(backend->stored_count()), rss_bytes()};
      },
      "rss_bytes");
  // rate × ttl live records; the sweep keeps the rest within about as many again.
  const std::int64_t live = std::int64_t{kRate} * kTtl.count() / 1000;
  EXPECT_LE(steady_max(samples, 0.6, &Sample::records), 3 * live);
  // Live for ttl, swept within about another ttl, and room for a sweep running late.
  expect_bounded_by_recent(samples, 1.0, 10, "records");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // Freed records go back to malloc's free lists and are reused, so the RSS levels off too
  // (sanitizers keep freed memory in quarantine, so only plain builds check it).
  expect_levels_off(samples, 0.6, 3.0, &Sample::bytes, 1.25, "RSS");
#endif
}

#elif defined(SOAK_POSTGRES)

// The table's rows and its size on disk (heap, index and TOAST, dead tuples included).
Sample measure_table(const std::string& url, const std::string& table, double at) {
  PGconn* conn = PQconnectdb(url.c_str());
  Sample sample{at, -1, -1};
  if (PQstatus(conn) == CONNECTION_OK) {
    const std::string sql =
        "SELECT count(*), pg_total_relation_size('" + table + "') FROM " + table;
    PGresult* r = PQexec(conn, sql.c_str());
    if (PQresultStatus(r) == PGRES_TUPLES_OK) {
      sample.records = std::stoll(PQgetvalue(r, 0, 0));
      sample.bytes = std::stoll(PQgetvalue(r, 0, 1));
    }
    PQclear(r);
  }
  PQfinish(conn);
  return sample;
}

TEST(StorageSoak, PostgresLevelsOffWithAReclaimer) {
  const std::string url = postgres_url();
  if (url.empty()) {
    // NOLINTNEXTLINE(concurrency-mt-unsafe): read before any thread starts
    if (std::getenv("CI") != nullptr) GTEST_FAIL() << "CI is set but no PostgreSQL server";
    GTEST_SKIP() << "no PostgreSQL test server";
  }
  constexpr int kRate = 400;
  constexpr milliseconds kTtl{500};
  constexpr milliseconds kInterval{200};
  constexpr milliseconds kRun{4'000};  // eight ttl periods
  const std::string table = unique_name("soak");
  auto backend = std::make_shared<PostgresLock>(
      url, PostgresOptions{.backend = {.ttl = kTtl}, .table = table, .pool_size = 2});
  Reclaimer reclaimer(backend, {.interval = kInterval});
  std::printf("postgres: %d distinct keys/s, ttl %lld ms, purge every %lld ms, for %lld ms\n",
              kRate, static_cast<long long>(kTtl.count()),
              static_cast<long long>(kInterval.count()), static_cast<long long>(kRun.count()));
  SteadyLoad load(kRate, kRun, [&](int i) {
    (void)backend->complete(won(backend->claim("k" + std::to_string(i), milliseconds(100))));
  });
  const auto samples = sample_while(
      load, milliseconds(250), [&](double at) { return measure_table(url, table, at); },
      "table_bytes");
  // rate × (ttl + one jittered interval), with room for the load running a little ahead.
  const std::int64_t bound = kRate * (kTtl.count() + kInterval.count() * 5 / 4) / 1000 * 3 / 2;
  EXPECT_LE(steady_max(samples, 1.0, &Sample::records), bound);
  // ttl, then purged within an interval (jittered), and room for a pass running late.
  expect_bounded_by_recent(samples, 1.5, 10, "rows");
  EXPECT_GT(reclaimer.purged(), 0U);
}

#elif defined(SOAK_GATEWAY)

std::int64_t count_rows(const std::string& path) {
  sqlite3* db = nullptr;
  std::int64_t n = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 1000);
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM idempotency_records", -1, &s, nullptr) ==
            SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW) {
      n = sqlite3_column_int64(s, 0);
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  return n;
}

std::int64_t file_bytes(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<std::int64_t>(size);
}

TEST(StorageSoak, TheGatewayOnSqliteLevelsOff) {
  constexpr int kRate = 300;
  constexpr milliseconds kRun{6'000};  // six ttl periods
  TempDir dir;
  const std::string db = dir.file("idem.db");
  ChildProcess upstream(GATEWAY_UPSTREAM_PATH, {}, {});
  ChildProcess gateway(
      GATEWAY_PATH,
      {"--listen", "127.0.0.1:0", "--upstream",
       "http://127.0.0.1:" + std::to_string(upstream.port()), "--backend", "sqlite://" + db,
       "--lease", "1s", "--ttl", "1s", "--purge-interval", "250ms"},
      {});
  std::printf(
      "gateway on sqlite: %d distinct messages/s, ttl 1 s, --purge-interval 250ms, %lld ms\n",
      kRate, static_cast<long long>(kRun.count()));
  std::atomic<int> acked{0};
  SteadyLoad load(kRate, kRun, [&](int i) {
    if (post(gateway.port(), envelope("soak-" + std::to_string(i))) == 201) ++acked;
  });
  const auto samples = sample_while(
      load, milliseconds(500),
      [&](double at) {
        return Sample{at, count_rows(db), file_bytes(db) + file_bytes(db + "-wal")};
      },
      "file_bytes");
  EXPECT_EQ(acked.load(), load.done()) << "every message is forwarded and acked once";
  // rate × (ttl + one jittered interval), with room for the load running a little ahead.
  EXPECT_LE(steady_max(samples, 2.0, &Sample::records), kRate * (1000 + 313) / 1000 * 3 / 2);
  // ttl, then purged within --purge-interval, and room for a pass running late.
  expect_bounded_by_recent(samples, 2.5, 10, "rows");
  expect_levels_off(samples, 2.0, 6.0, &Sample::bytes, 1.5, "file size");
  EXPECT_EQ(gateway.terminate(), 0);
}

#endif

}  // namespace
}  // namespace idempotency::testing
