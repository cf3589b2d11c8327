// PostgresLock internals shared by its sources (never installed): libpq ownership, the
// connection-string checks (postgres_conninfo.cc), the SQL form of the state machine
// (postgres_sql.cc), the binary parameters and results (postgres_result.cc) and the ways a
// statement is sent (postgres_exec.cc).
//
// Thread safety: pure functions and value types.
#pragma once

#include <libpq-fe.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/record.h"

namespace idempotency::postgres_detail {

/// Closes a libpq connection.
struct ConnDeleter {
  void operator()(PGconn* c) const noexcept { PQfinish(c); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnDeleter>;

/// Frees a libpq result.
struct ResultDeleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// ---------------------------------------------------------------------------------------
// Connection strings (postgres_conninfo.cc)

/// secrets_of() returns whatever in `conninfo` could be a password (a URL's user-info, every
/// `password=` value), so that no message ever echoes it.
[[nodiscard]] std::vector<std::string> secrets_of(std::string_view conninfo);

/// redact() replaces every occurrence of `secret` in `text` with `***`.
void redact(std::string& text, const std::string& secret);

/// tidy() makes a libpq or server message one line, with every secret redacted (the longest
/// first, so that one inside another cannot break its match).
[[nodiscard]] std::string tidy(std::string text, const std::vector<std::string>& secrets);

/// validate_conninfo() lets libpq parse `conninfo` (so every libpq option is accepted), then
/// checks the values libpq would only reject at connect time. Throws `std::invalid_argument`
/// naming the malformed part, never a secret.
void validate_conninfo(std::string_view conninfo, const std::vector<std::string>& secrets);

// ---------------------------------------------------------------------------------------
// The SQL (postgres_sql.cc)

/// TableName is a validated `name` or `schema.name`, quoted for SQL.
struct TableName {
  std::string quoted;        ///< "schema"."name" or "name"
  std::string quoted_index;  ///< "name_expires_idx"
  std::string display;       ///< schema.name, for messages
};

/// parse_table() validates and quotes a table name. Throws `std::invalid_argument`.
[[nodiscard]] TableName parse_table(std::string_view table);

/// ddl() returns the statements that create the table and its expiry index, and add the
/// `waiters` column to a table made by an older version.
[[nodiscard]] std::string ddl(const TableName& table);

/// create_table_sql() returns the DDL behind an advisory lock, since CREATE TABLE IF NOT
/// EXISTS is not atomic against itself when processes race at start-up, in one transaction
/// that waits at most `lock_timeout_ms` for the table's own lock (55P03 past it).
[[nodiscard]] std::string create_table_sql(const TableName& table, int lock_timeout_ms);

/// table_state_sql() returns a query answering two booleans: does the table exist, and does it
/// have the `waiters` column (older versions made it without).
[[nodiscard]] std::string table_state_sql(const TableName& table);

/// Statement is one prepared statement: its name, text and parameter types.
struct Statement {
  const char* name;
  std::string sql;
  std::vector<Oid> types;
};

/// Statements holds every statement PostgresLock prepares on a connection, the LISTEN/NOTIFY
/// channel that complete and release notify on, and a waiter's (un)registration, which runs
/// once per wait on the waiter's own connection and so is not prepared.
struct Statements {
  Statement claim;
  Statement complete;
  Statement release;
  Statement extend;
  Statement purge;
  Statement record;
  Statement wait;
  Statement unwait;
  std::string channel;

  /// all() lists the pooled connections' statements, for preparing each on a new connection.
  [[nodiscard]] std::array<const Statement*, 6> all() const {
    return {&claim, &complete, &release, &extend, &purge, &record};
  }
};

/// statements() builds the statements for `table`.
[[nodiscard]] Statements statements(const TableName& table);

// ---------------------------------------------------------------------------------------
// Parameters and results, binary format both ways (postgres_result.cc)

// Type oids from pg_type.h (stable across server versions).
constexpr Oid kBoolOid = 16;
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kInt2Oid = 21;

/// Params collects one statement's parameters, all in binary format; byte values point into
/// storage the caller keeps alive (its strings), integers into the Params itself.
class Params {
 public:
  /// bytes() adds a bytea parameter.
  void bytes(std::string_view b);
  /// bytes() adds a bytea parameter, SQL NULL for nullopt.
  void bytes(const std::optional<std::string>& b);
  /// int8() adds a bigint parameter.
  void int8(std::int64_t v);
  /// int8() adds a bigint parameter, SQL NULL for nullopt.
  void int8(std::optional<std::int64_t> v);
  /// clock() adds the bigint parameter of "now", left to set_clock(): SQL NULL until then (the
  /// server's clock). The backend's run() sets it once it holds a connection, each attempt.
  void clock();
  /// set_clock() sets the clock() parameter: an injected clock's reading, or nullopt for SQL
  /// NULL; without a clock() parameter, it does nothing.
  void set_clock(std::optional<std::int64_t> now);

  [[nodiscard]] int size() const { return static_cast<int>(count_); }
  [[nodiscard]] const char* const* values() const { return values_.data(); }
  [[nodiscard]] const int* lengths() const { return lengths_.data(); }
  [[nodiscard]] const int* formats() const { return formats_.data(); }

 private:
  void add(const char* p, std::size_t n);

  static constexpr std::size_t kMax = 8;
  std::array<const char*, kMax> values_{};
  std::array<int, kMax> lengths_{};
  std::array<int, kMax> formats_{};
  std::array<std::array<char, 8>, kMax> ints_{};
  std::size_t int_count_ = 0;
  std::size_t count_ = 0;
  // The clock() parameter's place and its int slot; kMax: none.
  std::size_t clock_at_ = kMax;
  std::size_t clock_slot_ = kMax;
};

/// bad_shape() throws `StoreError`: `op` got a result it cannot read as an answer.
[[noreturn]] void bad_shape(const char* op, const std::string& what);

/// expect_shape() checks a result's row count and its columns' types (binary format), so a
/// table altered by hand is never read as an outcome. Throws `StoreError`.
void expect_shape(const PGresult* r, const char* op, int rows_min, int rows_max,
                  std::initializer_list<Oid> types);

/// get_int() reads a smallint or bigint cell. Throws `StoreError` for NULL or another size.
[[nodiscard]] std::int64_t get_int(const PGresult* r, int row, int col, const char* op);

/// get_bool() reads a boolean cell. Throws `StoreError` for NULL.
[[nodiscard]] bool get_bool(const PGresult* r, int row, int col, const char* op);

/// get_bytes() reads a bytea cell; nullopt for NULL.
[[nodiscard]] std::optional<std::string> get_bytes(const PGresult* r, int row, int col);

/// get_state() reads a record state cell (1 CLAIMED, 2 DONE). Throws `StoreError`.
[[nodiscard]] RecordState get_state(const PGresult* r, int row, int col, const char* op);

// ---------------------------------------------------------------------------------------
// Sending a statement (postgres_exec.cc). Every connection is in libpq's nonblocking mode and
// every wait for the server ends at a Deadline: libpq's own waits have no limit, so a connection
// gone silent (a NAT or firewall that dropped the flow, a proxy that stopped answering, a commit
// waiting on a dead synchronous standby) would hold its caller until TCP gives up, or for ever.
// Each returns the statement's result, which may be null or an error result (the caller reads
// the error from it or from the connection), or throws NoAnswer.

/// How long past `statement_timeout` a call waits for the server's answer: long enough for the
/// server's own timeout error to arrive first, so a statement that is merely slow still reports
/// 57014.
inline constexpr std::chrono::seconds kAnswerMargin{5};

/// Deadline is when one round trip gives up waiting for the server.
struct Deadline {
  std::chrono::steady_clock::time_point at;  ///< time_point::max(): no limit
  std::chrono::milliseconds limit{0};        ///< what `at` was reckoned from, for messages

  /// for_statement() starts a round trip allowed `statement_timeout` + kAnswerMargin; with no
  /// statement_timeout (zero) it has no limit either.
  [[nodiscard]] static Deadline for_statement(std::chrono::milliseconds statement_timeout);
};

/// NoAnswer is thrown when a round trip ends without the server's answer: its deadline passed,
/// or reading failed while libpq still counted the connection open. Whether the statement took
/// effect is unknown, and the connection is left mid-exchange: the caller must close it. The
/// message names no key and no secret.
class NoAnswer : public StoreError {
 public:
  using StoreError::StoreError;
};

/// make_nonblocking() puts a new connection in libpq's nonblocking mode, which the functions
/// below need (a blocking one would wait without limit inside libpq to send). False on failure.
[[nodiscard]] bool make_nonblocking(PGconn* conn);

/// reusable() says whether a connection may go back to the pool: open, and inside neither a
/// transaction nor a pipeline.
[[nodiscard]] bool reusable(const ConnPtr& conn);

/// shared_session_hint() returns, for a result that failed because a named prepared statement
/// was missing (26000) or there already (42P05) — the session is shared, so a pooler in
/// transaction mode sits in front — a hint to set pool_mode=transaction; else "".
[[nodiscard]] std::string shared_session_hint(const PGresult* r);

/// exec_text() sends `sql` in the simple protocol (several statements allowed, text results)
/// and returns the last result, or the first error, as PQexec does.
[[nodiscard]] ResultPtr exec_text(PGconn* conn, const std::string& sql, const Deadline& deadline);

/// prepare() prepares `s` on this connection under its name.
[[nodiscard]] ResultPtr prepare(PGconn* conn, const Statement& s, const Deadline& deadline);

/// exec_prepared() runs `s` as prepare() prepared it on this connection.
[[nodiscard]] ResultPtr exec_prepared(PGconn* conn, const Statement& s, const Params& p,
                                      const Deadline& deadline);

/// exec_unprepared() sends `s` whole, parsed for this call only (an unnamed statement).
[[nodiscard]] ResultPtr exec_unprepared(PGconn* conn, const Statement& s, const Params& p,
                                        const Deadline& deadline);

/// exec_with_local_timeout() sends `s` whole with `statement_timeout` set for its transaction
/// only (none when zero): a `set_config(…, true)` and `s` pipelined before one Sync, so one
/// round trip and one transaction. For a connection a transaction-mode pooler shares, where a
/// session SET would neither stay nor stay ours. A connection left in pipeline mode (it broke
/// midway) is not reusable.
[[nodiscard]] ResultPtr exec_with_local_timeout(PGconn* conn, const Statement& s, const Params& p,
                                                std::chrono::milliseconds timeout,
                                                const Deadline& deadline);

}  // namespace idempotency::postgres_detail
