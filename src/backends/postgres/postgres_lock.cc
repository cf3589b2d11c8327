// PostgresLock: the transition table as single SQL statements, a bounded libpq pool.
#include "idempotency/postgres_lock.h"
#include "idempotency/detail/hex.h"

#include <libpq-fe.h>

#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/key.h"

namespace idempotency {
namespace {

struct ConnDeleter {
  void operator()(PGconn* c) const noexcept { PQfinish(c); }
};
struct ResultDeleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};
struct ConninfoDeleter {
  void operator()(PQconninfoOption* o) const noexcept { PQconninfoFree(o); }
};
struct FreememDeleter {
  void operator()(char* p) const noexcept { PQfreemem(p); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnDeleter>;
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;
using ConninfoPtr = std::unique_ptr<PQconninfoOption, ConninfoDeleter>;
using PqString = std::unique_ptr<char, FreememDeleter>;

// Type oids from pg_type.h (stable across server versions).
constexpr Oid kBoolOid = 16;
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kInt2Oid = 21;

constexpr std::size_t kMaxIdentifierPart = 48;
// Connection failures are retried once on a fresh connection, serialization failures and
// deadlocks (possible when the server defaults to SERIALIZABLE) a few times. Every operation
// is safe to repeat: see the header.
constexpr int kConnectionRetries = 1;
constexpr int kConflictRetries = 5;

// The server clock in epoch milliseconds; clock_timestamp() is the instant the statement
// reads it, not the transaction start.
constexpr const char* kServerNow = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

// ---------------------------------------------------------------------------------------
// Names and connection strings

struct TableName {
  std::string quoted;        // "schema"."name" or "name"
  std::string quoted_index;  // "name_expires_idx"
  std::string display;       // schema.name, for messages
};

bool identifier_part_ok(std::string_view part) {
  if (part.empty() || part.size() > kMaxIdentifierPart) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (!alpha(part.front())) return false;
  for (char c : part) {
    if (!alpha(c) && !digit(c)) return false;
  }
  return true;
}

TableName parse_table(std::string_view table) {
  const auto dot = table.find('.');
  std::string_view schema_part;
  std::string_view name = table;
  if (dot != std::string_view::npos) {
    schema_part = table.substr(0, dot);
    name = table.substr(dot + 1);
  }
  if ((dot != std::string_view::npos && !identifier_part_ok(schema_part)) ||
      !identifier_part_ok(name)) {
    throw std::invalid_argument(
        "PostgresOptions::table must be `name` or `schema.name`, each part 1-" +
        std::to_string(kMaxIdentifierPart) +
        " letters, digits or underscores, not starting with a digit");
  }
  TableName out;
  out.display = std::string(table);
  out.quoted = dot == std::string_view::npos
                   ? "\"" + std::string(name) + "\""
                   : "\"" + std::string(schema_part) + "\".\"" + std::string(name) + "\"";
  out.quoted_index = "\"" + std::string(name) + "_expires_idx\"";
  return out;
}

std::string ddl(const TableName& t) {
  return "CREATE TABLE IF NOT EXISTS " + t.quoted +
         " (\n"
         "  key bytea PRIMARY KEY,\n"
         "  state smallint NOT NULL CHECK (state IN (1, 2)),  -- 1 CLAIMED, 2 DONE\n"
         "  fence bigint NOT NULL CHECK (fence >= 1),\n"
         "  lease_expiry bigint NOT NULL,  -- epoch milliseconds\n"
         "  expires_at bigint NOT NULL,    -- epoch milliseconds\n"
         "  claim_token bytea NOT NULL,\n"
         "  result bytea,\n"
         "  fingerprint bytea\n"
         ");\n"
         "CREATE INDEX IF NOT EXISTS " +
         t.quoted_index + " ON " + t.quoted + " (expires_at);\n";
}

// url_scheme() returns the scheme when `conninfo` is a URL (`scheme://…`), else "" (a
// key/value string may contain "://" inside a value).
std::string_view url_scheme(std::string_view conninfo) {
  const auto end = conninfo.find("://");
  if (end == std::string_view::npos || end == 0) return {};
  const auto scheme = conninfo.substr(0, end);
  for (char c : scheme) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '+' || c == '-' || c == '.';
    if (!ok) return {};
  }
  return scheme;
}

void erase_all(std::string& text, const std::string& secret) {
  if (secret.empty()) return;
  for (auto pos = text.find(secret); pos != std::string::npos; pos = text.find(secret, pos)) {
    text.replace(pos, secret.size(), "***");
  }
}

// Whatever in a connection string could be a password: the user-info of a URL and every
// `password=` value (key/value form or URL query), so no message ever echoes it.
std::vector<std::string> secrets_of(std::string_view conninfo) {
  std::vector<std::string> out;
  if (const auto scheme = url_scheme(conninfo); !scheme.empty()) {
    const auto rest = conninfo.substr(scheme.size() + 3);
    const auto authority = rest.substr(0, rest.find_first_of("/?"));
    if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
      const auto userinfo = authority.substr(0, at);
      if (const auto colon = userinfo.find(':'); colon != std::string_view::npos) {
        out.emplace_back(userinfo.substr(colon + 1));
      }
      out.emplace_back(userinfo);
    }
  }
  for (auto pos = conninfo.find("password="); pos != std::string_view::npos;
       pos = conninfo.find("password=", pos + 1)) {
    auto value = conninfo.substr(pos + 9);
    if (!value.empty() && (value.front() == '\'' || value.front() == '"')) value.remove_prefix(1);
    value = value.substr(0, value.find_first_of(" &'\""));
    if (!value.empty()) out.emplace_back(value);
  }
  return out;
}

std::string tidy(std::string text, const std::vector<std::string>& secrets) {
  for (const auto& s : secrets) erase_all(text, s);
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// validate_conninfo() lets libpq parse the string (so every libpq option is accepted) and
// then checks the values libpq would only reject at connect time.
void validate_conninfo(std::string_view conninfo, const std::vector<std::string>& secrets) {
  const std::string text(conninfo);
  if (const auto scheme = url_scheme(text); !scheme.empty()) {
    if (scheme != "postgres" && scheme != "postgresql") {
      throw std::invalid_argument(
          "PostgreSQL URL has an unsupported scheme (expected postgres:// or postgresql://)");
    }
  }
  char* raw_error = nullptr;
  ConninfoPtr options(PQconninfoParse(text.c_str(), &raw_error));
  PqString error(raw_error);
  if (!options) {
    throw std::invalid_argument(
        "malformed PostgreSQL connection string: " +
        (error ? tidy(error.get(), secrets) : std::string("out of memory")));
  }
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr || *o->val == '\0') continue;
    const std::string_view keyword = o->keyword;
    const std::string_view value = o->val;
    if (keyword == "port") {
      std::string_view rest = value;
      while (true) {
        const auto comma = rest.find(',');
        const auto port = rest.substr(0, comma);
        if (!port.empty() &&
            (!all_digits(port) || port.size() > 5 || std::stoi(std::string(port)) < 1 ||
             std::stoi(std::string(port)) > 65535)) {
          throw std::invalid_argument(
              "malformed PostgreSQL connection string: the port must be a number from 1 to "
              "65535");
        }
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    } else if (keyword == "connect_timeout" && !all_digits(value)) {
      throw std::invalid_argument(
          "malformed PostgreSQL connection string: connect_timeout must be whole seconds");
    } else if (keyword == "sslmode" && value != "disable" && value != "allow" &&
               value != "prefer" && value != "require" && value != "verify-ca" &&
               value != "verify-full") {
      throw std::invalid_argument(
          "malformed PostgreSQL connection string: unknown sslmode (expected disable, allow, "
          "prefer, require, verify-ca or verify-full)");
    }
  }
}

// ---------------------------------------------------------------------------------------
// Parameters and results (binary format both ways)

void put_be64(std::int64_t v, std::array<char, 8>& out) {
  auto u = static_cast<std::uint64_t>(v);
  for (int i = 7; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>(u & 0xffU);
    u >>= 8;
  }
}

// Params collects one statement's parameters, all in binary format; byte values point into
// storage the caller keeps alive (its strings), integers into `ints_`.
class Params {
 public:
  void bytes(std::string_view b) { add(b.data() == nullptr ? "" : b.data(), b.size()); }
  void bytes(const std::optional<std::string>& b) {
    if (b) {
      bytes(std::string_view(*b));
    } else {
      add(nullptr, 0);  // SQL NULL
    }
  }
  void int8(std::int64_t v) {
    put_be64(v, ints_.at(int_count_));
    add(ints_.at(int_count_++).data(), 8);
  }
  void int8(std::optional<std::int64_t> v) {
    if (v) {
      int8(*v);
    } else {
      add(nullptr, 0);  // SQL NULL
    }
  }
  [[nodiscard]] int size() const { return static_cast<int>(count_); }
  [[nodiscard]] const char* const* values() const { return values_.data(); }
  [[nodiscard]] const int* lengths() const { return lengths_.data(); }
  [[nodiscard]] const int* formats() const { return formats_.data(); }

 private:
  void add(const char* p, std::size_t n) {
    values_.at(count_) = p;
    lengths_.at(count_) = static_cast<int>(n);
    formats_.at(count_) = 1;
    ++count_;
  }

  static constexpr std::size_t kMax = 8;
  std::array<const char*, kMax> values_{};
  std::array<int, kMax> lengths_{};
  std::array<int, kMax> formats_{};
  std::array<std::array<char, 8>, kMax> ints_{};
  std::size_t int_count_ = 0;
  std::size_t count_ = 0;
};

[[noreturn]] void bad_shape(const char* op, const std::string& what) {
  throw StoreError(std::string("postgres: ") + op + " got a reply of an unexpected shape (" + what +
                   ")");
}

void expect_shape(const PGresult* r, const char* op, int rows_min, int rows_max,
                  std::initializer_list<Oid> types) {
  const int rows = PQntuples(r);
  if (rows < rows_min || rows > rows_max) {
    bad_shape(op, std::to_string(rows) + " rows");
  }
  if (PQnfields(r) != static_cast<int>(types.size())) {
    bad_shape(op, std::to_string(PQnfields(r)) + " columns");
  }
  int i = 0;
  for (Oid t : types) {
    if (PQftype(r, i) != t || PQfformat(r, i) != 1) {
      bad_shape(op,
                "column " + std::to_string(i) + " has type oid " + std::to_string(PQftype(r, i)));
    }
    ++i;
  }
}

std::int64_t get_int(const PGresult* r, int row, int col, const char* op) {
  if (PQgetisnull(r, row, col) != 0) bad_shape(op, "null integer");
  const int len = PQgetlength(r, row, col);
  if (len != 2 && len != 8) bad_shape(op, "integer of " + std::to_string(len) + " bytes");
  const auto* p = reinterpret_cast<const unsigned char*>(PQgetvalue(r, row, col));
  std::uint64_t u = 0;
  for (int i = 0; i < len; ++i) u = (u << 8) | p[i];
  if (len == 2) return static_cast<std::int16_t>(static_cast<std::uint16_t>(u));
  return static_cast<std::int64_t>(u);
}

bool get_bool(const PGresult* r, int row, int col, const char* op) {
  if (PQgetisnull(r, row, col) != 0 || PQgetlength(r, row, col) != 1) {
    bad_shape(op, "bad boolean");
  }
  return *PQgetvalue(r, row, col) != 0;
}

std::optional<std::string> get_bytes(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col) != 0) return std::nullopt;
  return std::string(PQgetvalue(r, row, col), static_cast<std::size_t>(PQgetlength(r, row, col)));
}

RecordState get_state(const PGresult* r, int row, int col, const char* op) {
  const auto v = get_int(r, row, col, op);
  if (v == 1) return RecordState::kClaimed;
  if (v == 2) return RecordState::kDone;
  bad_shape(op, "state " + std::to_string(v));
}

std::string hex(std::string_view bytes) {
  return detail::to_hex(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

// ---------------------------------------------------------------------------------------
// The pool

class Pool;

// Lease is one borrowed connection; it goes back to the pool (or is dropped when broken)
// on destruction.
class Lease {
 public:
  Lease(Pool* pool, ConnPtr conn) : pool_(pool), conn_(std::move(conn)) {}
  Lease(Lease&& other) noexcept
      : pool_(std::exchange(other.pool_, nullptr)), conn_(std::move(other.conn_)) {}
  Lease& operator=(Lease&&) = delete;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease();
  [[nodiscard]] PGconn* get() const { return conn_.get(); }
  void discard() { conn_.reset(); }

 private:
  Pool* pool_;
  ConnPtr conn_;
};

class Pool {
 public:
  Pool(std::size_t size, std::chrono::milliseconds wait, std::function<ConnPtr()> connect)
      : size_(size), wait_(wait), connect_(std::move(connect)) {}

  // add() hands the pool an already open connection (the constructor's first one).
  void add(ConnPtr conn) {
    std::lock_guard lock(mu_);
    ++open_;
    idle_.push_back(std::move(conn));
  }

  Lease acquire() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, wait_, [&] { return !idle_.empty() || open_ < size_; })) {
      throw StoreError("postgres: no pooled connection became free within " +
                       std::to_string(wait_.count()) + " ms (pool_size " + std::to_string(size_) +
                       ")");
    }
    if (!idle_.empty()) {
      ConnPtr conn = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(conn));
    }
    ++open_;
    lock.unlock();
    try {
      return Lease(this, connect_());
    } catch (...) {
      give_back(nullptr);
      throw;
    }
  }

  void give_back(ConnPtr conn) noexcept {
    ConnPtr doomed;
    {
      std::lock_guard lock(mu_);
      if (conn && PQstatus(conn.get()) == CONNECTION_OK &&
          PQtransactionStatus(conn.get()) == PQTRANS_IDLE) {
        idle_.push_back(std::move(conn));
      } else {
        doomed = std::move(conn);
        --open_;
      }
    }
    cv_.notify_one();
  }

 private:
  const std::size_t size_;
  const std::chrono::milliseconds wait_;
  const std::function<ConnPtr()> connect_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ConnPtr> idle_;
  std::size_t open_ = 0;
};

Lease::~Lease() {
  if (pool_ != nullptr) pool_->give_back(std::move(conn_));
}

void ignore_notice(void* /*arg*/, const char* /*message*/) {}

}  // namespace

// ---------------------------------------------------------------------------------------

struct PostgresLock::Impl {
  Impl(std::string_view conninfo_or_url, const PostgresOptions& o)
      : conninfo(conninfo_or_url),
        secrets(secrets_of(conninfo_or_url)),
        table(parse_table(o.table)),
        options(o),
        pool(o.pool_size, o.pool_wait, [this] { return open(); }) {
    if (o.pool_size == 0) throw std::invalid_argument("PostgresOptions::pool_size must be >= 1");
    if (o.purge_batch == 0 || o.purge_batch > static_cast<std::size_t>(INT_MAX)) {
      throw std::invalid_argument("PostgresOptions::purge_batch must be from 1 to INT_MAX");
    }
    if (o.pool_wait.count() < 0 || o.statement_timeout.count() < 0) {
      throw std::invalid_argument("PostgresOptions::pool_wait and statement_timeout must be >= 0");
    }
    validate_conninfo(conninfo_or_url, secrets);
    build_sql();
    // Connect now, so a bad server, password or table fails the constructor, not a claim.
    ConnPtr first = connect();
    ensure_table(first.get());
    prepare(first.get());
    pool.add(std::move(first));
  }

  void build_sql() {
    const std::string& t = table.quoted;
    const std::string now = std::string("WITH c AS MATERIALIZED (SELECT coalesce($2::bigint, ") +
                            kServerNow + ") AS n) ";
    // In DO UPDATE only the target row and EXCLUDED are visible, so `n` is recovered from
    // the proposed row: excluded.lease_expiry = n + lease.
    const std::string n = "(excluded.lease_expiry - $3)";
    // transition(): an expired record, or a CLAIMED one whose lease lapsed, is reclaimed with
    // fence + 1, whatever its token; everything else is kept, and a kept CLAIMED row is the
    // caller's (a re-affirm) only when its token is the caller's, i.e. only while its lease is
    // live. release empties the token, so a released row is never re-affirmed.
    const std::string reclaim =
        "(" + n + " >= r.expires_at OR (r.state = 1 AND " + n + " >= r.lease_expiry))";
    auto pick = [&](const std::string& fresh, const std::string& kept) {
      return "CASE WHEN " + reclaim + " THEN " + fresh + " ELSE " + kept + " END";
    };
    // Every conflict rewrites the row (with itself when nothing changes) so RETURNING always
    // yields the record as it now stands: one round trip, no snapshot-vs-latest-row race.
    claim_sql = now + "INSERT INTO " + t +
                " AS r (key, state, fence, lease_expiry, expires_at, claim_token, result, "
                "fingerprint) SELECT $1, 1, 1, c.n + $3, c.n + $3 + $4, $5, NULL, $6 FROM c "
                "ON CONFLICT (key) DO UPDATE SET state = " +
                pick("1", "r.state") + ", fence = " + pick("r.fence + 1", "r.fence") +
                ", lease_expiry = " + pick("excluded.lease_expiry", "r.lease_expiry") +
                ", expires_at = " + pick("excluded.expires_at", "r.expires_at") +
                ", claim_token = " + pick("excluded.claim_token", "r.claim_token") +
                ", result = " + pick("NULL", "r.result") +
                ", fingerprint = " + pick("excluded.fingerprint", "r.fingerprint") +
                " RETURNING r.state, r.fence, r.lease_expiry, (r.claim_token = $5), r.result, "
                "r.fingerprint";
    // complete(): fence match on a live record; CLAIMED -> DONE, a DONE one stays as it is.
    // complete() and release() wake cross-instance waiters in the same round trip: NOTIFY on
    // the table's channel with the key's fingerprint, only when a row changed.
    channel = "idempotency_" + key_fingerprint(t);
    auto notifying = [&](const std::string& update) {
      return "WITH c AS MATERIALIZED (SELECT coalesce($2::bigint, " + std::string(kServerNow) +
             ") AS n), u AS (" + update + ") SELECT u.fence FROM u, LATERAL (SELECT pg_notify('" +
             channel + "', left(encode(sha256($1), 'hex'), 12))) AS notified";
    };
    complete_sql = notifying("UPDATE " + t +
                             " AS r SET state = 2, "
                             "result = CASE WHEN r.state = 1 THEN $4 ELSE r.result END, "
                             "expires_at = CASE WHEN r.state = 1 THEN c.n + $5 ELSE r.expires_at "
                             "END FROM c WHERE r.key = $1 AND r.fence = $3 AND c.n < r.expires_at "
                             "RETURNING r.fence");
    release_sql = notifying("UPDATE " + t +
                            " AS r SET lease_expiry = c.n, fence = r.fence + 1, "
                            "claim_token = ''::bytea, "
                            "expires_at = greatest(r.expires_at, c.n + $4) "
                            "FROM c WHERE r.key = $1 AND r.fence = $3 AND r.state = 1 AND "
                            "c.n < r.expires_at RETURNING r.fence");
    // extend(): fence and token on a live CLAIMED row (a release empties the token); no NOTIFY,
    // since nobody waits for a lease to grow, and NOTIFY's commit-time lock would serialize
    // every heartbeat.
    extend_sql = now + "UPDATE " + t +
                 " AS r SET lease_expiry = c.n + $5, "
                 "expires_at = greatest(r.expires_at, c.n + $5 + $6) "
                 "FROM c WHERE r.key = $1 AND r.fence = $3 AND r.state = 1 AND "
                 "r.claim_token = $4 AND $4 <> ''::bytea AND c.n < r.expires_at "
                 "RETURNING r.lease_expiry";
    purge_sql = std::string("WITH c AS MATERIALIZED (SELECT coalesce($1::bigint, ") + kServerNow +
                ") AS n), victims AS (SELECT v.key FROM " + t +
                " AS v, c WHERE v.expires_at <= c.n LIMIT $2 FOR UPDATE OF v SKIP LOCKED) "
                "DELETE FROM " +
                t + " AS d USING victims, c WHERE d.key = victims.key AND d.expires_at <= c.n";
    record_sql =
        "SELECT state, fence, lease_expiry, expires_at, claim_token, result, "
        "fingerprint FROM " +
        t + " WHERE key = $1";
  }

  ConnPtr connect() {
    // Defaults first: the expanded conninfo (dbname with expand_dbname) overrides them.
    const std::array<const char*, 4> keys{"connect_timeout", "application_name", "dbname", nullptr};
    const std::array<const char*, 4> values{"10", "gcp-pubsub-idempotency", conninfo.c_str(),
                                            nullptr};
    ConnPtr conn(PQconnectdbParams(keys.data(), values.data(), 1));
    if (!conn) throw StoreError("postgres: cannot connect: out of memory");
    if (PQstatus(conn.get()) != CONNECTION_OK) {
      throw StoreError("postgres: cannot connect: " + tidy(PQerrorMessage(conn.get()), secrets));
    }
    PQsetNoticeProcessor(conn.get(), ignore_notice, nullptr);
    exec_simple(conn.get(),
                "SET statement_timeout = " + std::to_string(options.statement_timeout.count()),
                "connection setup");
    return conn;
  }

  ConnPtr open() {
    ConnPtr conn = connect();
    prepare(conn.get());
    return conn;
  }

  std::string error_of(PGconn* conn, const PGresult* res, std::string_view key = {}) const {
    std::string msg;
    if (res != nullptr) {
      const char* primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
      const char* state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
      if (primary != nullptr) msg = primary;
      if (state != nullptr) msg += std::string(" (SQLSTATE ") + state + ")";
    }
    if (msg.empty()) msg = PQerrorMessage(conn);
    if (msg.empty()) msg = "unknown error";
    msg = tidy(std::move(msg), secrets);
    if (key.size() >= 3) {
      erase_all(msg, std::string(key));
      erase_all(msg, "\\x" + hex(key));
    }
    return msg;
  }

  void exec_simple(PGconn* conn, const std::string& sql, const char* what) {
    ResultPtr res(PQexec(conn, sql.c_str()));
    const auto status = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      throw StoreError(std::string("postgres: ") + what + " failed: " + error_of(conn, res.get()));
    }
  }

  bool table_exists(PGconn* conn) {
    const std::string sql = "SELECT to_regclass('" + table.quoted + "') IS NOT NULL";
    ResultPtr res(PQexecParams(conn, sql.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 1));
    if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
      throw StoreError("postgres: checking for the table failed: " + error_of(conn, res.get()));
    }
    expect_shape(res.get(), "table check", 1, 1, {kBoolOid});
    return get_bool(res.get(), 0, 0, "table check");
  }

  void ensure_table(PGconn* conn) {
    // Looked up first: CREATE ... IF NOT EXISTS still needs CREATE permission on the schema.
    if (table_exists(conn)) return;
    if (!options.create_table) {
      throw StoreError("postgres: table " + table.display +
                       " does not exist and create_table is off; apply "
                       "PostgresLock::schema() first");
    }
    // One implicit transaction; the advisory lock keeps racing processes from colliding in
    // the catalog (CREATE TABLE IF NOT EXISTS is not atomic against itself).
    exec_simple(conn,
                "SELECT pg_advisory_xact_lock(hashtext('gcp-pubsub-idempotency " + table.quoted +
                    "')); " + ddl(table),
                "creating the table");
  }

  void prepare_one(PGconn* conn, const char* name, const std::string& sql,
                   std::initializer_list<Oid> types) {
    const std::vector<Oid> oids(types);
    ResultPtr res(PQprepare(conn, name, sql.c_str(), static_cast<int>(oids.size()), oids.data()));
    if (!res || PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
      throw StoreError(std::string("postgres: preparing ") + name +
                       " failed: " + error_of(conn, res.get()));
    }
  }

  void prepare(PGconn* conn) {
    prepare_one(conn, "idem_claim", claim_sql,
                {kByteaOid, kInt8Oid, kInt8Oid, kInt8Oid, kByteaOid, kByteaOid});
    prepare_one(conn, "idem_complete", complete_sql,
                {kByteaOid, kInt8Oid, kInt8Oid, kByteaOid, kInt8Oid});
    prepare_one(conn, "idem_release", release_sql, {kByteaOid, kInt8Oid, kInt8Oid, kInt8Oid});
    prepare_one(conn, "idem_extend", extend_sql,
                {kByteaOid, kInt8Oid, kInt8Oid, kByteaOid, kInt8Oid, kInt8Oid});
    prepare_one(conn, "idem_purge", purge_sql, {kInt8Oid, kInt8Oid});
    prepare_one(conn, "idem_record", record_sql, {kByteaOid});
  }

  // now() is the client clock's instant when one was injected, else nullopt (server clock).
  [[nodiscard]] std::optional<std::int64_t> now() const {
    if (options.backend.clock) return to_millis(options.backend.clock->now());
    return std::nullopt;
  }

  // run() executes a prepared statement on a pooled connection and hands the result to
  // `decode` while the connection is still borrowed. A connection that broke is dropped and
  // the statement retried once on a fresh one; serialization failures are retried too.
  template <class Decode>
  auto run(const char* name, const char* op, std::string_view key, const Params& params,
           Decode&& decode) {
    int connection_failures = 0;
    int conflicts = 0;
    while (true) {
      Lease lease = pool.acquire();
      ResultPtr res(PQexecPrepared(lease.get(), name, params.size(), params.values(),
                                   params.lengths(), params.formats(), 1));
      const auto status = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
      if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) return decode(res.get());
      const std::string message = error_of(lease.get(), res.get(), key);
      const char* sqlstate = res ? PQresultErrorField(res.get(), PG_DIAG_SQLSTATE) : nullptr;
      if (PQstatus(lease.get()) != CONNECTION_OK) {
        lease.discard();
        if (connection_failures++ < kConnectionRetries) continue;
      } else if (sqlstate != nullptr &&
                 (std::strcmp(sqlstate, "40001") == 0 || std::strcmp(sqlstate, "40P01") == 0) &&
                 conflicts++ < kConflictRetries) {
        continue;
      }
      std::string text = std::string("postgres: ") + op + " failed";
      if (!key.empty()) text += " for key " + key_fingerprint(key);
      text += ": ";
      text += message;
      throw StoreError(text);
    }
  }

  std::string conninfo;
  std::vector<std::string> secrets;
  TableName table;
  PostgresOptions options;
  std::string claim_sql, complete_sql, release_sql, extend_sql, purge_sql, record_sql;
  std::string channel;  // LISTEN/NOTIFY channel of this table
  Pool pool;            // last: its connections are closed first
};

PostgresLock::PostgresLock(std::string_view conninfo_or_url, const PostgresOptions& options)
    : LockBackend(options.backend), impl_(std::make_unique<Impl>(conninfo_or_url, options)) {}

PostgresLock::~PostgresLock() = default;

std::string PostgresLock::schema(std::string_view table) { return ddl(parse_table(table)); }

ClaimResult PostgresLock::do_claim(std::string_view key, std::chrono::milliseconds lease,
                                   const ClaimRequest& request) {
  if (request.claim_token.empty()) {
    // The port always sets one; the answer below is judged by it.
    throw std::invalid_argument("claim token is empty");
  }
  Params p;
  p.bytes(key);
  p.int8(impl_->now());
  p.int8(static_cast<std::int64_t>(lease.count()));
  p.int8(static_cast<std::int64_t>(ttl().count()));
  p.bytes(std::string_view(request.claim_token));
  p.bytes(request.fingerprint);
  return impl_->run("idem_claim", "claim", key, p, [&](const PGresult* r) -> ClaimResult {
    expect_shape(r, "claim", 1, 1, {kInt2Oid, kInt8Oid, kInt8Oid, kBoolOid, kByteaOid, kByteaOid});
    const RecordState state = get_state(r, 0, 0, "claim");
    const std::int64_t fence = get_int(r, 0, 1, "claim");
    const TimePoint lease_expiry = from_millis(get_int(r, 0, 2, "claim"));
    const bool mine = get_bool(r, 0, 3, "claim");
    if (fence < 1) bad_shape("claim", "fence " + std::to_string(fence));
    if (state == RecordState::kDone) return AlreadyDone{get_bytes(r, 0, 4), get_bytes(r, 0, 5)};
    if (mine) return Won{Claim{std::string(key), fence, lease_expiry, request.claim_token}};
    return HeldByOther{lease_expiry, get_bytes(r, 0, 5)};
  });
}

bool PostgresLock::do_complete(const Claim& claim, std::optional<std::string> result) {
  Params p;
  p.bytes(std::string_view(claim.key));
  p.int8(impl_->now());
  p.int8(claim.fence);
  p.bytes(result);
  p.int8(static_cast<std::int64_t>(ttl().count()));
  return impl_->run("idem_complete", "complete", claim.key, p, [](const PGresult* r) {
    expect_shape(r, "complete", 0, 1, {kInt8Oid});
    return PQntuples(r) == 1;
  });
}

void PostgresLock::do_release(const Claim& claim) {
  Params p;
  p.bytes(std::string_view(claim.key));
  p.int8(impl_->now());
  p.int8(claim.fence);
  p.int8(static_cast<std::int64_t>(ttl().count()));
  impl_->run("idem_release", "release", claim.key, p,
             [](const PGresult* r) { expect_shape(r, "release", 0, 1, {kInt8Oid}); });
}

std::optional<TimePoint> PostgresLock::do_extend(const Claim& claim,
                                                 std::chrono::milliseconds lease) {
  Params p;
  p.bytes(std::string_view(claim.key));
  p.int8(impl_->now());
  p.int8(claim.fence);
  p.bytes(std::string_view(claim.claim_token));
  p.int8(static_cast<std::int64_t>(lease.count()));
  p.int8(static_cast<std::int64_t>(ttl().count()));
  return impl_->run("idem_extend", "extend", claim.key, p,
                    [](const PGresult* r) -> std::optional<TimePoint> {
                      expect_shape(r, "extend", 0, 1, {kInt8Oid});
                      if (PQntuples(r) == 0) return std::nullopt;
                      return from_millis(get_int(r, 0, 0, "extend"));
                    });
}

std::size_t PostgresLock::do_purge_expired() {
  const auto now = impl_->now();
  const auto batch = static_cast<std::int64_t>(impl_->options.purge_batch);
  std::size_t total = 0;
  while (true) {
    Params p;
    p.int8(now);
    p.int8(batch);
    const auto deleted = impl_->run("idem_purge", "purge_expired", {}, p, [](const PGresult* r) {
      const char* n = PQcmdTuples(const_cast<PGresult*>(r));
      if (n == nullptr || !all_digits(n)) bad_shape("purge_expired", "no row count");
      return static_cast<std::size_t>(std::stoull(n));
    });
    total += deleted;
    if (deleted < static_cast<std::size_t>(batch)) return total;
  }
}

std::optional<Record> PostgresLock::do_inspect(std::string_view key) {
  Params p;
  p.bytes(key);
  return impl_->run(
      "idem_record", "record", key, p, [](const PGresult* r) -> std::optional<Record> {
        expect_shape(r, "record", 0, 1,
                     {kInt2Oid, kInt8Oid, kInt8Oid, kInt8Oid, kByteaOid, kByteaOid, kByteaOid});
        if (PQntuples(r) == 0) return std::nullopt;
        Record rec;
        rec.state = get_state(r, 0, 0, "record");
        rec.fence = get_int(r, 0, 1, "record");
        rec.lease_expiry = get_int(r, 0, 2, "record");
        rec.expires_at = get_int(r, 0, 3, "record");
        rec.claim_token = get_bytes(r, 0, 4).value_or(std::string());
        rec.result = get_bytes(r, 0, 5);
        rec.fingerprint = get_bytes(r, 0, 6);
        return rec;
      });
}

void PostgresLock::do_wait_for_change(std::string_view key, std::chrono::milliseconds timeout,
                                      const std::stop_token& stop) {
  using SteadyClock = std::chrono::steady_clock;
  const auto deadline = SteadyClock::now() + timeout;
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  };
  ConnPtr listener;
  try {
    // A listening connection waits on its socket, so it is its own, not a pooled one.
    listener = impl_->connect();
    impl_->exec_simple(listener.get(), "LISTEN " + impl_->channel, "listen");
    // A change made before LISTEN took effect notified nobody: look once.
    const std::optional<Record> rec = do_inspect(key);
    if (!rec || rec->state == RecordState::kDone) return;
    // A lapsed lease notifies nobody either; with the server clock the engine's next claim
    // (at the end of this slice) finds it.
    if (const auto now = impl_->now(); now && *now >= rec->lease_expiry) return;
  } catch (const std::exception&) {
    // Unreachable or failing server: sleep like any backend; the next claim reports it.
    if (left() > std::chrono::milliseconds::zero()) {
      LockBackend::do_wait_for_change(key, left(), stop);
    }
    return;
  }
  const std::string wanted = key_fingerprint(key);
  pollfd pfd{PQsocket(listener.get()), POLLIN, 0};
  while (!stop.stop_requested()) {
    const auto remaining = left();
    if (remaining <= std::chrono::milliseconds::zero()) return;
    // Short slices so a stop request is seen promptly.
    const int slice = static_cast<int>(std::min<std::int64_t>(remaining.count(), 50));
    const int n = ::poll(&pfd, 1, slice);
    if (n < 0 && errno != EINTR) return;
    if (n <= 0) continue;
    if (PQconsumeInput(listener.get()) == 0) return;  // connection lost: wake, claim decides
    while (PGnotify* note = PQnotifies(listener.get())) {
      const bool ours = note->extra != nullptr && wanted == note->extra;
      PQfreemem(note);
      if (ours) return;
    }
  }
}

}  // namespace idempotency
