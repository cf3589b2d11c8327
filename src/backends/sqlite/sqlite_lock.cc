#include "idempotency/sqlite_lock.h"

#include <sqlite3.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "idempotency/errors.h"

namespace idempotency {
namespace {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

bool is_identifier(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(name.front())) return false;
  for (char c : name) {
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

[[noreturn]] void fail(sqlite3* db, const std::string& what) {
  throw StoreError("sqlite: " + what + ": " +
                   (db != nullptr ? sqlite3_errmsg(db) : "out of memory"));
}

void check(sqlite3* db, int rc, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) fail(db, what);
}

// After a checkpoint the WAL file is truncated to this size.
constexpr std::int64_t kWalSizeLimit = std::int64_t{64} << 20;
// Free pages handed back to the file system after each purge batch (4 KiB each by default):
// more than a batch of records frees, so the free list does not build up.
constexpr int kVacuumPagesPerBatch = 256;

void exec(sqlite3* db, const std::string& sql, const char* what) {
  check(db, sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), what);
}

// Whether the database holds a table named `table`, in any case as SQLite's names are; read
// before anything is written to it.
bool table_exists(sqlite3* db, const std::string& table) {
  sqlite3_stmt* raw = nullptr;
  check(db,
        sqlite3_prepare_v2(
            db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1 COLLATE NOCASE", -1,
            &raw, nullptr),
        "cannot read the database file");
  const StmtPtr statement(raw);
  check(db, sqlite3_bind_text(raw, 1, table.data(), static_cast<int>(table.size()), SQLITE_STATIC),
        "bind");
  const int rc = sqlite3_step(raw);
  check(db, rc, "cannot read the database file");
  return rc == SQLITE_ROW;
}

// Puts the database in WAL mode. SQLite answers the mode it ends in, and where WAL is
// impossible (an in-memory or temporary database) it stays in another without an error: that
// is refused, since neither keeps records across a restart, as this store promises.
void use_wal(sqlite3* db) {
  sqlite3_stmt* raw = nullptr;
  check(db, sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &raw, nullptr),
        "cannot use the database file");
  const StmtPtr statement(raw);
  const int rc = sqlite3_step(raw);
  check(db, rc, "cannot use the database file");
  const auto* mode = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));  // NOLINT
  const std::string_view answer = rc == SQLITE_ROW && mode != nullptr ? mode : "";
  if (answer != "wal") {
    throw StoreError("sqlite: the database cannot use WAL (journal mode " +
                     std::string(answer.empty() ? "unknown" : answer) +
                     "): give the path of a file, not an in-memory or temporary database");
  }
}

void bind_blob(sqlite3* db, sqlite3_stmt* s, int index, std::string_view bytes) {
  // A zero-length blob still binds as a blob, not NULL.
  check(db,
        sqlite3_bind_blob64(s, index, bytes.empty() ? "" : bytes.data(), bytes.size(),
                            SQLITE_TRANSIENT),
        "bind");
}

void bind_optional_blob(sqlite3* db, sqlite3_stmt* s, int index,
                        const std::optional<std::string>& bytes) {
  if (bytes) {
    bind_blob(db, s, index, *bytes);
  } else {
    check(db, sqlite3_bind_null(s, index), "bind");
  }
}

std::string column_bytes(sqlite3_stmt* s, int column) {
  const auto* data = static_cast<const char*>(sqlite3_column_blob(s, column));
  const int size = sqlite3_column_bytes(s, column);
  return data == nullptr ? std::string() : std::string(data, static_cast<std::size_t>(size));
}

std::optional<std::string> column_optional_bytes(sqlite3_stmt* s, int column) {
  if (sqlite3_column_type(s, column) == SQLITE_NULL) return std::nullopt;
  return column_bytes(s, column);
}

}  // namespace

struct SqliteLock::Impl {
  // One operation waiting for its turn: the group's leader runs it and fills in the outcome.
  struct Pending {
    std::string_view key;
    const Operation* op;
    std::optional<Transition> transition;
    std::exception_ptr error;
    bool finished = false;
  };

  std::mutex mutex;        // one transaction at a time on the one connection
  std::mutex queue_mutex;  // guards queue, leading and each Pending's `finished`
  std::condition_variable turn;
  std::vector<Pending*> queue;
  bool leading = false;
  DbPtr db;
  StmtPtr select;
  StmtPtr upsert;
  StmtPtr purge;
  std::int64_t purge_batch = 0;
  std::string path;   // for stored_records()' own read connection
  std::string table;  // quoted
  std::shared_ptr<const Clock> clock;

  StmtPtr prepare(const std::string& sql) {
    sqlite3_stmt* raw = nullptr;
    check(db.get(),
          sqlite3_prepare_v3(db.get(), sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr),
          "prepare");
    return StmtPtr(raw);
  }

  std::optional<Record> read(std::string_view key) {
    sqlite3_stmt* s = select.get();
    sqlite3_reset(s);
    // Reset on every way out, a throw included: a statement left active keeps its read
    // snapshot, and every later write on this connection fails once another has written.
    const std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> reset_on_exit(s, sqlite3_reset);
    bind_blob(db.get(), s, 1, key);
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) return std::nullopt;
    if (rc != SQLITE_ROW) fail(db.get(), "read");
    Record r;
    const auto state = sqlite3_column_int(s, 0);
    if (state != static_cast<int>(RecordState::kClaimed) &&
        state != static_cast<int>(RecordState::kDone)) {
      throw StoreError("sqlite: a record has an unknown state " + std::to_string(state));
    }
    r.state = static_cast<RecordState>(state);
    r.fence = sqlite3_column_int64(s, 1);
    r.lease_expiry = sqlite3_column_int64(s, 2);
    r.expires_at = sqlite3_column_int64(s, 3);
    r.claim_token = column_bytes(s, 4);
    r.result = column_optional_bytes(s, 5);
    r.fingerprint = column_optional_bytes(s, 6);
    return r;
  }

  void write(std::string_view key, const Record& r) {
    sqlite3_stmt* s = upsert.get();
    sqlite3_reset(s);
    bind_blob(db.get(), s, 1, key);
    check(db.get(), sqlite3_bind_int(s, 2, static_cast<int>(r.state)), "bind");
    check(db.get(), sqlite3_bind_int64(s, 3, r.fence), "bind");
    check(db.get(), sqlite3_bind_int64(s, 4, r.lease_expiry), "bind");
    check(db.get(), sqlite3_bind_int64(s, 5, r.expires_at), "bind");
    bind_blob(db.get(), s, 6, r.claim_token);
    bind_optional_blob(db.get(), s, 7, r.result);
    bind_optional_blob(db.get(), s, 8, r.fingerprint);
    if (sqlite3_step(s) != SQLITE_DONE) fail(db.get(), "write");
    sqlite3_reset(s);
  }

  // Group commit: concurrent operations of this instance share one BEGIN IMMEDIATE
  // transaction and so one fsync, which is what bounds a durable store. The first caller to
  // find no leader becomes the leader and runs every queued operation, in arrival order, each
  // read-decide-write on what the earlier ones wrote; nobody learns an outcome before COMMIT
  // returns, so each one is as durable as it was alone. If anything in a group fails after
  // BEGIN (a full disk), the group is rolled back and each operation is rerun in a transaction
  // of its own, so an error reaches only the calls it belongs to. A BEGIN that fails (the file
  // locked past the busy timeout) is every operation's error alike: rerun one by one, each
  // would wait out the timeout again, and the last caller would wait it once per caller.
  Transition apply(std::string_view key, const Operation& op) {
    Pending mine{.key = key, .op = &op};
    std::unique_lock queue_lock(queue_mutex);
    queue.push_back(&mine);
    for (;;) {
      turn.wait(queue_lock, [&] { return mine.finished || !leading; });
      if (mine.finished) break;
      // Lead one group, which holds `mine`; then hand the lead on, so that no caller serves
      // other callers' groups for as long as they keep coming.
      leading = true;
      std::vector<Pending*> group;
      group.swap(queue);
      queue_lock.unlock();
      run_group(group);
      queue_lock.lock();
      for (Pending* p : group) p->finished = true;
      leading = false;
      turn.notify_all();
    }
    if (mine.error) std::rethrow_exception(mine.error);
    return std::move(*mine.transition);
  }

  void run_group(const std::vector<Pending*>& group) {
    std::lock_guard lock(mutex);
    if (group.size() > 1) {
      try {
        exec(db.get(), "BEGIN IMMEDIATE", "begin");
      } catch (...) {
        for (Pending* p : group) p->error = std::current_exception();
        return;
      }
      try {
        // An outcome set here is only read once `finished`, after the COMMIT; the reruns below
        // overwrite every one if the group fails.
        for (Pending* p : group) p->transition = decide(p->key, *p->op);
        exec(db.get(), "COMMIT", "commit");
        return;
      } catch (...) {
        sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
      }
    }
    for (Pending* p : group) {
      try {
        p->transition = apply_alone(p->key, *p->op);
      } catch (...) {
        p->error = std::current_exception();
      }
    }
  }

  // Read, decide with the pure function, write if changed: inside a transaction.
  Transition decide(std::string_view key, const Operation& op) {
    Transition t = transition(read(key), op, to_millis(clock->now()));
    if (t.changed && t.record) write(key, *t.record);
    return t;
  }

  // One BEGIN IMMEDIATE transaction around decide(); the caller holds `mutex`.
  Transition apply_alone(std::string_view key, const Operation& op) {
    exec(db.get(), "BEGIN IMMEDIATE", "begin");
    try {
      Transition t = decide(key, op);
      exec(db.get(), "COMMIT", "commit");
      return t;
    } catch (...) {
      sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }
};

std::string SqliteLock::schema(std::string_view table) {
  if (!is_identifier(table)) {
    throw std::invalid_argument("sqlite table name must match [A-Za-z_][A-Za-z0-9_]{0,62}");
  }
  const std::string t(table);
  return "CREATE TABLE IF NOT EXISTS \"" + t +
         "\" (\n"
         "  key BLOB PRIMARY KEY NOT NULL,\n"
         "  state INTEGER NOT NULL,            -- 1 CLAIMED, 2 DONE\n"
         "  fence INTEGER NOT NULL,\n"
         "  lease_expiry_ms INTEGER NOT NULL,  -- epoch milliseconds\n"
         "  expires_at_ms INTEGER NOT NULL,    -- epoch milliseconds\n"
         "  claim_token BLOB NOT NULL,\n"
         "  result BLOB,\n"
         "  fingerprint BLOB\n"
         ") WITHOUT ROWID;\n"
         "CREATE INDEX IF NOT EXISTS \"" +
         t + "_expires_at\" ON \"" + t + "\" (expires_at_ms);\n";
}

SqliteLock::SqliteLock(const std::string& path, SqliteOptions options)
    : LockBackend(options.backend), impl_(std::make_unique<Impl>()) {
  const std::string ddl = schema(options.table);  // validates the table name
  // SQLite takes milliseconds as an int: a longer one would wrap, and turn the wait off.
  if (options.busy_timeout < std::chrono::milliseconds::zero() ||
      options.busy_timeout > std::chrono::milliseconds(INT32_MAX)) {
    throw std::invalid_argument("sqlite busy_timeout must be from 0 to INT32_MAX milliseconds");
  }
  if (options.max_pages < 0) throw std::invalid_argument("sqlite max_pages must not be negative");
  if (options.purge_batch < 1 || options.purge_batch > static_cast<std::size_t>(INT32_MAX)) {
    throw std::invalid_argument("sqlite purge_batch must be from 1 to INT32_MAX");
  }
  impl_->clock = options.backend.clock ? std::move(options.backend.clock) : system_clock();
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &raw,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (options.create_table ? SQLITE_OPEN_CREATE : 0),
      nullptr);
  impl_->db.reset(raw);
  if (rc != SQLITE_OK) fail(raw, "cannot open the database file");
  sqlite3_extended_result_codes(raw, 1);
  check(raw, sqlite3_busy_timeout(raw, static_cast<int>(options.busy_timeout.count())),
        "busy timeout");
  if (!options.create_table && !table_exists(raw, options.table)) {
    // Checked before the pragmas below, which would write to a file that is not a store, and
    // after the busy timeout: another process's commit may hold the file for a moment.
    throw StoreError("sqlite: table " + options.table +
                     " does not exist and create_table is off (idem migrate creates it)");
  }
  // WAL lets readers and the one writer overlap across processes; FULL sync makes a claim
  // survive a power cut, not only a process crash.
  // Before the table exists: a new file frees the pages of purged records back to the file
  // system (incremental_vacuum after each purge) instead of only onto its free list. A file
  // created without it keeps reusing its free pages, so it stops growing all the same.
  exec(raw, "PRAGMA auto_vacuum=INCREMENTAL", "pragma");
  use_wal(raw);
  exec(raw, "PRAGMA synchronous=FULL", "pragma");
  // A checkpoint leaves the WAL file at most this big, whatever a burst made it grow to.
  exec(raw, "PRAGMA journal_size_limit=" + std::to_string(kWalSizeLimit), "pragma");
  if (options.max_pages > 0) {
    exec(raw, "PRAGMA max_page_count=" + std::to_string(options.max_pages), "pragma");
  }
  if (options.create_table) exec(raw, ddl, "cannot create the table");
  const std::string t = "\"" + options.table + "\"";
  impl_->select = impl_->prepare(
      "SELECT state, fence, lease_expiry_ms, expires_at_ms, claim_token, result, fingerprint "
      "FROM " +
      t + " WHERE key = ?1");
  impl_->upsert = impl_->prepare(
      "INSERT OR REPLACE INTO " + t +
      " (key, state, fence, lease_expiry_ms, expires_at_ms, claim_token, result, fingerprint) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  // Through the expires_at index, a bounded batch at a time: the writer lock is held for one
  // short transaction, never for a whole backlog.
  impl_->purge = impl_->prepare("DELETE FROM " + t + " WHERE key IN (SELECT key FROM " + t +
                                " WHERE expires_at_ms <= ?1 LIMIT ?2)");
  impl_->purge_batch = static_cast<std::int64_t>(options.purge_batch);
  impl_->path = path;
  impl_->table = t;
}

SqliteLock::~SqliteLock() = default;

ClaimResult SqliteLock::do_claim(std::string_view key, std::chrono::milliseconds lease,
                                 const ClaimRequest& request) {
  Transition t = impl_->apply(
      key, ClaimOp{request.claim_token, lease.count(), ttl().count(), request.fingerprint});
  return claim_result(key, std::move(*t.record), *t.answer.claim);
}

bool SqliteLock::do_complete(const Claim& claim, std::optional<std::string> result) {
  return impl_->apply(claim.key, CompleteOp{claim.fence, std::move(result), ttl().count()})
      .answer.ok;
}

void SqliteLock::do_release(const Claim& claim) {
  (void)impl_->apply(claim.key, ReleaseOp{claim.fence, ttl().count()});
}

std::optional<TimePoint> SqliteLock::do_extend(const Claim& claim,
                                               std::chrono::milliseconds lease) {
  return extend_result(impl_->apply(
      claim.key, ExtendOp{claim.fence, claim.claim_token, lease.count(), ttl().count()}));
}

std::size_t SqliteLock::do_purge_expired() {
  const Millis now = to_millis(impl_->clock->now());
  std::size_t total = 0;
  for (;;) {
    // The lock is taken per batch, so this process's own claims run between batches.
    std::lock_guard lock(impl_->mutex);
    sqlite3* db = impl_->db.get();
    sqlite3_stmt* s = impl_->purge.get();
    sqlite3_reset(s);
    check(db, sqlite3_bind_int64(s, 1, now), "bind");
    check(db, sqlite3_bind_int64(s, 2, impl_->purge_batch), "bind");
    if (sqlite3_step(s) != SQLITE_DONE) fail(db, "purge");
    sqlite3_reset(s);
    const auto deleted = static_cast<std::size_t>(sqlite3_changes64(db));
    total += deleted;
    if (deleted > 0) {
      // Hands the freed pages back to the file system (a no-op for a file made without
      // auto_vacuum), bounded like the batch itself.
      exec(db, "PRAGMA incremental_vacuum(" + std::to_string(kVacuumPagesPerBatch) + ")",
           "incremental vacuum");
    }
    if (deleted < static_cast<std::size_t>(impl_->purge_batch)) return total;
  }
}

std::optional<std::size_t> SqliteLock::do_stored_records() {
  // A read connection of its own: a count walks the whole expires_at index, and under WAL a
  // reader never blocks the writer, so claims (on the main connection) never wait for it.
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(impl_->path.c_str(), &raw,
                                 SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  DbPtr db(raw);
  if (rc != SQLITE_OK) fail(raw, "count");
  sqlite3_stmt* s = nullptr;
  check(raw,
        sqlite3_prepare_v2(raw, ("SELECT count(*) FROM " + impl_->table).c_str(), -1, &s, nullptr),
        "count");
  StmtPtr statement(s);
  if (sqlite3_step(s) != SQLITE_ROW) fail(raw, "count");
  return static_cast<std::size_t>(sqlite3_column_int64(s, 0));
}

std::optional<Record> SqliteLock::do_inspect(std::string_view key) {
  std::lock_guard lock(impl_->mutex);
  return impl_->read(key);
}

}  // namespace idempotency
