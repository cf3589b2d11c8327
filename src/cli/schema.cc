// `idem schema` and `idem migrate`: the SQL DDL, printed or applied, by the backend's own
// registry entry.
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "backend_url.h"
#include "commands.h"
#include "exit_codes.h"

namespace idempotency::cli {

ExitCode run_schema(const SchemaRequest& request, std::ostream& out) {
  if (request.dialect) {
    std::vector<UrlParameter> table;
    if (request.table) table.push_back({"table", *request.table});
    BackendUrl url(*request.dialect, "", std::move(table));
    const BackendEntry& entry = sql_backend(url.scheme(), "--dialect names no SQL backend");
    out << as_usage([&] { return entry.schema(url); });
    return ExitCode::kOk;
  }
  if (request.backend_url.empty()) {
    throw usage_error("schema needs --backend URL or --dialect NAME");
  }
  BackendUrl url = parse_url(request.backend_url);
  const BackendEntry& entry = sql_backend(url.scheme(), "schema needs an SQL backend URL");
  out << as_usage([&] { return entry.schema(url); });
  return ExitCode::kOk;
}

ExitCode run_migrate(const std::string& backend_url, std::ostream& out) {
  BackendUrl url = parse_url(backend_url);
  const BackendEntry& entry = sql_backend(url.scheme(), "migrate needs an SQL backend URL");
  if (!entry.migrate) throw usage_error("this backend's schema is applied by hand");
  out << as_usage([&] { return entry.migrate(url); });
  return ExitCode::kOk;
}

}  // namespace idempotency::cli
