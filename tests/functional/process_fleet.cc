#include "process_fleet.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <stdexcept>
#include <utility>

namespace idempotency::testing {
namespace {

// The lowest port the kernel hands to outgoing connections (32768 when unreadable).
int ephemeral_low() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (range >> low && low > 2048) return low;
  return 32768;
}

bool can_bind(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  close(fd);
  return ok;
}

// A free loopback port below the ephemeral range, so that no outgoing connection takes it
// while its process is down between a kill and the restart.
int free_port_below_ephemeral_range(std::mt19937& random) {
  std::uniform_int_distribution<int> ports(1024 + (ephemeral_low() - 1024) / 2,
                                           ephemeral_low() - 1);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = ports(random);
    if (can_bind(port)) return port;
  }
  throw std::runtime_error("no free port below the ephemeral range");
}

}  // namespace

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ProcessFleet::ProcessFleet(int size, std::string log_dir, Launch launch)
    : log_dir_(std::move(log_dir)),
      launch_(std::move(launch)),
      slots_(static_cast<std::size_t>(size)) {
  std::mt19937 random(std::random_device{}());
  for (std::size_t slot = 0; slot < slots_.size(); ++slot) {
    // Another test may take a port between the probe and the start: then try another.
    for (int attempt = 0;; ++attempt) {
      ports_.push_back(free_port_below_ephemeral_range(random));
      try {
        start(slot);
        break;
      } catch (const std::runtime_error&) {
        ports_.pop_back();
        if (attempt == 4) throw;
      }
    }
  }
}

std::string ProcessFleet::incarnation(int slot) const {
  std::lock_guard lock(mutex_);
  return slots_.at(static_cast<std::size_t>(slot)).incarnation;
}

std::string ProcessFleet::log_file(int slot) const {
  return log_dir_ + "/p" + std::to_string(slot) + ".log";
}

void ProcessFleet::start(std::size_t slot) {
  Slot& s = slots_[slot];
  ++s.starts;
  s.incarnation = "p" + std::to_string(slot) + ".i" + std::to_string(s.starts);
  s.process = launch_(ports_[slot], s.incarnation, log_file(static_cast<int>(slot)));
}

void ProcessFleet::kill_and_restart(int slot) {
  std::lock_guard lock(mutex_);
  Slot& s = slots_.at(static_cast<std::size_t>(slot));
  KillRecord kill{.incarnation = s.incarnation, .sent_ns = steady_now_ns()};
  s.process->crash();
  kill.reaped_ns = steady_now_ns();
  kills_.push_back(std::move(kill));
  start(static_cast<std::size_t>(slot));
}

std::vector<KillRecord> ProcessFleet::kills() const {
  std::lock_guard lock(mutex_);
  return kills_;
}

}  // namespace idempotency::testing
