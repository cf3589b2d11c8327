#include "sim_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace idempotency::testing {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::atomic<int> next_run{0};

}  // namespace

SimProcess::SimProcess(const std::vector<std::string>& args, const std::string& dir) {
  const std::string run = std::to_string(next_run.fetch_add(1));
  out_path_ = dir + "/sim-" + run + ".out";
  err_path_ = dir + "/sim-" + run + ".err";
  std::vector<std::string> all{PUSH_SIM_PATH};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(all.size() + 1);
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    FILE* out = std::freopen(out_path_.c_str(), "w", stdout);
    FILE* err = std::freopen(err_path_.c_str(), "w", stderr);
    if (out == nullptr || err == nullptr) _exit(127);
    execv(argv[0], argv.data());
    _exit(127);
  }
}

SimProcess::~SimProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

SimRun SimProcess::wait() {
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out_path_), slurp(err_path_)};
}

SimRun run_sim(const std::vector<std::string>& args, const std::string& dir) {
  return SimProcess(args, dir).wait();
}

}  // namespace idempotency::testing
