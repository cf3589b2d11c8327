// ChildProcess: runs a program with extra environment variables, reads the port it prints
// ("listening on N"), and stops it with SIGTERM, for the functional tests.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "support/temp_dir.h"

namespace idempotency::testing {

class ChildProcess {
 public:
  /// ChildProcess() starts `program` with `args` and `env` added to this environment, then
  /// waits (bounded) for it to print "listening on PORT". Its stderr goes to `stderr_file`
  /// (appended) when one is named, else to a file of its own that the destructor copies to
  /// this process's stderr. Its stdin is /dev/null, its stdout a pipe to this process, and it
  /// inherits no other descriptor. Throws std::runtime_error on failure.
  ChildProcess(const std::string& program, std::vector<std::string> args,
               std::vector<std::pair<std::string, std::string>> env,
               const std::string& stderr_file = {});
  /// ~ChildProcess() kills the child if it is still running.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// port() returns the port the child said it listens on.
  [[nodiscard]] int port() const { return port_; }
  /// pid() returns the child's process id (-1 once it was stopped and reaped), e.g. to
  /// SIGSTOP and SIGCONT it.
  [[nodiscard]] pid_t pid() const { return pid_; }
  /// running() is whether the child has not exited yet; it reaps nothing, so terminate()
  /// still returns its exit status after it.
  [[nodiscard]] bool running() const;
  /// terminate() sends SIGTERM and returns the exit status (-1 when killed by a signal).
  int terminate();
  /// crash() sends SIGKILL (no drain, no cleanup: a crashed instance) and reaps the child.
  void crash();

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int stdout_fd_ = -1;
  std::optional<TempDir> own_stderr_dir_;  // holds the child's stderr when the test named none
};

}  // namespace idempotency::testing
