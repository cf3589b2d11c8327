// open_backend(): each built-in scheme by URL, a backend a program registers itself, and clear
// errors that never echo the URL.
#include "idempotency/open_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/fake_backend.h"
#include "idempotency/backend_registry.h"
#include "support/claim_matchers.h"
#include "support/temp_dir.h"

namespace idempotency::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string what_of(std::string_view url) {
  try {
    (void)open_backend(url);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected invalid_argument";
  return {};
}

TEST(OpenBackend, MemoryAndSqliteOpenByUrl) {
  auto memory = open_backend("memory://");
  (void)won(memory->claim("k", kDefaultLease));
  TempDir dir;
  auto a = open_backend("sqlite://" + dir.file("idem.db") + "?table=orders");
  Claim c = won(a->claim("k", kDefaultLease));
  auto b = open_backend("sqlite://" + dir.file("idem.db") + "?table=orders");
  (void)held(b->claim("k", kDefaultLease));  // same file, same table
  auto other_table = open_backend("sqlite://" + dir.file("idem.db"));
  (void)won(other_table->claim("k", kDefaultLease));
  EXPECT_TRUE(a->complete(c));
}

TEST(OpenBackend, OptionsReachTheBackend) {
  auto backend = open_backend("memory://", BackendOptions{.ttl = std::chrono::minutes(90)});
  EXPECT_EQ(backend->ttl(), std::chrono::minutes(90));
}

TEST(OpenBackend, TheBuiltInSchemesAreListed) {
  const auto schemes = backend_schemes();
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "memory"), schemes.end());
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "sqlite"), schemes.end());
}

TEST(OpenBackend, BadUrlsAreClearOneLineErrorsWithoutTheUrl) {
  EXPECT_THAT(what_of("nonsense"), HasSubstr("SCHEME://"));
  EXPECT_THAT(
      what_of("ftp://user:hunter2@host/x"),
      ::testing::AllOf(HasSubstr("not built in"), HasSubstr("memory"), Not(HasSubstr("hunter2"))));
  EXPECT_THAT(what_of("memory://extra"), HasSubstr("memory://"));
  EXPECT_THAT(what_of("sqlite://"), HasSubstr("needs a file"));
  EXPECT_THAT(what_of("sqlite:///tmp/x.db?mode=ro"), HasSubstr("table=NAME"));
  EXPECT_THAT(what_of("sqlite:///tmp/x.db?table="), HasSubstr("table= needs a name"));
}

TEST(OpenBackend, ARegisteredBackendIsReachableByItsUrl) {
  register_fake_backend();
  const auto schemes = backend_schemes();
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "fake"), schemes.end());
  EXPECT_THAT(backend_url_forms(), HasSubstr("fake://INNER-URL"));
  auto backend = open_backend("fake://memory://", BackendOptions{.ttl = std::chrono::minutes(7)});
  ASSERT_NE(dynamic_cast<FakeBackend*>(backend.get()), nullptr);
  EXPECT_EQ(backend->ttl(), std::chrono::minutes(7)) << "the options reach the backend";
  const Claim c = won(backend->claim("k", kDefaultLease));
  EXPECT_EQ(backend->inspect("k")->fence, c.fence) << "inspected through the decorator";
  EXPECT_THAT(what_of("fake://memory://?x=1"), HasSubstr("memory://"))
      << "the inner backend judges its own parameters";
}

TEST(OpenBackend, ASchemeIsRegisteredOnce) {
  register_fake_backend();
  const auto open = [](BackendUrl&, const BackendOptions&) -> std::unique_ptr<LockBackend> {
    return nullptr;
  };
  EXPECT_THROW(register_backend({.schemes = {"fake"}, .open = open}), std::invalid_argument);
  EXPECT_THROW(register_backend({.schemes = {"other", "memory"}, .open = open}),
               std::invalid_argument);
  EXPECT_THROW(register_backend({.schemes = {}, .open = open}), std::invalid_argument);
  EXPECT_THROW(register_backend({.schemes = {"no-open"}}), std::invalid_argument);
  EXPECT_EQ(find_backend("other"), nullptr) << "a refused entry is not half-registered";
}

}  // namespace
}  // namespace idempotency::testing
