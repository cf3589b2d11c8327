// PostgresLock: records in one PostgreSQL table, decided server-side in one round trip.
//
// Each operation is a single statement: `claim` is one `INSERT … ON CONFLICT DO UPDATE …
// RETURNING` that re-expresses the core's `transition()` in SQL, so two processes racing a new
// key get exactly one `Won`; `complete` and `release` are one `UPDATE` each. Connected directly
// (or through a pooler in session mode) the statements are prepared once per connection and
// cross-instance waiters LISTEN; behind a pooler in transaction mode
// (`PostgresPoolMode::kTransaction`) nothing outlives a transaction, so each statement is sent
// whole and waiters poll. Time is judged by the server's `clock_timestamp()` (epoch
// milliseconds) unless `BackendOptions::clock` is set, in which case the client clock's instant
// is sent instead. Connections come from a bounded pool; one broken by a server restart or
// `pg_terminate_backend` is dropped and the call is retried once on a fresh connection (every
// operation is safe to repeat: a retried claim carries its claim token and re-affirms). A call
// waits for the server's answer at most `statement_timeout` + 5 s, whatever the network does: a
// connection that stays silent past that (a NAT or firewall that dropped the flow, a proxy that
// stopped answering, a commit waiting on a dead synchronous standby) is closed and the call
// throws `StoreError`, its outcome unknown. Unless the conninfo sets them, connections use TCP
// keepalives (`keepalives_idle=30`, `keepalives_interval=10`, `keepalives_count=3`) and
// `tcp_user_timeout=30000`, so an idle one stays known to NATs and a dead peer is found.
//
// TLS is libpq's: `sslmode=verify-full&sslrootcert=CA.pem` (and `sslcert`/`sslkey` for a client
// certificate) in the URL or conninfo. No message repeats a password (`password`,
// `sslpassword`, a URL's user-info) or anything read from a key file.
//
// Example:
//   idempotency::PostgresLock backend(
//       "postgres://app@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem",
//       {.table = "orders_idempotency"});
//
// Thread safety: safe from any number of threads; each call borrows its own connection.
// Not fork-safe: build a new PostgresLock in a child process.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "idempotency/backend.h"
#include "idempotency/record.h"
#include "idempotency/wait_counts.h"

namespace idempotency {

/// PostgresPoolMode says what a PostgresLock connection is to the server: its own session, or
/// one transaction at a time of a session a pooler shares with other clients.
enum class PostgresPoolMode {
  /// Each connection is one server session (directly, or a pooler in session mode): statements
  /// are prepared once per connection, `statement_timeout` is SET once, waiters LISTEN.
  kSession,
  /// Behind a pooler in transaction mode (PgBouncer `pool_mode = transaction`, or a managed
  /// pooler in that mode): no session state is used. Each statement is sent whole,
  /// `statement_timeout` is set for its transaction only (in the same round trip), and
  /// cross-instance waiters poll the store, since a LISTEN would end with the transaction.
  kTransaction,
};

/// Options for PostgresLock. Fill with designated initializers.
struct PostgresOptions {
  BackendOptions backend;
  /// The table holding the records, `name` or `schema.name` (letters, digits, `_`; at most
  /// 48 bytes a part). Several subscriptions can share a database with one table each.
  std::string table = "idempotency_records";
  /// Create the table (and its expiry index) when missing, and add the `waiters` column to a
  /// table made by a version before it. Turn off for a role without CREATE permission (or not
  /// owning the table) and apply `schema(table)` by hand instead. Adding the column waits at
  /// most 1 s for the table's lock (so a long transaction on it, a pg_dump say, never stalls
  /// every claim queued behind the change); past that the constructor throws `StoreError`.
  bool create_table = true;
  /// Most connections the calls hold open at once; a call waits for a free one up to
  /// `pool_wait`. (URL parameter `pool_size=N`, 1 to 1000.) Cross-instance waits (kSession)
  /// each listen on a connection of their own, open for the wait only, at most `pool_size` of
  /// them at once; a wait that finds them all in use polls instead (counted in
  /// `wait_counts().polled`). So at most 2 × `pool_size` connections are open at once.
  std::size_t pool_size = 8;
  /// How long a call waits for a pooled connection before `StoreError`.
  std::chrono::milliseconds pool_wait = std::chrono::seconds(30);
  /// Server-side limit per statement (0: none); a statement that exceeds it is a
  /// `StoreError`. The client waits for any answer at most this + 5 s, then closes the
  /// connection and throws `StoreError` (with 0, it waits without limit too).
  std::chrono::milliseconds statement_timeout = std::chrono::seconds(30);
  /// Rows `purge_expired()` deletes per statement, so it never holds many locks at once.
  std::size_t purge_batch = 1000;
  /// kTransaction behind a pooler in transaction mode (URL parameter `pool_mode=transaction`).
  PostgresPoolMode pool_mode = PostgresPoolMode::kSession;
};

/// PostgresWaitCounts: how this instance's cross-instance waits ended (wait_counts.h).
using PostgresWaitCounts = WaitCounts;

/// PostgresLock stores records in a PostgreSQL table through libpq.
class PostgresLock final : public LockBackend {
 public:
  /// PostgresLock() connects with a libpq conninfo string (`host=… dbname=…`) or a
  /// `postgres://` / `postgresql://` URL (TLS and every libpq option included; the PG*
  /// environment variables fill what is left out), creates the table when allowed, and
  /// prepares its statements (kSession). Throws `std::invalid_argument` naming the malformed part
  /// (never the password) or a bad option, and `StoreError` with the server's message when
  /// it cannot connect or authenticate (a refused certificate or host name included), or the
  /// table is missing and may not be created.
  explicit PostgresLock(std::string_view conninfo_or_url, const PostgresOptions& options = {});
  ~PostgresLock() override;

  /// schema() returns the DDL that creates the table named `table` and its expiry index, or
  /// adds what an older version's table lacks, for an operator to apply by hand. Throws
  /// `std::invalid_argument` for a bad name.
  [[nodiscard]] static std::string schema(std::string_view table = "idempotency_records");

  /// wait_counts() returns how this instance's waits for a change have ended so far.
  [[nodiscard]] PostgresWaitCounts wait_counts() const noexcept;

 protected:
  ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
                       const ClaimRequest& request) override;
  bool do_complete(const Claim& claim, std::optional<std::string> result) override;
  void do_release(const Claim& claim) override;
  std::optional<TimePoint> do_extend(const Claim& claim, std::chrono::milliseconds lease) override;
  std::size_t do_purge_expired() override;
  /// Expired records are returned as stored.
  std::optional<Record> do_inspect(std::string_view key) override;
  /// Waits on LISTEN for the NOTIFY that complete() and release() send in their statement,
  /// after counting itself in the row's `waiters` (they notify only when it is above zero).
  /// kTransaction, or with `pool_size` listeners already open: sleeps `timeout` (once() passes
  /// a slice of 10 ms doubling to 500 ms and claims again after each, which is the poll).
  void do_wait_for_change(std::string_view key, std::chrono::milliseconds timeout,
                          const std::stop_token& stop) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idempotency
