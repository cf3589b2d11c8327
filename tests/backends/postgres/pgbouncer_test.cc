// PostgresLock behind the fixture's PgBouncer in transaction pooling mode
// (PostgresPoolMode::kTransaction): no session state used or left behind, the statement
// timeout still holds, cross-instance waiters are woken by polling, and a lock left in
// session mode there is told what to set. (The shared suites run through it as
// PostgresBouncer/… in the contract program.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <variant>

#include "idempotency/errors.h"
#include "idempotency/once.h"
#include "idempotency/postgres_lock.h"
#include "postgres_admin.h"
#include "support/claim_matchers.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::Not;

class PgBouncerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = pgbouncer_url();
    if (url_.empty() || postgres_url().empty()) {
      if (std::getenv("CI") != nullptr) GTEST_FAIL() << "CI is set but no PgBouncer";
      GTEST_SKIP() << "no PgBouncer in front of a test PostgreSQL (set PGBOUNCER_URL)";
    }
    table_ = unique_name("idem_bouncer");
  }

  std::unique_ptr<PostgresLock> make(PostgresOptions options = {}, const std::string& url = {}) {
    options.table = table_;
    options.pool_mode = PostgresPoolMode::kTransaction;
    return std::make_unique<PostgresLock>(url.empty() ? url_ : url, options);
  }

  // single_url() reaches the same database through the pool of one server connection.
  [[nodiscard]] std::string single_url() const {
    std::string url = url_;
    const auto db = url.rfind("/idempotency_test");
    if (db != std::string::npos) url.replace(db, 17, "/idempotency_single");
    return url;
  }

  std::string url_;
  std::string table_;
};

TEST_F(PgBouncerTest, AWaiterOnAnotherInstanceIsWokenByPollingNotNotify) {
  auto a = make();
  auto b = make();
  const Claim held = won(a->claim("polled-key", milliseconds(60'000)));
  std::atomic<bool> b_returned{false};
  std::jthread finisher([&] {
    // Complete only once B has slept at least one poll, so B must notice it by a later poll.
    while (b->wait_counts().polled == 0) {
      if (b_returned) return;
      std::this_thread::yield();
    }
    EXPECT_TRUE(a->complete(held, "from-A"));
  });
  auto o = once(
      "polled-key", *b, [] { return std::string("from-B"); },
      OnceOptions{.wait_for = std::chrono::seconds(30)});
  b_returned = true;
  finisher.join();
  EXPECT_EQ(o.status(), Status::kReplayed);
  EXPECT_EQ(o.value(), "from-A");
  const PostgresWaitCounts counts = b->wait_counts();
  EXPECT_GE(counts.polled, 1U);
  EXPECT_EQ(counts.notified, 0U);
  EXPECT_EQ(counts.settled + counts.timed_out + counts.unavailable, 0U);
}

TEST_F(PgBouncerTest, TheStatementTimeoutHoldsForEachTransaction) {
  // Not shorter: the claim and complete after the ROLLBACK run under it too, and must not
  // time out.
  auto lock = make(PostgresOptions{.statement_timeout = milliseconds(2000)});
  Admin admin(postgres_url());  // directly: it holds its lock across statements
  // Should the timeout not hold, the server ends this transaction in a while and the claim
  // wins: a failure, not a hang.
  admin.exec("SET idle_in_transaction_session_timeout = '20s'");
  admin.exec("BEGIN");
  admin.exec("LOCK TABLE \"" + table_ + "\" IN ACCESS EXCLUSIVE MODE");
  try {
    (void)lock->claim("bouncer-timeout-key", milliseconds(60'000));
    ADD_FAILURE() << "claim did not time out";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("57014"));
    EXPECT_THAT(e.what(), Not(HasSubstr("bouncer-timeout-key")));
  }
  admin.exec("ROLLBACK");
  EXPECT_TRUE(lock->complete(won(lock->claim("bouncer-timeout-key", milliseconds(60'000))), "r"));
}

// Through a pool of one server connection every client shares one session, as transaction
// pooling does under load: transaction mode leaves nothing on it; session mode would, and the
// second session-mode lock is told what to set.
TEST_F(PgBouncerTest, TransactionModeLeavesNoSessionStateOnASharedServerConnection) {
  Admin shared(single_url());
  shared.exec("DISCARD ALL");
  const std::string timeout_before = shared.exec("SHOW statement_timeout");
  {
    auto lock = make(PostgresOptions{.statement_timeout = milliseconds(4321)}, single_url());
    const Claim c = won(lock->claim("shared-key", milliseconds(60'000)));
    EXPECT_TRUE(lock->extend(c, milliseconds(60'000)).has_value());
    EXPECT_TRUE(lock->inspect("shared-key").has_value());
    lock->wait_for_change("shared-key", milliseconds(20), {});
    EXPECT_TRUE(lock->complete(c, "r"));
    (void)lock->purge_expired();
    EXPECT_EQ(lock->wait_counts().polled, 1U);
  }
  EXPECT_EQ(shared.exec("SHOW statement_timeout"), timeout_before);
  EXPECT_EQ(shared.exec("SELECT count(*) FROM pg_prepared_statements"), "0");
  EXPECT_EQ(shared.exec("SELECT count(*) FROM pg_listening_channels()"), "0");

  const PostgresOptions session{.table = table_, .pool_mode = PostgresPoolMode::kSession};
  const PostgresLock first(single_url(), session);  // prepares its statements on the one session
  try {
    const PostgresLock second(single_url(), session);
    ADD_FAILURE() << "a second session-mode lock prepared its statements again";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("already exists"));
    EXPECT_THAT(e.what(), HasSubstr("pool_mode=transaction"));
  }
  shared.exec("DISCARD ALL");  // what session mode left, for the next run
}

}  // namespace
}  // namespace idempotency::testing
