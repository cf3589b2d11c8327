// RedisLock's claim_async and complete_async on its I/O thread's connection, against a
// redis-server of the test's own: every call's callback runs exactly once, with its own outcome,
// under calls from several threads and calls made from callbacks; a server that dies with calls
// in flight ends each of them once with a StoreFailure, and the next call reconnects (and
// reloads the script the restarted server lost); destroying the backend ends the calls in
// flight first. CLIENT PAUSE holds replies back where a test needs calls in flight, so nothing
// here depends on timing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "idempotency/backend.h"
#include "idempotency/clock.h"
#include "idempotency/done_cache.h"
#include "idempotency/redis_lock.h"
#include "private_redis.h"
#include "support/claim_matchers.h"
#include "support/eventually.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kLease(60'000);

// Records what callbacks say went wrong, from any thread.
class Problems {
 public:
  void add(std::string what) {
    const std::lock_guard lock(mutex_);
    list_.push_back(std::move(what));
  }
  [[nodiscard]] std::vector<std::string> list() {
    const std::lock_guard lock(mutex_);
    return list_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> list_;
};

// claim → complete → claim again (AlreadyDone, the result the complete stored), all from
// callbacks; `finished` counts the chains that got that far.
void chain(RedisLock& lock, const std::string& key, std::atomic<int>& finished,
           Problems& problems) {
  lock.claim_async(key, kLease, {}, [&lock, key, &finished, &problems](AsyncClaimResult r) {
    const auto* result = std::get_if<ClaimResult>(&r);
    if (result == nullptr || !std::holds_alternative<Won>(*result)) {
      problems.add(key + ": the first claim did not win");
      ++finished;
      return;
    }
    lock.complete_async(
        std::get<Won>(*result).claim, key,
        [&lock, key, &finished, &problems](AsyncCompleteResult c) {
          if (!std::holds_alternative<bool>(c) || !std::get<bool>(c)) {
            problems.add(key + ": complete failed");
            ++finished;
            return;
          }
          lock.claim_async(key, kLease, {}, [key, &finished, &problems](AsyncClaimResult again) {
            const auto* r2 = std::get_if<ClaimResult>(&again);
            const auto* done = r2 != nullptr ? std::get_if<AlreadyDone>(r2) : nullptr;
            if (done == nullptr || done->result != key) {
              problems.add(key + ": the second claim did not replay its own result");
            }
            ++finished;
          });
        });
  });
}

TEST(RedisAsync, ManyCallsFromSeveralThreadsAndFromCallbacksEachGetTheirOwnOutcome) {
  PrivateRedis server;
  RedisLock lock(server.url());
  constexpr int kThreads = 4;
  constexpr int kKeys = 300;
  std::atomic<int> finished{0};
  Problems problems;
  {
    std::vector<std::jthread> callers;
    for (int t = 0; t < kThreads; ++t) {
      callers.emplace_back([&, t] {
        for (int i = 0; i < kKeys; ++i) {
          chain(lock, "t" + std::to_string(t) + "-" + std::to_string(i), finished, problems);
        }
      });
    }
  }
  ASSERT_TRUE(eventually([&] { return finished.load() == kThreads * kKeys; }))
      << finished.load() << " of " << kThreads * kKeys << " chains finished";
  EXPECT_TRUE(problems.list().empty()) << problems.list().front();
}

TEST(RedisAsync, AKeyHeldByAnotherClaimIsHeld) {
  PrivateRedis server;
  RedisLock lock(server.url());
  std::atomic<int> answered{0};
  std::optional<AsyncClaimResult> first;
  std::optional<AsyncClaimResult> second;
  lock.claim_async("k", kLease, {}, [&](AsyncClaimResult r) {
    first = std::move(r);
    ++answered;
  });
  ASSERT_TRUE(eventually([&] { return answered.load() == 1; }));
  lock.claim_async("k", kLease, {}, [&](AsyncClaimResult r) {
    second = std::move(r);
    ++answered;
  });
  ASSERT_TRUE(eventually([&] { return answered.load() == 2; }));
  ASSERT_TRUE(std::holds_alternative<ClaimResult>(*first));
  EXPECT_TRUE(std::holds_alternative<Won>(std::get<ClaimResult>(*first)));
  ASSERT_TRUE(std::holds_alternative<ClaimResult>(*second));
  EXPECT_TRUE(std::holds_alternative<HeldByOther>(std::get<ClaimResult>(*second)));
}

TEST(RedisAsync, AServerThatDiesWithCallsInFlightEndsEachOnceAndTheNextCallReconnects) {
  PrivateRedis server;
  RedisLock lock(server.url());
  RawRedis admin(server.url());
  constexpr int kCalls = 50;
  std::atomic<int> answered{0};
  std::atomic<int> failures{0};
  std::atomic<int> results{0};
  // Held back by the server: sent, in flight, unanswered when it dies.
  ASSERT_EQ(admin.text({"CLIENT", "PAUSE", "10000", "ALL"}), "OK");
  for (int i = 0; i < kCalls; ++i) {
    lock.claim_async("d" + std::to_string(i), kLease, {}, [&](AsyncClaimResult r) {
      (std::holds_alternative<StoreFailure>(r) ? failures : results)++;
      ++answered;
    });
  }
  server.kill(SIGKILL);
  ASSERT_TRUE(eventually([&] { return answered.load() == kCalls; }))
      << answered.load() << " of " << kCalls << " callbacks ran";
  EXPECT_EQ(failures.load(), kCalls);
  EXPECT_EQ(results.load(), 0);

  // Its script cache is empty: a claim of a fresh key needs no script, the second claim of
  // it meets NOSCRIPT and reloads.
  server.start();
  std::atomic<int> later{0};
  std::optional<AsyncClaimResult> after;
  std::optional<AsyncClaimResult> again;
  lock.claim_async("after-restart", kLease, {}, [&](AsyncClaimResult r) {
    after = std::move(r);
    ++later;
  });
  ASSERT_TRUE(eventually([&] { return later.load() == 1; }));
  lock.claim_async("after-restart", kLease, {}, [&](AsyncClaimResult r) {
    again = std::move(r);
    ++later;
  });
  ASSERT_TRUE(eventually([&] { return later.load() == 2; }));
  std::this_thread::sleep_for(milliseconds(50));  // a third callback would show here
  EXPECT_EQ(later.load(), 2);
  ASSERT_TRUE(std::holds_alternative<ClaimResult>(*after))
      << std::get<StoreFailure>(*after).message;
  EXPECT_TRUE(std::holds_alternative<Won>(std::get<ClaimResult>(*after)));
  ASSERT_TRUE(std::holds_alternative<ClaimResult>(*again))
      << std::get<StoreFailure>(*again).message;
  EXPECT_TRUE(std::holds_alternative<HeldByOther>(std::get<ClaimResult>(*again)));
}

TEST(RedisAsync, AFlushedScriptCacheIsReloaded) {
  PrivateRedis server;
  RedisLock lock(server.url());
  RawRedis admin(server.url());
  const Claim held = won(lock.claim("k", kLease));
  ASSERT_EQ(admin.text({"SCRIPT", "FLUSH"}), "OK");
  std::atomic<int> answered{0};
  std::optional<AsyncClaimResult> r;
  // The key exists, so the script decides (a fresh key would need none).
  lock.claim_async("k", kLease, {}, [&](AsyncClaimResult out) {
    r = std::move(out);
    ++answered;
  });
  ASSERT_TRUE(eventually([&] { return answered.load() == 1; }));
  ASSERT_TRUE(std::holds_alternative<ClaimResult>(*r)) << std::get<StoreFailure>(*r).message;
  const auto* other = std::get_if<HeldByOther>(&std::get<ClaimResult>(*r));
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->lease_expiry, held.lease_expiry);
}

// claim_async of a fresh key on Redis 7: one plain SET NX PX of the record's fresh form, no
// script; the lease it reports is the server's (the key's expiry less the ttl), and every
// later operation reads the fresh form as the record it is.
TEST(RedisAsync, AFreshKeyIsClaimedWithoutTheScriptAndReadAsTheRecordItIs) {
  PrivateRedis server;
  RawRedis admin(server.url());
  RedisLock lock(server.url(), RedisOptions{.backend = {.ttl = std::chrono::minutes(5)}});
  auto claim_now = [&](const std::string& key, milliseconds lease,
                       const std::string& token) -> ClaimResult {
    std::atomic<int> answered{0};
    std::optional<AsyncClaimResult> out;
    lock.claim_async(key, lease, ClaimRequest{.claim_token = token, .fingerprint = "fp"},
                     [&](AsyncClaimResult r) {
                       out = std::move(r);
                       ++answered;
                     });
    EXPECT_TRUE(eventually([&] { return answered.load() == 1; }));
    EXPECT_TRUE(out && std::holds_alternative<ClaimResult>(*out));
    return std::get<ClaimResult>(*out);
  };
  const std::string token = "token-of-the-first-claim";
  const Claim first = won(claim_now("k", kLease, token));
  const std::string redis_key = lock.key_prefix() + "k";
  const long long expiry = std::stoll(admin.text({"PEXPIRETIME", redis_key}));
  EXPECT_EQ(admin.text({"GET", redis_key}), "F 300000 24 2\n" + token + "fp");
  EXPECT_EQ(first.fence, 1);
  EXPECT_EQ(first.claim_token, token);
  EXPECT_EQ(to_millis(first.lease_expiry), expiry - 300'000);

  const std::optional<Record> stored = lock.inspect("k");
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->state, RecordState::kClaimed);
  EXPECT_EQ(stored->fence, 1);
  EXPECT_EQ(stored->lease_expiry, to_millis(first.lease_expiry));
  EXPECT_EQ(stored->expires_at, expiry);
  EXPECT_EQ(stored->claim_token, token);
  EXPECT_EQ(stored->fingerprint, std::optional<std::string>("fp"));

  // A retried claim (its reply lost) is re-affirmed by its token; anyone else is held off.
  const Claim retried = won(claim_now("k", kLease, token));
  EXPECT_EQ(retried.fence, 1);
  EXPECT_EQ(retried.lease_expiry, first.lease_expiry);
  // The retry met a claimed record, so this claim sends TIME along and is answered from the
  // record, without the script (RedisLockTest.ALiveHolderIsAnsweredFromItsRecordWithoutTheScript).
  ASSERT_EQ(admin.text({"CONFIG", "RESETSTAT"}), "OK");
  const ClaimResult other = claim_now("k", kLease, "another-token");
  ASSERT_TRUE(std::holds_alternative<HeldByOther>(other));
  EXPECT_EQ(std::get<HeldByOther>(other).lease_expiry, first.lease_expiry);
  EXPECT_EQ(std::get<HeldByOther>(other).fingerprint, std::optional<std::string>("fp"));
  EXPECT_EQ(admin.text({"INFO", "commandstats"}).find("cmdstat_evalsha"), std::string::npos)
      << "a live holder's key ran the script";
  EXPECT_NE(admin.text({"INFO", "commandstats"}).find("cmdstat_time"), std::string::npos);

  ASSERT_TRUE(lock.complete(first, "result"));
  // A DONE record answers SET NX GET itself: the replay without the script.
  ASSERT_EQ(admin.text({"CONFIG", "RESETSTAT"}), "OK");
  const ClaimResult replay = claim_now("k", kLease, "a-third-token");
  ASSERT_TRUE(std::holds_alternative<AlreadyDone>(replay));
  EXPECT_EQ(std::get<AlreadyDone>(replay).result, std::optional<std::string>("result"));
  EXPECT_EQ(std::get<AlreadyDone>(replay).fingerprint, std::optional<std::string>("fp"));
  EXPECT_EQ(to_millis(*std::get<AlreadyDone>(replay).expires_at),
            std::stoll(admin.text({"PEXPIRETIME", redis_key})));
  EXPECT_EQ(admin.text({"INFO", "commandstats"}).find("cmdstat_evalsha"), std::string::npos)
      << "the replay ran the script";
  EXPECT_EQ(admin.text({"TYPE", redis_key}), "string");

  // A lapsed fresh claim is taken over at fence 2, and its holder is fenced out.
  const Claim lapsed = won(claim_now("lapsing", milliseconds(200), token));
  EXPECT_EQ(lapsed.fence, 1);
  ASSERT_TRUE(eventually([&] {
    return std::holds_alternative<Won>(claim_now("lapsing", kLease, "the-next-holder"));
  }));
  const std::optional<Record> taken = lock.inspect("lapsing");
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->fence, 2);
  EXPECT_FALSE(lock.complete(lapsed));
}

// won_claims() claims `count` fresh keys, `prefix` and a number each, and returns the claims.
std::vector<Claim> won_claims(RedisLock& lock, const std::string& prefix, int count) {
  std::vector<Claim> claims;
  for (int i = 0; i < count; ++i)
    claims.push_back(won(lock.claim(prefix + std::to_string(i), kLease)));
  return claims;
}

// complete_async of N fresh claims, queued while an earlier write waits, each told its own
// outcome through `done` (index, completed); returns once all N have answered.
void complete_all_paused(RedisLock& lock, RawRedis& admin, const std::vector<Claim>& claims,
                         const std::function<void(std::size_t, AsyncCompleteResult)>& done) {
  // EVALSHA may write, so the server holds it: the first complete goes out alone and waits,
  // and the rest queue up behind it for the next write.
  ASSERT_EQ(admin.text({"CLIENT", "PAUSE", "10000", "WRITE"}), "OK");
  std::atomic<std::size_t> answered{0};
  for (std::size_t i = 0; i < claims.size(); ++i) {
    lock.complete_async(claims[i], "result-of-" + claims[i].key, [&, i](AsyncCompleteResult r) {
      done(i, std::move(r));
      ++answered;
    });
  }
  ASSERT_EQ(admin.text({"CLIENT", "UNPAUSE"}), "OK");
  ASSERT_TRUE(eventually([&] { return answered.load() == claims.size(); }))
      << answered.load() << " of " << claims.size() << " completes answered";
}

// not_completed() is complete_all_paused() of `claims`, and the keys whose complete did not
// answer true.
std::vector<std::string> not_completed(RedisLock& lock, RawRedis& admin,
                                       const std::vector<Claim>& claims) {
  Problems problems;
  complete_all_paused(lock, admin, claims, [&](std::size_t i, AsyncCompleteResult r) {
    if (!std::holds_alternative<bool>(r) || !std::get<bool>(r)) {
      problems.add(claims[i].key + " was not completed");
    }
  });
  return problems.list();
}

// The completes of fresh claims queued for one write go to the server as one script call
// (complete_many) of at most 64 keys: each key is completed on its own, with its own result,
// each caller is told its own outcome, and each key still wakes its waiters (a PUBLISH each).
TEST(RedisAsync, CompletesQueuedForOneWriteAreOneScriptCallOfAtMost64) {
  PrivateRedis server;
  RawRedis admin(server.url());
  RedisLock lock(server.url(), RedisOptions{.backend = {.ttl = std::chrono::minutes(5)}});
  constexpr int kKeys = 129;
  const std::vector<Claim> claims = won_claims(lock, "j", kKeys);
  ASSERT_EQ(admin.text({"CONFIG", "RESETSTAT"}), "OK");
  const std::vector<std::string> missed = not_completed(lock, admin, claims);
  EXPECT_TRUE(missed.empty()) << missed.front();
  // The first write took one or more, the next the rest: three calls whatever the split (one
  // call, or two, without the bound of 64).
  EXPECT_EQ(admin.calls("evalsha"), 3);
  EXPECT_EQ(admin.calls("publish"), kKeys);
  for (const Claim& c : claims) {
    EXPECT_EQ(admin.text({"GET", lock.key_prefix() + c.key}).substr(0, 4), "E 1 ");
    const std::optional<Record> r = lock.inspect(c.key);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->state, RecordState::kDone);
    EXPECT_EQ(r->result, std::optional<std::string>("result-of-" + c.key));
    EXPECT_EQ(r->lease_expiry, to_millis(c.lease_expiry));
  }
}

// A key the joined call cannot complete is left untouched by it and sent alone, to the
// script's general path, which decides: a fence-1 record the script wrote is completed in its
// own form, and a key with no record is not completed.
TEST(RedisAsync, AKeyAJoinedCompleteLeavesGoesToItsOwnCall) {
  PrivateRedis server;
  RawRedis admin(server.url());
  RedisLock lock(server.url(), RedisOptions{.backend = {.ttl = std::chrono::minutes(5)}});
  const Claim fresh = won(lock.claim("fresh", kLease));
  const long long now = admin.time_ms();
  const std::string scripted_key = lock.key_prefix() + "scripted";
  admin.command({"SET", scripted_key,
                 "C 1 " + std::to_string(now + 60'000) + " " + std::to_string(now + 360'000) +
                     " 5 -1 -1\ntoken"});
  admin.command({"PEXPIREAT", scripted_key, std::to_string(now + 360'000)});
  const Claim scripted{"scripted", 1, from_millis(now + 60'000), "token"};
  const Claim absent{"absent", 1, from_millis(now + 60'000), "gone"};
  std::vector<std::optional<AsyncCompleteResult>> out(3);
  std::mutex mutex;
  complete_all_paused(lock, admin, {fresh, scripted, absent},
                      [&](std::size_t i, AsyncCompleteResult r) {
                        const std::lock_guard hold(mutex);
                        out[i] = std::move(r);
                      });
  const std::lock_guard hold(mutex);
  for (const auto& r : out) {
    ASSERT_TRUE(r && std::holds_alternative<bool>(*r)) << std::get<StoreFailure>(*r).message;
  }
  EXPECT_TRUE(std::get<bool>(*out[0]));
  EXPECT_TRUE(std::get<bool>(*out[1]));
  EXPECT_FALSE(std::get<bool>(*out[2]));
  EXPECT_EQ(admin.text({"GET", lock.key_prefix() + "fresh"}).substr(0, 2), "E ");
  EXPECT_EQ(admin.text({"GET", scripted_key}).substr(0, 2), "D ") << "the general path's form";
  const std::optional<Record> done = lock.inspect("scripted");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->state, RecordState::kDone);
  EXPECT_EQ(done->result, std::optional<std::string>("result-of-scripted"));
  EXPECT_FALSE(lock.inspect("absent"));
}

// A server that lost its scripts answers the joined call NOSCRIPT: each key is then sent alone,
// which loads the script again, and each is completed.
TEST(RedisAsync, AJoinedCallMetByNoscriptSendsEachKeyAloneAndReloads) {
  PrivateRedis server;
  RawRedis admin(server.url());
  RedisLock lock(server.url());
  const std::vector<Claim> claims = won_claims(lock, "n", 8);
  ASSERT_EQ(admin.text({"SCRIPT", "FLUSH"}), "OK");
  const std::vector<std::string> missed = not_completed(lock, admin, claims);
  EXPECT_TRUE(missed.empty()) << missed.front();
  for (const Claim& c : claims) {
    const std::optional<Record> r = lock.inspect(c.key);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->state, RecordState::kDone);
    EXPECT_EQ(r->result, std::optional<std::string>("result-of-" + c.key));
  }
}

// A server that dies with a joined call in flight ends each of its callers once, a failure:
// the retry the stale connection allows finds no server either.
TEST(RedisAsync, AServerThatDiesWithJoinedCompletesInFlightEndsEachOnce) {
  PrivateRedis server;
  RawRedis admin(server.url());
  RedisLock lock(server.url());
  constexpr int kKeys = 10;
  const std::vector<Claim> claims = won_claims(lock, "d", kKeys);
  std::atomic<int> answered{0};
  std::atomic<int> failures{0};
  ASSERT_EQ(admin.text({"CLIENT", "PAUSE", "10000", "WRITE"}), "OK");
  for (const Claim& c : claims) {
    lock.complete_async(c, std::nullopt, [&](AsyncCompleteResult r) {
      if (std::holds_alternative<StoreFailure>(r)) ++failures;
      ++answered;
    });
  }
  server.kill(SIGKILL);
  ASSERT_TRUE(eventually([&] { return answered.load() == kKeys; }))
      << answered.load() << " of " << kKeys << " callbacks ran";
  std::this_thread::sleep_for(milliseconds(50));  // a second callback would show here
  EXPECT_EQ(answered.load(), kKeys);
  EXPECT_EQ(failures.load(), kKeys);
}

// A callback of a joined call's caller that destroys the backend ends the callers after it at
// once, each once, as failures: they are never handed to a backend that is gone.
TEST(RedisAsync, ABackendDestroyedByAJoinedCallersCallbackEndsTheOthersAtOnce) {
  PrivateRedis server;
  RawRedis admin(server.url());
  constexpr int kKeys = 10;
  auto lock = std::make_shared<RedisLock>(server.url());
  const std::vector<Claim> claims = won_claims(*lock, "x", kKeys);
  std::atomic<int> answered{0};
  std::atomic<int> completed{0};
  std::promise<void> destroyed;
  ASSERT_EQ(admin.text({"CLIENT", "PAUSE", "10000", "WRITE"}), "OK");
  // The first goes out alone; the second heads the joined call of the rest and destroys the
  // backend from its callback.
  lock->complete_async(claims[0], std::nullopt, [&](AsyncCompleteResult) { ++answered; });
  lock->complete_async(claims[1], std::nullopt,
                       [keep = lock, &destroyed, &answered](AsyncCompleteResult) mutable {
                         keep.reset();  // the last reference: the backend goes here
                         ++answered;
                         destroyed.set_value();
                       });
  for (int i = 2; i < kKeys; ++i) {
    lock->complete_async(claims[i], std::nullopt, [&](AsyncCompleteResult r) {
      if (std::holds_alternative<bool>(r)) ++completed;
      ++answered;
    });
  }
  lock.reset();
  ASSERT_EQ(admin.text({"CLIENT", "UNPAUSE"}), "OK");
  ASSERT_EQ(destroyed.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(answered.load(), kKeys);  // all of them before the backend was gone
  EXPECT_EQ(completed.load(), 0) << "a caller after the destroying one was handed its outcome";
}

// Replies read together are handed to their callbacks in slices, and what a slice's callbacks
// queued is sent before the next slice's run: the server works on it meanwhile, instead of
// waiting for every callback of the batch (one wave at a time on the one connection).
TEST(RedisAsync, WhatTheFirstCallbacksOfABatchQueueIsSentBeforeItsLastCallbackRuns) {
  PrivateRedis server;
  RawRedis admin(server.url());
  RawRedis watcher(server.url());  // the I/O thread's own: a connection is not shared
  RedisLock lock(server.url());
  constexpr int kKeys = 64;
  // The first claim goes out alone and the server holds it; the rest queue behind it and go
  // in one write, whose replies come back together.
  ASSERT_EQ(admin.text({"CLIENT", "PAUSE", "10000", "WRITE"}), "OK");
  std::atomic<int> answered{0};
  std::atomic<bool> landed{false};
  const std::string first_of_batch = lock.key_prefix() + "s1";
  for (int i = 0; i < kKeys; ++i) {
    lock.claim_async("s" + std::to_string(i), kLease, {}, [&, i](AsyncClaimResult r) {
      const auto* result = std::get_if<ClaimResult>(&r);
      if (result != nullptr && std::holds_alternative<Won>(*result)) {
        lock.complete_async(std::get<Won>(*result).claim, std::nullopt, [](AsyncCompleteResult) {});
      }
      if (i == kKeys - 1) {
        // This callback holds the I/O thread: the batch's first key is completed only if its
        // complete was sent before this ran.
        landed = eventually(
            [&] {
              return watcher.text({"GET", first_of_batch}).starts_with("E 1 ");
            },
            std::chrono::seconds(5));
      }
      ++answered;
    });
    if (i == 0) {
      ASSERT_TRUE(eventually([&] {
        return admin.text({"INFO", "clients"}).find("blocked_clients:1") != std::string::npos;
      }));
    }
  }
  ASSERT_EQ(admin.text({"CLIENT", "UNPAUSE"}), "OK");
  ASSERT_TRUE(eventually([&] { return answered.load() == kKeys; }));
  EXPECT_TRUE(landed.load()) << "the batch's completes waited for its last callback";
}

TEST(RedisAsync, DestroyingTheBackendEndsEveryCallInFlightFirst) {
  PrivateRedis server;
  RawRedis admin(server.url());
  constexpr int kCalls = 50;
  std::atomic<int> answered{0};
  {
    RedisLock lock(server.url());
    ASSERT_EQ(admin.text({"CLIENT", "PAUSE", "300", "ALL"}), "OK");
    for (int i = 0; i < kCalls; ++i) {
      lock.claim_async("x" + std::to_string(i), kLease, {}, [&](AsyncClaimResult) { ++answered; });
    }
  }  // waits for the paused replies
  EXPECT_EQ(answered.load(), kCalls);
}

// A callback may drop the last reference to its backend, on the I/O thread (the gateway's
// shutdown does when a push's last callback outlives the server). That thread cannot wait for
// itself: the calls still in flight or queued end at once, each once, as failures, and the
// process goes on (it used to end in std::terminate, a thread joining itself).
TEST(RedisAsync, ABackendDestroyedByItsOwnCallbackEndsTheRestAtOnce) {
  PrivateRedis server;
  RawRedis admin(server.url());
  constexpr int kOthers = 20;
  std::atomic<int> answered{0};
  std::atomic<int> failed{0};
  std::promise<void> destroyed;
  auto lock = std::make_shared<RedisLock>(server.url());
  ASSERT_EQ(admin.text({"CLIENT", "PAUSE", "300", "ALL"}), "OK");
  lock->claim_async("first", kLease, {}, [keep = lock, &destroyed](AsyncClaimResult) mutable {
    keep.reset();  // the last reference: the backend goes here
    destroyed.set_value();
  });
  for (int i = 0; i < kOthers; ++i) {
    lock->claim_async("x" + std::to_string(i), kLease, {}, [&](AsyncClaimResult r) {
      if (std::holds_alternative<StoreFailure>(r)) ++failed;
      ++answered;
    });
  }
  lock.reset();  // the first call's callback holds the backend now
  ASSERT_EQ(destroyed.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(answered.load(), kOthers);  // all of them before the backend was gone
  EXPECT_EQ(failed.load(), kOthers);
}

// Behind a DoneCache the calls stay asynchronous (answered on the I/O thread) until a copy
// answers a duplicate at once.
TEST(RedisAsync, BehindADoneCacheCallsStayAsynchronousAndDuplicatesComeFromTheCopy) {
  PrivateRedis server;
  RedisLock lock(server.url());
  DoneCache cache(lock);
  const auto caller = std::this_thread::get_id();
  std::atomic<int> answered{0};
  std::atomic<bool> on_caller_thread{false};
  std::optional<Claim> claim;
  cache.claim_async("k", kLease, {}, [&](AsyncClaimResult r) {
    on_caller_thread = std::this_thread::get_id() == caller;
    claim = std::get<Won>(std::get<ClaimResult>(r)).claim;
    ++answered;
  });
  ASSERT_TRUE(eventually([&] { return answered.load() == 1; }));
  EXPECT_FALSE(on_caller_thread.load()) << "answered by the I/O thread, not inline";
  cache.complete_async(*claim, "r", [&](AsyncCompleteResult c) {
    EXPECT_TRUE(std::get<bool>(c));
    ++answered;
  });
  ASSERT_TRUE(eventually([&] { return answered.load() == 2; }));
  cache.claim_async("k", kLease, {}, [&](AsyncClaimResult) { ++answered; });  // from the store
  ASSERT_TRUE(eventually([&] { return answered.load() == 3; }));
  std::optional<AsyncClaimResult> copy;
  cache.claim_async("k", kLease, {}, [&](AsyncClaimResult r) { copy = std::move(r); });
  ASSERT_TRUE(copy.has_value()) << "a copy answers before claim_async returns";
  EXPECT_EQ(std::get<AlreadyDone>(std::get<ClaimResult>(*copy)).result, "r");
  EXPECT_EQ(cache.hits(), 1U);
}

TEST(RedisAsync, WithoutSharedConnectionsTheBlockingCallAnswersBeforeReturning) {
  PrivateRedis server;
  RedisLock lock(server.url() + "?pipelines=0");
  std::optional<AsyncClaimResult> r;
  lock.claim_async("k", kLease, {}, [&](AsyncClaimResult out) { r = std::move(out); });
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(std::holds_alternative<Won>(std::get<ClaimResult>(*r)));
}

}  // namespace
}  // namespace idempotency::testing
