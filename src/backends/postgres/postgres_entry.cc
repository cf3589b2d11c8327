// The PostgreSQL backend's registry entry: `postgres://` (or `postgresql://`) URLs whose
// `table=NAME`, `pool_size=N` and `pool_mode=session|transaction` the library takes and whose other
// parameters (sslmode, sslrootcert, connect_timeout, …) go to libpq; its DDL; and the CLI's
// migrate, which first checks without CREATE permission.
#include <charconv>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include "idempotency/backend_registry.h"
#include "idempotency/errors.h"
#include "idempotency/postgres_lock.h"

namespace idempotency::registry_detail {
namespace {

std::string table_of(BackendUrl& url) { return take_table(url).value_or(PostgresOptions{}.table); }

// The most connections a `pool_size=` may ask for: PostgreSQL's own default max_connections is
// 100, and one process holding more than a thousand is a typo, not a plan.
constexpr std::size_t kMaxPoolSize = 1000;

// pool_size= as a whole number from 1 to kMaxPoolSize.
std::size_t pool_size_of(std::string_view text) {
  std::size_t size = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), size);
  if (ec != std::errc() || end != text.data() + text.size() || size == 0 || size > kMaxPoolSize) {
    throw std::invalid_argument("postgres URL: pool_size= must be a whole number from 1 to " +
                                std::to_string(kMaxPoolSize));
  }
  return size;
}

// postgres_options_of() takes the parameters the library reads (table, pool_mode, pool_size) out of
// `url`.
PostgresOptions postgres_options_of(BackendUrl& url) {
  PostgresOptions options;
  options.table = table_of(url);
  // Sized to the callers: with more threads than connections, calls queue for the pool while
  // the server could commit more of them together (a pool of 8 under 64 threads: 0.78x the
  // server's own rate here; a pool of 64, 1.03x; BENCHMARKS.md).
  if (const auto size = url.take("pool_size")) options.pool_size = pool_size_of(*size);
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
          "postgres://USER:PASSWORD@HOST/DB[?table=NAME&pool_size=N&pool_mode=transaction"
          "&sslmode=verify-full&sslrootcert=CA.pem]",
      .open = [](BackendUrl& url, const BackendOptions& backend) -> std::unique_ptr<LockBackend> {
        PostgresOptions options = postgres_options_of(url);
        options.backend = backend;
        return std::make_unique<PostgresLock>(url.str(), options);
      },
      // An operator's tool reads what is there: a mistyped table= must not make one.
      .open_existing = [](BackendUrl& url) -> std::unique_ptr<LockBackend> {
        PostgresOptions options = postgres_options_of(url);
        options.create_table = false;
        options.pool_size = 1;
        return std::make_unique<PostgresLock>(url.str(), options);
      },
      .schema =
          [](BackendUrl& url) { return PostgresLock::schema(postgres_options_of(url).table); },
      .migrate =
          [](BackendUrl& url) {
            PostgresOptions options = postgres_options_of(url);
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
