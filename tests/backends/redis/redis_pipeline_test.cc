// Pipeline and Pipelines (src/backends/redis/redis_pipeline.h) against a redis-server of the
// test's own: every caller gets its own reply under concurrency, calls made while a reply is
// awaited go out in one write, and a connection that fails ends every call, saying which ones
// were never sent. A blocking BLPOP holds the reader role open for as long as a test needs, so
// nothing here depends on timing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/redis_lock.h"
#include "private_redis.h"
#include "redis_connection.h"
#include "redis_pipeline.h"
#include "support/eventually.h"

namespace idempotency::testing {
namespace {

using redis_detail::Connection;
using redis_detail::ConnectionPtr;
using redis_detail::IoFailure;
using redis_detail::Pipeline;
using redis_detail::PipelineOutcome;
using redis_detail::Pipelines;
using std::chrono::milliseconds;

ConnectionPtr open_to(const PrivateRedis& server,
                      milliseconds command_timeout = milliseconds(10'000)) {
  return Connection::open(
      "127.0.0.1", server.port(),
      {.connect_timeout = milliseconds(5'000), .command_timeout = command_timeout});
}

std::string text_of(const PipelineOutcome& o) {
  if (!o.reply) return "<failed: " + o.error + ">";
  return {o.reply->str, o.reply->len};
}

// A call that blocks its connection, holding the reader role, until `list` gets an element.
PipelineOutcome blocking_pop(Pipeline& pipeline, const std::string& list) {
  return pipeline.call({"BLPOP", list, "0"});
}

// Runs `call(t, i)` for i below `calls` on each of `threads` threads at once: what each thread's
// calls found wrong (a call returns "" when its reply was right).
template <class Call>
std::vector<std::vector<std::string>> run_callers(int threads, int calls, Call&& call) {
  std::vector<std::vector<std::string>> wrong(static_cast<std::size_t>(threads));
  {
    std::vector<std::jthread> callers;
    callers.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      callers.emplace_back([&, t] {
        for (int i = 0; i < calls; ++i) {
          if (std::string w = call(t, i); !w.empty()) wrong[t].push_back(std::move(w));
        }
      });
    }
  }
  return wrong;
}

TEST(RedisPipeline, EveryCallerGetsItsOwnReplyUnderConcurrency) {
  PrivateRedis server;
  Pipeline pipeline(open_to(server));
  constexpr int kThreads = 8;
  constexpr int kCalls = 400;
  const auto wrong = run_callers(kThreads, kCalls, [&](int t, int i) -> std::string {
    // Now and then a reply larger than one read, so replies straddle reads.
    std::string payload = "t" + std::to_string(t) + "-" + std::to_string(i);
    if (i % 50 == 0) payload.append(std::size_t{40} * 1024, 'x');
    const PipelineOutcome o = pipeline.call({"ECHO", payload});
    return text_of(o) == payload ? "" : text_of(o).substr(0, 40);
  });
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_THAT(wrong[t], ::testing::IsEmpty()) << "caller " << t << " got another's reply";
  }
  EXPECT_FALSE(pipeline.broken());
  EXPECT_GE(pipeline.writes(), 1U);
  EXPECT_LE(pipeline.writes(), std::uint64_t{kThreads} * kCalls);
}

// A call with a command ahead of its own: both go in the same write, in order, and each reply
// goes where it belongs, among concurrent plain calls (a chain of two as well).
TEST(RedisPipeline, ACommandSentAheadOfACallGetsItsOwnReplyInTheSameWrite) {
  PrivateRedis server;
  Pipeline pipeline(open_to(server));
  constexpr int kThreads = 4;
  constexpr int kCalls = 300;
  const auto wrong = run_callers(kThreads, kCalls, [&](int t, int i) -> std::string {
    const std::string key = "k" + std::to_string(t) + "-" + std::to_string(i);
    if (t % 2 == 0) {
      const PipelineOutcome o = pipeline.call({"ECHO", key});
      return text_of(o) == key ? "" : "plain: " + text_of(o);
    }
    // Each command sees the effect of those ahead of it: they ran in order, back to back.
    // Caller 3 chains a second command ahead of its own.
    const std::string value = "value-" + std::to_string(i);
    const std::vector<std::string_view> set = {"SET", key, value};
    const std::vector<std::string_view> append = {"APPEND", key, "!"};
    redis_detail::Preceding appended{append, nullptr};
    redis_detail::Preceding before{set, nullptr, t == 3 ? &appended : nullptr};
    const PipelineOutcome o = pipeline.call({"STRLEN", key}, &before);
    const std::string first =
        before.reply ? std::string(before.reply->str, before.reply->len) : "<none>";
    if (first != "OK") return "before: " + first;
    const auto length = static_cast<long long>(value.size()) + (t == 3 ? 1 : 0);
    if (t == 3 && (!appended.reply || appended.reply->type != REDIS_REPLY_INTEGER ||
                   appended.reply->integer != length)) {
      return "appended: no length";
    }
    if (!o.reply || o.reply->type != REDIS_REPLY_INTEGER || o.reply->integer != length) {
      return "after: " + text_of(o);
    }
    return "";
  });
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_THAT(wrong[t], ::testing::IsEmpty()) << "caller " << t;
  }
  EXPECT_FALSE(pipeline.broken());
  // Alone on the connection: one write for the three commands.
  const std::uint64_t writes = pipeline.writes();
  const std::vector<std::string_view> set = {"SET", "alone", "v"};
  const std::vector<std::string_view> append = {"APPEND", "alone", "w"};
  redis_detail::Preceding appended{append, nullptr};
  redis_detail::Preceding before{set, nullptr, &appended};
  EXPECT_EQ(text_of(pipeline.call({"GET", "alone"}, &before)), "vw");
  EXPECT_EQ(pipeline.writes(), writes + 1);
}

TEST(RedisPipeline, CallsMadeWhileAReplyIsAwaitedGoOutTogetherInOneWrite) {
  PrivateRedis server;
  Pipeline pipeline(open_to(server));
  PipelineOutcome popped;
  std::jthread reader([&] { popped = blocking_pop(pipeline, "list"); });
  RawRedis admin(server.url());
  ASSERT_TRUE(eventually([&] { return pipeline.writes() == 1; }));

  constexpr int kQueued = 7;
  std::vector<std::string> answers(kQueued);
  std::vector<std::jthread> callers;
  callers.reserve(kQueued);
  for (int i = 0; i < kQueued; ++i) {
    callers.emplace_back([&, i] {
      answers[i] = text_of(pipeline.call({"ECHO", std::to_string(i)}));
    });
  }
  ASSERT_TRUE(eventually([&] { return pipeline.queued() == kQueued; }));
  EXPECT_EQ(pipeline.writes(), 1U) << "a call went out while the connection awaited a reply";

  EXPECT_EQ(admin.text({"RPUSH", "list", "v"}), "1");
  reader.join();
  callers.clear();  // joins
  ASSERT_TRUE(popped.reply);
  ASSERT_EQ(popped.reply->type, REDIS_REPLY_ARRAY);
  EXPECT_EQ(std::string(popped.reply->element[1]->str), "v");
  for (int i = 0; i < kQueued; ++i) EXPECT_EQ(answers[i], std::to_string(i));
  EXPECT_EQ(pipeline.writes(), 2U) << "the seven queued calls took more than one write";
}

// Which calls a failure reached: the one in flight may have run; the queued ones never left.
struct Ended {
  PipelineOutcome in_flight;
  std::vector<PipelineOutcome> queued;
};

template <class Break>
Ended fail_while_queued(PrivateRedis& server, Pipeline& pipeline, Break&& break_it) {
  Ended ended;
  ended.queued.resize(3);
  std::jthread reader([&] { ended.in_flight = blocking_pop(pipeline, "never-pushed"); });
  EXPECT_TRUE(eventually([&] { return pipeline.writes() == 1; }));
  {
    std::vector<std::jthread> callers;
    callers.reserve(ended.queued.size());
    for (std::size_t i = 0; i < ended.queued.size(); ++i) {
      callers.emplace_back([&, i] {
        ended.queued[i] = pipeline.call({"SET", "k" + std::to_string(i), "v"});
      });
    }
    EXPECT_TRUE(eventually([&] { return pipeline.queued() == 3; }));
    break_it(server);
  }
  return ended;
}

void expect_ended(const Ended& ended, IoFailure failure) {
  EXPECT_FALSE(ended.in_flight.reply);
  EXPECT_EQ(ended.in_flight.failure, failure);
  EXPECT_TRUE(ended.in_flight.maybe_sent);
  EXPECT_THAT(ended.in_flight.error, ::testing::StartsWith("redis: "));
  for (const PipelineOutcome& o : ended.queued) {
    EXPECT_FALSE(o.reply);
    EXPECT_FALSE(o.maybe_sent) << "a queued call was reported as possibly sent";
    EXPECT_THAT(o.error,
                ::testing::StartsWith("redis: not sent, the shared connection failed first: "));
    EXPECT_THAT(o.error, ::testing::EndsWith(ended.in_flight.error.substr(7)));
  }
}

TEST(RedisPipeline, AConnectionTheServerClosesEndsEveryCallAndTheQueuedOnesWereNeverSent) {
  PrivateRedis server;
  Pipeline pipeline(open_to(server));
  const Ended ended = fail_while_queued(server, pipeline, [](PrivateRedis& s) {
    RawRedis admin(s.url());
    EXPECT_EQ(admin.text({"CLIENT", "KILL", "TYPE", "normal"}), "1");
  });
  expect_ended(ended, IoFailure::kClosed);
  EXPECT_TRUE(pipeline.broken());
  // None of the queued SETs reached the server.
  RawRedis admin(server.url());
  EXPECT_EQ(admin.text({"EXISTS", "k0", "k1", "k2"}), "0");
  // Later calls fail at once, unsent.
  const PipelineOutcome later = pipeline.call({"PING"});
  EXPECT_FALSE(later.reply);
  EXPECT_FALSE(later.maybe_sent);
  EXPECT_THAT(later.error, ::testing::StartsWith("redis: not sent"));
}

TEST(RedisPipeline, ACallPastTheCommandTimeoutEndsTheQueuedOnesUnsent) {
  PrivateRedis server;
  Pipeline pipeline(open_to(server, milliseconds(2'000)));
  const Ended ended = fail_while_queued(server, pipeline, [](PrivateRedis&) {});
  expect_ended(ended, IoFailure::kTimedOut);
  EXPECT_THAT(ended.in_flight.error, ::testing::HasSubstr("command_timeout"));
  EXPECT_TRUE(pipeline.broken());
}

TEST(RedisPipeline, PipelinesReplaceABrokenConnectionAndTellAFreshOneFromAStaleOne) {
  PrivateRedis server;
  int opened = 0;
  Pipelines pipelines(1, [&] {
    ++opened;
    return open_to(server);
  });
  bool fresh = false;
  std::size_t slot = Pipelines::kAny;
  EXPECT_EQ(text_of(pipelines.call({"ECHO", "a"}, fresh, slot)), "a");
  EXPECT_TRUE(fresh);
  EXPECT_EQ(slot, 0U);
  EXPECT_EQ(text_of(pipelines.call({"ECHO", "b"}, fresh, slot)), "b");
  EXPECT_FALSE(fresh);

  RawRedis admin(server.url());
  EXPECT_EQ(admin.text({"CLIENT", "KILL", "TYPE", "normal"}), "1");
  const PipelineOutcome stale = pipelines.call({"ECHO", "c"}, fresh, slot);
  EXPECT_FALSE(stale.reply);
  EXPECT_EQ(stale.failure, IoFailure::kClosed);
  EXPECT_FALSE(fresh) << "the failure was on a connection opened before the call";
  EXPECT_EQ(text_of(pipelines.call({"ECHO", "d"}, fresh, slot)), "d");
  EXPECT_TRUE(fresh);
  EXPECT_EQ(opened, 2);
}

// Callers that find a slot empty or broken at once wait for one connect and share what it
// gives: a recovering server is not met by a connect per thread.
TEST(RedisPipeline, CallersThatFindASlotBrokenTogetherShareOneConnect) {
  PrivateRedis server;
  constexpr int kThreads = 8;
  std::atomic<int> opened{0};
  Pipelines* pipelines_ref = nullptr;  // connects only once callers came, after it is set
  Pipelines pipelines(1, [&] {
    ++opened;
    // Every caller has found the slot empty before this connect ends: all of them are
    // replacing it, this one connecting and the others waiting for it. (Bounded: were one
    // never to come, `fresh` below says so.)
    (void)eventually([&] { return pipelines_ref->reopening(0) == kThreads; });
    return open_to(server);
  });
  pipelines_ref = &pipelines;
  std::vector<std::string> replies(kThreads);
  std::vector<char> fresh(kThreads, 0);
  {
    std::vector<std::jthread> callers;
    callers.reserve(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      callers.emplace_back([&, t] {
        bool f = false;
        std::size_t slot = Pipelines::kAny;
        replies[t] = text_of(pipelines.call({"ECHO", std::to_string(t)}, f, slot));
        fresh[t] = f ? 1 : 0;
      });
    }
  }
  EXPECT_EQ(opened.load(), 1);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(replies[t], std::to_string(t));
    EXPECT_TRUE(fresh[t]) << "caller " << t << ": its pipeline was opened after it came";
  }
}

// A connect that fails fails every caller that waited for it, without a connect of its own
// each (a dead server would otherwise cost a connect_timeout per waiting thread, in turn).
TEST(RedisPipeline, CallersWaitingForAFailedConnectShareItsFailure) {
  PrivateRedis server;
  server.kill(SIGKILL);
  constexpr int kThreads = 8;
  std::atomic<int> attempts{0};
  Pipelines* pipelines_ref = nullptr;  // connects only once callers came, after it is set
  Pipelines pipelines(1, [&] {
    // Every caller is queued behind the first connect before it fails.
    if (++attempts == 1) {
      (void)eventually([&] { return pipelines_ref->reopening(0) == kThreads; });
    }
    return open_to(server);
  });
  pipelines_ref = &pipelines;
  std::atomic<int> refused{0};
  {
    std::vector<std::jthread> callers;
    callers.reserve(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      callers.emplace_back([&] {
        bool f = false;
        std::size_t slot = Pipelines::kAny;
        try {
          (void)pipelines.call({"PING"}, f, slot);
        } catch (const StoreError&) {
          ++refused;
        }
      });
    }
  }
  EXPECT_EQ(refused.load(), kThreads);
  EXPECT_EQ(attempts.load(), 1);
  // The next call is a new attempt of its own.
  bool f = false;
  std::size_t slot = Pipelines::kAny;
  EXPECT_THROW((void)pipelines.call({"PING"}, f, slot), StoreError);
  EXPECT_EQ(attempts.load(), 2);
}

TEST(RedisPipeline, ALockSpreadsCallsOverItsPipelinesAndSurvivesTheirConnectionsBeingClosed) {
  PrivateRedis server;
  RedisLock lock(server.url() + "?pipelines=3");
  RawRedis admin(server.url());
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 6; ++i) {
      const std::string key = "r" + std::to_string(round) + "-" + std::to_string(i);
      const ClaimResult r = lock.claim(key, milliseconds(60'000));
      ASSERT_TRUE(std::holds_alternative<Won>(r));
      EXPECT_TRUE(lock.complete(std::get<Won>(r).claim, "done"));
    }
    // Three pipelines, plus this admin connection, which CLIENT KILL skips.
    EXPECT_EQ(admin.text({"CLIENT", "KILL", "TYPE", "normal"}), "3");
  }
}

}  // namespace
}  // namespace idempotency::testing
