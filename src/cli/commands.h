// The idem subcommands. Each writes its report to `out` and returns the exit code, or throws
// `CliError` (usage, no record, refused) or `StoreError` for main() to report on stderr.
// No command ever writes the key; `key_fingerprint(key)` stands in for it.
//
// Thread safety: each command opens its own backend; call from one thread.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "exit_codes.h"

namespace idempotency::cli {

/// run_inspect() prints `key`'s record: state, fence, times, token, result size, fingerprint.
[[nodiscard]] ExitCode run_inspect(const std::string& backend_url, const std::string& key,
                                   std::ostream& out);

/// run_release() releases `key`'s stuck CLAIMED record at its current fence when `confirmed`;
/// otherwise prints what it would do and returns kConfirmationRequired.
[[nodiscard]] ExitCode run_release(const std::string& backend_url, const std::string& key,
                                   bool confirmed, std::ostream& out);

/// run_purge_expired() deletes the records past their `expires_at` and prints how many.
[[nodiscard]] ExitCode run_purge_expired(const std::string& backend_url, std::ostream& out);

/// SchemaRequest says which DDL to print: from a backend URL, or a dialect and table.
struct SchemaRequest {
  std::string backend_url;
  std::optional<std::string> dialect;
  std::optional<std::string> table;
};

/// run_schema() prints the SQL DDL without connecting to any database.
[[nodiscard]] ExitCode run_schema(const SchemaRequest& request, std::ostream& out);

/// run_migrate() creates the table (and its index) where missing and says what it did.
[[nodiscard]] ExitCode run_migrate(const std::string& backend_url, std::ostream& out);

}  // namespace idempotency::cli
