// The idem CLI against the PostgreSQL test server: inspect and migrate.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <variant>

#include "idempotency/key.h"
#include "idempotency/postgres_lock.h"
#include "run_idem.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKey[] = "invoice-2024-customer-secret";

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

}  // namespace
}  // namespace idempotency::testing
