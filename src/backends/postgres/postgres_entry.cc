// The PostgreSQL backend's registry entry: `postgres://` (or `postgresql://`) URLs whose
// `table=NAME` and `pool_mode=session|transaction` the library takes and whose other
// parameters (sslmode, sslrootcert, connect_timeout, …) go to libpq; its DDL; and the CLI's
// migrate, which first checks without CREATE permission.
#include <memory>
#include <stdexcept>
#include <string>

#include "idempotency/backend_registry.h"
#include "idempotency/errors.h"
#include "idempotency/postgres_lock.h"

namespace idempotency::registry_detail {
namespace {

std::string table_of(BackendUrl& url) { return take_table(url).value_or(PostgresOptions{}.table); }

// options_of() takes the parameters the library reads (table, pool_mode) out of `url`.
PostgresOptions options_of(BackendUrl& url) {
  PostgresOptions options;
  options.table = table_of(url);
  if (const auto mode = url.take("pool_mode")) {
    if (*mode == "transaction") {
      options.pool_mode = PostgresPoolMode::kTransaction;
    } else if (*mode != "session") {
      throw std::invalid_argument("postgres URL: pool_mode= must be session or transaction");
    }
  }
  return options;
}

}  // namespace

BackendEntry postgres_backend_entry() {
  return BackendEntry{
      .schemes = {"postgres", "postgresql"},
      .url_form =
          "postgres://USER:PASSWORD@HOST/DB[?table=NAME&pool_mode=transaction&sslmode=verify-full"
          "&sslrootcert=CA.pem]",
      .open = [](BackendUrl& url, const BackendOptions& backend) -> std::unique_ptr<LockBackend> {
        PostgresOptions options = options_of(url);
        options.backend = backend;
        return std::make_unique<PostgresLock>(url.str(), options);
      },
      .schema = [](BackendUrl& url) { return PostgresLock::schema(options_of(url).table); },
      .migrate =
          [](BackendUrl& url) {
            PostgresOptions options = options_of(url);
            options.pool_size = 1;
            const std::string statements = PostgresLock::schema(options.table);
            // Succeeding without create_table proves the table is there, and a role without
            // CREATE permission can still check its database.
            try {
              options.create_table = false;
              const PostgresLock present(url.str(), options);
              return "table " + options.table + " already exists; nothing to do\n";
            } catch (const StoreError&) {
              // Missing (or unreachable: the second attempt reports that with the server's
              // message).
            }
            options.create_table = true;
            const PostgresLock created(url.str(), options);
            return "created table " + options.table +
                   " and its expiry index, or added what it lacked:\n" + statements;
          }};
}

}  // namespace idempotency::registry_detail
