// The idem CLI against Datastore: the process finds the in-process REST double through
// DATASTORE_EMULATOR_HOST, as it would find Google's emulator, and inspects and releases
// records a DatastoreLock wrote there.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <variant>

#include "backends/datastore/datastore_double.h"
#include "idempotency/datastore_lock.h"
#include "idempotency/key.h"
#include "run_idem.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kProject[] = "idem-cli-test";
constexpr char kKey[] = "order-4711-customer-secret";

class IdemCliDatastoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // idem gets only a URL; like any client it reaches an emulator through this variable.
    const std::string endpoint = server_.endpoint();
    ::setenv("DATASTORE_EMULATOR_HOST", endpoint.substr(endpoint.find("//") + 2).c_str(), 1);
  }
  void TearDown() override { ::unsetenv("DATASTORE_EMULATOR_HOST"); }

  std::string url() const {
    std::string url = "datastore://";
    url += kProject;  // appended, not std::string(…) + …: GCC 12's -Warray-bounds misreads that
    return url + "?kind=" + kind_;
  }

  IdemRun idem(const std::vector<std::string>& args, const std::string& stdin_text = "") {
    std::vector<std::string> all{"--backend", url()};
    all.insert(all.end(), args.begin(), args.end());
    return run_idem(all, stdin_text);
  }

  Claim claim_key(const std::string& key) {
    auto result = lock_.claim(key, std::chrono::minutes(5), {.fingerprint = "payload-hash"});
    EXPECT_TRUE(std::holds_alternative<Won>(result));
    return std::get<Won>(result).claim;
  }

  DatastoreDouble server_;
  std::string kind_ = unique_name("CliRecords");
  DatastoreLock lock_{
      DatastoreOptions{.project = kProject, .kind = kind_, .endpoint = server_.endpoint()}};
};

TEST_F(IdemCliDatastoreTest, InspectShowsTheRecordButNeverTheKey) {
  ASSERT_TRUE(lock_.complete(claim_key(kKey), std::string("result")));

  const IdemRun run = idem({"inspect", "-"}, kKey);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("key_fingerprint: " + key_fingerprint(kKey)));
  EXPECT_THAT(run.out, HasSubstr("state:           DONE (duplicates are suppressed)"));
  EXPECT_THAT(run.out, HasSubstr("fence:           1"));
  EXPECT_THAT(run.out, HasSubstr("result:          6 bytes"));
  EXPECT_THAT(run.out, HasSubstr("fingerprint:     present"));
  EXPECT_THAT(run.all(), Not(HasSubstr(kKey)));
  EXPECT_GT(server_.calls("lookup"), 0) << "read through the REST API";

  const IdemRun absent = idem({"inspect", "other-key"});
  EXPECT_EQ(absent.exit_code, 3) << absent.err;
}

TEST_F(IdemCliDatastoreTest, AKeyStoredUnderItsHashedNameIsFoundByTheKey) {
  // Datastore refuses key names like __x__, so the record lives under "sha256:…".
  const std::string reserved = "__po-7__";
  ASSERT_NE(datastore_key_name(reserved), reserved);
  (void)claim_key(reserved);
  const IdemRun run = idem({"inspect", "-"}, reserved);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("state:           CLAIMED (held: lease live)"));
}

TEST_F(IdemCliDatastoreTest, ReleaseEndsAStuckClaimAndAdvancesTheFence) {
  const Claim stuck = claim_key(kKey);
  const IdemRun run = idem({"release", "-", "--yes"}, kKey);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("released"));
  const auto after = lock_.inspect(kKey);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->fence, stuck.fence + 1);
  EXPECT_FALSE(lock_.complete(stuck)) << "the stuck holder can no longer complete";
  EXPECT_TRUE(std::holds_alternative<Won>(lock_.claim(kKey, std::chrono::minutes(5))));
}

}  // namespace
}  // namespace idempotency::testing
