// The idem CLI's exit codes and the error that carries one to main().
//
// Every message a CliError carries is written for an operator and never contains a key (keys
// are customer data) or a backend URL (it may hold a password).
//
// Thread safety: plain value types.
#pragma once

#include <stdexcept>
#include <string>

namespace idempotency::cli {

/// ExitCode is what `idem` returns; documented in `idem --help` and the README.
enum class ExitCode : int {
  kOk = 0,
  /// The store failed; the message is the store's own (never the key).
  kStoreError = 1,
  /// A bad flag, URL, key or combination of options.
  kUsage = 2,
  /// The key has no record.
  kNoRecord = 3,
  /// `release` without `--yes`: nothing was changed.
  kConfirmationRequired = 4,
  /// `release` of a record that is not a stuck claim (a DONE record).
  kRefused = 5,
};

/// CliError ends the command with `code` after printing its one-line message to stderr.
class CliError : public std::runtime_error {
 public:
  CliError(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  /// code() is the exit code the process returns.
  [[nodiscard]] ExitCode code() const noexcept { return code_; }

 private:
  ExitCode code_;
};

/// usage_error() builds the CliError for a bad flag, URL or key.
[[nodiscard]] inline CliError usage_error(const std::string& message) {
  return {ExitCode::kUsage, message};
}

}  // namespace idempotency::cli
