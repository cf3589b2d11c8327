// SqliteLock: the embedded, durable default backend (one SQLite file).
//
// WAL mode (its file capped at 64 MiB after checkpoints), a busy timeout, and the schema
// created on first use; a new file is in incremental auto-vacuum, so purged records give their
// space back to the file system. Each operation is one
// `BEGIN IMMEDIATE` write transaction around the core's transition function, so several
// processes on one host sharing the file are safe. Times are epoch-millisecond integers
// from the injectable clock.
//
// Thread safety: safe from any number of threads. Concurrent operations on one instance are
// group-committed: they run one after another in a shared write transaction, so many claims
// cost one fsync, and none returns before that transaction is durable.
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

namespace idempotency {

/// Options for SqliteLock.
struct SqliteOptions {
  BackendOptions backend;
  /// The table holding the records; several subscriptions can share one file.
  std::string table = "idempotency_records";
  /// Create the file and the table (and its expiry index) when missing. Off, a missing file
  /// or table is a `StoreError` and nothing is written before the check: an operator's tool
  /// must not make a store of a mistyped path or table name.
  bool create_table = true;
  /// How long a call waits for another process's write lock before `StoreError`; at most
  /// INT32_MAX milliseconds.
  std::chrono::milliseconds busy_timeout = std::chrono::seconds(5);
  /// Caps the database at this many pages (0: no cap), so a runaway store fails with
  /// `StoreError` ("database or disk is full") instead of filling the disk.
  std::int64_t max_pages = 0;
  /// Records `purge_expired()` deletes per write transaction, so a purge holds the file's
  /// writer lock only briefly at a time.
  std::size_t purge_batch = 500;
};

/// SqliteLock stores records in a SQLite database file.
class SqliteLock final : public LockBackend {
 public:
  /// SqliteLock() opens (creating if needed, unless `create_table` is off) the database at
  /// `path` and its table. Throws
  /// `StoreError` with SQLite's message when the file cannot be opened or is not a database,
  /// and `std::invalid_argument` for a bad option.
  explicit SqliteLock(const std::string& path, SqliteOptions options = {});
  ~SqliteLock() override;

  /// schema() returns the DDL that creates the table named `table`.
  [[nodiscard]] static std::string schema(std::string_view table = "idempotency_records");

 protected:
  ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
                       const ClaimRequest& request) override;
  bool do_complete(const Claim& claim, std::optional<std::string> result) override;
  void do_release(const Claim& claim) override;
  std::optional<TimePoint> do_extend(const Claim& claim, std::chrono::milliseconds lease) override;
  std::size_t do_purge_expired() override;
  std::optional<Record> do_inspect(std::string_view key) override;
  std::optional<std::size_t> do_stored_records() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idempotency
