// Backend URLs as the CLI needs them: opened for reading existing records, or parsed (with
// no connection) into the SQL dialect, location and table for `schema` and `migrate`.
//
// No message built here contains the URL, which may hold a password.
//
// Thread safety: pure functions, except open_existing_backend (it opens a store).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "idempotency/backend.h"

namespace idempotency::cli {

/// The table every backend uses unless told otherwise.
inline constexpr std::string_view kDefaultTable = "idempotency_records";

/// The SQL dialects whose DDL the CLI prints.
enum class Dialect { kSqlite, kPostgres };

/// SqlTarget is a sqlite:// or postgres:// URL taken apart.
struct SqlTarget {
  Dialect dialect = Dialect::kSqlite;
  /// The sqlite file path, or the PostgreSQL URL without the `table` parameter.
  std::string location;
  std::string table = std::string(kDefaultTable);
};

/// parse_dialect() maps "sqlite" / "postgres" (or "postgresql") to a Dialect; throws a usage
/// CliError otherwise.
[[nodiscard]] Dialect parse_dialect(std::string_view name);

/// parse_sql_url() takes a sqlite:// or postgres:// URL apart without connecting. Throws a
/// usage CliError for any other scheme or a malformed URL.
[[nodiscard]] SqlTarget parse_sql_url(std::string_view url);

/// open_existing_backend() opens the backend `url` names for reading and changing existing
/// records. A sqlite file that does not exist is a StoreError instead of a new empty
/// database (only `migrate` creates one). Throws a usage CliError for a bad URL.
[[nodiscard]] std::unique_ptr<LockBackend> open_existing_backend(std::string_view url);

/// one_line() flattens a (store's) message onto one line.
[[nodiscard]] std::string one_line(std::string_view message);

}  // namespace idempotency::cli
