// ProcessFleet: N copies of one server program, each on a loopback port of its own that it
// keeps across restarts, so whatever balances load over them (the push simulator) keeps its
// endpoint list while the processes behind it are killed and started again.
//
// Every start is an incarnation with a name ("p2.i3": slot 2, third start) that the launch
// function can pass to the program, e.g. in the path it sends its effects to, so that each
// effect can be traced to the very process that made it. kill() records when an incarnation
// was killed, on steady_clock (CLOCK_MONOTONIC, shared by every process on the machine).
//
// Ports come from below the kernel's ephemeral range: a port freed by a kill is then never
// handed to some process's outgoing connection before the restart binds it again.
//
// Thread safety: every member may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "support/child_process.h"

namespace idempotency::testing {

/// A kill: which incarnation, and the steady_clock time (ns) just before SIGKILL was sent and
/// just after the process was reaped. It died somewhere between the two.
struct KillRecord {
  std::string incarnation;
  std::int64_t sent_ns = 0;
  std::int64_t reaped_ns = 0;
};

/// steady_now_ns() is steady_clock's now in nanoseconds, the time base of every record.
[[nodiscard]] std::int64_t steady_now_ns();

class ProcessFleet {
 public:
  /// Launch starts one incarnation listening on 127.0.0.1:`port`; its stderr goes to
  /// `stderr_file`.
  using Launch = std::function<std::unique_ptr<ChildProcess>(
      int port, const std::string& incarnation, const std::string& stderr_file)>;

  /// ProcessFleet() starts `size` processes; their stderr is appended to
  /// `<log_dir>/<slot>.log`. Throws std::runtime_error when one cannot start.
  ProcessFleet(int size, std::string log_dir, Launch launch);

  /// size() is the number of slots.
  [[nodiscard]] int size() const { return static_cast<int>(ports_.size()); }
  /// port() is slot `slot`'s port, the same for every incarnation.
  [[nodiscard]] int port(int slot) const { return ports_.at(static_cast<std::size_t>(slot)); }
  /// incarnation() is the name of the process serving `slot` now.
  [[nodiscard]] std::string incarnation(int slot) const;
  /// log_file() is where slot `slot`'s processes write their stderr.
  [[nodiscard]] std::string log_file(int slot) const;

  /// kill_and_restart() SIGKILLs the process in `slot`, reaps it, records the kill and starts
  /// the slot's next incarnation on the same port.
  void kill_and_restart(int slot);

  /// kills() is every kill so far.
  [[nodiscard]] std::vector<KillRecord> kills() const;

 private:
  struct Slot {
    std::unique_ptr<ChildProcess> process;
    std::string incarnation;
    int starts = 0;
  };
  void start(std::size_t slot);

  const std::string log_dir_;
  const Launch launch_;
  std::vector<int> ports_;
  mutable std::mutex mutex_;
  std::vector<Slot> slots_;        // guarded by mutex_
  std::vector<KillRecord> kills_;  // guarded by mutex_
};

}  // namespace idempotency::testing
