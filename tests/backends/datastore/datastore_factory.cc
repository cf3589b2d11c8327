// The Datastore factory for the contract, differential, concurrency and cross-instance suites:
// Google's emulator when DATASTORE_EMULATOR_HOST is set, else the in-process REST double; a
// fresh kind per backend either way.
#include <cstdlib>
#include <memory>

#include "backends/datastore/datastore_double.h"
#include "idempotency/datastore_lock.h"
#include "support/backend_factory.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

DatastoreOptions options_for(const BackendOptions& backend, const std::string& kind) {
  DatastoreOptions o{.backend = backend, .kind = kind};
  if (std::getenv("DATASTORE_EMULATOR_HOST") != nullptr) {      // NOLINT(concurrency-mt-unsafe)
    const char* project = std::getenv("DATASTORE_PROJECT_ID");  // NOLINT(concurrency-mt-unsafe)
    o.project = project != nullptr ? project : "idempotency-test";
    return o;  // the backend finds the emulator itself
  }
  static DatastoreDouble server;  // one double for the whole program
  o.project = "idempotency-test";
  o.endpoint = server.endpoint();
  return o;
}

}  // namespace

BackendFactory datastore_factory() {
  return BackendFactory{
      .name = "Datastore",
      .make = [](const BackendOptions& options) -> std::unique_ptr<LockBackend> {
        return std::make_unique<DatastoreLock>(options_for(options, unique_name("Records")));
      },
      .reaps_at_expiry = false,
      .make_twins =
          [](const BackendOptions& options) {
            const DatastoreOptions o = options_for(options, unique_name("Twins"));
            std::unique_ptr<LockBackend> a = std::make_unique<DatastoreLock>(o);
            std::unique_ptr<LockBackend> b = std::make_unique<DatastoreLock>(o);
            return std::make_pair(std::move(a), std::move(b));
          }};
}

}  // namespace idempotency::testing
