// Claim tokens: 32 hex digits, never repeated within a process, across threads, or between a
// forked child and its parent (whose per-thread random pools the child inherits).
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

TEST(ClaimToken, ThirtyTwoHexDigitsAndNeverRepeatedAcrossThreads) {
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
      ASSERT_EQ(token.size(), 32U);
      ASSERT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
      EXPECT_TRUE(seen.insert(token).second) << "repeated: " << token;
    }
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
  std::string from_child(32, '\0');
  ASSERT_EQ(::read(pipe_fds[0], from_child.data(), from_child.size()), 32);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_NE(new_claim_token(), from_child);
}

}  // namespace
}  // namespace idempotency::detail
