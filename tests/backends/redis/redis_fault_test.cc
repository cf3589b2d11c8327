// Faults against a private redis-server of the test's own: a restart mid-run, a lost reply,
// authentication (password and ACL user), a command timeout and a pool that stays busy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <latch>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/redis_lock.h"
#include "private_redis.h"
#include "redis_test_util.h"
#include "support/log_capture.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kServerPassword = "s3cr3t-PW";

// Blocks `url`'s server for `seconds` (DEBUG SLEEP) from a connection of its own and returns
// the thread once the server is asleep: a PING on another connection then goes unanswered.
// What the caller times is then the server's sleep, not how long a loaded machine took to
// connect and send.
std::thread block_server(const std::string& url, const char* seconds) {
  std::thread sleeper([url, seconds] {
    RawRedis raw(url);
    raw.command({"DEBUG", "SLEEP", seconds});
  });
  const bool asleep = eventually([&] {
    RawRedis probe(url, milliseconds(50));
    try {
      (void)probe.command({"PING"});
      return false;
    } catch (const std::runtime_error&) {
      return true;  // no answer within 50 ms
    }
  });
  if (!asleep) ADD_FAILURE() << "the server never went to sleep";
  return sleeper;
}

// A server that does not fsync every write: the calls after an outage must be judged by
// `command_timeout`, not by a shared CI disk.
std::vector<std::string> no_fsync() { return {"--appendonly", "no"}; }

TEST(RedisFaults, RestartMidRunThrowsDuringTheOutageAndLosesNothing) {
  PrivateRedis server;
  RedisLock lock(server.url(), RedisOptions{.pool_size = 4,
                                            .connect_timeout = milliseconds(500),
                                            .command_timeout = milliseconds(1000)});
  const std::string secret_key = "payment-9f8e7d-customer";
  std::vector<Claim> done, open;
  for (int i = 0; i < 40; ++i) {
    Claim c = won(lock.claim(secret_key + std::to_string(i), std::chrono::minutes(5)));
    if (i % 2 == 0) {
      ASSERT_TRUE(lock.complete(c, "result" + std::to_string(i)));
      done.push_back(c);
    } else {
      open.push_back(c);
    }
  }

  server.kill(SIGKILL);  // a crash, not a clean shutdown: only the AOF saves the records
  auto expect_store_error = [&](auto&& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " reported an outcome while the server was down";
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), Not(HasSubstr(secret_key))) << what;
    }
  };
  for (int round = 0; round < 3; ++round) {
    expect_store_error([&] { (void)lock.claim(secret_key + "new", milliseconds(1000)); }, "claim");
    expect_store_error([&] { (void)lock.complete(open[0]); }, "complete");
    expect_store_error([&] { lock.release(open[1]); }, "release");
  }

  server.start();  // same port, same data directory
  for (std::size_t i = 0; i < done.size(); ++i) {
    ClaimResult r = lock.claim(done[i].key, milliseconds(1000));
    ASSERT_TRUE(std::holds_alternative<AlreadyDone>(r)) << outcome(r);
    EXPECT_EQ(std::get<AlreadyDone>(r).result,
              std::optional<std::string>("result" + std::to_string(2 * i)));
  }
  for (const Claim& c : open) {
    EXPECT_EQ(outcome(lock.claim(c.key, milliseconds(1000))), std::string("HeldByOther"));
  }
  EXPECT_TRUE(lock.complete(open[0], "late"));
  lock.release(open[1]);
  // The release advanced the fence once, the reclaim once more.
  EXPECT_EQ(won(lock.claim(open[1].key, milliseconds(1000))).fence, open[1].fence + 2);
  EXPECT_EQ(won(lock.claim(secret_key + "new", milliseconds(1000))).fence, 1);
}

TEST(RedisFaults, AScriptCacheFlushIsReloadedTransparently) {
  PrivateRedis server;
  RedisLock lock(server.url());
  RawRedis raw(server.url());
  Claim c = won(lock.claim("k", milliseconds(60'000)));
  raw.command({"SCRIPT", "FLUSH"});
  EXPECT_TRUE(lock.complete(c));
  EXPECT_EQ(outcome(lock.claim("k", milliseconds(60'000))), std::string("AlreadyDone"));
}

TEST(RedisFaults, AClaimRetriedAfterItsReplyWasLostReaffirmsItsOwnClaim) {
  PrivateRedis server(no_fsync());
  // The pool serves calls when pipelining is off (and on a cluster, and with replicas=).
  RedisLock lock(
      server.url(),
      RedisOptions{.pool_size = 1, .pipelines = 0, .command_timeout = milliseconds(300)});
  // Block the server for a while from another connection; our claim is sent meanwhile, its
  // call times out, and the server runs it later, writing a reply nobody reads.
  std::thread sleeper = block_server(server.url(), "1.5");
  const ClaimRequest request{.claim_token = "retry-token-1"};
  EXPECT_THROW((void)lock.claim("k", std::chrono::minutes(1), request), StoreError)
      << "a timed-out call must throw, never report an outcome";
  sleeper.join();
  std::this_thread::sleep_for(milliseconds(100));  // the server now runs the orphaned claim

  RedisLock other(server.url(), RedisOptions{.key_prefix = lock.key_prefix()});
  ClaimResult seen = other.claim("k", std::chrono::minutes(1));
  ASSERT_TRUE(std::holds_alternative<HeldByOther>(seen))
      << "the orphaned claim ran: " << outcome(seen);

  // The retry carries the same token: it re-affirms (same fence), instead of self-locking.
  Claim mine = won(lock.claim("k", std::chrono::minutes(1), request));
  EXPECT_EQ(mine.fence, 1);
  EXPECT_EQ(mine.lease_expiry, std::get<HeldByOther>(seen).lease_expiry);
  EXPECT_TRUE(lock.complete(mine));
}

TEST(RedisFaults, ACallGivesUpWaitingForABusyPoolAfterPoolWait) {
  PrivateRedis server;
  // The pool serves calls when pipelining is off (and on a cluster, and with replicas=).
  RedisLock lock(server.url(), RedisOptions{.pool_size = 1,
                                            .pipelines = 0,
                                            .pool_wait = milliseconds(50),
                                            .command_timeout = milliseconds(5000)});
  // The server sleeps, so the one pooled connection stays lent to the first claim.
  std::thread sleeper = block_server(server.url(), "3");
  std::latch borrowing(1);
  std::thread holder([&] {
    borrowing.count_down();
    (void)lock.claim("first", milliseconds(60'000));
  });
  borrowing.wait();
  std::this_thread::sleep_for(milliseconds(100));  // from the latch to the pool: no I/O
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)lock.claim("second-key", milliseconds(60'000));
    ADD_FAILURE() << "a second connection was lent from a pool of one";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("redis: no pooled connection became free within 50 ms"));
    EXPECT_THAT(e.what(), Not(HasSubstr("second-key")));
  }
  // Waiting for the busy connection instead would take the rest of the 3 s sleep.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1500))
      << "waited for the busy connection instead of giving up after pool_wait";
  holder.join();
  sleeper.join();
  EXPECT_NO_THROW((void)lock.claim("third", milliseconds(60'000)));
}

TEST(RedisFaults, PasswordAndAclUserAuthentication) {
  PrivateRedis server({"--requirepass", kServerPassword});
  RedisLock ok(server.url(std::string(":") + kServerPassword));
  EXPECT_EQ(won(ok.claim("k", milliseconds(60'000))).fence, 1);

  for (const std::string userinfo : {":wrong-password", "nobody:wrong-password"}) {
    try {
      RedisLock bad(server.url(userinfo));
      ADD_FAILURE() << "authenticated with a wrong password";
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), HasSubstr("AUTH failed"));
      EXPECT_THAT(e.what(), Not(HasSubstr("wrong-password")));
    }
  }
  try {
    RedisLock anonymous(server.url());
    ADD_FAILURE() << "worked without a password";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("NOAUTH"));
  }

  RawRedis admin(server.url(std::string(":") + kServerPassword));
  ASSERT_EQ(admin.text({"ACL", "SETUSER", "alice", "on", ">alice-pw", "~*", "+@all"}), "OK");
  RedisLock alice(server.url("alice:alice-pw"));
  EXPECT_EQ(outcome(alice.claim("k", milliseconds(60'000))), std::string("HeldByOther"));
  // alice may not publish (Redis 7 gives a new user no channels): the writes still answer as
  // they landed, and the wake-up is left to the waiters' back-off.
  EXPECT_TRUE(alice.complete(won(alice.claim("k2", milliseconds(60'000)))));
  EXPECT_EQ(outcome(alice.claim("k2", milliseconds(60'000))), std::string("AlreadyDone"));
  alice.release(won(alice.claim("k3", milliseconds(60'000))));
  EXPECT_EQ(won(alice.claim("k3", milliseconds(60'000))).fence, 3);
}

TEST(RedisFaults, AServerThatMayEvictRecordsIsWarnedOfAtStart) {
  // Every record has an expiry, so volatile-* policies may evict it as allkeys-* do.
  {
    PrivateRedis evicting({"--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"});
    LogCapture logs;
    RedisLock lock(evicting.url());
    EXPECT_EQ(logs.count("redis_may_evict"), 1);
    EXPECT_THAT(logs.all_text(), HasSubstr("volatile-lru"));
  }
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{},
        {"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"},
        {"--maxmemory-policy", "allkeys-lru"}}) {  // no limit: nothing is ever evicted
    PrivateRedis server(flags);
    LogCapture logs;
    RedisLock lock(server.url());
    EXPECT_EQ(logs.count("redis_may_evict"), 0);
  }
}

TEST(RedisFaults, ACommandTimeoutIsAStoreErrorAndTheNextCallWorks) {
  PrivateRedis server(no_fsync());
  RedisLock lock(server.url(), RedisOptions{.command_timeout = milliseconds(300)});
  std::thread sleeper = block_server(server.url(), "1.5");
  try {
    (void)lock.claim("timeout-key", milliseconds(60'000));
    ADD_FAILURE() << "no timeout";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), Not(HasSubstr("timeout-key")));
  }
  sleeper.join();
  EXPECT_NO_THROW((void)lock.claim("other", milliseconds(60'000)));
}

}  // namespace
}  // namespace idempotency::testing
