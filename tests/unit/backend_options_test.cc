// Lease and ttl validation, and the sizing warning of the seed's invariant 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "idempotency/memory_lock.h"
#include "support/log_capture.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using ::testing::HasSubstr;

TEST(BackendOptions, DefaultsClearCloudRunsHolderLifetime) {
  EXPECT_EQ(kDefaultLease, minutes(15));
  EXPECT_EQ(kDefaultTtl, minutes(60));
  EXPECT_GT(kDefaultLease + kDefaultTtl, kMaxHolderLifetime);
}

TEST(BackendOptions, BadLeasesAndTtlsAreInvalidArguments) {
  EXPECT_THROW(validate_lease(milliseconds(0)), std::invalid_argument);
  EXPECT_THROW(validate_lease(kMaxLease + milliseconds(1)), std::invalid_argument);
  EXPECT_NO_THROW(validate_lease(kMaxLease));
  EXPECT_THROW(validate_ttl(milliseconds(-1)), std::invalid_argument);
  EXPECT_THROW(InMemoryLock(BackendOptions{.ttl = milliseconds(0)}), std::invalid_argument);
}

TEST(BackendOptions, UndersizedLeasePlusTtlWarnsOnceWithTheNumbers) {
  LogCapture logs;
  InMemoryLock backend(BackendOptions{.ttl = minutes(30)});
  (void)backend.claim("a", minutes(10));
  (void)backend.claim("b", minutes(10));
  ASSERT_EQ(logs.count("sizing_invariant"), 1);
  const std::string line = logs.all_text();
  EXPECT_THAT(line, HasSubstr("\"lease_s\":\"600"));
  EXPECT_THAT(line, HasSubstr("\"ttl_s\":\"1800"));
  EXPECT_THAT(line, HasSubstr("\"max_holder_lifetime_s\":\"3600"));
  EXPECT_THAT(line, HasSubstr("WARNING"));
}

TEST(BackendOptions, TheDefaultsDoNotWarn) {
  LogCapture logs;
  InMemoryLock backend;
  (void)backend.claim("a", kDefaultLease);
  EXPECT_EQ(logs.count("sizing_invariant"), 0);
}

}  // namespace
}  // namespace idempotency::testing
