// po_updates: the seed's two verbs together.
//
// Successive status updates for one purchase order must each be applied, never two at once,
// and a redelivered update must be dropped. That is two jobs on two keys:
//   - idempotent() on the messageId drops the transport redelivery (lock semantics), and
//   - mutex("po:" + id) inside the handler serializes the updates for one PO (never DONE, so
//     every distinct update still runs).
// A concurrent update for the same PO meets the mutex, is nacked with a quiet 503, and runs
// when Pub/Sub redelivers it.
#include <idempotency/idempotency.h>
#include <idempotency/pubsub/idempotent.h>
#include <idempotency/sqlite_lock.h>

#include <openssl/evp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace idem = idempotency;
namespace pubsub = idempotency::pubsub;

namespace {

std::string base64(const std::string& s) {
  std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
  out.resize(static_cast<std::size_t>(EVP_EncodeBlock(
      reinterpret_cast<unsigned char*>(out.data()),
      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()))));
  return out;
}

// A push delivery of one status update, as Pub/Sub would POST it.
pubsub::PushRequest update(const std::string& message_id, const std::string& po,
                           const std::string& status) {
  pubsub::PushRequest r;
  r.headers = {{"Content-Type", "application/json"}};
  r.body = R"({"message":{"messageId":")" + message_id + R"(","attributes":{"po_id":")" + po +
           R"("},"data":")" + base64(status) +
           R"("},"subscription":"projects/p/subscriptions/po"})";
  return r;
}

}  // namespace

int main() {
  const auto db = std::filesystem::temp_directory_path() / "idempotency-po-updates.db";
  std::filesystem::remove(db);
  auto backend = std::make_shared<idem::SqliteLock>(db.string());
  idem::set_log_sink([](const idem::LogRecord& r) {
    std::printf("   [log %s] %s\n", idem::severity_name(r.severity), r.event.c_str());
  });

  std::mutex history_mutex;
  std::map<std::string, std::vector<std::string>> history;  // the PO's applied updates
  std::atomic<bool> slow{false};
  std::atomic<bool> inside{false};  // a slow update holds the PO's mutex

  auto handle = pubsub::idempotent(
      {.backend = backend},  // verb 1: dedup on the messageId (transport redelivery)
      [&](const pubsub::Delivery& d) {
        const std::string po = d.message.attributes.at("po_id");
        // Verb 2: one update at a time. A short lease kept alive by a heartbeat: a crashed
        // holder blocks the PO for 30 s, not for the default's 15 minutes.
        auto serialized =
            idem::mutex("po:" + po, *backend,
                        {.lease = std::chrono::seconds(30), .heartbeat = std::chrono::seconds(10)});
        if (slow && !inside.exchange(true)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
        // Lost, another update may hold the PO now: stop, and let Pub/Sub retry this one. In a
        // real store, also pass serialized.fence() to the write, which refuses a stale one.
        if (serialized.lost()) throw std::runtime_error("lost the PO's mutex");
        std::lock_guard lock(history_mutex);
        history[po].push_back(d.message.data);  // read-modify-write the PO safely
      });

  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("   %s %s\n", ok ? "ok: " : "FAILED:", what);
    failures += ok ? 0 : 1;
  };

  std::printf("1. Two distinct updates for PO-1 both apply (a mutex never suppresses):\n");
  const int a = handle(update("m-1", "PO-1", "confirmed")).status;
  const int b = handle(update("m-2", "PO-1", "shipped")).status;
  expect(a == 200 && b == 200 && history["PO-1"].size() == 2, "both updates applied");

  std::printf("2. The transport redelivers m-1:\n");
  const int dup = handle(update("m-1", "PO-1", "confirmed")).status;
  expect(dup == 204 && history["PO-1"].size() == 2, "dropped as a duplicate (204)");

  std::printf("3. Two updates for PO-2 arrive at once on two workers:\n");
  slow = true;
  int first = 0;
  int second = 0;
  {
    std::jthread w1([&] { first = handle(update("m-3", "PO-2", "confirmed")).status; });
    while (!inside) std::this_thread::yield();  // worker 1 is mid-update
    std::jthread w2([&] { second = handle(update("m-4", "PO-2", "cancelled")).status; });
  }
  slow = false;
  std::printf("   worker 1 -> %d, worker 2 -> %d\n", first, second);
  const int retried = handle(update("m-4", "PO-2", "cancelled")).status;  // Pub/Sub's retry
  expect(first == 200 && second == 503 && retried == 200 && history["PO-2"].size() == 2,
         "never interleaved: the second was nacked (503), then applied on redelivery");

  std::filesystem::remove(db);
  std::printf("\n%s\n", failures == 0
                            ? "two verbs, two keys: all updates applied once, one at a time"
                            : "SOME EXPECTATIONS FAILED");
  return failures == 0 ? 0 : 1;
}
