// owner_joined_replayed: once() gives every duplicate the original's result.
//
// Three callers race one payment key: one owns it and charges the card, the two that arrive
// while it runs join and receive its result, and a later caller — here on a second backend
// instance over the same SQLite file, as another process would be — replays the stored
// result. The card is charged once.
#include <idempotency/idempotency.h>
#include <idempotency/sqlite_lock.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace idem = idempotency;

int main() {
  const auto db = std::filesystem::temp_directory_path() / "idempotency-owner-joined.db";
  std::filesystem::remove(db);
  idem::SqliteLock backend(db.string());

  std::atomic<int> charges{0};
  auto charge_card = [&] {
    ++charges;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the payment provider is slow
    return std::string("payment-7f3a");
  };

  std::vector<idem::Status> statuses(3);
  std::vector<std::string> values(3);
  {
    std::vector<std::jthread> callers;
    for (int i = 0; i < 3; ++i) {
      callers.emplace_back([&, i] {
        while (i > 0 && charges == 0) std::this_thread::yield();  // arrive while it runs
        auto outcome = idem::once("create-payment:request-123", backend, charge_card);
        statuses[i] = outcome.status();
        values[i] = outcome.value();
      });
    }
  }
  for (int i = 0; i < 3; ++i) {
    std::printf("caller %d: %-8s -> %s\n", i + 1, idem::status_name(statuses[i]),
                values[i].c_str());
  }

  idem::SqliteLock other_process(db.string());  // another instance sharing the store
  auto later = idem::once("create-payment:request-123", other_process, charge_card);
  std::printf("later caller elsewhere: %s -> %s (cache hit: %s)\n",
              idem::status_name(later.status()), later.value().c_str(),
              later.cache_hit() ? "yes" : "no");
  std::printf("card charged %d time(s)\n", charges.load());

  const bool ok = charges == 1 && statuses[0] == idem::Status::kExecuted &&
                  statuses[1] == idem::Status::kJoined && statuses[2] == idem::Status::kJoined &&
                  later.status() == idem::Status::kReplayed && later.value() == "payment-7f3a";
  std::filesystem::remove(db);
  return ok ? 0 : 1;
}
