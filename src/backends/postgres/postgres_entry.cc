// The PostgreSQL backend's registry entry: `postgres://` (or `postgresql://`) URLs whose
// `table=NAME` the library takes and whose other parameters (sslmode, connect_timeout, …) go
// to libpq; its DDL; and the CLI's migrate, which first checks without CREATE permission.
#include <memory>
#include <string>

#include "idempotency/backend_registry.h"
#include "idempotency/errors.h"
#include "idempotency/postgres_lock.h"

namespace idempotency::registry_detail {
namespace {

std::string table_of(BackendUrl& url) { return take_table(url).value_or(PostgresOptions{}.table); }

}  // namespace

BackendEntry postgres_backend_entry() {
  return BackendEntry{
      .schemes = {"postgres", "postgresql"},
      .url_form = "postgres://USER:PASSWORD@HOST/DB[?table=NAME]",
      .open = [](BackendUrl& url, const BackendOptions& backend) -> std::unique_ptr<LockBackend> {
        PostgresOptions options{.backend = backend};
        options.table = table_of(url);
        return std::make_unique<PostgresLock>(url.str(), options);
      },
      .schema = [](BackendUrl& url) { return PostgresLock::schema(table_of(url)); },
      .migrate =
          [](BackendUrl& url) {
            const std::string table = table_of(url);
            const std::string statements = PostgresLock::schema(table);
            // Succeeding without create_table proves the table is there, and a role without
            // CREATE permission can still check its database.
            try {
              const PostgresLock present(url.str(),
                                         {.table = table, .create_table = false, .pool_size = 1});
              return "table " + table + " already exists; nothing to do\n";
            } catch (const StoreError&) {
              // Missing (or unreachable: the second attempt reports that with the server's
              // message).
            }
            const PostgresLock created(url.str(),
                                       {.table = table, .create_table = true, .pool_size = 1});
            return "created table " + table + " and its expiry index, or added what it lacked:\n" +
                   statements;
          }};
}

}  // namespace idempotency::registry_detail
