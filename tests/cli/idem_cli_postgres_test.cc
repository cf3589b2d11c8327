// The idem CLI against the PostgreSQL test server: inspect and migrate, directly, over TLS and
// through PgBouncer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <variant>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "idempotency/postgres_lock.h"
#include "run_idem.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKey[] = "invoice-2024-customer-secret";

// server_or_skip() is `url`, or "" after failing (CI) or skipping the test when it is empty.
std::string server_or_skip(const std::string& url, const char* what) {
  if (url.empty()) {
    if (std::getenv("CI") != nullptr) {  // NOLINT(concurrency-mt-unsafe)
      ADD_FAILURE() << "CI is set but there is no " << what;
    } else {
      [&] { GTEST_SKIP() << "no " << what; }();
    }
  }
  return url;
}

class IdemCliPostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = postgres_url();
    if (url_.empty()) {
      if (std::getenv("CI") != nullptr) {  // NOLINT(concurrency-mt-unsafe)
        FAIL() << "CI is set but there is no PostgreSQL test server (POSTGRES_URL)";
      }
      GTEST_SKIP() << "no PostgreSQL test server (set POSTGRES_URL)";
    }
    table_ = unique_name("idem_cli");
  }

  // The server URL with this test's table.
  std::string backend() const {
    return url_ + (url_.find('?') == std::string::npos ? "?" : "&") + "table=" + table_;
  }

  std::string url_;
  std::string table_;
};

TEST_F(IdemCliPostgresTest, MigrateCreatesTheTableThenFindsIt) {
  const IdemRun run = run_idem({"--backend", backend(), "migrate"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("created table " + table_));
  // Present now: a lock that may not create it opens fine.
  EXPECT_NO_THROW(PostgresLock(url_, {.table = table_, .create_table = false}));
  const IdemRun again = run_idem({"--backend", backend(), "migrate"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("already exists"));
}

// A mistyped table= names no store: the operator's commands report it, and make no table.
TEST_F(IdemCliPostgresTest, NoCommandCreatesAMissingTable) {
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"inspect", "-"}, {"release", "-", "--yes"}, {"purge-expired"}}) {
    std::vector<std::string> args = {"--backend", backend()};
    args.insert(args.end(), command.begin(), command.end());
    const IdemRun run = run_idem(args, kKey);
    EXPECT_EQ(run.exit_code, 1) << command.front() << ": " << run.all();
    EXPECT_THAT(run.err, HasSubstr("does not exist"));
    EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
    EXPECT_THROW(PostgresLock(url_, {.table = table_, .create_table = false}), StoreError)
        << command.front() << " made the table";
  }
}

TEST_F(IdemCliPostgresTest, InspectShowsTheRecordButNeverTheKey) {
  PostgresLock lock(url_, {.table = table_});
  const auto claimed = lock.claim(kKey, std::chrono::minutes(5), {.fingerprint = "fp"});
  ASSERT_TRUE(std::holds_alternative<Won>(claimed));
  ASSERT_TRUE(lock.complete(std::get<Won>(claimed).claim, std::string("result")));

  const IdemRun run = run_idem({"--backend", backend(), "inspect", "-"}, kKey);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("key_fingerprint: " + key_fingerprint(kKey)));
  EXPECT_THAT(run.out, HasSubstr("state:           DONE"));
  EXPECT_THAT(run.out, HasSubstr("result:          6 bytes"));
  EXPECT_THAT(run.out, HasSubstr("fingerprint:     present"));
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));

  const IdemRun absent = run_idem({"--backend", backend(), "inspect", "other-key"});
  EXPECT_EQ(absent.exit_code, 3);
}

TEST_F(IdemCliPostgresTest, ThroughPgBouncerWithPoolModeTransactionInTheUrl) {
  const std::string bouncer = server_or_skip(pgbouncer_url(), "PgBouncer (PGBOUNCER_URL)");
  if (bouncer.empty()) return;
  const std::string url = bouncer + "?table=" + table_ + "&pool_mode=transaction";
  const IdemRun migrate = run_idem({"--backend", url, "migrate"});
  EXPECT_EQ(migrate.exit_code, 0) << migrate.err;
  EXPECT_THAT(migrate.out, HasSubstr("created table " + table_));
  const IdemRun absent = run_idem({"--backend", url, "inspect", "other-key"});
  EXPECT_EQ(absent.exit_code, 3) << absent.err;
  const IdemRun unknown =
      run_idem({"--backend", bouncer + "?pool_mode=statement", "inspect", "other-key"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("pool_mode= must be session or transaction"));
}

TEST_F(IdemCliPostgresTest, OverTlsAndARefusedCaNeverShowsThePassword) {
  const std::string tls = server_or_skip(postgres_tls_url(), "PostgreSQL with TLS");
  if (tls.empty()) return;
  const IdemRun migrate = run_idem({"--backend", tls + "&table=" + table_, "migrate"});
  EXPECT_EQ(migrate.exit_code, 0) << migrate.err;
  std::string wrong = tls + "&table=" + table_;
  wrong.replace(wrong.find(postgres_ca()), postgres_ca().size(), postgres_wrong_ca());
  const IdemRun refused = run_idem({"--backend", wrong, "inspect", "other-key"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("certificate verify failed"));
  const auto user = tls.find("://") + 3;
  const auto colon = tls.find(':', user);
  const std::string password = tls.substr(colon + 1, tls.find('@') - colon - 1);
  ASSERT_FALSE(password.empty());
  EXPECT_THAT(refused.all(), Not(HasSubstr(password)));
}

}  // namespace
}  // namespace idempotency::testing
