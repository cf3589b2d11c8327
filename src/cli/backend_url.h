// Backend URLs as the CLI needs them, all through the backend registry: opened for reading
// existing records, or handed to a backend's own schema and migrate.
//
// No message built here contains the URL, which may hold a password.
//
// Thread safety: pure functions, except open_existing_backend (it opens a store).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "idempotency/backend.h"
#include "idempotency/backend_registry.h"

namespace idempotency::cli {

/// open_existing_backend() opens the backend `url` names for reading and changing existing
/// records, never creating a store that is not there yet (a sqlite file that does not exist is
/// a StoreError; only `migrate` creates one). Throws a usage CliError for a bad URL.
[[nodiscard]] std::unique_ptr<LockBackend> open_existing_backend(std::string_view url);

/// parse_url() takes `url` apart. Throws a usage CliError when it is malformed.
[[nodiscard]] BackendUrl parse_url(std::string_view url);

/// sql_backend() returns the entry of the backend `scheme` names when it has an SQL schema.
/// Throws a usage CliError starting with `what` and listing the backends that have one.
[[nodiscard]] const BackendEntry& sql_backend(std::string_view scheme, std::string_view what);

/// as_usage() runs `call`, turning the library's `std::invalid_argument` (a bad URL, table
/// name or parameter) into a one-line usage CliError.
std::string as_usage(const std::function<std::string()>& call);

/// one_line() flattens a (store's) message onto one line.
[[nodiscard]] std::string one_line(std::string_view message);

}  // namespace idempotency::cli
