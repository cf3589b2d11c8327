#include "backend_url.h"

#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "exit_codes.h"
#include "idempotency/errors.h"
#include "idempotency/open_backend.h"

namespace idempotency::cli {
namespace {

// Removes `table=NAME` from a query string; returns the remaining query and the table.
std::pair<std::string, std::string> take_table(std::string_view query) {
  std::string rest;
  std::string table;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (param.substr(0, 6) == "table=") {
      table = std::string(param.substr(6));
      if (table.empty()) throw usage_error("backend URL: table= needs a name");
    } else if (!param.empty()) {
      rest += (rest.empty() ? "" : "&") + std::string(param);
    }
  }
  return {rest, table};
}

}  // namespace

Dialect parse_dialect(std::string_view name) {
  if (name == "sqlite") return Dialect::kSqlite;
  if (name == "postgres" || name == "postgresql") return Dialect::kPostgres;
  throw usage_error("--dialect must be sqlite or postgres");
}

SqlTarget parse_sql_url(std::string_view url) {
  const auto sep = url.find("://");
  if (sep == std::string_view::npos) {
    throw usage_error("backend URL must look like SCHEME://...");
  }
  const std::string_view scheme = url.substr(0, sep);
  SqlTarget target;
  if (scheme == "sqlite") {
    target.dialect = Dialect::kSqlite;
  } else if (scheme == "postgres" || scheme == "postgresql") {
    target.dialect = Dialect::kPostgres;
  } else {
    throw usage_error("schema and migrate need a sqlite:// or postgres:// backend URL");
  }
  const auto q = url.find('?');
  auto [query, table] =
      take_table(q == std::string_view::npos ? std::string_view() : url.substr(q + 1));
  if (!table.empty()) target.table = table;
  if (target.dialect == Dialect::kSqlite) {
    if (!query.empty()) throw usage_error("sqlite backend URL: the only parameter is table=NAME");
    const std::string_view rest = url.substr(sep + 3);
    target.location = std::string(rest.substr(0, rest.find('?')));
    if (target.location.empty()) {
      throw usage_error("sqlite backend URL needs a file: sqlite:///PATH");
    }
  } else {
    target.location = std::string(url.substr(0, q));
    if (!query.empty()) target.location += "?" + query;
  }
  return target;
}

std::unique_ptr<LockBackend> open_existing_backend(std::string_view url) {
  if (url.substr(0, 9) == "sqlite://") {
    const SqlTarget target = parse_sql_url(url);
    std::error_code ec;
    if (!std::filesystem::exists(target.location, ec)) {
      throw StoreError("sqlite: the database file does not exist (idem migrate creates it)");
    }
  }
  try {
    return open_backend(url);
  } catch (const std::invalid_argument& e) {
    throw usage_error(one_line(e.what()));
  }
}

std::string one_line(std::string_view message) {
  std::string out;
  for (const char c : message) {
    if (c == '\n' || c == '\r') {
      if (!out.empty() && out.back() != ' ') out += "; ";
    } else {
      out += c;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  return out;
}

}  // namespace idempotency::cli
