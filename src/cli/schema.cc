// `idem schema` and `idem migrate`: the SQL DDL, printed or applied.
#include <filesystem>
#include <ostream>
#include <stdexcept>
#include <system_error>

#include "backend_url.h"
#include "commands.h"
#include "idempotency/errors.h"
#ifdef IDEMPOTENCY_HAVE_SQLITE
#include "idempotency/sqlite_lock.h"
#endif
#ifdef IDEMPOTENCY_HAVE_POSTGRES
#include "idempotency/postgres_lock.h"
#endif

namespace idempotency::cli {
namespace {

// The DDL for `table` in `dialect`; the backends' own schema() also validates the name.
std::string ddl(Dialect dialect, const std::string& table) {
  try {
    if (dialect == Dialect::kSqlite) {
#ifdef IDEMPOTENCY_HAVE_SQLITE
      return SqliteLock::schema(table);
#endif
    } else {
#ifdef IDEMPOTENCY_HAVE_POSTGRES
      return PostgresLock::schema(table);
#endif
    }
  } catch (const std::invalid_argument& e) {
    throw usage_error(one_line(e.what()));
  }
  throw usage_error(std::string(dialect == Dialect::kSqlite ? "sqlite" : "postgres") +
                    " support is not built into this idem");
}

#ifdef IDEMPOTENCY_HAVE_SQLITE
ExitCode migrate_sqlite(const SqlTarget& target, std::ostream& out) {
  const std::string statements = ddl(Dialect::kSqlite, target.table);
  std::error_code ec;
  const bool existed = std::filesystem::exists(target.location, ec);
  const SqliteLock opened(target.location, {.table = target.table});  // applies the DDL
  out << (existed ? "sqlite file " + target.location + " exists; ensured table \""
                  : "created sqlite file " + target.location + " with table \"")
      << target.table << "\" and its expiry index (CREATE ... IF NOT EXISTS):\n"
      << statements;
  return ExitCode::kOk;
}
#endif

#ifdef IDEMPOTENCY_HAVE_POSTGRES
ExitCode migrate_postgres(const SqlTarget& target, std::ostream& out) {
  const std::string statements = ddl(Dialect::kPostgres, target.table);
  // First without create_table: succeeding proves the table is already there, and a role
  // without CREATE permission can still check its database.
  try {
    const PostgresLock present(target.location,
                               {.table = target.table, .create_table = false, .pool_size = 1});
    out << "table " << target.table << " already exists; nothing to do\n";
    return ExitCode::kOk;
  } catch (const StoreError&) {
    // Missing (or unreachable: the second attempt reports that with the server's message).
  } catch (const std::invalid_argument& e) {
    throw usage_error(one_line(e.what()));
  }
  try {
    const PostgresLock created(target.location,
                               {.table = target.table, .create_table = true, .pool_size = 1});
  } catch (const std::invalid_argument& e) {
    throw usage_error(one_line(e.what()));
  }
  out << "created table " << target.table << " and its expiry index:\n" << statements;
  return ExitCode::kOk;
}
#endif

}  // namespace

ExitCode run_schema(const SchemaRequest& request, std::ostream& out) {
  SqlTarget target;
  if (request.dialect) {
    target.dialect = parse_dialect(*request.dialect);
    if (request.table) target.table = *request.table;
  } else if (!request.backend_url.empty()) {
    target = parse_sql_url(request.backend_url);
  } else {
    throw usage_error("schema needs --backend URL or --dialect sqlite|postgres");
  }
  out << ddl(target.dialect, target.table);
  return ExitCode::kOk;
}

ExitCode run_migrate(const std::string& backend_url, std::ostream& out) {
  const SqlTarget target = parse_sql_url(backend_url);
#ifdef IDEMPOTENCY_HAVE_SQLITE
  if (target.dialect == Dialect::kSqlite) return migrate_sqlite(target, out);
#endif
#ifdef IDEMPOTENCY_HAVE_POSTGRES
  if (target.dialect == Dialect::kPostgres) return migrate_postgres(target, out);
#endif
  throw usage_error("this idem was built without support for that backend");
}

}  // namespace idempotency::cli
