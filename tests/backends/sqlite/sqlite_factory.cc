#include <memory>

#include "idempotency/sqlite_lock.h"
#include "support/backend_factory.h"
#include "support/temp_dir.h"
#include "support/test_servers.h"

namespace idempotency::testing {

BackendFactory sqlite_factory() {
  return BackendFactory{.name = "Sqlite",
                        .make = [](const BackendOptions& options) -> std::unique_ptr<LockBackend> {
                          // One file for the whole program, a fresh table per backend.
                          static const TempDir dir;
                          return std::make_unique<SqliteLock>(
                              dir.file("contract.db"),
                              SqliteOptions{.backend = options, .table = unique_name("records")});
                        },
                        .reaps_at_expiry = false,
                        .make_twins =
                            [](const BackendOptions& options) {
                              static const TempDir dir;
                              const std::string table = unique_name("twins");
                              auto make = [&] {
                                return std::make_unique<SqliteLock>(
                                    dir.file("twins.db"),
                                    SqliteOptions{.backend = options, .table = table});
                              };
                              std::unique_ptr<LockBackend> a = make();
                              std::unique_ptr<LockBackend> b = make();
                              return std::make_pair(std::move(a), std::move(b));
                            }};
}

}  // namespace idempotency::testing
