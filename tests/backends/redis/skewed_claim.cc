// skewed_claim: one claim from a separate process, which the clock-skew test runs under
// faketime so that this process's clock is hours off the server's.
//
//   skewed_claim URL PREFIX KEY LEASE_MS
//
// Prints one line: OUTCOME LEASE_EXPIRY_MS FENCE OWN_CLOCK_MS (FENCE is 0 unless Won;
// OWN_CLOCK_MS is this process's system clock, so the test can see the skew took effect).
// Exits 0, or 1 with a message on stderr.
#include <chrono>
#include <exception>
#include <iostream>
#include <string>
#include <variant>

#include "idempotency/clock.h"
#include "idempotency/redis_lock.h"

int main(int argc, char** argv) {
  using idempotency::to_millis;
  if (argc != 5) {
    std::cerr << "usage: skewed_claim URL PREFIX KEY LEASE_MS\n";
    return 1;
  }
  try {
    // Default options: no injected clock, as in production.
    idempotency::RedisLock lock(argv[1], idempotency::RedisOptions{.key_prefix = argv[2]});
    const auto result = lock.claim(argv[3], std::chrono::milliseconds(std::stoll(argv[4])));
    const auto own_clock = to_millis(idempotency::system_clock()->now());
    if (const auto* won = std::get_if<idempotency::Won>(&result)) {
      std::cout << "Won " << to_millis(won->claim.lease_expiry) << " " << won->claim.fence;
    } else if (const auto* held = std::get_if<idempotency::HeldByOther>(&result)) {
      std::cout << "HeldByOther " << to_millis(held->lease_expiry) << " 0";
    } else {
      std::cout << "AlreadyDone 0 0";
    }
    std::cout << " " << own_clock << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "skewed_claim: " << e.what() << "\n";
    return 1;
  }
}
