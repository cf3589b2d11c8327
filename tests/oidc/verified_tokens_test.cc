// VerifiedTokens: bounded, oldest forgotten first, and a forgotten token is gone.
#include "verified_tokens.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace idempotency::oidc::internal {
namespace {

VerifiedTokens::Entry entry(const std::string& kid) {
  return {.kid = kid, .key = nullptr, .claims = std::make_shared<const nlohmann::json>()};
}

TEST(VerifiedTokens, HoldsAtMostItsCapacityForgettingTheOldestFirst) {
  VerifiedTokens tokens(3);
  for (const char* token : {"t1", "t2", "t3"}) tokens.add(token, entry(token));
  tokens.add("t2", entry("t2-again"));  // replaced in place: still second oldest
  tokens.add("t4", entry("t4"));
  EXPECT_FALSE(tokens.find("t1"));
  ASSERT_TRUE(tokens.find("t2"));
  EXPECT_EQ(tokens.find("t2")->kid, "t2-again");
  tokens.add("t5", entry("t5"));
  EXPECT_FALSE(tokens.find("t2"));
  for (const char* token : {"t3", "t4", "t5"}) EXPECT_TRUE(tokens.find(token)) << token;
}

TEST(VerifiedTokens, AForgottenTokenIsGoneAndItsPlaceFree) {
  VerifiedTokens tokens(2);
  tokens.add("t1", entry("t1"));
  tokens.add("t2", entry("t2"));
  tokens.forget("t1");
  tokens.forget("never-added");
  EXPECT_FALSE(tokens.find("t1"));
  tokens.add("t3", entry("t3"));  // fills the freed place: t2 stays
  EXPECT_TRUE(tokens.find("t2"));
  EXPECT_TRUE(tokens.find("t3"));
}

TEST(VerifiedTokens, ACapacityOfNoneIsRefused) {
  EXPECT_THROW(VerifiedTokens(0), std::invalid_argument);
}

}  // namespace
}  // namespace idempotency::oidc::internal
