// Real clock skew: a second process whose system clock faketime shifts by hours claims the
// same keys as this one, through a RedisLock with default options (no injected clock). Leases
// are judged, and lease expiries computed, by the Redis server's TIME alone.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "idempotency/clock.h"
#include "idempotency/redis_lock.h"
#include "private_redis.h"
#include "redis_test_util.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;

constexpr long long kHourMs = 3'600'000;

// One claim as the skewed process reported it.
struct SkewedClaim {
  std::string outcome;
  long long lease_expiry_ms = 0;
  long long fence = 0;
  long long own_clock_ms = 0;
};

// Runs skewed_claim under `faketime -f OFFSET` and parses its line; fails the test on error.
SkewedClaim claim_with_clock_offset(const std::string& offset, const std::string& prefix,
                                    const std::string& key, milliseconds lease) {
  // libfaketime is preloaded ahead of the sanitizer runtimes in the ASan build; let it be.
  const char* asan = std::getenv("ASAN_OPTIONS");  // NOLINT(concurrency-mt-unsafe)
  const std::string command = "ASAN_OPTIONS='" + std::string(asan != nullptr ? asan : "") +
                              ":verify_asan_link_order=0' " + FAKETIME + " -f '" + offset + "' " +
                              SKEWED_CLAIM + " '" + fixture_redis_url() + "' '" + prefix + "' '" +
                              key + "' " + std::to_string(lease.count());
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed";
    return {};
  }
  std::string output;
  std::array<char, 256> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) output += buf.data();
  const int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << output;
  SkewedClaim c;
  std::istringstream in(output);
  in >> c.outcome >> c.lease_expiry_ms >> c.fence >> c.own_clock_ms;
  EXPECT_FALSE(in.fail()) << "unexpected output: " << output;
  return c;
}

long long own_clock_ms() { return to_millis(system_clock()->now()); }

class RedisClockSkew : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(FAKETIME).empty()) {
      if (std::getenv("CI") != nullptr) {  // NOLINT(concurrency-mt-unsafe)
        FAIL() << "CI is set but faketime is not installed (./dev deps installs it)";
      }
      GTEST_SKIP() << "faketime is not installed (Debian package faketime)";
    }
  }

  std::unique_ptr<RedisLock> lock_ = fixture_lock();
  RawRedis raw_{fixture_redis_url()};
};

TEST_F(RedisClockSkew, AProcessWhoseClockRunsHoursAheadStillSeesTheLease) {
  const Claim held = won(lock_->claim("k", milliseconds(60'000)));
  const SkewedClaim ahead =
      claim_with_clock_offset("+2h", lock_->key_prefix(), "k", milliseconds(60'000));
  EXPECT_GE(ahead.own_clock_ms - own_clock_ms(), 2 * kHourMs - 60'000) << "the skew took effect";
  // By its own clock the lease lapsed two hours ago; by the server's it is live.
  EXPECT_EQ(ahead.outcome, "HeldByOther");
  EXPECT_EQ(ahead.lease_expiry_ms, to_millis(held.lease_expiry));
  EXPECT_TRUE(lock_->complete(held));
}

TEST_F(RedisClockSkew, AProcessWhoseClockRunsAheadWritesLeasesOnTheServersClock) {
  const long long before = raw_.time_ms();
  const SkewedClaim ahead =
      claim_with_clock_offset("+2h", lock_->key_prefix(), "k", milliseconds(60'000));
  const long long after = raw_.time_ms();
  ASSERT_EQ(ahead.outcome, "Won");
  EXPECT_GE(ahead.lease_expiry_ms, before + 60'000);
  EXPECT_LE(ahead.lease_expiry_ms, after + 60'000) << "not its own clock + lease (2 h later)";
  const ClaimResult here = lock_->claim("k", milliseconds(60'000));
  ASSERT_TRUE(std::holds_alternative<HeldByOther>(here));
  EXPECT_EQ(to_millis(std::get<HeldByOther>(here).lease_expiry), ahead.lease_expiry_ms);
}

TEST_F(RedisClockSkew, AProcessWhoseClockRunsHoursBehindReclaimsOnceTheServerSaysTheLeaseLapsed) {
  const Claim first = won(lock_->claim("k", milliseconds(300)));
  // Wait until the lease has lapsed by the server's clock (by the skewed process's clock it
  // has two hours to go).
  ASSERT_TRUE(eventually([&] { return raw_.time_ms() >= to_millis(first.lease_expiry); }));
  const long long before = raw_.time_ms();
  const SkewedClaim behind =
      claim_with_clock_offset("-2h", lock_->key_prefix(), "k", milliseconds(60'000));
  const long long after = raw_.time_ms();
  EXPECT_LE(behind.own_clock_ms - own_clock_ms(), -2 * kHourMs + 60'000) << "the skew took effect";
  ASSERT_EQ(behind.outcome, "Won");
  EXPECT_EQ(behind.fence, first.fence + 1) << "a reclaim of the lapsed lease";
  EXPECT_GE(behind.lease_expiry_ms, before + 60'000);
  EXPECT_LE(behind.lease_expiry_ms, after + 60'000);
  EXPECT_FALSE(lock_->complete(first)) << "the lapsed holder is fenced out";
}

}  // namespace
}  // namespace idempotency::testing
