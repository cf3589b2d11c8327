#include "support/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "support/file_tail.h"

namespace idempotency::testing {
namespace {

// The last lines a failed start wrote to its stderr file, so that the failure explains itself.
std::string stderr_tail(const std::string& stderr_file) {
  return "; the end of its stderr (" + stderr_file + "): " + file_tail(stderr_file);
}

// The name of the child's stderr in own_stderr_dir_. A file of its own when the test names
// none: were the child to hold this process's stderr, which is ctest's pipe, a test killed
// before its destructors ran (a sanitizer's halt) would leave ctest waiting on that pipe until
// the test's timeout.
constexpr const char* kOwnStderr = "stderr";

// Copies what the child wrote to `path` to this process's stderr, where an inherited stderr
// would have put it.
void forward(const std::string& path) {
  std::ostringstream text;
  text << std::ifstream(path, std::ios::binary).rdbuf();
  std::cerr << text.str() << std::flush;
}

}  // namespace

ChildProcess::ChildProcess(const std::string& program, std::vector<std::string> args,
                           std::vector<std::pair<std::string, std::string>> env,
                           const std::string& named_stderr_file) {
  const std::string stderr_file =
      named_stderr_file.empty() ? own_stderr_dir_.emplace().file(kOwnStderr) : named_stderr_file;
  int out[2];
  if (pipe(out) != 0) throw std::runtime_error("pipe failed");
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // Opened without O_CLOEXEC, which dup2() onto the same number would keep: whatever is left
    // above stderr is closed below.
    const int in = open("/dev/null", O_RDONLY);
    if (in < 0) _exit(126);
    dup2(in, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    const int err = open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (err < 0) _exit(126);
    dup2(err, STDERR_FILENO);
    // Nothing of this process's but the three above: no descriptor of ctest's or the test's.
    closefrom(STDERR_FILENO + 1);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(program.c_str()));
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  stdout_fd_ = out[0];
  // Read until "listening on N\n", for at most 30 s.
  std::string seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    const ssize_t n = read(stdout_fd_, buf, sizeof buf);
    if (n <= 0) break;
    seen.append(buf, static_cast<std::size_t>(n));
    const auto at = seen.find("listening on ");
    const auto nl = at == std::string::npos ? std::string::npos : seen.find('\n', at);
    if (nl != std::string::npos) {
      port_ = std::atoi(seen.c_str() + at + 13);
      return;
    }
  }
  const int status = terminate();
  const std::string error = program + " did not report a listening port (exit status " +
                            std::to_string(status) + "); it printed: " + seen +
                            stderr_tail(stderr_file);
  close(stdout_fd_);  // no destructor runs after a constructor throws (own_stderr_dir_ goes)
  throw std::runtime_error(error);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
  if (own_stderr_dir_) forward(own_stderr_dir_->file(kOwnStderr));
}

void ChildProcess::crash() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

bool ChildProcess::running() const {
  if (pid_ <= 0) return false;
  // Waited for with WNOWAIT: an exited child stays a zombie, still to be reaped.
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    return false;
  }
  return info.si_pid == 0;  // no state change to report: still running
}

int ChildProcess::terminate() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace idempotency::testing
