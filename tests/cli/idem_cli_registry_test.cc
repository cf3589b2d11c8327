// idem and the backend registry: an idem linked with one more registration (the fake backend
// of tests/backends/fake_backend.cc, a decorator over any backend URL) reaches that backend
// through the same commands, inspect reading through the decorator by the port alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <variant>

#include "idempotency/key.h"
#include "idempotency/sqlite_lock.h"
#include "run_idem.h"
#include "support/temp_dir.h"

namespace idempotency::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKey[] = "order-4711-customer-secret";

class IdemCliRegistryTest : public ::testing::Test {
 protected:
  // The fake backend wrapping SQLite on this test's file.
  std::string url() const { return "fake://sqlite://" + path_; }

  TempDir dir_;
  std::string path_ = dir_.file("idem.db");
  SqliteLock lock_{path_};
};

TEST_F(IdemCliRegistryTest, HelpListsTheRegisteredBackend) {
  const IdemRun run = run_idem({"--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("fake://INNER-URL"));
  EXPECT_THAT(run.out, HasSubstr("sqlite:///PATH"));
}

TEST_F(IdemCliRegistryTest, InspectReadsThroughTheDecoratedBackend) {
  const auto claimed = lock_.claim(kKey, std::chrono::minutes(5), {.fingerprint = "fp"});
  ASSERT_TRUE(std::holds_alternative<Won>(claimed));
  const IdemRun run = run_idem({"--backend", url(), "inspect", "-"}, kKey);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("key_fingerprint: " + key_fingerprint(kKey)));
  EXPECT_THAT(run.out, HasSubstr("state:           CLAIMED (held: lease live)"));
  EXPECT_THAT(run.out, HasSubstr("fingerprint:     present"));
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
  EXPECT_EQ(run_idem({"--backend", url(), "inspect", "other-key"}).exit_code, 3);
}

TEST_F(IdemCliRegistryTest, ReleaseWorksThroughTheDecoratedBackend) {
  const auto claimed = lock_.claim(kKey, std::chrono::minutes(5));
  ASSERT_TRUE(std::holds_alternative<Won>(claimed));
  const IdemRun run = run_idem({"--backend", url(), "release", "-", "--yes"}, kKey);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("released"));
  EXPECT_EQ(lock_.inspect(kKey)->fence, std::get<Won>(claimed).claim.fence + 1);
}

TEST_F(IdemCliRegistryTest, TheRegisteredBackendHasNoSqlSchema) {
  const IdemRun run = run_idem({"schema", "--backend", url()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("sqlite"));
}

}  // namespace
}  // namespace idempotency::testing
