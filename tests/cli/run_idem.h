// run_idem(): runs the built `idem` binary as a child process and captures what it says.
#pragma once

#include <string>
#include <vector>

namespace idempotency::testing {

/// IdemRun is one finished `idem` process.
struct IdemRun {
  int exit_code = -1;
  std::string out;
  std::string err;
  /// all() is stdout and stderr together, for "never appears anywhere" checks.
  [[nodiscard]] std::string all() const { return out + err; }
};

/// run_idem() runs IDEM_BINARY with `args`, writes `stdin_text` to its stdin, and returns its
/// exit code and output. IDEMPOTENCY_BACKEND is removed from the child's environment unless
/// `backend_env` is non-empty, in which case it is set to that.
IdemRun run_idem(const std::vector<std::string>& args, const std::string& stdin_text = "",
                 const std::string& backend_env = "");

}  // namespace idempotency::testing
