// local_dev: the seed's hazards, played out on the embedded SQLite backend.
//
//   ./local_dev [--db PATH]
//
// One message redelivered, two racing duplicates, a holder that crashes and is reclaimed
// after its lease, and a zombie fenced out, each described in plain words. Real time, short
// leases: it takes about two seconds.
#include <idempotency/idempotency.h>
#include <idempotency/sqlite_lock.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace idem = idempotency;
using std::chrono::milliseconds;

namespace {

int failures = 0;

void expect(bool ok, const char* promise) {
  std::printf("   %s %s\n", ok ? "ok: " : "FAILED:", promise);
  if (!ok) ++failures;
}

// The business action. In real code: place the order, charge the card, send the email, passing
// the claim's fence so that the sink refuses a holder whose lease lapsed and was taken over.
std::atomic<int> orders_sent{0};
void send_order_to_supplier(std::int64_t /*fence*/) { ++orders_sent; }

// One delivery of a message, the way a push handler would treat it: returns the HTTP
// status Pub/Sub would see.
int deliver(idem::LockBackend& backend, const std::string& key, milliseconds lease) {
  try {
    auto held = idem::lock(key, backend, {.lease = lease});
    send_order_to_supplier(held.fence());
    return 200;  // scope exit marks the key DONE
  } catch (const idem::Duplicate&) {
    return 204;  // already done: ack, body skipped
  } catch (const idem::InProgress&) {
    return 503;  // a live holder elsewhere: nack, Pub/Sub retries later
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string db = (std::filesystem::temp_directory_path() / "idempotency-local-dev.db").string();
  if (argc == 3 && std::string(argv[1]) == "--db") db = argv[2];
  std::filesystem::remove(db);
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
  // Quiet JSON logs: show only the event names the library reports.
  idem::set_log_sink([](const idem::LogRecord& r) {
    std::printf("   [log %s] %s\n", idem::severity_name(r.severity), r.event.c_str());
  });

  idem::SqliteLock backend(db, {.backend = {.ttl = std::chrono::hours(1)}});
  std::printf("Backend: SQLite at %s\n\n", db.c_str());

  std::printf("1. Transport redelivery: message m-1 arrives twice.\n");
  orders_sent = 0;
  const int first = deliver(backend, "orders:m-1", idem::kDefaultLease);
  const int second = deliver(backend, "orders:m-1", idem::kDefaultLease);
  std::printf("   first delivery -> %d, redelivery -> %d, orders sent: %d\n", first, second,
              orders_sent.load());
  expect(first == 200 && second == 204 && orders_sent == 1, "the order went out once");

  std::printf("\n2. Concurrent duplicates: m-2 delivered to two workers at once.\n");
  orders_sent = 0;
  std::vector<int> statuses(2);
  {
    std::vector<std::jthread> workers;
    for (int i = 0; i < 2; ++i) {
      workers.emplace_back([&, i] {
        try {
          auto held = idem::lock("orders:m-2", backend);
          send_order_to_supplier(held.fence());
          std::this_thread::sleep_for(milliseconds(200));  // still working when the twin arrives
          statuses[i] = 200;
        } catch (const idem::Duplicate&) {
          statuses[i] = 204;
        } catch (const idem::InProgress&) {
          statuses[i] = 503;
        }
      });
    }
  }
  const int retry = deliver(backend, "orders:m-2", idem::kDefaultLease);
  std::printf("   workers -> %d and %d, the nacked one's retry -> %d, orders sent: %d\n",
              statuses[0], statuses[1], retry, orders_sent.load());
  expect(orders_sent == 1 && retry == 204, "one worker ran it, the other was nacked, then acked");

  std::printf("\n3. Crashed holder: a worker claims m-3 and dies without releasing.\n");
  orders_sent = 0;
  const milliseconds short_lease(400);
  auto crashed = backend.claim("orders:m-3", short_lease);  // the claim is simply abandoned
  const int during = deliver(backend, "orders:m-3", short_lease);
  std::this_thread::sleep_for(short_lease + milliseconds(50));
  const int after = deliver(backend, "orders:m-3", short_lease);
  std::printf("   redelivery during the lease -> %d, after the lease -> %d, orders sent: %d\n",
              during, after, orders_sent.load());
  expect(std::holds_alternative<idem::Won>(crashed) && during == 503 && after == 200 &&
             orders_sent == 1,
         "the key healed itself after the lease, no cron");

  std::printf("\n4. Zombie: a worker's m-4 outlives its lease and a redelivery takes over.\n");
  orders_sent = 0;
  {
    auto zombie = idem::lock("orders:m-4", backend, {.lease = short_lease});
    std::this_thread::sleep_for(short_lease + milliseconds(50));  // a long GC pause
    int takeover = 0;  // the redelivery lands on another worker thread
    std::thread([&] { takeover = deliver(backend, "orders:m-4", short_lease); }).join();
    std::printf("   the redelivery reclaimed the key -> %d (fence %lld -> %lld)\n", takeover,
                static_cast<long long>(zombie.fence()), static_cast<long long>(zombie.fence() + 1));
    const auto status = zombie.complete();
    expect(status == idem::CompleteStatus::kFencedOut,
           "the zombie's late completion was fenced out and logged, not acked twice");
  }
  const int later = deliver(backend, "orders:m-4", short_lease);
  expect(later == 204, "the key stays DONE under the newer claim");

  std::printf("\n%s\n",
              failures == 0 ? "all scenarios behaved as promised" : "SOME SCENARIOS FAILED");
  return failures == 0 ? 0 : 1;
}
