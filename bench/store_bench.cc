// store_bench: the driver behind `./dev bench store` (bench/run.sh). It measures every store
// path through the public API (open_backend + LockBackend), and the raw SQLite limit the same
// statements reach without the library; bench/run.sh measures the Redis and PostgreSQL limits
// with redis-benchmark and pgbench, back to back with these runs. One JSON object a line.
//
//   store_bench run URL NAME THREADS SECONDS PATHS  paths: pair,dup,dupcache,hot,async (comma-
//                                                   separated; dupcache: dup behind a DoneCache;
//                                                   async: pairs by claim_async/complete_async,
//                                                   THREADS chains in flight from one thread)
//   store_bench sqlite-limit PATH THREADS SECONDS   raw BEGIN IMMEDIATE / SELECT / UPSERT /
//                                                   COMMIT pairs, synchronous=FULL, WAL
//   store_bench pgbench-script [TABLE]              the claim + complete statements as a
//                                                   pgbench script (-M prepared)
//   store_bench scale NAME URL COUNTS               claim p50/p99 at each count of live
//                                                   records (a store each, measured in
//                                                   rounds), and bytes per record; URL
//                                                   without a query, database or table
//   store_bench purge NAME URL COUNTS               purge_expired() time against expired count
//   store_bench floor PORT SECONDS                  the least a blocking call can cost here,
//                                                   without the library (blocking_floor.h)
//
// A pair is claim (must be Won) then complete (must be true) of a key no run used before. The
// duplicate path is claim of a DONE key (must be AlreadyDone), directly (dup) or through a
// DoneCache with its defaults (dupcache); async is the pair path with THREADS pairs kept in
// flight by callbacks (claim_async → complete_async → the next claim), no thread per call, as an
// event loop calls a store (Redis only: elsewhere the callbacks run inline); the hot path is every
// thread claiming one key that one earlier claim holds (must be HeldByOther). Each run also reports
// the client CPU it took per operation (cpu_us_per_op): the whole process's user + system time over
// the measured window (getrusage RUSAGE_SELF, every thread) ÷ operations — what the library costs
// the host of a store client, compared with the Powertools peer's process.cpuUsage() (bench/peer).
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "blocking_floor.h"
#include "idempotency/backend.h"
#include "idempotency/backend_url.h"
#include "idempotency/clock.h"
#include "idempotency/done_cache.h"
#include "idempotency/memory_lock.h"
#include "idempotency/open_backend.h"
#include "idempotency/postgres_lock.h"
#include "idempotency/redis_lock.h"
#include "idempotency/sqlite_lock.h"
#include "measure.h"
#include "postgres/postgres_internal.h"

namespace {

using Clock = std::chrono::steady_clock;
using idempotency::AlreadyDone;
using idempotency::ClaimResult;
using idempotency::HeldByOther;
using idempotency::LockBackend;
using idempotency::Won;

constexpr std::chrono::milliseconds kLease{60'000};
constexpr std::int64_t kTtlMs = 3'600'000;  // the default ttl, which every backend here uses

std::string nonce() {
  std::random_device rd;
  std::ostringstream s;
  s << std::hex << rd() << rd();
  return s.str();
}

// Percentile of sorted nanoseconds, in microseconds.
double pct_us(const std::vector<std::int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto i = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1));
  return static_cast<double>(sorted[i]) / 1000.0;
}

// One decimal; two below 10 µs, where the memory store's calls are.
std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, v < 10 ? "%.2f" : "%.1f", v);
  return buf;
}

// One thread's counts. A cache line of its own: threads that wrote neighbouring tallies would
// bounce one line between cores on every call and measure that, not the store.
struct alignas(64) Tally {
  std::vector<std::int64_t> call_ns;  // the timed store calls in the measured window
  std::uint64_t ops = 0;              // pairs (pair path) or claims (dup, hot)
  std::uint64_t unexpected = 0;       // an answer the path does not expect
  double cpu_seconds = 0;             // the process's user + system CPU in the measured window
};

using bench::measure_window;

// What one operation of a driven body records: `measured` once the measured window is open
// (count it), `timed` for the operations whose calls are timed (one in `time_every`).
struct Step {
  bool measured;
  bool timed;
};

// Runs body(thread, tally, step) on `threads` threads: kWarmupSeconds unrecorded, then
// `seconds` recorded. body performs one operation, counts it when step.measured and adds its
// calls' latencies when step.timed. Reading the clock twice a call costs about 50 ns, a tenth
// of a memory-store pair, so that store times one operation in `time_every` (a uniform sample)
// and the rate is not the clock's. Returns the merged tally (with the process's CPU time
// between the switches to and from the measured phase) and the measured wall time.
template <typename Body>
std::pair<Tally, double> drive(int threads, double seconds, Body body, unsigned time_every = 1) {
  std::vector<Tally> tallies(static_cast<std::size_t>(threads));
  std::latch ready(threads + 1);
  std::atomic<int> phase{0};  // 0 warm-up, 1 measured, 2 stop
  std::atomic<std::uint64_t> errors{0};
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Tally& tally = tallies[static_cast<std::size_t>(t)];
      tally.call_ns.reserve(1 << 16);
      ready.arrive_and_wait();
      unsigned tick = 0;
      for (int p = phase.load(std::memory_order_relaxed); p != 2;
           p = phase.load(std::memory_order_relaxed)) {
        const bool measured = p == 1;
        const bool timed = measured && ++tick % time_every == 0;
        try {
          body(t, tally, Step{measured, timed});
        } catch (const std::exception& e) {
          if (errors.fetch_add(1) < 3) std::fprintf(stderr, "store_bench: %s\n", e.what());
          ++tally.unexpected;
        }
      }
    });
  }
  ready.arrive_and_wait();
  const auto [elapsed, cpu] = measure_window(phase, seconds);
  for (auto& th : pool) th.join();
  Tally all;
  all.cpu_seconds = cpu;
  for (auto& t : tallies) {
    all.ops += t.ops;
    all.unexpected += t.unexpected;
    all.call_ns.insert(all.call_ns.end(), t.call_ns.begin(), t.call_ns.end());
  }
  std::sort(all.call_ns.begin(), all.call_ns.end());
  return {std::move(all), elapsed};
}

// Runs one call, adding its latency to the tally when `time` is set.
template <typename F>
auto timed(Tally& tally, bool time, F f) {
  if (!time) return f();
  const auto t0 = Clock::now();
  auto r = f();
  tally.call_ns.push_back((Clock::now() - t0).count());
  return r;
}

// A thread's keys: `prefix` then a serial number, written over the last one in place, so
// that the driver spends no allocation and no string concatenation on a key (a caller has
// its key already: a message id). Aligned like Tally, for the same reason; the key's own
// buffer is allocated by the first next(), on the thread that writes it, so that two threads'
// buffers are not neighbours from one allocator.
class alignas(64) KeySerial {
 public:
  explicit KeySerial(std::string prefix) : prefix_(std::move(prefix)) {}
  // The next key: prefix and the next serial.
  const std::string& next() {
    if (key_.empty()) {
      key_.reserve(prefix_.size() + 20);
      key_ = prefix_;
    }
    char digits[20];
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, serial_++);
    (void)ec;  // 20 digits hold any 64-bit number
    key_.resize(prefix_.size());
    key_.append(digits, end);
    return key_;
  }

 private:
  std::string prefix_;  // never written after construction
  std::string key_;
  std::uint64_t serial_ = 0;
};

// Keys "<prefix><thread>-<serial>" for `threads` threads, one KeySerial each.
std::vector<KeySerial> key_serials(const std::string& prefix, int threads) {
  std::vector<KeySerial> keys;
  keys.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) keys.emplace_back(prefix + std::to_string(t) + "-");
  return keys;
}

// One timed operation in kMemoryTimeEvery on the memory store (see drive()); every one
// elsewhere, where a call takes a round trip and the clock is noise.
constexpr unsigned kMemoryTimeEvery = 16;
unsigned time_every(std::string_view url) {
  return url.starts_with("memory") ? kMemoryTimeEvery : 1;
}

void emit(const std::string& kind, const std::string& name, const std::string& path, int threads,
          const Tally& t, double elapsed, const std::string& extra) {
  std::printf(
      "{\"kind\":\"%s\",\"backend\":\"%s\",\"path\":\"%s\",\"threads\":%d,\"ops\":%llu,"
      "\"seconds\":%.3f,\"rate\":%.1f,\"calls\":%zu,\"p50_us\":%s,\"p99_us\":%s,"
      "\"cpu_us_per_op\":%.2f,\"unexpected\":%llu%s}\n",
      kind.c_str(), name.c_str(), path.c_str(), threads, static_cast<unsigned long long>(t.ops),
      elapsed, static_cast<double>(t.ops) / elapsed, t.call_ns.size(),
      fmt(pct_us(t.call_ns, 0.50)).c_str(), fmt(pct_us(t.call_ns, 0.99)).c_str(),
      t.ops == 0 ? 0.0 : t.cpu_seconds * 1e6 / static_cast<double>(t.ops),
      static_cast<unsigned long long>(t.unexpected), extra.c_str());
  std::fflush(stdout);
}

// The pool of the backend a URL names, as the library builds it (the default, or PostgreSQL's
// `pool_size=`), and whether `threads` callers outnumber it; for pipelined Redis, its
// connections, which any number of callers share.
std::string pool_info(std::string_view url, int threads) {
  std::size_t pool = 0;
  // A single Redis node pipelines every call over a few shared connections unless the URL
  // turns that off; then, and on a cluster, calls take pooled connections.
  if (url.starts_with("redis://") && url.find("pipelines=0") == std::string_view::npos) {
    return ",\"pool\":" + std::to_string(idempotency::RedisOptions{}.pipelines) +
           ",\"pipelined\":true,\"pool_limited\":false";
  }
  if (url.starts_with("redis")) pool = idempotency::RedisOptions{}.pool_size;
  if (url.starts_with("postgres")) {
    pool = idempotency::PostgresOptions{}.pool_size;
    // The parameter, not a longer name ending in it; the last one wins, as in the library.
    for (const std::string_view kSize : {"?pool_size=", "&pool_size="}) {
      const auto at = url.rfind(kSize);
      if (at == std::string_view::npos) continue;
      pool = std::strtoul(std::string(url.substr(at + kSize.size())).c_str(), nullptr, 10);
    }
  }
  if (url.starts_with("sqlite")) pool = 1;  // one connection, serialized (DECISIONS.md)
  if (pool == 0) return ",\"pool\":null,\"pool_limited\":false";
  return ",\"pool\":" + std::to_string(pool) +
         ",\"pool_limited\":" + (static_cast<std::size_t>(threads) > pool ? "true" : "false");
}

// Whether the comma-separated `paths` names `path` ("dup" is not "dupcache").
bool has_path(const std::string& paths, std::string_view path) {
  std::stringstream in(paths);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item == path) return true;
  }
  return false;
}

// The async path: `chains` claim → complete chains, each started again by its last callback,
// until the measured window ends. Callbacks run on the backend's I/O thread (one thread), so
// the tally is written there alone; the driver reads it once every chain has stopped.
class AsyncPairs {
 public:
  AsyncPairs(LockBackend& backend, std::string prefix) : b_(backend), prefix_(std::move(prefix)) {}

  // Runs `chains` chains: kWarmupSeconds unrecorded, then `seconds` recorded.
  std::pair<Tally, double> run(int chains, double seconds) {
    running_ = chains;
    for (int i = 0; i < chains; ++i) claim();
    if (inline_.load()) throw std::runtime_error("async: this backend answers inline");
    const auto [elapsed, cpu] = measure_window(phase_, seconds);
    std::unique_lock lock(mutex_);
    stopped_.wait(lock, [&] { return running_ == 0; });
    tally_.cpu_seconds = cpu;
    std::sort(tally_.call_ns.begin(), tally_.call_ns.end());
    return {std::move(tally_), elapsed};
  }

 private:
  void claim() {
    const std::string key = prefix_ + std::to_string(next_++);
    const auto t0 = Clock::now();
    ++depth;
    b_.claim_async(key, kLease, {}, [this, t0](idempotency::AsyncClaimResult r) {
      // Answered within claim_async, on this thread: a blocking backend; the chain would recurse.
      if (depth > 0) {
        inline_ = true;
        end_chain();
        return;
      }
      record(t0);
      const auto* result = std::get_if<ClaimResult>(&r);
      const Won* won = result != nullptr ? std::get_if<Won>(result) : nullptr;
      if (won == nullptr) {
        unexpected();
        return;
      }
      const auto t1 = Clock::now();
      b_.complete_async(won->claim, std::nullopt, [this, t1](idempotency::AsyncCompleteResult c) {
        record(t1);
        const bool ok = std::holds_alternative<bool>(c) && std::get<bool>(c);
        if (!ok) {
          unexpected();
          return;
        }
        if (phase_.load() == 1) ++tally_.ops;
        next_step();
      });
    });
    --depth;
  }

  // How many claim_async calls the current thread is inside.
  static thread_local int depth;

  void record(Clock::time_point t0) {
    if (phase_.load() == 1) tally_.call_ns.push_back((Clock::now() - t0).count());
  }
  void unexpected() {
    if (phase_.load() == 1) ++tally_.unexpected;
    next_step();
  }
  void next_step() {
    if (phase_.load() == 2) {
      end_chain();
      return;
    }
    claim();
  }
  void end_chain() {
    const std::lock_guard lock(mutex_);
    if (--running_ == 0) stopped_.notify_all();
  }

  LockBackend& b_;
  const std::string prefix_;
  std::atomic<std::uint64_t> next_{0};
  std::atomic<int> phase_{0};  // 0 warm-up, 1 measured, 2 stop
  std::atomic<bool> inline_{false};
  Tally tally_;  // the I/O thread's until every chain has stopped
  std::mutex mutex_;
  std::condition_variable stopped_;
  int running_ = 0;  // guarded by mutex_
};

thread_local int AsyncPairs::depth = 0;

int cmd_run(const std::string& url, const std::string& name, const std::vector<int>& counts,
            double seconds, const std::string& paths) {
  std::unique_ptr<LockBackend> backend = idempotency::open_backend(url);
  const std::string run = nonce();
  std::uint64_t serial = 0;  // keys of the set-up steps
  const unsigned every = time_every(url);
  auto fresh = [&] { return "bench-" + run + "-setup-" + std::to_string(serial++); };
  for (int threads : counts) {
    const std::string extra = pool_info(url, threads) + ",\"timed_every\":" + std::to_string(every);
    if (has_path(paths, "pair")) {
      std::vector<KeySerial> keys =
          key_serials("bench-" + run + "-pair-" + std::to_string(threads) + "-", threads);
      auto [t, s] = drive(
          threads, seconds,
          [&](int th, Tally& tally, Step step) {
            const std::string& key = keys[static_cast<std::size_t>(th)].next();
            ClaimResult r = timed(tally, step.timed, [&] { return backend->claim(key, kLease); });
            const Won* won = std::get_if<Won>(&r);
            if (won == nullptr) {
              if (step.measured) ++tally.unexpected;
              return;
            }
            const bool ok = timed(tally, step.timed, [&] { return backend->complete(won->claim); });
            if (!step.measured) return;
            if (ok) {
              ++tally.ops;
            } else {
              ++tally.unexpected;
            }
          },
          every);
      emit("store", name, "pair", threads, t, s, extra);
    }
    if (has_path(paths, "async")) {
      AsyncPairs pairs(*backend, "bench-" + run + "-async-" + std::to_string(threads) + "-");
      auto [t, s] = pairs.run(threads, seconds);
      emit("store", name, "async", threads, t, s, extra);
    }
    // The duplicate path through `via`: 256 DONE keys, claimed again at random (spread so
    // that rows are not all one hot row).
    auto duplicates = [&](LockBackend& via, const char* path) {
      std::vector<std::string> done;
      for (int i = 0; i < 256; ++i) {
        std::string k = fresh();
        ClaimResult r = backend->claim(k, kLease);
        if (const Won* w = std::get_if<Won>(&r)) (void)backend->complete(w->claim, "result");
        done.push_back(std::move(k));
      }
      auto [t, s] = drive(
          threads, seconds,
          [&](int th, Tally& tally, Step step) {
            thread_local std::minstd_rand rng(static_cast<unsigned>(th) + 1);
            const std::string& key = done[rng() % done.size()];
            ClaimResult r = timed(tally, step.timed, [&] { return via.claim(key, kLease); });
            if (!step.measured) return;
            if (std::holds_alternative<AlreadyDone>(r)) {
              ++tally.ops;
            } else {
              ++tally.unexpected;
            }
          },
          every);
      emit("store", name, path, threads, t, s, extra);
    };
    if (has_path(paths, "dup")) duplicates(*backend, "dup");
    if (has_path(paths, "dupcache")) {
      // The same behind a DoneCache (its defaults): from a key's first duplicate on, answered
      // in this process without a store call.
      idempotency::DoneCache cached(*backend);
      duplicates(cached, "dupcache");
    }
    if (has_path(paths, "hot")) {
      const std::string hot = fresh();
      ClaimResult owner = backend->claim(hot, kLease);  // held for the whole run
      if (!std::holds_alternative<Won>(owner)) throw std::runtime_error("hot key not won");
      auto [t, s] = drive(
          threads, seconds,
          [&](int, Tally& tally, Step step) {
            ClaimResult r = timed(tally, step.timed, [&] { return backend->claim(hot, kLease); });
            if (!step.measured) return;
            if (std::holds_alternative<HeldByOther>(r)) {
              ++tally.ops;
            } else {
              ++tally.unexpected;
            }
          },
          every);
      emit("store", name, "hot", threads, t, s, extra);
    }
  }
  return 0;
}

// ------------------------------------------------------------------------------------------
// Raw SQLite: what SqliteLock's file setup and statements cost without the library.

void sqlite_ok(sqlite3* db, int rc, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
    throw std::runtime_error(std::string("sqlite ") + what + ": " + sqlite3_errmsg(db));
  }
}

void sqlite_exec(sqlite3* db, const std::string& sql) {
  sqlite_ok(db, sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), sql.c_str());
}

struct SqliteDeleter {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};
using SqlitePtr = std::unique_ptr<sqlite3, SqliteDeleter>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

// Opens `path` exactly as SqliteLock does (src/backends/sqlite/sqlite_lock.cc).
SqlitePtr sqlite_open(const std::string& path) {
  sqlite3* raw = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  SqlitePtr db(raw);
  sqlite_ok(raw, rc, "open");
  sqlite3_busy_timeout(raw, 5000);
  sqlite_exec(raw, "PRAGMA auto_vacuum=INCREMENTAL");
  sqlite_exec(raw, "PRAGMA journal_mode=WAL");
  sqlite_exec(raw, "PRAGMA synchronous=FULL");
  sqlite_exec(raw, "PRAGMA journal_size_limit=67108864");
  sqlite_exec(raw, idempotency::SqliteLock::schema());
  return db;
}

StmtPtr sqlite_prepare(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* s = nullptr;
  sqlite_ok(db, sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr),
            "prepare");
  return StmtPtr(s);
}

const char* const kSqliteSelect =
    "SELECT state, fence, lease_expiry_ms, expires_at_ms, claim_token, result, fingerprint "
    "FROM \"idempotency_records\" WHERE key = ?1";
const char* const kSqliteUpsert =
    "INSERT OR REPLACE INTO \"idempotency_records\" (key, state, fence, lease_expiry_ms, "
    "expires_at_ms, claim_token, result, fingerprint) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

std::int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int cmd_sqlite_limit(const std::string& path, const std::vector<int>& counts, double seconds) {
  SqlitePtr db = sqlite_open(path);
  StmtPtr select = sqlite_prepare(db.get(), kSqliteSelect);
  StmtPtr upsert = sqlite_prepare(db.get(), kSqliteUpsert);
  std::mutex mutex;  // one connection, one transaction at a time, as SqliteLock
  const std::string token(32, 't');
  // One operation: BEGIN IMMEDIATE, read the key, write its record, COMMIT.
  auto op = [&](const std::string& key, int state) {
    const std::lock_guard lock(mutex);
    sqlite_exec(db.get(), "BEGIN IMMEDIATE");
    sqlite3_stmt* s = select.get();
    sqlite3_reset(s);
    sqlite3_bind_blob(s, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
    while (sqlite3_step(s) == SQLITE_ROW) {
    }
    sqlite3_reset(s);
    const std::int64_t now = epoch_ms();
    sqlite3_stmt* u = upsert.get();
    sqlite3_reset(u);
    sqlite3_bind_blob(u, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
    sqlite3_bind_int(u, 2, state);
    sqlite3_bind_int64(u, 3, 1);
    sqlite3_bind_int64(u, 4, now + kLease.count());
    sqlite3_bind_int64(u, 5, now + kLease.count() + kTtlMs);
    sqlite3_bind_blob(u, 6, token.data(), static_cast<int>(token.size()), SQLITE_STATIC);
    sqlite3_bind_null(u, 7);
    sqlite3_bind_null(u, 8);
    sqlite_ok(db.get(), sqlite3_step(u), "upsert");
    sqlite3_reset(u);
    sqlite_exec(db.get(), "COMMIT");
    return 0;
  };
  const std::string run = nonce();
  for (int threads : counts) {
    std::vector<KeySerial> keys =
        key_serials("raw-" + run + "-" + std::to_string(threads) + "-", threads);
    auto [t, s] = drive(threads, seconds, [&](int th, Tally& tally, Step step) {
      const std::string& key = keys[static_cast<std::size_t>(th)].next();
      timed(tally, step.timed, [&] { return op(key, 1); });
      timed(tally, step.timed, [&] { return op(key, 2); });
      if (step.measured) ++tally.ops;
    });
    emit("limit", "sqlite", "pair", threads, t, s,
         ",\"tool\":\"raw SQLite C API: the same pragmas, table and statements, one connection\"");
  }
  return 0;
}

// ------------------------------------------------------------------------------------------
// pgbench: PostgresLock's own claim and complete statements, parameters made pgbench variables.

std::string pg_substitute(const std::string& sql, const std::vector<std::string>& params) {
  std::string out;
  for (std::size_t i = 0; i < sql.size(); ++i) {
    if (sql[i] == '$' && i + 1 < sql.size() && sql[i + 1] >= '1' && sql[i + 1] <= '9') {
      std::size_t j = i + 1;
      std::size_t n = 0;
      while (j < sql.size() && sql[j] >= '0' && sql[j] <= '9') n = n * 10 + (sql[j++] - '0');
      out += params.at(n - 1);
      i = j - 1;
    } else {
      out += sql[i];
    }
  }
  return out;
}

int cmd_pgbench_script(const std::string& table) {
  namespace pg = idempotency::postgres_detail;
  const pg::Statements st = pg::statements(pg::parse_table(table));
  // claim: $1 key, $2 now (NULL: the server's clock), $3 lease, $4 ttl, $5 token, $6 fingerprint
  const std::string claim = pg_substitute(
      st.claim.sql,
      {":k::bytea", "NULL", ":lease::bigint", ":ttl::bigint", ":tok::bytea", "NULL::bytea"});
  // complete: $1 key, $2 now, $3 fence (1: a fresh key), $4 result (none), $5 ttl
  const std::string complete = pg_substitute(
      st.complete.sql, {":k::bytea", "NULL", ":fence::bigint", "NULL::bytea", ":ttl::bigint"});
  std::printf("\\set k random(1, 1000000000000)\n\\set tok random(1, 1000000000000)\n");
  std::printf("\\set lease %lld\n\\set ttl %lld\n\\set fence 1\n",
              static_cast<long long>(kLease.count()), static_cast<long long>(kTtlMs));
  std::printf("%s;\n%s;\n", claim.c_str(), complete.c_str());
  return 0;
}

// ------------------------------------------------------------------------------------------
// Scale: live records in bulk (written straight into the store, in the backend's own format,
// as the benchmark cannot wait for 10^6 durable claims), then claim latency of fresh keys.

std::string url_after(std::string_view url, std::string_view scheme) {
  return std::string(url.substr(scheme.size()));
}

struct PgConnDeleter {
  void operator()(PGconn* c) const noexcept { PQfinish(c); }
};
struct RedisDeleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};

class Populator {
 public:
  virtual ~Populator() = default;
  // add(): `n` more records, live (DONE within their ttl) or already expired.
  virtual void add(std::int64_t from, std::int64_t n, bool expired) = 0;
  // bytes(): what the store holds for its records now, or -1.
  virtual double bytes() = 0;
};

class SqlitePopulator final : public Populator {
 public:
  explicit SqlitePopulator(std::string path) : path_(std::move(path)), db_(sqlite_open(path_)) {}
  void add(std::int64_t from, std::int64_t n, bool expired) override {
    StmtPtr u = sqlite_prepare(db_.get(), kSqliteUpsert);
    const std::int64_t now = epoch_ms();
    const std::int64_t exp = expired ? now - 1000 : now + kTtlMs;
    const std::string token(32, 't');
    sqlite_exec(db_.get(), "BEGIN IMMEDIATE");
    for (std::int64_t i = from; i < from + n; ++i) {
      const std::string key = "pop-" + std::to_string(i);
      sqlite3_reset(u.get());
      sqlite3_bind_blob(u.get(), 1, key.data(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
      sqlite3_bind_int(u.get(), 2, 2);
      sqlite3_bind_int64(u.get(), 3, 1);
      sqlite3_bind_int64(u.get(), 4, exp - kTtlMs);
      sqlite3_bind_int64(u.get(), 5, exp);
      sqlite3_bind_blob(u.get(), 6, token.data(), static_cast<int>(token.size()), SQLITE_STATIC);
      sqlite3_bind_null(u.get(), 7);
      sqlite3_bind_null(u.get(), 8);
      sqlite_ok(db_.get(), sqlite3_step(u.get()), "populate");
    }
    sqlite_exec(db_.get(), "COMMIT");
  }
  double bytes() override {
    sqlite_exec(db_.get(), "PRAGMA wal_checkpoint(TRUNCATE)");
    std::ifstream f(path_, std::ios::binary | std::ios::ate);
    return static_cast<double>(f.tellg());
  }

 private:
  std::string path_;
  SqlitePtr db_;
};

class PgPopulator final : public Populator {
 public:
  PgPopulator(std::string url, std::string table)
      : url_(std::move(url)), table_(std::move(table)), conn_(connect(url_)) {}
  void add(std::int64_t from, std::int64_t n, bool expired) override {
    const std::string now = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
    const std::string exp = expired ? now + " - 1000" : now + " + " + std::to_string(kTtlMs);
    const auto insert = [&](PGconn* conn, std::int64_t first, std::int64_t count) {
      exec(conn,
           "INSERT INTO " + table_ +
               " (key, state, fence, lease_expiry, expires_at, "
               "claim_token, result, fingerprint) SELECT convert_to('pop-' || i, 'UTF8'), 2, 1, " +
               exp + " - " + std::to_string(kTtlMs) + ", " + exp +
               ", convert_to(repeat('t', 32), 'UTF8'), NULL, NULL FROM generate_series(" +
               std::to_string(first) + ", " + std::to_string(first + count - 1) + ") AS i");
    };
    // Many rows go in by two server processes at once, half the keys each: a row costs the
    // server ~8 µs (the heap and two indexes), and 10^7 took 94 s on one, 59–61 on two. Few go
    // in by one, whose pages they fill as one would (bytes per record at 10^3 stay comparable).
    if (n < 100'000) {
      insert(conn_.get(), from, n);
    } else {
      const auto second = connect(url_);
      std::exception_ptr failed;
      {
        std::jthread other([&] {
          try {
            insert(second.get(), from, n / 2);
          } catch (...) {
            failed = std::current_exception();
          }
        });
        insert(conn_.get(), from + n / 2, n - n / 2);
      }  // joined here, also when the insert above throws
      if (failed) std::rethrow_exception(failed);
    }
    exec(conn_.get(), "VACUUM ANALYZE " + table_);
  }
  double bytes() override {
    PGresult* r = PQexec(conn_.get(), ("SELECT pg_total_relation_size('" + table_ + "')").c_str());
    const double b = PQresultStatus(r) == PGRES_TUPLES_OK ? std::atof(PQgetvalue(r, 0, 0)) : -1;
    PQclear(r);
    return b;
  }

 private:
  static std::unique_ptr<PGconn, PgConnDeleter> connect(const std::string& url) {
    std::unique_ptr<PGconn, PgConnDeleter> conn(PQconnectdb(url.c_str()));
    if (PQstatus(conn.get()) != CONNECTION_OK) throw std::runtime_error("pg connect failed");
    return conn;
  }
  static void exec(PGconn* conn, const std::string& sql) {
    PGresult* r = PQexec(conn, sql.c_str());
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    const std::string err = PQresultErrorMessage(r);
    PQclear(r);
    if (!ok) throw std::runtime_error("pg populate: " + err);
  }
  std::string url_;
  std::string table_;
  std::unique_ptr<PGconn, PgConnDeleter> conn_;
};

// A connection to `url`'s server and database, for what the library does not send: the
// populator's bulk writes, the scale step's raw commands.
std::unique_ptr<redisContext, RedisDeleter> raw_redis(const std::string& url) {
  const idempotency::RedisEndpoint ep = idempotency::parse_redis_url(url);
  std::unique_ptr<redisContext, RedisDeleter> c(redisConnect(ep.host.c_str(), ep.port));
  if (!c || c->err != 0) throw std::runtime_error("redis connect failed");
  auto* r = static_cast<redisReply*>(redisCommand(c.get(), "SELECT %d", ep.db));
  const bool ok = r != nullptr && r->type != REDIS_REPLY_ERROR;
  freeReplyObject(r);
  if (!ok) throw std::runtime_error("redis: SELECT failed");
  return c;
}

class RedisPopulator final : public Populator {
 public:
  explicit RedisPopulator(const std::string& url) : ctx_(raw_redis(url)) {}
  void add(std::int64_t from, std::int64_t n, bool expired) override {
    // DONE records as the script writes them (src/backends/redis/redis_script.lua: the
    // string form, a 32-byte token, no fingerprint or result), each expiring at its expires_at
    // (`SET … PXAT`, one command a record; the server is the limit: a Lua loop of them filled
    // 10^7 records in 61 s, pipelined from here in 70, SET then PEXPIREAT in 80).
    static const char* const kLua =
        "local t = redis.call('TIME') local now = t[1] * 1000 "
        "local exp = now + tonumber(ARGV[3]) "
        "local value = string.format('D 1 %d %d 32 -1 -1\\n', now, exp) .. "
        "string.rep('t', 32) "
        "local at = string.format('%d', exp) "
        "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do "
        "redis.call('SET', 'idempotency:pop-' .. i, value, 'PXAT', at) end return 0";
    if (expired) return;  // Redis expires records itself: nothing for purge_expired() to do
    constexpr std::int64_t kChunk = 100'000;
    for (std::int64_t i = from; i < from + n; i += kChunk) {
      const std::int64_t last = std::min(from + n, i + kChunk) - 1;
      auto* r = static_cast<redisReply*>(
          redisCommand(ctx_.get(), "EVAL %s 0 %lld %lld %lld", kLua, static_cast<long long>(i),
                       static_cast<long long>(last), static_cast<long long>(kTtlMs)));
      const bool ok = r != nullptr && r->type != REDIS_REPLY_ERROR;
      const std::string err = r != nullptr && r->str != nullptr ? r->str : "no reply";
      freeReplyObject(r);
      if (!ok) throw std::runtime_error("redis populate: " + err);
    }
  }
  double bytes() override {
    auto* r = static_cast<redisReply*>(redisCommand(ctx_.get(), "INFO memory"));
    double b = -1;
    if (r != nullptr && r->type == REDIS_REPLY_STRING) {
      const std::string info(r->str, r->len);
      const auto at = info.find("used_memory:");
      if (at != std::string::npos) b = std::atof(info.c_str() + at + 12);
    }
    freeReplyObject(r);
    return b;
  }

 private:
  std::unique_ptr<redisContext, RedisDeleter> ctx_;
};

long rss_bytes() {
  std::ifstream f("/proc/self/statm");
  long pages = 0;
  long resident = 0;
  f >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// The memory store is populated through its own API (claim + complete are cheap there).
class MemoryPopulator final : public Populator {
 public:
  explicit MemoryPopulator(LockBackend& b) : b_(b) {}
  void add(std::int64_t from, std::int64_t n, bool) override {
    for (std::int64_t i = from; i < from + n; ++i) {
      ClaimResult r = b_.claim("pop-" + std::to_string(i), kLease);
      if (const Won* w = std::get_if<Won>(&r)) (void)b_.complete(w->claim);
    }
  }
  double bytes() override { return static_cast<double>(rss_bytes()); }

 private:
  LockBackend& b_;
};

std::unique_ptr<Populator> populator(const std::string& url, LockBackend& backend) {
  if (url.starts_with("sqlite://")) {
    return std::make_unique<SqlitePopulator>(url_after(url, "sqlite://"));
  }
  if (url.starts_with("postgres")) {
    // The library's `table=` is not libpq's: the populator connects without it.
    idempotency::BackendUrl parsed = idempotency::BackendUrl::parse(url);
    std::string table = parsed.take("table").value_or("idempotency_records");
    return std::make_unique<PgPopulator>(parsed.str(), std::move(table));
  }
  if (url.starts_with("redis://")) return std::make_unique<RedisPopulator>(url);
  return std::make_unique<MemoryPopulator>(backend);
}

// A store of its own for each count of records in `base` (a URL without a database, table or
// query): another memory store, SQLite file, Redis database or PostgreSQL table.
std::string scale_url(const std::string& base, std::size_t i) {
  if (base.find('?') != std::string::npos) {
    throw std::invalid_argument("store_bench scale: the URL may not have a query");
  }
  if (base.starts_with("sqlite://")) return base + "-" + std::to_string(i);
  if (base.starts_with("redis://")) return base + "/" + std::to_string(i + 1);
  if (base.starts_with("postgres")) return base + "?table=idempotency_scale_" + std::to_string(i);
  return base;  // memory://: every open is a store of its own
}

// Reads at random places in memory laid out as the memory store's slot tables: `arrays`
// arrays of `bytes` each, on 2 MiB boundaries with transparent huge pages asked for where an
// array is 2 MiB or more, as RecordTable::allocate_slots does. A chase through a random cycle of
// all their cache lines: each read's address is the one before's value, so reads cannot
// overlap. A claim of a fresh key reads its home slot at such a random place, so what one read
// here costs beyond one in tables that fit the caches is about what that claim must add.
class RandomReads {
 public:
  RandomReads(std::size_t arrays, std::size_t bytes) {
    const bool huge = bytes >= kHugePage;
    std::vector<Line*> order;
    for (std::size_t a = 0; a < arrays; ++a) {
      void* raw = std::aligned_alloc(huge ? kHugePage : sizeof(Line), bytes);
      if (raw == nullptr) throw std::bad_alloc();
      if (huge) (void)::madvise(raw, bytes, MADV_HUGEPAGE);
      arrays_.emplace_back(static_cast<Line*>(raw), &std::free);
      for (std::size_t i = 0; i < bytes / sizeof(Line); ++i)
        order.push_back(arrays_.back().get() + i);
    }
    std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
    for (std::size_t i = 0; i < order.size(); ++i) order[i]->next = order[(i + 1) % order.size()];
    at_ = order.front();
  }

  // The mean time of one read over `steps` of them, after as many untimed: the TLB and the
  // caches as a store in use has them.
  double ns(int steps) {
    for (int i = 0; i < steps; ++i) at_ = at_->next;
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) at_ = at_->next;
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / steps;
  }

 private:
  struct alignas(64) Line {
    Line* next;
  };
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;

  std::vector<std::unique_ptr<Line, decltype(&std::free)>> arrays_;
  Line* at_ = nullptr;  // where the chase stands; a member, so the reads are not dead code
};

// The memory store's slot tables holding `records` (src/backends/memory/): 32 shards, each an
// open-addressing table of 16-byte slots, a power of two from 16 up, grown past 3/4 full.
constexpr std::size_t kMemoryShards = 32;
std::size_t memory_shard_table_bytes(std::int64_t records) {
  const auto per_shard = static_cast<std::uint64_t>(records) / kMemoryShards;
  std::uint64_t capacity = 16;
  while ((per_shard + 1) * 4 > capacity * 3) capacity *= 2;
  return static_cast<std::size_t>(capacity) * 16;
}

// One store at one count: its backend, its records' filler, and its timed claims.
struct ScaleStore {
  int records = 0;      // filled
  int records_end = 0;  // filled, and the rounds' claims on top
  std::unique_ptr<LockBackend> backend;
  std::unique_ptr<Populator> pop;
  double bytes_per_record = 0;
  double fill_seconds = 0;
  std::vector<std::int64_t> call_ns;  // every round's
  std::vector<double> round_p50_us;
  std::uint64_t unexpected = 0;
  std::vector<double> round_read_ns;  // the memory store's: see RandomReads
  // Redis's: the server's own SET NX PX GET of fresh keys (what a fresh claim sends), on a
  // connection of our own to the store's database.
  std::unique_ptr<redisContext, RedisDeleter> raw;
  std::vector<double> round_raw_us;
};

// `calls` SET NX PX GET of fresh keys on `store`'s own connection after `warmup` untimed, with
// a value the size of a claim's record; returns their p50 in µs.
double raw_set_round(ScaleStore& store, const std::string& prefix, int warmup, int calls) {
  const std::string value(60, 'v');
  Tally t;
  for (int i = -warmup; i < calls; ++i) {
    const std::string key = prefix + std::to_string(i);
    auto* r = timed(t, i >= 0, [&] {
      return static_cast<redisReply*>(redisCommand(store.raw.get(), "SET %b %b NX PX 3600000 GET",
                                                   key.data(), key.size(), value.data(),
                                                   value.size()));
    });
    if (r != nullptr && r->type == REDIS_REPLY_NIL) {
      ++store.records_end;
    } else {
      ++store.unexpected;
    }
    freeReplyObject(r);
  }
  std::sort(t.call_ns.begin(), t.call_ns.end());
  return pct_us(t.call_ns, 0.5);
}

// `calls` claims of fresh keys in `store` (each then completed, untimed: every claim adds a
// live record), after `warmup` such claims untimed; returns their p50 in µs.
double claim_round(ScaleStore& store, const std::string& prefix, int warmup, int calls) {
  Tally t;
  for (int i = -warmup; i < calls; ++i) {
    const std::string key = prefix + std::to_string(i);
    ClaimResult r = timed(t, i >= 0, [&] { return store.backend->claim(key, kLease); });
    if (const Won* w = std::get_if<Won>(&r)) {
      (void)store.backend->complete(w->claim);
      ++store.records_end;
    } else {
      ++store.unexpected;
    }
  }
  store.call_ns.insert(store.call_ns.end(), t.call_ns.begin(), t.call_ns.end());
  std::sort(t.call_ns.begin(), t.call_ns.end());
  return pct_us(t.call_ns, 0.5);
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The median over rounds of `mine[round] / fewest[round]`: each round's own ratio.
double median_ratio(const std::vector<double>& mine, const std::vector<double>& fewest) {
  std::vector<double> ratios;
  for (std::size_t r = 0; r < mine.size(); ++r) ratios.push_back(mine[r] / fewest[r]);
  return median_of(ratios);
}

// Claim latency against the count of live records. Each count has a store of its own, all
// filled first; then kRounds rounds each take a short batch of claims from every store in
// turn (starting one store later each round). A round's batches sit seconds apart at most,
// so what a shared machine does meanwhile falls on every count alike, and each count is
// compared with the fewest by the median of the rounds' own ratios. One store measured
// after another, minutes apart, read the same store 20 % apart on this VM. For the memory
// store, reads at random places in memory laid out as its tables are timed after the rounds
// (between the batches they would evict the other stores' caches).
int cmd_scale(const std::string& name, const std::string& url, std::vector<int> counts) {
  constexpr int kRounds = 5;
  const bool fast = name == "memory" || name == "redis";
  const int calls = fast ? 1000 : 100;  // a round's, a store
  const int warmup = calls / 5;
  std::sort(counts.begin(), counts.end());  // the fewest first: the one the others are held to
  std::vector<ScaleStore> stores(counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i) {
    ScaleStore& s = stores[i];
    const std::string at = scale_url(url, i);
    s.records = s.records_end = counts[i];
    s.backend = idempotency::open_backend(at);
    s.pop = populator(at, *s.backend);
    if (name == "redis") s.raw = raw_redis(at);
    const double before = s.pop->bytes();
    const auto t0 = Clock::now();
    s.pop->add(0, s.records, false);
    s.fill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    s.bytes_per_record = (s.pop->bytes() - before) / s.records;
    std::fprintf(stderr, "scale: %s filled with %d records in %.1f s\n", name.c_str(), s.records,
                 s.fill_seconds);
  }
  const std::string run = nonce();
  for (int round = 0; round < kRounds; ++round) {
    const std::string tag = run + "-" + std::to_string(round) + "-";
    for (std::size_t k = 0; k < stores.size(); ++k) {
      ScaleStore& s = stores[(k + static_cast<std::size_t>(round)) % stores.size()];
      s.round_p50_us.push_back(claim_round(s, "scale-" + tag, warmup, calls));
      if (s.raw) s.round_raw_us.push_back(raw_set_round(s, "scale-raw-" + tag, warmup, calls));
    }
  }
  if (name == "memory") {
    for (ScaleStore& s : stores) s.backend.reset();  // their memory back for the reads
    for (ScaleStore& s : stores) {
      // Tables as large as the store's after the rounds: the most its claims met.
      RandomReads reads(kMemoryShards, memory_shard_table_bytes(s.records_end));
      for (int round = 0; round < kRounds; ++round) s.round_read_ns.push_back(reads.ns(200'000));
    }
  }
  for (ScaleStore& s : stores) {
    std::sort(s.call_ns.begin(), s.call_ns.end());
    // What the store itself does at this count, beside the claims (memory: reads; Redis: SET).
    std::string own;
    if (!s.round_read_ns.empty()) {
      own = ",\"table_bytes\":" +
            std::to_string(kMemoryShards * memory_shard_table_bytes(s.records_end)) +
            ",\"random_read_ns\":" + fmt(median_of(s.round_read_ns));
    }
    if (!s.round_raw_us.empty()) {
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, "%.3f",
                    median_ratio(s.round_raw_us, stores[0].round_raw_us));
      own = ",\"raw_set_p50_us\":" + fmt(median_of(s.round_raw_us)) +
            ",\"raw_set_vs_fewest\":" + ratio;
    }
    std::string rounds;
    for (double v : s.round_p50_us) rounds += (rounds.empty() ? "" : ",") + fmt(v);
    std::printf(
        "{\"kind\":\"scale\",\"backend\":\"%s\",\"records\":%d,\"records_end\":%d,\"claims\":%d,"
        "\"p50_us\":%s,\"p99_us\":%s,\"round_p50_us\":[%s],\"vs_fewest\":%.3f,\"unexpected\":%llu,"
        "\"bytes_per_record\":%.1f,\"fill_seconds\":%.2f%s}\n",
        name.c_str(), s.records, s.records_end, kRounds * calls,
        fmt(median_of(s.round_p50_us)).c_str(), fmt(pct_us(s.call_ns, 0.99)).c_str(),
        rounds.c_str(), median_ratio(s.round_p50_us, stores[0].round_p50_us),
        static_cast<unsigned long long>(s.unexpected), s.bytes_per_record, s.fill_seconds,
        own.c_str());
  }
  std::fflush(stdout);
  return 0;
}

int cmd_purge(const std::string& name, const std::string& url, const std::vector<int>& counts) {
  std::int64_t from = 0;
  for (int count : counts) {
    std::unique_ptr<LockBackend> backend;
    std::shared_ptr<idempotency::ManualClock> clock;
    if (name == "memory") {
      // Claims at a standing clock, which then jumps past their expiry.
      clock = std::make_shared<idempotency::ManualClock>();
      backend = std::make_unique<idempotency::InMemoryLock>(
          idempotency::BackendOptions{.ttl = std::chrono::seconds(1), .clock = clock});
      for (int i = 0; i < count; ++i) {
        ClaimResult r = backend->claim("exp-" + std::to_string(i), std::chrono::seconds(1));
        if (const Won* w = std::get_if<Won>(&r)) (void)backend->complete(w->claim);
      }
      clock->advance(std::chrono::seconds(10));
    } else {
      backend = idempotency::open_backend(url);
      populator(url, *backend)->add(from, count, true);
      from += count;
    }
    const auto t0 = Clock::now();
    const std::size_t purged = backend->purge_expired();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf(
        "{\"kind\":\"store_purge\",\"backend\":\"%s\",\"expired\":%d,\"purged\":%zu,\"seconds\":%."
        "4f}\n",
        name.c_str(), count, purged, s);
    std::fflush(stdout);
  }
  return 0;
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

int usage() {
  std::fprintf(stderr,
               "usage: store_bench run URL NAME THREADS SECONDS PATHS\n"
               "       store_bench sqlite-limit PATH THREADS SECONDS\n"
               "       store_bench pgbench-script [TABLE]\n"
               "       store_bench scale|purge NAME URL COUNTS\n"
               "       store_bench floor PORT SECONDS\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  try {
    if (a.size() == 6 && a[0] == "run") {
      return cmd_run(a[1], a[2], int_list(a[3]), std::stod(a[4]), a[5]);
    }
    if (a.size() == 4 && a[0] == "sqlite-limit") {
      return cmd_sqlite_limit(a[1], int_list(a[2]), std::stod(a[3]));
    }
    if ((a.size() == 1 || a.size() == 2) && a[0] == "pgbench-script") {
      return cmd_pgbench_script(a.size() == 2 ? a[1] : "idempotency_records");
    }
    if (a.size() == 4 && a[0] == "scale") return cmd_scale(a[1], a[2], int_list(a[3]));
    if (a.size() == 4 && a[0] == "purge") return cmd_purge(a[1], a[2], int_list(a[3]));
    if (a.size() == 3 && a[0] == "floor")
      return bench::blocking_floor(std::stoi(a[1]), std::stod(a[2]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_bench: %s\n", e.what());
    return 1;
  }
  return usage();
}
