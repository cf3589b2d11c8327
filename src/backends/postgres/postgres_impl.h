// PostgresLock::Impl: what the backend's files share, the connection pool and the options
// behind every statement, the table's set-up and the retry loop (postgres_lock.cc: the
// operations; postgres_wait.cc: a waiter's LISTEN on a connection of its own). Internal to the
// postgres component.
//
// Thread safety: every member may be called from any number of threads at once.
#pragma once

#include <libpq-fe.h>

#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/connection_pool.h"
#include "common/notify_wait.h"
#include "idempotency/detail/hex.h"
#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "idempotency/postgres_lock.h"
#include "postgres_internal.h"

namespace idempotency {

namespace postgres_detail {

// Connection failures are retried once on a fresh connection, serialization failures and
// deadlocks (possible when the server defaults to SERIALIZABLE) a few times. Every operation
// is safe to repeat: see the header.
inline constexpr int kConnectionRetries = 1;
inline constexpr int kConflictRetries = 5;

inline void ignore_notice(void* /*arg*/, const char* /*message*/) {}

// Unless the conninfo says otherwise: TCP keepalives that keep an idle pooled connection's flow
// alive through a NAT or firewall (which commonly forget one idle for 4 to 20 minutes) and find
// a dead peer within about a minute, and a limit on data the server does not acknowledge, so a
// connection to a host that vanished fails rather than waits out TCP's ~15 minutes of
// retransmissions.
inline constexpr const char* kKeepalivesIdle = "30";      // seconds
inline constexpr const char* kKeepalivesInterval = "10";  // seconds
inline constexpr const char* kKeepalivesCount = "3";
inline constexpr const char* kTcpUserTimeout = "30000";  // milliseconds

// How long the DDL that adds the waiters column to an old table waits for the table's lock.
// ALTER TABLE queues for ACCESS EXCLUSIVE, and every claim and complete from every instance
// queues behind it: a long transaction holding any lock on the table (a pg_dump) would stall
// them all for as long as it runs. Short, so the stall is at most this; the start-up then fails.
inline constexpr int kDdlLockTimeoutMs = 1000;

}  // namespace postgres_detail

struct PostgresLock::Impl {
  using ConnPtr = postgres_detail::ConnPtr;
  using Deadline = postgres_detail::Deadline;
  using NoAnswer = postgres_detail::NoAnswer;
  using Params = postgres_detail::Params;
  using ResultPtr = postgres_detail::ResultPtr;
  Impl(std::string_view conninfo_or_url, const PostgresOptions& o)
      : conninfo(conninfo_or_url),
        secrets(postgres_detail::secrets_of(conninfo_or_url)),
        table(postgres_detail::parse_table(o.table)),
        options(o),
        sql(postgres_detail::statements(table)),
        pool(
            "postgres", o.pool_size, o.pool_wait, [this] { return open(); },
            postgres_detail::reusable) {
    if (o.pool_size == 0) throw std::invalid_argument("PostgresOptions::pool_size must be >= 1");
    if (o.purge_batch == 0 || o.purge_batch > static_cast<std::size_t>(INT_MAX)) {
      throw std::invalid_argument("PostgresOptions::purge_batch must be from 1 to INT_MAX");
    }
    if (o.pool_wait.count() < 0 || o.statement_timeout.count() < 0) {
      throw std::invalid_argument("PostgresOptions::pool_wait and statement_timeout must be >= 0");
    }
    postgres_detail::validate_conninfo(conninfo_or_url, secrets);
    // Connect now, so a bad server, password or table fails the constructor, not a claim.
    ConnPtr first = connect();
    ensure_table(first.get());
    if (own_session()) prepare(first.get());
    pool.add(std::move(first));
  }

  ConnPtr connect() {
    // Defaults first: the expanded conninfo (dbname with expand_dbname) overrides them.
    const std::array<const char*, 8> keys{
        "connect_timeout",  "application_name", "keepalives_idle", "keepalives_interval",
        "keepalives_count", "tcp_user_timeout", "dbname",          nullptr};
    const std::array<const char*, 8> values{"10",
                                            "gcp-pubsub-idempotency",
                                            postgres_detail::kKeepalivesIdle,
                                            postgres_detail::kKeepalivesInterval,
                                            postgres_detail::kKeepalivesCount,
                                            postgres_detail::kTcpUserTimeout,
                                            conninfo.c_str(),
                                            nullptr};
    ConnPtr conn(PQconnectdbParams(keys.data(), values.data(), 1));
    if (!conn) throw StoreError("postgres: cannot connect: out of memory");
    if (PQstatus(conn.get()) != CONNECTION_OK || !postgres_detail::make_nonblocking(conn.get())) {
      throw StoreError("postgres: cannot connect: " +
                       postgres_detail::tidy(PQerrorMessage(conn.get()), secrets));
    }
    PQsetNoticeProcessor(conn.get(), postgres_detail::ignore_notice, nullptr);
    if (own_session()) {
      exec_simple(conn.get(),
                  "SET statement_timeout = " + std::to_string(options.statement_timeout.count()),
                  "connection setup");
    }
    return conn;
  }

  ConnPtr open() {
    ConnPtr conn = connect();
    if (own_session()) prepare(conn.get());
    return conn;
  }

  // own_session() is true when a connection is a server session of its own, so session
  // state (prepared statements, SET, LISTEN) is ours and stays.
  [[nodiscard]] bool own_session() const { return options.pool_mode == PostgresPoolMode::kSession; }

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
    if (key.size() < 3) return postgres_detail::tidy(std::move(msg), secrets);
    // The server may quote the key in a message (bytea in hex form); it is customer data.
    // Redacted with the secrets, before tidy() makes the message one line: a key with a line
    // break or a tab would no longer match once those are spaces.
    std::vector<std::string> hidden = secrets;
    hidden.emplace_back(key);
    hidden.push_back(
        "\\x" + detail::to_hex(reinterpret_cast<const unsigned char*>(key.data()), key.size()));
    return postgres_detail::tidy(std::move(msg), hidden);
  }

  // deadline() starts one round trip's wait for the server.
  [[nodiscard]] Deadline deadline() const {
    return Deadline::for_statement(options.statement_timeout);
  }

  // no_answer() is the one-line StoreError message for a round trip that got no answer.
  [[nodiscard]] std::string no_answer(const char* what, std::string_view key,
                                      const NoAnswer& e) const {
    std::string text = std::string("postgres: ") + what;
    if (!key.empty()) text += " for key " + key_fingerprint(key);
    text += ": ";
    text += postgres_detail::tidy(e.what(), secrets);
    text += "; the connection was closed, and whether it took effect is unknown";
    return text;
  }

  // answered() runs one round trip on a connection the caller owns and closes when this throws
  // (setting one up, the table check, a waiter's): NoAnswer becomes a one-line StoreError.
  template <class Send>
  ResultPtr answered(const char* what, std::string_view key, Send&& send) {
    try {
      return std::forward<Send>(send)(deadline());
    } catch (const NoAnswer& e) {
      throw StoreError(no_answer(what, key, e));
    }
  }

  void exec_simple(PGconn* conn, const std::string& sql, const char* what) {
    const ResultPtr res = answered(
        what, {}, [&](const Deadline& d) { return postgres_detail::exec_text(conn, sql, d); });
    const auto status = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      throw StoreError(std::string("postgres: ") + what + " failed: " + error_of(conn, res.get()));
    }
  }

  struct TableState {
    bool exists;
    bool has_waiters;
  };

  TableState table_state(PGconn* conn) {
    const postgres_detail::Statement query{"", postgres_detail::table_state_sql(table), {}};
    const ResultPtr res = answered("checking for the table", {}, [&](const Deadline& d) {
      return postgres_detail::exec_unprepared(conn, query, Params{}, d);
    });
    if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
      throw StoreError("postgres: checking for the table failed: " + error_of(conn, res.get()));
    }
    postgres_detail::expect_shape(res.get(), "table check", 1, 1,
                                  {postgres_detail::kBoolOid, postgres_detail::kBoolOid});
    return {postgres_detail::get_bool(res.get(), 0, 0, "table check"),
            postgres_detail::get_bool(res.get(), 0, 1, "table check")};
  }

  void ensure_table(PGconn* conn) {
    // Looked up first: CREATE ... IF NOT EXISTS still needs CREATE permission on the schema.
    const TableState state = table_state(conn);
    if (state.exists && state.has_waiters) return;
    if (!options.create_table) {
      throw StoreError(
          "postgres: table " + table.display +
          (state.exists ? " lacks the waiters column this version needs" : " does not exist") +
          " and create_table is off; apply PostgresLock::schema() first (idem migrate does so)");
    }
    // The same DDL creates a table or upgrades an old one (ADD COLUMN IF NOT EXISTS), waiting
    // at most postgres_detail::kDdlLockTimeoutMs for the table's lock.
    const char* what =
        state.exists ? "adding the waiters column to the table" : "creating the table";
    const std::string ddl =
        postgres_detail::create_table_sql(table, postgres_detail::kDdlLockTimeoutMs);
    const ResultPtr res = answered(
        what, {}, [&](const Deadline& d) { return postgres_detail::exec_text(conn, ddl, d); });
    const auto status = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return;
    std::string text = std::string("postgres: ") + what + " failed: " + error_of(conn, res.get());
    const char* sqlstate = res ? PQresultErrorField(res.get(), PG_DIAG_SQLSTATE) : nullptr;
    if (sqlstate != nullptr && std::strcmp(sqlstate, "55P03") == 0) {
      text += ": another transaction holds a lock on table " + table.display +
              " (a pg_dump, a long transaction) and the change waits at most " +
              std::to_string(postgres_detail::kDdlLockTimeoutMs) +
              " ms for it, so as not to stall every claim behind it; start again once it ends, or "
              "apply PostgresLock::schema() by hand";
    }
    throw StoreError(text);
  }

  // register_waiter() counts a waiter in the row's `waiters` on its listening connection,
  // after its LISTEN: true when the record is a live claim that will notify, false when it is
  // missing, done or lapsed (nothing will notify: claim again now). In postgres_wait.cc.
  bool register_waiter(PGconn* conn, std::string_view key);

  // unregister_waiter() undoes register_waiter(), reporting nothing (see postgres_wait.cc).
  void unregister_waiter(PGconn* conn, std::string_view key) noexcept;

  void prepare(PGconn* conn) {
    for (const postgres_detail::Statement* s : sql.all()) {
      const ResultPtr res = answered("preparing statements", {}, [&](const Deadline& d) {
        return postgres_detail::prepare(conn, *s, d);
      });
      if (!res || PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
        throw StoreError(std::string("postgres: preparing ") + s->name +
                         " failed: " + error_of(conn, res.get()) +
                         postgres_detail::shared_session_hint(res.get()));
      }
    }
  }

  // now() is the client clock's instant when one was injected, else nullopt (server clock).
  [[nodiscard]] std::optional<std::int64_t> now() const {
    if (options.backend.clock) return to_millis(options.backend.clock->now());
    return std::nullopt;
  }

  // run() executes a statement on a pooled connection and hands the result to `decode` while
  // the connection is still borrowed. A connection that broke is dropped and the statement
  // retried once on a fresh one; serialization failures are retried too. One that gave no
  // answer in time is closed, and the call fails: the caller retries if it will (each
  // operation is safe to repeat), after a wait that was already long. An injected clock is
  // read once the connection is in hand, on every attempt: read before a wait for the pool
  // (up to `pool_wait`) or a reconnect, a claim's lease would start in the past and could
  // have lapsed, and been taken over, before the holder heard it had won.
  template <class Decode>
  auto run(const postgres_detail::Statement& statement, const char* op, std::string_view key,
           Params& params, Decode&& decode) {
    int connection_failures = 0;
    int conflicts = 0;
    while (true) {
      auto lease = pool.acquire();
      params.set_clock(now());
      ResultPtr res;
      try {
        res = own_session()
                  ? postgres_detail::exec_prepared(lease.get(), statement, params, deadline())
                  : postgres_detail::exec_with_local_timeout(lease.get(), statement, params,
                                                             options.statement_timeout, deadline());
      } catch (const NoAnswer& e) {
        lease.broken();  // and the idle ones: what silenced this one most likely silenced them
        throw StoreError(no_answer(op, key, e));
      }
      const auto status = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
      if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) return decode(res.get());
      const std::string message = error_of(lease.get(), res.get(), key);
      const char* sqlstate = res ? PQresultErrorField(res.get(), PG_DIAG_SQLSTATE) : nullptr;
      if (PQstatus(lease.get()) != CONNECTION_OK) {
        lease.broken();
        if (connection_failures++ < postgres_detail::kConnectionRetries) continue;
      } else if (sqlstate != nullptr &&
                 (std::strcmp(sqlstate, "40001") == 0 || std::strcmp(sqlstate, "40P01") == 0) &&
                 conflicts++ < postgres_detail::kConflictRetries) {
        continue;
      }
      std::string text = std::string("postgres: ") + op + " failed";
      if (!key.empty()) text += " for key " + key_fingerprint(key);
      text += ": ";
      text += message;
      text += postgres_detail::shared_session_hint(res.get());
      throw StoreError(text);
    }
  }

  std::string conninfo;
  std::vector<std::string> secrets;
  postgres_detail::TableName table;
  PostgresOptions options;
  postgres_detail::Statements sql;
  // How waits ended, the ones slept instead of notified (kTransaction) among them.
  store_detail::WaitTally waits;
  // Listening connections open now (waiters'), at most pool_size: past that a wait polls.
  std::atomic<std::size_t> listeners{0};
  store_detail::ConnectionPool<ConnPtr> pool;  // last: its connections are closed first
};

}  // namespace idempotency
