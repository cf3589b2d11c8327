// The idem CLI run as a real process against SQLite files the tests prepare with SqliteLock.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <variant>

#include "idempotency/clock.h"
#include "idempotency/key.h"
#include "idempotency/sqlite_lock.h"
#include "run_idem.h"
#include "support/temp_dir.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

constexpr char kKey[] = "order-4711-customer-secret";
constexpr char kRfc3339[] = "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z";

class IdemCliTest : public ::testing::Test {
 protected:
  std::string url() const { return "sqlite://" + path_; }
  SqliteLock& lock() { return *lock_; }

  Claim claim_key(const std::string& key = kKey) {
    auto result = lock_->claim(key, std::chrono::minutes(5), {.fingerprint = "payload-hash"});
    EXPECT_TRUE(std::holds_alternative<Won>(result));
    return std::get<Won>(result).claim;
  }

  IdemRun idem(const std::vector<std::string>& args, const std::string& stdin_text = "") {
    std::vector<std::string> all{"--backend", url()};
    all.insert(all.end(), args.begin(), args.end());
    return run_idem(all, stdin_text);
  }

  TempDir dir_;
  std::string path_ = dir_.file("idem.db");
  std::unique_ptr<SqliteLock> lock_ = std::make_unique<SqliteLock>(path_);
};

// Counts the lines of `text`, ignoring one trailing newline.
long line_count(const std::string& text) {
  long n = std::count(text.begin(), text.end(), '\n');
  if (!text.empty() && text.back() != '\n') ++n;
  return n;
}

// Options for a lock on the same file judged by `clock`, with a 1 s ttl. Filled member by
// member: GCC 12 -O2 misreports a nested designated initializer holding a shared_ptr.
SqliteOptions clocked(std::shared_ptr<const Clock> clock) {
  SqliteOptions options;
  options.backend.ttl = milliseconds(1000);
  options.backend.clock = std::move(clock);
  return options;
}

bool sqlite_table_exists(const std::string& path, const std::string& table) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return false;
  }
  sqlite3_stmt* stmt = nullptr;
  bool found = false;
  if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?1", -1,
                         &stmt, nullptr) == SQLITE_OK) {
    sqlite3_bind_text(stmt, 1, table.c_str(), -1, SQLITE_TRANSIENT);
    found = sqlite3_step(stmt) == SQLITE_ROW;
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return found;
}

TEST_F(IdemCliTest, InspectClaimedShowsFieldsButNeverTheKey) {
  const Claim claim = claim_key();
  const IdemRun run = idem({"inspect", kKey});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("key_fingerprint: " + key_fingerprint(kKey)));
  EXPECT_THAT(run.out, HasSubstr("state:           CLAIMED (held: lease live)"));
  EXPECT_THAT(run.out, HasSubstr("fence:           1\n"));
  EXPECT_THAT(run.out, HasSubstr("claim_token:     " + claim.claim_token + "\n"));
  EXPECT_THAT(run.out, HasSubstr("result:          none\n"));
  EXPECT_THAT(run.out, HasSubstr("fingerprint:     present\n"));
  EXPECT_THAT(run.out,
              MatchesRegex(std::string("(.|\n)*lease_expiry:    ") + kRfc3339 + "\n(.|\n)*"));
  EXPECT_THAT(run.out,
              MatchesRegex(std::string("(.|\n)*expires_at:      ") + kRfc3339 + "\n(.|\n)*"));
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
}

TEST_F(IdemCliTest, InspectDoneShowsResultSize) {
  const Claim claim = claim_key();
  ASSERT_TRUE(lock().complete(claim, std::string("hello")));
  const IdemRun run = idem({"inspect", kKey});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("state:           DONE (duplicates are suppressed)"));
  EXPECT_THAT(run.out, HasSubstr("result:          5 bytes\n"));
  EXPECT_THAT(run.out, HasSubstr(key_fingerprint(kKey)));
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
}

TEST_F(IdemCliTest, InspectShowsATimestampInRfc3339WithMilliseconds) {
  // A ManualClock-backed lock on the same file writes exactly known instants.
  auto clock = std::make_shared<ManualClock>(from_millis(1'780'000'000'123));
  SqliteLock manual(path_, clocked(clock));
  ASSERT_TRUE(std::holds_alternative<Won>(manual.claim(kKey, milliseconds(2000))));
  const IdemRun run = idem({"inspect", kKey});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("lease_expiry:    2026-05-28T20:26:42.123Z\n"));
  EXPECT_THAT(run.out, HasSubstr("expires_at:      2026-05-28T20:26:43.123Z\n"));
}

TEST_F(IdemCliTest, InspectAbsentKeySaysNoRecordAndExits3) {
  const IdemRun run = idem({"inspect", kKey});
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_THAT(run.err, HasSubstr("no record"));
  EXPECT_THAT(run.err, HasSubstr(key_fingerprint(kKey)));
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
}

TEST_F(IdemCliTest, InspectReadsTheKeyFromStdinWithDash) {
  claim_key();
  const IdemRun run = idem({"inspect", "-"}, std::string(kKey) + "\n");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("CLAIMED"));
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
}

// One line end is taken off, "\n" or "\r\n"; a "\r" without a "\n" after it is the key's.
TEST_F(IdemCliTest, AKeyFromStdinLosesOneLineEndAndNothingElse) {
  const std::string key = std::string(kKey) + "\r";
  (void)claim_key(key);
  const IdemRun lone_cr = idem({"inspect", "-"}, key);
  EXPECT_EQ(lone_cr.exit_code, 0) << lone_cr.err;
  EXPECT_THAT(lone_cr.out, HasSubstr(key_fingerprint(key)));
  const IdemRun crlf_taken = idem({"inspect", "-"}, std::string(kKey) + "\r\n");
  EXPECT_EQ(crlf_taken.exit_code, 3) << "the key without its \\r has no record";
}

TEST_F(IdemCliTest, AKeyStartingWithADashGoesAfterTheSeparator) {
  claim_key("-dash-key");
  const IdemRun run = idem({"inspect", "--", "-dash-key"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr(key_fingerprint("-dash-key")));
}

TEST_F(IdemCliTest, BackendComesFromTheEnvironment) {
  claim_key();
  const IdemRun run = run_idem({"inspect", "-"}, kKey, url());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("CLAIMED"));
}

TEST_F(IdemCliTest, ReleaseWithoutYesExits4AndChangesNothing) {
  claim_key();
  const auto before = lock().inspect(kKey);
  const IdemRun run = idem({"release", kKey});
  EXPECT_EQ(run.exit_code, 4);
  EXPECT_THAT(run.out, HasSubstr("would release"));
  EXPECT_THAT(run.err, HasSubstr("--yes"));
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
  EXPECT_EQ(lock().inspect(kKey), before);
}

TEST_F(IdemCliTest, ReleaseSaysWhenTheLeaseIsStillLive) {
  claim_key();  // a 5 min lease: its holder may well be working
  EXPECT_THAT(idem({"release", kKey}).out, HasSubstr("the lease is still live"));
  (void)lock().claim("lapsed", std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const IdemRun lapsed = idem({"release", "lapsed"});
  EXPECT_EQ(lapsed.exit_code, 4) << lapsed.err;  // found, and only shown without --yes
  EXPECT_THAT(lapsed.out, HasSubstr("would release"));
  EXPECT_THAT(lapsed.out, Not(HasSubstr("still live")));
}

TEST_F(IdemCliTest, ReleaseWithYesMakesTheClaimReclaimable) {
  claim_key();
  const IdemRun run = idem({"release", "-", "--yes"}, kKey);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("released"));
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
  const IdemRun shown = idem({"inspect", kKey});
  EXPECT_THAT(shown.out, HasSubstr("reclaimable: lease lapsed"));
  EXPECT_THAT(shown.out, HasSubstr("fence:           2\n"));
  const auto next = lock().claim(kKey, std::chrono::minutes(5));
  ASSERT_TRUE(std::holds_alternative<Won>(next));
  EXPECT_EQ(std::get<Won>(next).claim.fence, 3);
}

TEST_F(IdemCliTest, ReleaseRefusesADoneRecord) {
  ASSERT_TRUE(lock().complete(claim_key(), std::string("r")));
  const auto before = lock().inspect(kKey);
  const IdemRun run = idem({"release", kKey, "--yes"});
  EXPECT_EQ(run.exit_code, 5);
  EXPECT_THAT(run.err, HasSubstr("DONE, not stuck"));
  EXPECT_THAT(run.err, HasSubstr("ttl"));
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
  EXPECT_EQ(lock().inspect(kKey), before);
}

TEST_F(IdemCliTest, ReleaseOfAnAbsentKeyExits3) {
  const IdemRun run = idem({"release", kKey, "--yes"});
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
}

TEST_F(IdemCliTest, PurgeExpiredDeletesOnlyExpiredRecords) {
  claim_key("live-key");
  // Written through a clock a day behind: its expires_at is long past by the real clock.
  auto clock = std::make_shared<ManualClock>(system_clock()->now() - std::chrono::hours(24));
  SqliteLock past(path_, clocked(clock));
  ASSERT_TRUE(std::holds_alternative<Won>(past.claim(kKey, milliseconds(1000))));

  const IdemRun shown = idem({"inspect", kKey});
  EXPECT_THAT(shown.out, HasSubstr("reclaimable: ttl lapsed"));
  const IdemRun run = idem({"purge-expired"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "purged 1 expired record\n");
  EXPECT_FALSE(lock().inspect(kKey).has_value());
  EXPECT_TRUE(lock().inspect("live-key").has_value());
  EXPECT_EQ(idem({"purge-expired"}).out, "purged 0 expired records\n");
}

TEST_F(IdemCliTest, SchemaPrintsSqliteDdlForADialectAndTable) {
  const IdemRun run = run_idem({"schema", "--dialect", "sqlite", "--table", "orders_idem"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, SqliteLock::schema("orders_idem"));
}

TEST_F(IdemCliTest, SchemaPrintsPostgresDdlWithoutADatabase) {
  const IdemRun run = run_idem({"schema", "--dialect", "postgres"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("CREATE TABLE IF NOT EXISTS"));
  EXPECT_THAT(run.out, HasSubstr("idempotency_records"));
  const IdemRun named =
      run_idem({"schema", "--backend", "postgres://app:hunter2@db.invalid/app?table=orders_idem"});
  EXPECT_EQ(named.exit_code, 0) << named.err;
  EXPECT_THAT(named.out, HasSubstr("orders_idem"));
  EXPECT_THAT(named.all(), Not(HasSubstr("hunter2")));
}

TEST_F(IdemCliTest, SchemaHonoursTheTableInASqliteUrl) {
  const IdemRun run = run_idem({"schema", "--backend", "sqlite:///nowhere/x.db?table=t_one"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, SqliteLock::schema("t_one"));
  EXPECT_FALSE(std::filesystem::exists("/nowhere/x.db"));
}

TEST_F(IdemCliTest, SchemaRefusesABadDialectOrTable) {
  EXPECT_EQ(run_idem({"schema", "--dialect", "oracle"}).exit_code, 2);
  EXPECT_EQ(run_idem({"schema", "--dialect", "sqlite", "--table", "x; DROP"}).exit_code, 2);
  EXPECT_EQ(run_idem({"schema"}).exit_code, 2);
  EXPECT_EQ(run_idem({"schema", "--backend", "redis://localhost:6379"}).exit_code, 2);
}

TEST_F(IdemCliTest, MigrateCreatesTheTableInAFreshSqliteFile) {
  const std::string fresh = dir_.file("fresh.db");
  const IdemRun run =
      run_idem({"--backend", "sqlite://" + fresh + "?table=orders_idem", "migrate"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("created sqlite file"));
  EXPECT_THAT(run.out, HasSubstr("orders_idem"));
  EXPECT_TRUE(sqlite_table_exists(fresh, "orders_idem"));
  const IdemRun again =
      run_idem({"--backend", "sqlite://" + fresh + "?table=orders_idem", "migrate"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("exists; ensured table"));
}

TEST_F(IdemCliTest, InspectNeverCreatesAMissingSqliteFile) {
  const std::string missing = dir_.file("missing.db");
  const IdemRun run = run_idem({"--backend", "sqlite://" + missing, "inspect", kKey});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(line_count(run.err), 1);
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
  EXPECT_FALSE(std::filesystem::exists(missing));
}

// A mistyped table= names no store: the operator's commands report it, and make no table.
TEST_F(IdemCliTest, NoCommandCreatesAMissingSqliteTable) {
  const std::string file = dir_.file("store.db");
  ASSERT_EQ(run_idem({"--backend", "sqlite://" + file + "?table=orders_idem", "migrate"}).exit_code,
            0);
  const std::string typo = "sqlite://" + file + "?table=orders_idme";
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"inspect", kKey}, {"release", kKey, "--yes"}, {"purge-expired"}}) {
    std::vector<std::string> args = {"--backend", typo};
    args.insert(args.end(), command.begin(), command.end());
    const IdemRun run = run_idem(args);
    EXPECT_EQ(run.exit_code, 1) << command.front() << ": " << run.all();
    EXPECT_EQ(line_count(run.err), 1) << run.err;
    EXPECT_THAT(run.err, HasSubstr("does not exist"));
    EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
    EXPECT_FALSE(sqlite_table_exists(file, "orders_idme")) << command.front();
  }
}

TEST_F(IdemCliTest, BadUrlIsOneUsageLineWithoutThePassword) {
  for (const std::string bad :
       {"postgresx://app:hunter2@db/app", "app:hunter2@db", "sqlite:///tmp/x.db?password=hunter2",
        "pg:hunter2@db/app?sslrootcert=file://ca.pem"}) {
    const IdemRun run = run_idem({"--backend", bad, "inspect", kKey});
    EXPECT_EQ(run.exit_code, 2) << run.all();
    EXPECT_EQ(line_count(run.err), 1) << run.err;
    EXPECT_EQ(run.out, "");
    EXPECT_THAT(run.all(), Not(HasSubstr("hunter2")));
    EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
  }
}

TEST_F(IdemCliTest, ABackendNoRegistrationNamesIsAUsageErrorListingTheBuiltInOnes) {
  const IdemRun run = run_idem({"--backend", "fake://memory://", "inspect", kKey});
  EXPECT_EQ(run.exit_code, 2) << run.all();
  EXPECT_THAT(run.err, HasSubstr("not built in"));
  EXPECT_THAT(run.err, HasSubstr("sqlite"));
}

TEST_F(IdemCliTest, UsageErrorsNeverEchoAKey) {
  const std::vector<std::vector<std::string>> cases = {
      {"inspect", "first-key", kKey},         // a surplus positional
      {"inspect", std::string("--") + kKey},  // looks like an unknown option
      {"release", kKey, std::string("--yes=") + kKey},
      {"inspect"},       // no key
      {"inspect", "-"},  // empty stdin
  };
  for (const auto& args : cases) {
    const IdemRun run = idem(args);
    EXPECT_EQ(run.exit_code, 2) << run.all();
    EXPECT_EQ(line_count(run.err), 1) << run.err;
    EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
  }
  EXPECT_EQ(run_idem({"inspect", kKey}).exit_code, 2);  // no backend at all
}

TEST_F(IdemCliTest, HelpDocumentsExitCodesAndStdinKeys) {
  const IdemRun run = run_idem({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("EXIT CODES"));
  EXPECT_THAT(run.out, HasSubstr("4  confirmation required"));
  EXPECT_THAT(run.out, HasSubstr("- to read it from stdin"));
}

}  // namespace
}  // namespace idempotency::testing
