// ChildProcess, the harness the functional tests start the gateway, the worker and their
// upstreams with: what a child inherits from the test. A child holding ctest's pipe outlives
// a test killed before its destructors ran (a sanitizer's halt) and keeps ctest waiting on the
// pipe until the test's timeout.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "support/child_process.h"
#include "support/eventually.h"

namespace idempotency::testing {
namespace {

// Which file a path names, by device and inode: /proc/PID/fd/N names what descriptor N holds.
struct FileId {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const FileId&) const = default;
  friend void PrintTo(const FileId& id, std::ostream* os) {
    *os << "device " << id.device << " inode " << id.inode;
  }
};

FileId file_of(const std::string& fd_path) {
  struct stat st {};
  EXPECT_EQ(::stat(fd_path.c_str(), &st), 0) << fd_path;
  return {st.st_dev, st.st_ino};
}

// A child that writes `stderr_text` to its stderr, reports a port and then waits to be killed.
ChildProcess start_shell(const std::string& stderr_text = "") {
  return ChildProcess(
      "/bin/sh", {"-c", "printf '" + stderr_text + "' >&2; echo 'listening on 1'; exec sleep 60"},
      {});
}

TEST(ChildProcess, HoldsNoDescriptorOfTheTestsButItsOwnThree) {
  // A descriptor left open across exec, as ctest's pipe reaches a test.
  int leaked[2];
  ASSERT_EQ(::pipe(leaked), 0);
  const FileId leaked_id = file_of("/proc/self/fd/" + std::to_string(leaked[1]));
  const FileId test_stderr = file_of("/proc/self/fd/2");
  {
    ChildProcess child = start_shell();
    const std::string fds = "/proc/" + std::to_string(child.pid()) + "/fd";
    // What the program run holds once it has settled: the shell on its way to exec it, and the
    // dynamic loader starting it, hold a descriptor of their own for a moment. One inherited
    // from the test never goes away.
    std::vector<std::string> names;
    const bool settled = eventually([&] {
      names.clear();
      std::error_code error;
      for (const auto& entry : std::filesystem::directory_iterator(fds, error)) {
        names.push_back(entry.path().filename().string());
      }
      std::sort(names.begin(), names.end());
      return names == std::vector<std::string>{"0", "1", "2"};
    });
    EXPECT_TRUE(settled) << "the child holds " << ::testing::PrintToString(names);
    for (const auto& name : names) {
      EXPECT_NE(file_of(fds + "/" + name), leaked_id) << "fd " << name;
    }
    EXPECT_EQ(file_of(fds + "/0"), file_of("/dev/null"));
    EXPECT_NE(file_of(fds + "/2"), test_stderr) << "the child holds the test's stderr";
  }
  ::close(leaked[0]);
  ::close(leaked[1]);
}

TEST(ChildProcess, WhatTheChildWroteToStderrReachesTheTestsStderrAtTheEnd) {
  ::testing::internal::CaptureStderr();
  { ChildProcess child = start_shell("a line of the child\\n"); }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "a line of the child\n");
}

}  // namespace
}  // namespace idempotency::testing
