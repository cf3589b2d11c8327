// The SQLite backend's registry entry: `sqlite:///PATH[?table=NAME]`, its DDL, and the CLI's
// migrate, which creates the file and table (and says whether the file was there before).
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>

#include "idempotency/backend_registry.h"
#include "idempotency/errors.h"
#include "idempotency/sqlite_lock.h"

namespace idempotency::registry_detail {
namespace {

SqliteOptions sqlite_options_of(BackendUrl& url, const BackendOptions& backend = {}) {
  SqliteOptions options{.backend = backend};
  if (auto table = take_table(url)) options.table = std::move(*table);
  url.refuse_rest("sqlite backend URL: the only query parameter is table=NAME");
  return options;
}

const std::string& file_of(const BackendUrl& url) {
  if (url.location().empty()) {
    throw std::invalid_argument("sqlite backend URL needs a file: sqlite:///PATH");
  }
  return url.location();
}

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

}  // namespace

BackendEntry sqlite_backend_entry() {
  return BackendEntry{
      .schemes = {"sqlite"},
      .url_form = "sqlite:///PATH[?table=NAME]",
      .open = [](BackendUrl& url, const BackendOptions& backend) -> std::unique_ptr<LockBackend> {
        SqliteOptions options = sqlite_options_of(url, backend);
        return std::make_unique<SqliteLock>(file_of(url), std::move(options));
      },
      .open_existing = [](BackendUrl& url) -> std::unique_ptr<LockBackend> {
        SqliteOptions options = sqlite_options_of(url);
        options.create_table = false;
        if (!file_exists(file_of(url))) {
          throw StoreError("sqlite: the database file does not exist (idem migrate creates it)");
        }
        return std::make_unique<SqliteLock>(url.location(), std::move(options));
      },
      .schema = [](BackendUrl& url) { return SqliteLock::schema(sqlite_options_of(url).table); },
      .migrate =
          [](BackendUrl& url) {
            const SqliteOptions options = sqlite_options_of(url);
            const std::string& path = file_of(url);
            const std::string statements = SqliteLock::schema(options.table);
            const bool existed = file_exists(path);
            const SqliteLock opened(path, options);  // applies the DDL
            return (existed ? "sqlite file " + path + " exists; ensured table \""
                            : "created sqlite file " + path + " with table \"") +
                   options.table + "\" and its expiry index (CREATE ... IF NOT EXISTS):\n" +
                   statements;
          }};
}

}  // namespace idempotency::registry_detail
