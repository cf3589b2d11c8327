// cloud_run_worker: a Pub/Sub push endpoint for Cloud Run (or GKE, or a VM), guarded by
// idempotent() on the backend a URL names.
//
// Environment:
//   PORT                 the port to listen on (Cloud Run sets it; default 8080; 0 = any free)
//   HOST                 the address to listen on (default 0.0.0.0; 127.0.0.1 for local tests)
//   IDEMPOTENCY_BACKEND  a backend URL (default sqlite:///tmp/idempotency-worker.db);
//                        redis://… or postgres://… when several instances share the store
//   ORDERS_LEDGER        a file each processed order is appended to (default: none)
//   SUPPLIER_URL         when set, each order is also POSTed there, keyed and fenced
//                        (Idempotency-Key: the message id, X-Idempotency-Fence: the claim's
//                        fence), so the supplier can refuse a stale sender; a non-2xx answer
//                        fails the delivery (nack)
//   LEASE_MS             the claim's lease (default 30 s, renewed every third of it while the
//                        handler runs: a crashed instance's message is retried a lease later)
//   WAIT_FOR_MS          wait this long for a holder on another instance before a 503
//   PURGE_INTERVAL_MS    delete expired records in the background this often (default 60000,
//                        0 = never), so the store stays bounded however long the worker runs
//   OIDC_AUDIENCE        when set, verify Pub/Sub's OIDC push token for this audience (needed
//                        anywhere the platform does not verify it for you: GKE, VMs);
//   OIDC_EMAIL           the push subscription's service account (required with it)
//   OIDC_JWKS_FILE       a local key set instead of Google's (tests, air-gapped setups)
//
// The business action here "sends an order to the supplier" by appending the message id and
// fence to a ledger. Two demo attributes make the hard cases easy to see: `demo_sleep_ms`
// keeps the handler busy, `demo_fail_first=true` makes the first attempt fail (as a supplier
// that refused the connection: known not to have acted, so the key is released at once).
#include <idempotency/http.h>
#include <idempotency/idempotency.h>
#include <idempotency/oidc.h>
#include <idempotency/open_backend.h>
#include <idempotency/pubsub/idempotent.h>

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

namespace idem = idempotency;
namespace pubsub = idempotency::pubsub;

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// Sends the order to the supplier at `url` (http://host:port/path), keyed on the message and
// fenced by the claim: a supplier that keeps the highest fence per key turns away an instance
// whose lease lapsed and whose message another instance took over.
void post_order(const std::string& url, const std::string& id, std::int64_t fence,
                const std::string& order) {
  const auto path_at = url.find('/', url.find("://") + 3);
  httplib::Client supplier(url.substr(0, path_at));
  // Well within the lease (renewed while this runs, but a call should not outlive a crash).
  supplier.set_connection_timeout(std::chrono::seconds(5));
  supplier.set_read_timeout(std::chrono::seconds(20));
  const std::string path = path_at == std::string::npos ? "/" : url.substr(path_at);
  const auto answer =
      supplier.Post(path, {{"Idempotency-Key", id}, {"X-Idempotency-Fence", std::to_string(fence)}},
                    order, "application/octet-stream");
  if (!answer && answer.error() == httplib::Error::Connection) {
    // Never connected: the supplier cannot have acted, so the key is released for a retry.
    throw std::runtime_error("supplier unreachable");
  }
  if (!answer) {
    // Sent, or perhaps sent, and no answer (a timeout, a reset): the supplier may still be
    // placing the order. The key stays held until its lease lapses, so no retry runs beside
    // it, and the fence turns away a stale sender after that.
    throw idem::OutcomeUnknown("no answer from the supplier");
  }
  if (answer->status < 200 || answer->status > 299) {
    throw std::runtime_error("supplier answered " + std::to_string(answer->status));
  }
}

}  // namespace

int main() {
  const std::string backend_url =
      env_or("IDEMPOTENCY_BACKEND", "sqlite:///tmp/idempotency-worker.db");
  const int port = std::stoi(env_or("PORT", "8080"));
  const std::string host = env_or("HOST", "0.0.0.0");
  const std::string supplier_url = env_or("SUPPLIER_URL", "");
  const std::string ledger_path = env_or("ORDERS_LEDGER", "");
  const auto wait_for = std::chrono::milliseconds(std::stoll(env_or("WAIT_FOR_MS", "0")));
  const auto purge_interval =
      std::chrono::milliseconds(std::stoll(env_or("PURGE_INTERVAL_MS", "60000")));
  const auto lease = std::chrono::milliseconds(
      std::stoll(env_or("LEASE_MS", std::to_string(pubsub::kDefaultPushLease.count()).c_str())));
  const bool local_store =
      backend_url.rfind("sqlite:", 0) == 0 || backend_url.rfind("memory:", 0) == 0;
  if (local_store && std::getenv("K_SERVICE") != nullptr) {
    // Cloud Run's file system is the instance's own memory: duplicates that reach another
    // instance, or come after a restart, would run again.
    std::fprintf(stderr,
                 "warning: IDEMPOTENCY_BACKEND is a local store on Cloud Run; set it to Redis, "
                 "PostgreSQL or Datastore so every instance shares one\n");
  }

  std::mutex ledger_mutex;
  std::mutex failed_mutex;
  std::set<std::string> failed_once;

  auto send_order_to_supplier = [&](const pubsub::Delivery& d) {
    const auto& attrs = d.message.attributes;
    // The supplier's idempotency key: the message id, else the CloudEvent's ce-id, never a
    // placeholder that distinct orders would share.
    const auto key = pubsub::default_key(d.message);
    if (!key) throw std::runtime_error("the delivery has no message id");
    const std::string& id = *key;
    if (auto it = attrs.find("demo_sleep_ms"); it != attrs.end()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoll(it->second)));
    }
    if (auto it = attrs.find("demo_fail_first"); it != attrs.end() && it->second == "true") {
      std::lock_guard lock(failed_mutex);
      if (failed_once.insert(id).second) throw std::runtime_error("supplier refused (demo)");
    }
    if (!supplier_url.empty()) post_order(supplier_url, id, d.fence, d.message.data);
    std::lock_guard lock(ledger_mutex);
    if (!ledger_path.empty()) {
      // The business action: unwritten (a full disk, no permission), it must fail the
      // delivery, not be acked as done.
      std::ofstream ledger(ledger_path, std::ios::app);
      ledger << id << " fence=" << d.fence << "\n";
      ledger.flush();
      if (!ledger) throw std::runtime_error("cannot write the orders ledger");
    }
  };

  pubsub::IdempotentOptions options{
      .backend_factory =
          [backend_url] {
            return std::shared_ptr<idem::LockBackend>(idem::open_backend(backend_url));
          },
      .lease = lease,
      .wait_for = wait_for,
      .purge_interval = purge_interval};
  if (const std::string audience = env_or("OIDC_AUDIENCE", ""); !audience.empty()) {
    auto verifier = std::make_shared<idem::OidcVerifier>(
        idem::OidcOptions{.audience = audience,
                          .allowed_emails = {env_or("OIDC_EMAIL", "")},
                          .jwks_file = env_or("OIDC_JWKS_FILE", "")});
    options.authenticate = [verifier](const pubsub::PushRequest& r) { return verifier->verify(r); };
  }
  auto handler = pubsub::idempotent(std::move(options), send_order_to_supplier);

  return idem::http::serve(host, port, handler, {.on_listening = [](int bound) {
                             std::printf("listening on %d\n", bound), std::fflush(stdout);
                           }});
}
