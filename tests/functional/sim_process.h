// SimProcess: runs the built pubsub-push-sim as a child process (stdout and stderr to files in
// a directory), for the functional tests that drive endpoints through it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace idempotency::testing {

/// SimRun is one finished simulator run.
struct SimRun {
  int exit_code = -1;  ///< -1 when killed by a signal.
  std::string out;
  std::string err;
};

/// SimProcess starts the simulator at construction; wait() collects it.
class SimProcess {
 public:
  /// SimProcess() starts PUSH_SIM_PATH with `args`, its output going to files in `dir`.
  /// Throws std::runtime_error when it cannot start.
  SimProcess(const std::vector<std::string>& args, const std::string& dir);
  /// ~SimProcess() kills the child if wait() was not called.
  ~SimProcess();
  SimProcess(const SimProcess&) = delete;
  SimProcess& operator=(const SimProcess&) = delete;

  /// wait() blocks until the simulator exits (it always does, by its --run-timeout).
  SimRun wait();

 private:
  pid_t pid_ = -1;
  std::string out_path_;
  std::string err_path_;
};

/// run_sim() runs the simulator to completion.
SimRun run_sim(const std::vector<std::string>& args, const std::string& dir);

}  // namespace idempotency::testing
