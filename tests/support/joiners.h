// start_joiners(): threads that call into a flight another caller already runs, started and
// known to be calling.
#pragma once

#include <chrono>
#include <latch>
#include <thread>
#include <vector>

namespace idempotency::testing {

/// start_joiners() starts `count` threads running `call` and returns them once all are calling,
/// and 200 ms more: from their call to joining the running flight they do no I/O, and the
/// margin is for a busy box (not a timing assertion).
template <typename Call>
std::vector<std::jthread> start_joiners(Call& call, int count) {
  std::vector<std::jthread> joiners;
  joiners.reserve(static_cast<std::size_t>(count));
  std::latch calling(count);
  for (int i = 0; i < count; ++i) {
    joiners.emplace_back([&calling, &call] {
      calling.count_down();
      call();
    });
  }
  calling.wait();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return joiners;
}

}  // namespace idempotency::testing
