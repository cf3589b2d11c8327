// SqliteLock beyond the contract: durability, several processes on one file, and faults
// (unopenable, corrupt, locked) surfacing as StoreError with SQLite's message.
#include "idempotency/sqlite_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/once.h"
#include "support/claim_matchers.h"
#include "support/temp_dir.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr milliseconds kLease = std::chrono::minutes(15);

TEST(SqliteLock, RecordsSurviveReopeningTheFile) {
  TempDir dir;
  const std::string path = dir.file("idem.db");
  Claim c;
  {
    SqliteLock first(path);
    c = won(first.claim("orders:1", kLease));
    EXPECT_TRUE(first.complete(c, std::string("receipt")));
  }
  SqliteLock second(path);
  EXPECT_EQ(done(second.claim("orders:1", kLease)).result, std::optional<std::string>("receipt"));
  EXPECT_EQ(second.inspect("orders:1")->fence, c.fence);
}

TEST(SqliteLock, TwoInstancesOnOneFileSeeEachOther) {
  TempDir dir;
  SqliteLock a(dir.file("idem.db"));
  SqliteLock b(dir.file("idem.db"));
  Claim c = won(a.claim("k", kLease));
  held(b.claim("k", kLease));
  EXPECT_TRUE(a.complete(c));
  done(b.claim("k", kLease));
}

TEST(SqliteLock, TablesInOneFileAreIndependent) {
  TempDir dir;
  SqliteLock orders(dir.file("idem.db"), SqliteOptions{.table = "orders"});
  SqliteLock emails(dir.file("idem.db"), SqliteOptions{.table = "emails"});
  (void)won(orders.claim("k", kLease));
  (void)won(emails.claim("k", kLease));
}

// Runs `body` in `n` child processes and returns the sum of their exit codes.
template <class Body>
int sum_over_children(int n, Body body) {
  std::vector<pid_t> children;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) _exit(body());
    children.push_back(pid);
  }
  int total = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status));
    total += WEXITSTATUS(status);
  }
  return total;
}

TEST(SqliteLock, ProcessesAndThreadsRacingOneKeyProduceExactlyOneWon) {
  TempDir dir;
  const std::string path = dir.file("race.db");
  { SqliteLock init(path); }  // create the schema before the race
  const int wins = sum_over_children(4, [&] {
    SqliteLock backend(path);
    std::atomic<int> won_here{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        if (std::holds_alternative<Won>(backend.claim("race", kLease))) won_here++;
      });
    }
    for (auto& t : threads) t.join();
    return won_here.load();
  });
  EXPECT_EQ(wins, 1);
}

TEST(SqliteLock, ProcessesRacingManyKeysWinEachKeyExactlyOnce) {
  TempDir dir;
  const std::string path = dir.file("race.db");
  { SqliteLock init(path); }
  constexpr int kKeys = 250;  // exit codes carry at most 255 wins per child
  std::vector<int> per_child;
  const int wins = sum_over_children(3, [&] {
    SqliteLock backend(path);
    int won_here = 0;
    for (int k = 0; k < kKeys; ++k) {
      if (std::holds_alternative<Won>(backend.claim("key-" + std::to_string(k), kLease))) {
        ++won_here;
      }
    }
    return won_here;
  });
  // Every child claims every key, so each key was won at least once; a sum of exactly kKeys
  // means none was won twice.
  EXPECT_EQ(wins, kKeys);
}

TEST(SqliteLock, OnceReplaysInOneProcessWhatAnotherProcessExecuted) {
  TempDir dir;
  const std::string path = dir.file("once.db");
  { SqliteLock init(path); }
  const int child_executed = sum_over_children(1, [&] {
    SqliteLock backend(path);
    return once("orders:1", backend, [] { return std::string("from-child"); }).status() ==
                   Status::kExecuted
               ? 1
               : 0;
  });
  ASSERT_EQ(child_executed, 1);
  SqliteLock backend(path);
  auto replay = once("orders:1", backend, [] { return std::string("from-parent"); });
  EXPECT_EQ(replay.status(), Status::kReplayed);
  EXPECT_EQ(replay.value(), "from-child");
}

TEST(SqliteLock, OnceWaitsForAHolderInAnotherProcessAndReplays) {
  TempDir dir;
  const std::string path = dir.file("wait.db");
  SqliteLock backend(path);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    SqliteLock child(path);
    auto o = once("orders:2", child, [&] {
      (void)write(ready[1], "x", 1);  // holding the key now
      std::this_thread::sleep_for(milliseconds(300));
      return std::string("from-child");
    });
    _exit(o.status() == Status::kExecuted ? 0 : 1);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  auto o = once(
      "orders:2", backend, [] { return std::string("from-parent"); },
      OnceOptions{.wait_for = std::chrono::seconds(30)});
  int status = 0;
  waitpid(pid, &status, 0);
  close(ready[0]);
  close(ready[1]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(o.status(), Status::kReplayed);
  EXPECT_EQ(o.value(), "from-child");
}

// A row read as unknown (written by something else) fails its read; the read's statement must
// not stay active, or its connection keeps an old snapshot and every later write on it fails
// once another connection has written (SQLITE_BUSY_SNAPSHOT).
TEST(SqliteLock, AnUnreadableRecordLeavesItsConnectionUsable) {
  TempDir dir;
  const std::string path = dir.file("idem.db");
  SqliteLock lock(path);
  (void)won(lock.claim("bad", kLease));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, "UPDATE idempotency_records SET state = 9", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  EXPECT_THROW((void)lock.inspect("bad"), StoreError);
  SqliteLock other(path);
  (void)won(other.claim("written-elsewhere", kLease));
  (void)won(lock.claim("k", kLease));
}

TEST(SqliteLock, AnUnopenableFileIsAStoreErrorWithSqlitesMessage) {
  try {
    SqliteLock backend("/nonexistent-dir/sub/idem.db");
    FAIL() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unable to open database file"));
  }
}

TEST(SqliteLock, ADatabaseThatCannotUseWalIsAStoreError) {
  // SQLite keeps these in another journal mode without an error, and neither keeps a record
  // across a restart.
  for (const char* path : {":memory:", ""}) {
    try {
      SqliteLock backend(path);
      ADD_FAILURE() << "expected StoreError for \"" << path << "\"";
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), HasSubstr("cannot use WAL")) << path;
    }
  }
}

TEST(SqliteLock, ACorruptFileIsAStoreErrorNeverAWon) {
  TempDir dir;
  const std::string path = dir.file("corrupt.db");
  std::ofstream(path) << std::string(8192, 'x');
  try {
    SqliteLock backend(path);
    FAIL() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("file is not a database"));
  }
}

// Another connection's exclusive transaction on the file, as an operator's sqlite3 or another
// process's long write holds it, until release() or the end of the scope.
class HeldWriteLock {
 public:
  explicit HeldWriteLock(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db_, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  }
  ~HeldWriteLock() { release(); }
  HeldWriteLock(const HeldWriteLock&) = delete;
  HeldWriteLock& operator=(const HeldWriteLock&) = delete;
  void release() {
    if (db_ == nullptr) return;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(db_);
    db_ = nullptr;
  }

 private:
  sqlite3* db_ = nullptr;
};

TEST(SqliteLock, ALockedDatabasePastTheBusyTimeoutIsAStoreError) {
  TempDir dir;
  const std::string path = dir.file("locked.db");
  SqliteLock backend(path, SqliteOptions{.busy_timeout = milliseconds(100)});
  HeldWriteLock other(path);
  try {
    (void)backend.claim("orders:secret-123", kLease);
    ADD_FAILURE() << "expected StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("locked"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("secret-123")));
  }
  other.release();
  (void)won(backend.claim("orders:secret-123", kLease));  // nothing was half-written
}

// Calls that share a transaction share its BEGIN's failure too: each rerun alone would wait
// out the busy timeout again, and the last caller would wait it once per caller before it.
TEST(SqliteLock, ALockedDatabaseFailsCallsSharingACommitAfterOneBusyTimeoutNotOneEach) {
  TempDir dir;
  const std::string path = dir.file("locked.db");
  SqliteLock backend(path, SqliteOptions{.busy_timeout = milliseconds(250)});
  HeldWriteLock other(path);
  constexpr int kCallers = 16;
  std::atomic<int> refused{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> callers;
  for (int i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      try {
        (void)backend.claim("locked-" + std::to_string(i), kLease);
      } catch (const StoreError&) {
        ++refused;
      }
    });
  }
  for (auto& t : callers) t.join();
  const auto waited = std::chrono::steady_clock::now() - start;
  other.release();
  EXPECT_EQ(refused, kCallers);
  // A few timeouts at most (the groups as callers arrive), against 16 one after another.
  EXPECT_LT(waited, std::chrono::milliseconds(250) * kCallers / 2);
}

TEST(SqliteLock, ADiskFullWriteIsAStoreErrorAndLosesNothing) {
  TempDir dir;
  const std::string path = dir.file("full.db");
  SqliteLock backend(path, SqliteOptions{.max_pages = 16});
  Claim first = won(backend.claim("first", kLease));
  const std::string big(64 * 1024, 'r');  // more than 16 pages can hold
  EXPECT_THROW((void)backend.complete(first, big), StoreError);
  held(backend.claim("first", kLease));  // the claim is intact, not half-completed
  EXPECT_TRUE(backend.complete(first, std::string("small")));
}

// Concurrent calls share one transaction (group commit); a write that fails in a group must
// fail its own call only: the others are rerun and succeed, and nothing is half-written.
TEST(SqliteLock, AFailingWriteFailsOnlyItsOwnCallWhenCallsShareACommit) {
  TempDir dir;
  SqliteLock backend(dir.file("full.db"), SqliteOptions{.max_pages = 64});
  Claim bulky = won(backend.claim("bulky", kLease));
  const std::string too_big(512 * 1024, 'r');  // more than 64 pages can hold
  constexpr int kThreads = 4;
  constexpr int kClaimsEach = 15;
  std::atomic<int> ready{0};
  std::atomic<int> small_won{0};
  std::atomic<int> big_refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ++ready;
      while (ready < kThreads + 1) std::this_thread::yield();
      for (int i = 0; i < kClaimsEach; ++i) {
        try {
          const auto r =
              backend.claim("small-" + std::to_string(t) + "-" + std::to_string(i), kLease);
          if (std::holds_alternative<Won>(r)) ++small_won;
        } catch (const StoreError&) {  // counted as not won
        }
      }
    });
  }
  threads.emplace_back([&] {
    ++ready;
    while (ready < kThreads + 1) std::this_thread::yield();
    for (int i = 0; i < kClaimsEach; ++i) {
      try {
        (void)backend.complete(bulky, too_big);
      } catch (const StoreError&) {
        ++big_refused;
      }
    }
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(small_won, kThreads * kClaimsEach) << "no call failed for another's write";
  EXPECT_EQ(big_refused, kClaimsEach) << "the oversized write failed every time";
  held(backend.claim("bulky", kLease));  // still claimed, not half-completed
  EXPECT_EQ(backend.stored_records(), std::optional<std::size_t>(1 + kThreads * kClaimsEach));
}

// Reads one integer PRAGMA through a connection of its own, as an operator's sqlite3 would.
std::int64_t pragma(const std::string& path, const std::string& name) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, ("PRAGMA " + name).c_str(), -1, &s, nullptr), SQLITE_OK);
  std::int64_t value = -1;
  if (sqlite3_step(s) == SQLITE_ROW) value = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return value;
}

// A purge deletes in small transactions (other writers get the lock between them) and gives
// the space back: the file's page count falls, rather than only its free list growing.
TEST(SqliteLock, APurgeDeletesInBatchesAndReturnsTheSpace) {
  TempDir dir;
  const std::string path = dir.file("idem.db");
  auto clock = std::make_shared<ManualClock>();
  SqliteOptions options;
  options.backend.ttl = milliseconds(1000);
  options.backend.clock = clock;
  options.purge_batch = 64;
  SqliteLock backend(path, options);
  EXPECT_EQ(pragma(path, "auto_vacuum"), 2) << "a new file is in incremental auto-vacuum";
  const std::string bulky(6000, 'r');
  for (int i = 0; i < 300; ++i) {
    EXPECT_TRUE(backend.complete(won(backend.claim("k" + std::to_string(i), kLease)), bulky));
  }
  Claim live = won(backend.claim("live", kLease));
  const std::int64_t full = pragma(path, "page_count");
  EXPECT_EQ(backend.stored_records(), std::optional<std::size_t>(301));
  clock->advance(milliseconds(1000));
  EXPECT_EQ(backend.stored_records(), std::optional<std::size_t>(301)) << "expired, not purged";
  EXPECT_EQ(backend.purge_expired(), 300U);
  EXPECT_EQ(backend.stored_records(), std::optional<std::size_t>(1));
  const std::int64_t after = pragma(path, "page_count");
  EXPECT_LT(after * 4, full) << "pages: " << full << " before the purge, " << after << " after";
  EXPECT_EQ(pragma(path, "freelist_count"), 0);
  EXPECT_TRUE(backend.complete(live));
  EXPECT_EQ(backend.purge_expired(), 0U);
}

TEST(SqliteLock, BadTableNamesAreRejected) {
  TempDir dir;
  EXPECT_THROW(SqliteLock(dir.file("x.db"), SqliteOptions{.table = "x; DROP TABLE y"}),
               std::invalid_argument);
  EXPECT_THROW(SqliteLock(dir.file("x.db"), SqliteOptions{.table = ""}), std::invalid_argument);
}

// SQLite takes the busy timeout as an int of milliseconds: a longer one would wrap negative
// and turn the wait off, every lock conflict an immediate StoreError.
TEST(SqliteLock, ABusyTimeoutSqliteCannotHoldIsRejected) {
  TempDir dir;
  EXPECT_THROW(SqliteLock(dir.file("x.db"),
                          SqliteOptions{.busy_timeout = milliseconds(std::int64_t{INT32_MAX} + 1)}),
               std::invalid_argument);
  EXPECT_NO_THROW(
      SqliteLock(dir.file("x.db"), SqliteOptions{.busy_timeout = milliseconds(INT32_MAX)}));
}

// Off, create_table opens only a store that is there, and writes nothing before it knows.
TEST(SqliteLock, WithoutCreateTableAMissingFileOrTableIsAStoreErrorAndNothingIsMade) {
  TempDir dir;
  EXPECT_THROW(SqliteLock(dir.file("missing.db"), SqliteOptions{.create_table = false}),
               StoreError);
  EXPECT_FALSE(std::filesystem::exists(dir.file("missing.db")));
  { SqliteLock made(dir.file("x.db"), SqliteOptions{.table = "orders"}); }
  EXPECT_THROW(SqliteLock(dir.file("x.db"), SqliteOptions{.table = "other", .create_table = false}),
               StoreError);
  EXPECT_NO_THROW(
      SqliteLock(dir.file("x.db"), SqliteOptions{.table = "orders", .create_table = false}));
  // SQLite's names are the same in any case: so is the check.
  EXPECT_NO_THROW(
      SqliteLock(dir.file("x.db"), SqliteOptions{.table = "Orders", .create_table = false}));
}

TEST(SqliteLock, SchemaIsPrintableForOperators) {
  const std::string ddl = SqliteLock::schema("orders");
  EXPECT_THAT(ddl, HasSubstr("CREATE TABLE IF NOT EXISTS \"orders\""));
  EXPECT_THAT(ddl, HasSubstr("expires_at_ms"));
}

}  // namespace
}  // namespace idempotency::testing
