// The differential test on the server's clock: random claim / complete / release / extend
// sequences through RedisLock as production runs it, and through transition() on a model record,
// must give identical answers. tests/contract/differential_test.cc drives Redis on an injected
// clock, which turns off the paths a RedisLock takes by default: the fresh claim (SET NX PX GET,
// redis_fresh_claim.cc), the script's short complete, and completes joined into one call
// (complete_many). Here they run as in production: several instances on one prefix (pipelined,
// and per call with pipelines=0), blocking and asynchronous calls, from one thread and from many.
//
// Time cannot be moved: every lease and ttl is long enough that no boundary is crossed while the
// test runs, and the model is fed the test's own steady clock, which never reaches one either.
// What does not depend on time must match exactly (the answer, the fence, token, result and
// fingerprint); an instant the server chose (a lease expiry, a retention end) must lie between
// the server's TIME read before and after the call that set it.
//
// The seed is fixed and printed on failure; IDEMPOTENCY_DIFF_SEED=<n> runs another one.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "idempotency/record.h"
#include "idempotency/redis_lock.h"
#include "private_redis.h"
#include "redis_test_util.h"
#include "support/recorded_calls.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;

// One RedisLock of the run: `pipelines` shared connections (0: a connection per call), its ttl.
struct Claimer {
  std::size_t pipelines;
  milliseconds ttl;
};

struct Config {
  std::string name;
  std::vector<Claimer> claimers;
};

void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

// The server's instants of a model record, as a range where the test cannot know them exactly.
struct Instants {
  Millis lease_lo = 0, lease_hi = 0, expires_lo = 0, expires_hi = 0;
};

struct Entry {
  std::optional<Record> record;  // moved by transition() only; its instants are the model's
  Instants at;                   // the same record's instants on the server
  std::optional<Claim> holder;   // the last claim won on the key
};

class RedisServerClockDifferential : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    const char* env = std::getenv("IDEMPOTENCY_DIFF_SEED");  // NOLINT(concurrency-mt-unsafe)
    seed_ = env != nullptr ? static_cast<std::uint32_t>(std::stoul(env)) : 20260315U;
    rng_.seed(seed_);
    prefix_ = unique_name("idem_sclock_diff") + ":";
    for (const Claimer& c : GetParam().claimers) {
      backends_.push_back(std::make_unique<RedisLock>(
          fixture_redis_url(), RedisOptions{.backend = {.ttl = c.ttl},
                                            .key_prefix = prefix_,
                                            .pipelines = c.pipelines,
                                            .command_timeout = std::chrono::seconds(10)}));
    }
    raw_ = std::make_unique<RawRedis>(fixture_redis_url());
    for (int i = 0; i < 6; ++i) keys_.push_back(new_key());
  }

  void TearDown() override {
    if (!raw_) return;
    for (const auto& [key, entry] : model_) (void)raw_->command({"DEL", prefix_ + key});
  }

  std::size_t pick(std::size_t n) { return rng_() % n; }
  bool chance(unsigned percent) { return rng_() % 100 < percent; }

  std::string new_key() {
    ++key_count_;
    // Every fourth key holds bytes a text protocol would trip over.
    if (key_count_ % 4 == 0) return std::string("\xff\0 k\n", 5) + std::to_string(key_count_);
    return "k" + std::to_string(key_count_);
  }

  std::optional<std::string> bytes(const char* stem, unsigned none_percent) {
    if (chance(none_percent)) return std::nullopt;
    switch (pick(6)) {
      case 0:
        return std::string();
      case 1:
        return std::string(stem) + std::string(" \n\0-+", 5) + std::to_string(pick(1000));
      default:
        return std::string(stem) + std::to_string(pick(1000));
    }
  }

  Millis random_lease() {
    static constexpr std::int64_t kLeases[] = {2, 5, 30};  // minutes: lease + ttl > 1 h
    return std::chrono::duration_cast<milliseconds>(minutes(kLeases[pick(3)])).count();
  }

  // holds() says whether the last claim won on the key still holds it (by the model).
  static bool holds(const Entry& e) {
    return e.holder && e.record && e.record->state == RecordState::kClaimed &&
           e.record->fence == e.holder->fence && e.record->claim_token == e.holder->claim_token;
  }

  // A claim to act on: mostly one that holds a key in play, else any claim ever won.
  std::optional<Claim> some_claim() {
    std::vector<Claim> holding;
    for (const std::string& key : keys_) {
      if (const Entry& e = model_[key]; holds(e)) holding.push_back(*e.holder);
    }
    if (!holding.empty() && chance(70)) return holding[pick(holding.size())];
    if (claims_.empty()) return std::nullopt;
    return claims_[pick(claims_.size())];
  }

  RecordedCall claim_step(const std::string& key) {
    RecordedCall s{.kind = CallKind::kClaim, .backend = pick(backends_.size()), .key = key};
    s.via = chance(40) ? CallVia::kAsync : CallVia::kBlocking;
    if (chance(15)) {
      s.token.clear();  // the backend makes one
    } else if (!claims_.empty() && chance(30)) {
      const Entry& e = model_[key];
      s.token = e.holder && chance(70) ? e.holder->claim_token
                                       : claims_[pick(claims_.size())].claim_token;
    } else {
      s.token = "t" + std::to_string(++token_count_);
      if (chance(10)) s.token += std::string(" \n\0x", 4);
    }
    s.lease = random_lease();
    s.fingerprint = bytes("fp", 40);
    return s;
  }

  RecordedCall acting_step(CallKind kind, const Claim& c) {
    RecordedCall s{.kind = kind, .backend = pick(backends_.size()), .key = c.key, .claim = c};
    if (kind == CallKind::kComplete) {
      s.via = chance(50) ? CallVia::kAsync : CallVia::kBlocking;
      s.result = bytes("r", 30);
    }
    if (kind == CallKind::kExtend) s.lease = random_lease();
    return s;
  }

  // Makes `steps` (on distinct keys) together (run_together()), then checks every answer and
  // the records they left against the model.
  void execute(std::vector<RecordedCall> steps, bool threads) {
    std::vector<LockBackend*> backends;
    for (const auto& b : backends_) backends.push_back(b.get());
    const Millis before = raw_->time_ms();
    const std::optional<std::vector<RecordedCall>> ran =
        run_together(std::move(steps), backends, threads);
    ASSERT_TRUE(ran.has_value()) << "an asynchronous call never ended";
    const Millis after = raw_->time_ms();
    const Millis now = model_now();
    for (const RecordedCall& s : *ran) {
      SCOPED_TRACE(s.describe());
      check(s, before, after, now);
      if (HasFailure()) return;
    }
    for (const RecordedCall& s : *ran) {
      SCOPED_TRACE("the record after " + s.describe());
      check_stored(s.key);
      if (HasFailure()) return;
    }
  }

  // The model's clock: the test's steady clock, which never reaches a lease's end during a run.
  Millis model_now() const {
    return 1'000'000 +
           std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - started_)
               .count();
  }

  void check(const RecordedCall& s, Millis before, Millis after, Millis now) {
    ASSERT_EQ(s.error, "") << "the call failed";
    Entry& e = model_[s.key];
    const Millis ttl = backends_[s.backend]->ttl().count();
    switch (s.kind) {
      case CallKind::kClaim: {
        // A token the backend made never equals a stored one: the model's empty token neither.
        Transition t = transition(e.record, ClaimOp{s.token, s.lease, ttl, s.fingerprint}, now);
        const ClaimResult& got = *s.claimed;
        ASSERT_STREQ(outcome(got), outcome(claim_result(s.key, *t.record, *t.answer.claim)));
        if (const auto* w = std::get_if<Won>(&got)) {
          EXPECT_EQ(w->claim.key, s.key);
          EXPECT_EQ(w->claim.fence, t.record->fence);
          if (!s.token.empty()) {
            EXPECT_EQ(w->claim.claim_token, s.token);
          }
          const Millis lease = to_millis(w->claim.lease_expiry);
          seen(!t.changed ? "won re-affirmed" : t.record->fence == 1 ? "won fresh" : "won again");
          if (t.changed) {
            expect_within(lease, before + s.lease, after + s.lease, "a new claim's lease expiry");
            t.record->claim_token = w->claim.claim_token;
            e.at = {lease, lease, lease + ttl, lease + ttl};
          } else {
            expect_within(lease, e.at.lease_lo, e.at.lease_hi, "a re-affirmed lease expiry");
          }
          e.holder = w->claim;
          claims_.push_back(w->claim);
        } else if (const auto* d = std::get_if<AlreadyDone>(&got)) {
          seen(d->result ? "done with a result" : "done without a result");
          EXPECT_EQ(d->result, t.record->result);
          EXPECT_EQ(d->fingerprint, t.record->fingerprint);
          ASSERT_TRUE(d->expires_at.has_value());
          expect_within(to_millis(*d->expires_at), e.at.expires_lo, e.at.expires_hi,
                        "a replay's expires_at");
        } else {
          const auto& h = std::get<HeldByOther>(got);
          seen("held");
          EXPECT_EQ(h.fingerprint, t.record->fingerprint);
          expect_within(to_millis(h.lease_expiry), e.at.lease_lo, e.at.lease_hi,
                        "the holder's lease expiry");
        }
        e.record = std::move(t.record);
        break;
      }
      case CallKind::kComplete: {
        Transition t = transition(e.record, CompleteOp{s.claim.fence, s.result, ttl}, now);
        EXPECT_EQ(s.completed, t.answer.ok);
        seen(!t.answer.ok               ? "complete refused"
             : !t.changed               ? "complete repeated"
             : s.via == CallVia::kAsync ? "complete async"
                                        : "complete blocking");
        if (t.changed) {
          e.at.expires_lo = before + ttl;
          e.at.expires_hi = after + ttl;
        }
        e.record = std::move(t.record);
        break;
      }
      case CallKind::kRelease: {  // release() says nothing: the record checked next shows it
        Transition t = transition(e.record, ReleaseOp{s.claim.fence, ttl}, now);
        seen(t.changed ? "released" : "release refused");
        if (t.changed) {
          e.at = {before, after, std::max(e.at.expires_lo, before + ttl),
                  std::max(e.at.expires_hi, after + ttl)};
        }
        e.record = std::move(t.record);
        break;
      }
      case CallKind::kExtend: {
        Transition t =
            transition(e.record, ExtendOp{s.claim.fence, s.claim.claim_token, s.lease, ttl}, now);
        ASSERT_EQ(s.extended.has_value(), t.answer.ok);
        seen(t.answer.ok ? "extended" : "extend refused");
        if (s.extended) {
          const Millis lease = to_millis(*s.extended);
          expect_within(lease, before + s.lease, after + s.lease, "an extended lease expiry");
          e.at = {lease, lease, std::max(e.at.expires_lo, lease + ttl),
                  std::max(e.at.expires_hi, lease + ttl)};
        }
        e.record = std::move(t.record);
        break;
      }
    }
  }

  // The stored record (read by the script, whichever form it has) is the model's.
  void check_stored(const std::string& key) {
    const Entry& e = model_[key];
    const std::optional<Record> stored = backends_[pick(backends_.size())]->inspect(key);
    ASSERT_EQ(stored.has_value(), e.record.has_value());
    if (!stored) return;
    const Record& m = *e.record;
    EXPECT_EQ(stored->state, m.state);
    EXPECT_EQ(stored->fence, m.fence);
    EXPECT_EQ(stored->claim_token, m.claim_token);
    EXPECT_EQ(stored->result, m.result);
    EXPECT_EQ(stored->fingerprint, m.fingerprint);
    expect_within(stored->lease_expiry, e.at.lease_lo, e.at.lease_hi, "the stored lease expiry");
    expect_within(stored->expires_at, e.at.expires_lo, e.at.expires_hi, "the stored expires_at");
  }

  void seen(const char* what) { ++seen_[what]; }

  static void expect_within(Millis value, Millis lo, Millis hi, const char* what) {
    EXPECT_TRUE(value >= lo && value <= hi)
        << what << " " << value << " is not within [" << lo << ", " << hi << "]";
  }

  // A few calls on distinct keys together: mostly completes of the keys' holders (fence 1 on a
  // fresh key: joined into one complete_many when asynchronous), then a claim of each completed
  // key, which must find it done with its result.
  void burst() {
    std::vector<std::string> keys = keys_;
    std::shuffle(keys.begin(), keys.end(), rng_);
    keys.resize(2 + pick(keys.size() - 1));
    std::vector<RecordedCall> steps;
    std::vector<std::string> completing;
    const bool all_async = chance(50);
    for (const std::string& key : keys) {
      const Entry& e = model_[key];
      if (holds(e) && chance(75)) {
        steps.push_back(acting_step(CallKind::kComplete, *e.holder));
        completing.push_back(key);
      } else {
        steps.push_back(claim_step(key));
      }
      if (all_async) steps.back().via = CallVia::kAsync;
    }
    execute(std::move(steps), chance(50));
    if (HasFailure() || completing.empty()) return;
    std::vector<RecordedCall> again;
    again.reserve(completing.size());
    for (const std::string& key : completing) again.push_back(claim_step(key));
    execute(std::move(again), chance(50));
  }

  void random_step() {
    const unsigned r = rng_() % 100;
    if (r < 35) {
      execute({claim_step(keys_[pick(keys_.size())])}, false);
    } else if (r < 75) {
      const CallKind kind = r < 55   ? CallKind::kComplete
                            : r < 65 ? CallKind::kRelease
                                     : CallKind::kExtend;
      if (const std::optional<Claim> c = some_claim()) execute({acting_step(kind, *c)}, false);
    } else {
      burst();
    }
    // A key done is mostly replaced by a fresh one, whose claim is SET NX's and whose
    // complete is the short one (or joined).
    for (std::string& key : keys_) {
      const Entry& e = model_[key];
      if (e.record && e.record->state == RecordState::kDone && chance(30)) key = new_key();
    }
  }

  // Every key whose last winner still holds it: completed together, then claimed again.
  void complete_every_holder() {
    std::vector<RecordedCall> steps;
    for (const auto& [key, e] : model_) {
      if (holds(e)) {
        steps.push_back(acting_step(CallKind::kComplete, *e.holder));
      }
    }
    std::vector<RecordedCall> again;
    again.reserve(steps.size());
    for (const RecordedCall& s : steps) again.push_back(claim_step(s.key));
    execute(std::move(steps), true);
    for (const RecordedCall& s : again) EXPECT_EQ(model_[s.key].record->state, RecordState::kDone);
    if (!HasFailure()) execute(std::move(again), false);
  }

  std::uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::string prefix_;
  std::vector<std::unique_ptr<RedisLock>> backends_;
  std::unique_ptr<RawRedis> raw_;
  std::vector<std::string> keys_;  // the keys in play
  std::map<std::string, Entry> model_;
  std::vector<Claim> claims_;        // every claim ever won, live or not
  std::map<std::string, int> seen_;  // how often each answer came
  int key_count_ = 0;
  int token_count_ = 0;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

TEST_P(RedisServerClockDifferential, RandomSequencesMatchThePureFunction) {
  SCOPED_TRACE("seed " + std::to_string(seed_) + " (IDEMPOTENCY_DIFF_SEED reruns one)");
  for (int step = 0; step < 1000; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    random_step();
    if (HasFailure()) return;
  }
  complete_every_holder();
  // The sequence reached every answer (else it would prove little).
  for (const char* what :
       {"won fresh", "won again", "won re-affirmed", "done with a result", "done without a result",
        "held", "complete refused", "complete repeated", "complete async", "complete blocking",
        "released", "release refused", "extended", "extend refused"}) {
    EXPECT_GT(seen_[what], 0) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Redis, RedisServerClockDifferential,
    ::testing::Values(Config{"Pipelined", {{2, minutes(60)}, {2, minutes(60)}, {1, minutes(90)}}},
                      Config{"PerCall", {{0, minutes(60)}, {0, minutes(90)}}},
                      Config{"Mixed", {{2, minutes(60)}, {0, minutes(60)}, {2, minutes(90)}}}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace idempotency::testing
