// Claim tokens: 15 base64url characters (kept inside std::string), never repeated within a process,
// across threads, or between a forked child and its parent (whose per-thread random pools the child
// inherits).
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/token.h"

namespace idempotency::detail {
namespace {

constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

TEST(ClaimToken, FifteenBase64UrlCharactersAndNeverRepeatedAcrossThreads) {
  std::vector<std::vector<std::string>> drawn(4);
  {
    std::vector<std::jthread> threads;
    for (auto& mine : drawn) {
      threads.emplace_back([&mine] {
        for (int i = 0; i < 2000; ++i) mine.push_back(new_claim_token());
      });
    }
  }
  std::set<std::string> seen;
  for (const auto& mine : drawn) {
    for (const auto& token : mine) {
      ASSERT_EQ(token.size(), 15U);
      ASSERT_LE(token.size(), std::string().capacity()) << "no heap block for a token";
      ASSERT_EQ(token.find_first_not_of(kBase64Url), std::string::npos) << token;
      EXPECT_TRUE(seen.insert(token).second) << "repeated: " << token;
    }
  }
}

// Every place carries its 6 random bits: over 8,000 tokens each place shows all 64 characters
// (one missing by chance: under 2^-170). A place fed fewer than 6 bits shows fewer.
TEST(ClaimToken, EveryPlaceTakesAllSixtyFourCharacters) {
  std::vector<std::set<char>> at(15);
  for (int i = 0; i < 8000; ++i) {
    const std::string token = new_claim_token();
    for (std::size_t place = 0; place < at.size(); ++place) at[place].insert(token[place]);
  }
  for (std::size_t place = 0; place < at.size(); ++place) {
    EXPECT_EQ(at[place].size(), 64U) << "place " << place;
  }
}

TEST(ClaimToken, AForkedChildNeverReusesItsParentsUnusedBytes) {
  (void)new_claim_token();  // this thread's pool now holds unused bytes the child inherits
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string token = new_claim_token();
    (void)!::write(pipe_fds[1], token.data(), token.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string from_child(15, '\0');
  ASSERT_EQ(::read(pipe_fds[0], from_child.data(), from_child.size()), 15);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_NE(new_claim_token(), from_child);
}

}  // namespace
}  // namespace idempotency::detail
