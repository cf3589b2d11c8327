// The differential test: random sequences of claim / complete / release / extend /
// advance-time / purge applied to the pure transition function and to a backend give identical
// answers. Backends that re-express the state machine (Redis Lua, PostgreSQL SQL) are held to the
// one definition this way.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "contract/suites.h"
#include "idempotency/record.h"
#include "support/claim_matchers.h"

namespace idempotency::testing {
namespace {

// The reference: records kept in a map and moved only by transition().
class Model {
 public:
  Model(Millis ttl, bool reaps) : ttl_(ttl), reaps_(reaps) {}

  Transition apply(const std::string& key, const Operation& op, Millis now) {
    std::optional<Record>& slot = records_[key];
    if (reaps_ && slot && now >= slot->expires_at) slot.reset();  // the store reaped it
    Transition t = transition(slot, op, now);
    slot = t.record;
    return t;
  }

  void purge(Millis now) {
    for (auto& [key, slot] : records_) {
      if (slot && now >= slot->expires_at) slot.reset();
    }
  }

  Millis ttl() const { return ttl_; }

 private:
  Millis ttl_;
  bool reaps_;
  std::map<std::string, std::optional<Record>> records_;
};

TEST_P(Differential, RandomSequencesMatchThePureFunction) {
  constexpr Millis kTtl = 300;
  auto backend = make(std::chrono::milliseconds(kTtl));
  const std::vector<Millis> leases = {50, 100, 250};
  const std::vector<Millis> steps = {0, 1, 49, 50, 99, 150, 301};
  const std::vector<std::string> keys = {"k0", "k1", "k2"};

  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&rng](const auto& v) { return v[rng() % v.size()]; };
    Model model(kTtl, reaps_at_expiry());
    std::vector<Claim> claims;  // every Won ever returned, live or stale
    int token_counter = 0;
    // Each seed uses its own keys so earlier seeds leave nothing behind.
    const std::string prefix = "s" + std::to_string(seed) + ":";

    for (int step = 0; step < 60; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const Millis now = to_millis(clock_->now());
      switch (rng() % 7) {
        case 0:
        case 1: {  // claim, sometimes retrying an earlier call's token
          const std::string key = prefix + pick(keys);
          std::string token = "t" + std::to_string(++token_counter);
          if (!claims.empty() && rng() % 4 == 0) token = pick(claims).claim_token;
          const Millis lease = pick(leases);
          const std::optional<std::string> fp =
              rng() % 2 ? std::optional<std::string>("fp" + std::to_string(step)) : std::nullopt;
          Transition expected = model.apply(key, ClaimOp{token, lease, kTtl, fp}, now);
          ClaimResult actual =
              backend->claim(key, std::chrono::milliseconds(lease), ClaimRequest{token, fp});
          ASSERT_EQ(outcome_name(actual),
                    outcome_name(claim_result(key, *expected.record, *expected.answer.claim)));
          const Record& r = *expected.record;
          if (auto* w = std::get_if<Won>(&actual)) {
            EXPECT_EQ(w->claim.fence, r.fence);
            EXPECT_EQ(to_millis(w->claim.lease_expiry), r.lease_expiry);
            EXPECT_EQ(w->claim.claim_token, r.claim_token);
            claims.push_back(w->claim);
          } else if (auto* d = std::get_if<AlreadyDone>(&actual)) {
            EXPECT_EQ(d->result, r.result);
            EXPECT_EQ(d->fingerprint, r.fingerprint);
          } else {
            const auto& h = std::get<HeldByOther>(actual);
            EXPECT_EQ(to_millis(h.lease_expiry), r.lease_expiry);
            EXPECT_EQ(h.fingerprint, r.fingerprint);
          }
          break;
        }
        case 2: {  // complete any claim ever won, live or stale
          if (claims.empty()) break;
          const Claim c = pick(claims);
          std::optional<std::string> result;
          if (rng() % 2) result = "r" + std::to_string(step);
          const bool expected =
              model.apply(c.key, CompleteOp{c.fence, result, kTtl}, now).answer.ok;
          EXPECT_EQ(backend->complete(c, result), expected);
          break;
        }
        case 3: {  // release any claim ever won
          if (claims.empty()) break;
          const Claim c = pick(claims);
          (void)model.apply(c.key, ReleaseOp{c.fence, kTtl}, now);
          backend->release(c);
          break;
        }
        case 4:
          clock_->advance(std::chrono::milliseconds(pick(steps)));
          break;
        case 5:
          if (rng() % 3 == 0) {
            model.purge(now);
            (void)backend->purge_expired();
          }
          break;
        case 6: {  // extend (a heartbeat) any claim ever won, live or stale
          if (claims.empty()) break;
          const Claim c = pick(claims);
          const Millis lease = pick(leases);
          const Transition expected =
              model.apply(c.key, ExtendOp{c.fence, c.claim_token, lease, kTtl}, now);
          const auto actual = backend->extend(c, std::chrono::milliseconds(lease));
          ASSERT_EQ(actual.has_value(), expected.answer.ok);
          if (actual) {
            EXPECT_EQ(to_millis(*actual), expected.record->lease_expiry);
          }
          break;
        }
      }
      if (HasFatalFailure()) return;
    }
  }
}

// Issue 11, defect 1, scripted: a token re-affirms only its own live claim. Every answer must
// match the pure function AND the rule, so the two cannot agree on the old behaviour.
TEST_P(Differential, ATokenReaffirmsOnlyItsOwnLiveClaim) {
  constexpr Millis kTtl = 300;
  constexpr Millis kLease = 100;
  using std::chrono::milliseconds;
  auto backend = make(milliseconds(kTtl));
  Model model(kTtl, reaps_at_expiry());
  auto now = [&] { return to_millis(clock_->now()); };
  auto claim = [&](const std::string& key, const std::string& token) -> Claim {
    Transition expected = model.apply(key, ClaimOp{token, kLease, kTtl, std::nullopt}, now());
    ClaimResult actual = backend->claim(key, milliseconds(kLease), ClaimRequest{token, {}});
    EXPECT_EQ(outcome_name(actual),
              outcome_name(claim_result(key, *expected.record, *expected.answer.claim)));
    if (const auto* w = std::get_if<Won>(&actual)) {
      EXPECT_EQ(w->claim.fence, expected.record->fence);
      EXPECT_EQ(to_millis(w->claim.lease_expiry), expected.record->lease_expiry);
      return w->claim;
    }
    return Claim{.key = key};  // fence 0: never completes
  };
  auto complete = [&](const Claim& c) {
    const bool expected =
        model.apply(c.key, CompleteOp{c.fence, std::nullopt, kTtl}, now()).answer.ok;
    const bool actual = backend->complete(c);
    EXPECT_EQ(actual, expected);
    return actual;
  };
  auto release = [&](const Claim& c) {
    (void)model.apply(c.key, ReleaseOp{c.fence, kTtl}, now());
    backend->release(c);
  };

  {  // a live claim re-affirms: same fence, same lease
    SCOPED_TRACE("live");
    const Claim first = claim("live", "t-v");
    clock_->advance(milliseconds(kLease - 1));
    const Claim again = claim("live", "t-v");
    EXPECT_EQ(again.fence, first.fence);
    EXPECT_EQ(again.lease_expiry, first.lease_expiry);
  }
  {  // after release: the normal reclaim, never the released record
    SCOPED_TRACE("released");
    const Claim first = claim("released", "t-r");
    release(first);
    const Claim again = claim("released", "t-r");
    EXPECT_EQ(again.fence, first.fence + 2);
    EXPECT_GT(again.lease_expiry, clock_->now());
    Claim dead = first;
    dead.fence = first.fence + 1;
    EXPECT_FALSE(complete(dead));
    EXPECT_TRUE(complete(again));
  }
  {  // after release, by a clock that stepped back: still nothing to re-affirm
    SCOPED_TRACE("released, clock stepped back");
    const Claim first = claim("stepped", "t-s");
    release(first);
    clock_->set(clock_->now() - milliseconds(1));
    EXPECT_EQ(claim("stepped", "t-s").fence, 0) << "held, not re-affirmed";
    clock_->advance(milliseconds(1));
    EXPECT_EQ(claim("stepped", "t-s").fence, first.fence + 2);
  }
  {  // after the lease lapsed: a reclaim with fence + 1 that fences the lapsed claim out
    SCOPED_TRACE("lapsed");
    const Claim first = claim("lapsed", "t-l");
    clock_->advance(milliseconds(kLease));
    const Claim again = claim("lapsed", "t-l");
    EXPECT_EQ(again.fence, first.fence + 1);
    EXPECT_GT(again.lease_expiry, clock_->now());
    EXPECT_FALSE(complete(first));
    EXPECT_TRUE(complete(again));
  }
  {  // after expires_at: a fresh claim (fence + 1, or 1 where the store reaped the record)
    SCOPED_TRACE("expired");
    const Claim first = claim("expired", "t-e");
    clock_->advance(milliseconds(kLease + kTtl));
    const Claim again = claim("expired", "t-e");
    EXPECT_EQ(again.fence, reaps_at_expiry() ? 1 : first.fence + 1);
    EXPECT_GT(again.lease_expiry, clock_->now());
    EXPECT_TRUE(complete(again));
  }
}

}  // namespace
}  // namespace idempotency::testing
