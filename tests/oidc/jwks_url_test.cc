// OidcVerifier against a JWKS URL served by a local HTTP server: the libcurl path, the
// refresh rules (once per minute at most, one fetch at a time) and fetch failures.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "idempotency/clock.h"
#include "idempotency/oidc.h"
#include "local_http_server.h"
#include "test_tokens.h"

namespace idempotency {
namespace {

using nlohmann::json;
using testing::bearer_request;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using testing::TestKey;

constexpr char kAudience[] = "https://push.example.com/handler";
constexpr char kEmail[] = "pusher@proj-x.iam.gserviceaccount.com";
constexpr char kKid[] = "kid-current";

const TestKey& signing_key() {
  static const TestKey key;
  return key;
}
const TestKey& next_key() {
  static const TestKey key;
  return key;
}

class OidcJwksUrlTest : public ::testing::Test {
 protected:
  OidcJwksUrlTest() { server_.set_response(200, testing::jwks({{kKid, &signing_key()}})); }

  [[nodiscard]] OidcOptions options(const std::string& url) const {
    return OidcOptions{.audience = kAudience,
                       .allowed_emails = {kEmail},
                       .jwks_url = url,
                       .jwks_timeout = std::chrono::seconds(5),
                       .clock = clock_};
  }

  [[nodiscard]] std::string token(const std::string& kid = kKid,
                                  const TestKey* key = nullptr) const {
    const std::int64_t now = to_millis(clock_->now()) / 1000;
    const json claims = {
        {"aud", kAudience},  {"email", kEmail}, {"email_verified", true},
        {"exp", now + 3600}, {"iat", now},      {"iss", "https://accounts.google.com"}};
    return testing::mint(key != nullptr ? *key : signing_key(),
                         {{"alg", "RS256"}, {"kid", kid}, {"typ", "JWT"}}, claims);
  }

  [[nodiscard]] std::optional<std::string> verify(const std::string& t) const {
    return verifier_.verify(bearer_request(t));
  }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  testing::LocalHttpServer server_;
  OidcVerifier verifier_{options(server_.url())};
};

TEST_F(OidcJwksUrlTest, KeysAreFetchedOnceAndCached) {
  EXPECT_EQ(server_.requests(), 0);  // the constructor fetches nothing
  for (int i = 0; i < 5; ++i) EXPECT_EQ(verify(token()), std::nullopt);
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(OidcJwksUrlTest, MalformedTokensFetchNothing) {
  EXPECT_EQ(verify("a.b"), "malformed token");
  EXPECT_EQ(verify(testing::mint_unsigned({{"alg", "none"}, {"kid", "x"}}, json::object())),
            "unsupported algorithm");
  EXPECT_EQ(verify(testing::mint(signing_key(), {{"alg", "RS256"}}, json::object())),
            "unknown signing key");
  EXPECT_EQ(server_.requests(), 0);
}

TEST_F(OidcJwksUrlTest, UnknownKidRefreshesAtMostOncePerMinute) {
  EXPECT_EQ(verify(token()), std::nullopt);
  EXPECT_EQ(server_.requests(), 1);

  // Within the minute of the first fetch an unknown kid fetches nothing.
  clock_->advance(std::chrono::seconds(30));
  EXPECT_EQ(verify(token("kid-unknown-1")), "unknown signing key");
  EXPECT_EQ(server_.requests(), 1);

  // After it, one unknown kid triggers one refresh ...
  clock_->advance(std::chrono::seconds(31));
  EXPECT_EQ(verify(token("kid-unknown-2")), "unknown signing key");
  EXPECT_EQ(server_.requests(), 2);
  // ... and a second unknown kid within the minute does not fetch again.
  clock_->advance(std::chrono::seconds(59));
  EXPECT_EQ(verify(token("kid-unknown-3")), "unknown signing key");
  EXPECT_EQ(verify(token("kid-unknown-2")), "unknown signing key");
  EXPECT_EQ(server_.requests(), 2);
  // The known key keeps working throughout.
  EXPECT_EQ(verify(token()), std::nullopt);
  EXPECT_EQ(server_.requests(), 2);

  clock_->advance(std::chrono::seconds(1));
  EXPECT_EQ(verify(token("kid-unknown-4")), "unknown signing key");
  EXPECT_EQ(server_.requests(), 3);
}

TEST_F(OidcJwksUrlTest, RotatedKeyIsFetchedOnItsFirstToken) {
  EXPECT_EQ(verify(token()), std::nullopt);
  server_.set_response(200, testing::jwks({{kKid, &signing_key()}, {"kid-next", &next_key()}}));
  clock_->advance(std::chrono::minutes(2));
  EXPECT_EQ(verify(token("kid-next", &next_key())), std::nullopt);
  EXPECT_EQ(server_.requests(), 2);
  EXPECT_EQ(verify(token("kid-next", &next_key())), std::nullopt);
  EXPECT_EQ(verify(token()), std::nullopt);
  EXPECT_EQ(server_.requests(), 2);
}

TEST_F(OidcJwksUrlTest, OldKeySetIsRefreshedAndKeptWhenTheRefreshFails) {
  EXPECT_EQ(verify(token()), std::nullopt);
  clock_->advance(std::chrono::minutes(61));  // past jwks_max_age
  server_.set_response(503, "unavailable");
  EXPECT_EQ(verify(token()), std::nullopt);  // refresh failed; the old keys still serve
  EXPECT_EQ(server_.requests(), 2);
  EXPECT_EQ(verify(token()), std::nullopt);  // within the minute: no new attempt
  EXPECT_EQ(server_.requests(), 2);

  // A removed key stops working once a refresh succeeds.
  server_.set_response(200, testing::jwks({{"kid-next", &next_key()}}));
  clock_->advance(std::chrono::minutes(1));
  EXPECT_EQ(verify(token()), "unknown signing key");
  EXPECT_EQ(server_.requests(), 3);
  EXPECT_EQ(verify(token("kid-next", &next_key())), std::nullopt);
}

TEST_F(OidcJwksUrlTest, HttpErrorIsKeySetUnavailableAndRetriedAfterTheInterval) {
  server_.set_response(500, "{}");
  EXPECT_EQ(verify(token()), "key set unavailable: HTTP status 500");
  EXPECT_EQ(verify(token()), "key set unavailable: HTTP status 500");
  EXPECT_EQ(server_.requests(), 1);

  server_.set_response(200, testing::jwks({{kKid, &signing_key()}}));
  clock_->advance(std::chrono::seconds(60));
  EXPECT_EQ(verify(token()), std::nullopt);
  EXPECT_EQ(server_.requests(), 2);
}

TEST_F(OidcJwksUrlTest, NonJsonBodyIsKeySetUnavailable) {
  server_.set_response(200, "<html>captive portal</html>");
  EXPECT_EQ(verify(token()), "key set unavailable: key set is not JSON");
}

TEST_F(OidcJwksUrlTest, ConnectionRefusedIsKeySetUnavailableNamingNoUrl) {
  std::string url;
  {
    testing::LocalHttpServer closed;
    url = closed.url();
  }  // the port is closed now
  const OidcVerifier verifier(options(url));
  const std::optional<std::string> reason = verifier.verify(bearer_request(token()));
  ASSERT_TRUE(reason.has_value());
  EXPECT_THAT(*reason, StartsWith("key set unavailable: "));
  EXPECT_THAT(*reason, HasSubstr("connect"));
  EXPECT_THAT(*reason, Not(HasSubstr("127.0.0.1")));
  EXPECT_THAT(*reason, Not(HasSubstr(url.substr(url.rfind(':')))));
  EXPECT_THAT(*reason, Not(HasSubstr("\n")));
}

TEST_F(OidcJwksUrlTest, ConcurrentFirstVerificationsFetchOnce) {
  constexpr int kThreads = 8;
  constexpr int kEach = 20;
  const std::string t = token();
  std::vector<std::thread> threads;
  std::vector<int> passed(kThreads, 0);
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < kEach; ++j) passed[i] += verify(t) ? 0 : 1;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(passed[i], kEach) << i;
  EXPECT_EQ(server_.requests(), 1);
}

TEST_F(OidcJwksUrlTest, ConcurrentUnknownKidsFetchOnce) {
  EXPECT_EQ(verify(token()), std::nullopt);
  clock_->advance(std::chrono::minutes(2));
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 10; ++j) {
        EXPECT_EQ(verify(token("kid-made-up-" + std::to_string(i * 100 + j))),
                  "unknown signing key");
        EXPECT_EQ(verify(token()), std::nullopt);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(server_.requests(), 2);
}

}  // namespace
}  // namespace idempotency
