#include "idempotency/open_backend.h"

#include <stdexcept>
#include <string>

#include "idempotency/memory_lock.h"
#ifdef IDEMPOTENCY_HAVE_SQLITE
#include "idempotency/sqlite_lock.h"
#endif
#ifdef IDEMPOTENCY_HAVE_REDIS
#include "idempotency/redis_lock.h"
#endif
#ifdef IDEMPOTENCY_HAVE_POSTGRES
#include "idempotency/postgres_lock.h"
#endif
#ifdef IDEMPOTENCY_HAVE_DATASTORE
#include "idempotency/datastore_lock.h"
#endif

namespace idempotency {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Splits "path?table=NAME" into the path and the table (empty when absent). Any other query
// parameter is refused rather than silently ignored.
[[maybe_unused]] std::pair<std::string, std::string> split_table(std::string_view rest,
                                                                 std::string_view scheme) {
  const auto q = rest.find('?');
  if (q == std::string_view::npos) return {std::string(rest), {}};
  const std::string_view query = rest.substr(q + 1);
  if (query.substr(0, 6) != "table=" || query.find('&') != std::string_view::npos) {
    throw std::invalid_argument(std::string(scheme) +
                                " backend URL: the only query parameter is table=NAME");
  }
  return {std::string(rest.substr(0, q)), std::string(query.substr(6))};
}

// Takes `table=NAME` out of a postgres URL's query and keeps every other parameter (sslmode,
// connect_timeout, …) for libpq.
[[maybe_unused]] std::pair<std::string, std::string> take_table(std::string_view url) {
  const auto q = url.find('?');
  if (q == std::string_view::npos) return {std::string(url), {}};
  std::string kept;
  std::string table;
  std::string_view query = url.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    if (param.substr(0, 6) == "table=") {
      table = std::string(param.substr(6));
    } else if (!param.empty()) {
      kept += (kept.empty() ? "" : "&") + std::string(param);
    }
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
  }
  std::string base(url.substr(0, q));
  if (!kept.empty()) base += "?" + kept;
  return {base, table};
}

}  // namespace

std::vector<std::string> backend_schemes() {
  std::vector<std::string> schemes = {"memory"};
#ifdef IDEMPOTENCY_HAVE_SQLITE
  schemes.emplace_back("sqlite");
#endif
#ifdef IDEMPOTENCY_HAVE_REDIS
  schemes.emplace_back("redis");
#endif
#ifdef IDEMPOTENCY_HAVE_POSTGRES
  schemes.emplace_back("postgres");
#endif
#ifdef IDEMPOTENCY_HAVE_DATASTORE
  schemes.emplace_back("datastore");
#endif
  return schemes;
}

std::unique_ptr<LockBackend> open_backend(std::string_view url, const BackendOptions& options) {
  const auto colon = url.find("://");
  if (colon == std::string_view::npos) {
    throw std::invalid_argument("backend URL must look like SCHEME://…; built in: " +
                                join(backend_schemes()));
  }
  const std::string scheme(url.substr(0, colon));
  const std::string_view rest = url.substr(colon + 3);
  if (scheme == "memory") {
    if (!rest.empty()) throw std::invalid_argument("memory backend URL takes nothing: memory://");
    return std::make_unique<InMemoryLock>(options);
  }
#ifdef IDEMPOTENCY_HAVE_SQLITE
  if (scheme == "sqlite") {
    auto [path, table] = split_table(rest, scheme);
    if (path.empty())
      throw std::invalid_argument("sqlite backend URL needs a file: sqlite:///PATH");
    SqliteOptions sqlite{.backend = options};
    if (!table.empty()) sqlite.table = table;
    return std::make_unique<SqliteLock>(path, std::move(sqlite));
  }
#endif
#ifdef IDEMPOTENCY_HAVE_REDIS
  if (scheme == "redis") return std::make_unique<RedisLock>(url, RedisOptions{.backend = options});
#endif
#ifdef IDEMPOTENCY_HAVE_POSTGRES
  if (scheme == "postgres" || scheme == "postgresql") {
    auto [base, table] = take_table(url);
    PostgresOptions postgres{.backend = options};
    if (!table.empty()) postgres.table = table;
    return std::make_unique<PostgresLock>(base, std::move(postgres));
  }
#endif
#ifdef IDEMPOTENCY_HAVE_DATASTORE
  if (scheme == "datastore") {
    return std::make_unique<DatastoreLock>(
        parse_datastore_url(url, DatastoreOptions{.backend = options}));
  }
#endif
  throw std::invalid_argument("backend URL scheme '" + scheme.substr(0, 16) +
                              "' is not built in; built in: " + join(backend_schemes()));
}

}  // namespace idempotency
