// BackendUrl: the one parser of backend URLs (scheme, location, query parameters).
#include "idempotency/backend_url.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace idempotency::testing {
namespace {

TEST(BackendUrl, SplitsSchemeLocationAndParameters) {
  const BackendUrl url =
      BackendUrl::parse("postgres://app:p%40ss@db:5432/app?sslmode=require&table=orders");
  EXPECT_EQ(url.scheme(), "postgres");
  EXPECT_EQ(url.location(), "app:p%40ss@db:5432/app") << "kept as written";
  EXPECT_EQ(url.parameters(),
            (std::vector<UrlParameter>{{"sslmode", "require"}, {"table", "orders"}}));
}

TEST(BackendUrl, AnEmptyLocationOrQueryIsFine) {
  const BackendUrl memory = BackendUrl::parse("memory://");
  EXPECT_EQ(memory.scheme(), "memory");
  EXPECT_EQ(memory.location(), "");
  EXPECT_TRUE(memory.parameters().empty());
  const BackendUrl no_location = BackendUrl::parse("datastore://?kind=K");
  EXPECT_EQ(no_location.location(), "");
  EXPECT_EQ(no_location.parameters(), (std::vector<UrlParameter>{{"kind", "K"}}));
}

TEST(BackendUrl, EmptyParametersAreSkippedAndAMissingValueIsEmpty) {
  const BackendUrl url = BackendUrl::parse("x://h?a=1&&flag&b=x=y&");
  EXPECT_EQ(url.parameters(), (std::vector<UrlParameter>{{"a", "1"}, {"flag", ""}, {"b", "x=y"}}));
}

TEST(BackendUrl, TakeRemovesEveryOccurrenceAndReturnsTheLast) {
  BackendUrl url = BackendUrl::parse("x://h?table=a&keep=1&table=b");
  EXPECT_EQ(url.take("table"), std::optional<std::string>("b"));
  EXPECT_EQ(url.take("table"), std::nullopt);
  EXPECT_EQ(url.parameters(), (std::vector<UrlParameter>{{"keep", "1"}}));
  EXPECT_EQ(url.str(), "x://h?keep=1");
}

TEST(BackendUrl, RefuseRestThrowsOnlyWhileAParameterIsLeft) {
  BackendUrl url = BackendUrl::parse("x://h?table=a");
  EXPECT_THROW(url.refuse_rest("only table"), std::invalid_argument);
  (void)url.take("table");
  EXPECT_NO_THROW(url.refuse_rest("only table"));
  EXPECT_EQ(url.str(), "x://h");
}

TEST(BackendUrl, WithoutASchemeSeparatorItIsRefusedWithoutEchoingTheUrl) {
  try {
    (void)BackendUrl::parse("app:hunter2@db");
    ADD_FAILURE() << "no invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("SCHEME://"), std::string::npos);
    EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos);
  }
}

// What comes before a later "://" in a mistyped URL is not a scheme, and may hold a password:
// refused as such, never echoed.
TEST(BackendUrl, AnythingButAnRfc3986SchemeIsRefusedWithoutEchoingIt) {
  for (const char* bad : {"pg:hunter2@db/app?ca=file://x", "://h", "1pg://h", "p g://h"}) {
    try {
      (void)BackendUrl::parse(bad);
      ADD_FAILURE() << "no invalid_argument: " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(BackendUrl::parse("svc+tls.v-2://h").scheme(), "svc+tls.v-2");
}

TEST(BackendUrl, IsAssembledFromParts) {
  const BackendUrl url("sqlite", "", {{"table", "t"}});
  EXPECT_EQ(url.str(), "sqlite://?table=t");
}

}  // namespace
}  // namespace idempotency::testing
