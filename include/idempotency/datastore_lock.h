// DatastoreLock: records in Firestore in Datastore mode (or the Datastore emulator), over the
// Datastore v1 REST API.
//
// Each operation is one read-write transaction: `beginTransaction`, `lookup` in it, the core's
// pure `transition()`, then `commit` (TRANSACTIONAL) when the record changed, else `rollback`.
// A commit that loses to a concurrent one comes back ABORTED and the whole transaction is
// retried with jittered back-off, as are transient failures (UNAVAILABLE, DEADLINE_EXCEEDED,
// INTERNAL, RESOURCE_EXHAUSTED, a dropped connection). A retried claim reuses its claim token,
// so a claim whose commit reply was lost re-affirms itself (same fence, `Won`) instead of
// finding the key held. Keys a lookup defers are looked up again in the same transaction. A
// call answered 401 UNAUTHENTICATED is sent once more after `TokenSource::invalidate()` drops
// the refused token. Replies are read up to 2 MiB per key looked up and 16 MiB otherwise; a
// longer one is a `StoreError`, not retried. Leases are judged by the client clock
// (`BackendOptions::clock`).
//
// One entity per key, in `kind` (namespace and database optional): the key name is the
// idempotency key itself, or "sha256:" + 64 hex digits of it when the key is not valid UTF-8,
// contains NUL, matches Datastore's reserved `__.*__`, or itself starts with "sha256:".
// Properties: `state`, `fence`, `lease_expiry_ms` (integers), `expires_at` (a timestamp,
// indexed, so a TTL policy can reclaim storage), `claim_token`, `result`, `fingerprint`
// (blobs); everything but `expires_at` is excluded from indexes. Enable the TTL policy with
//   gcloud firestore fields ttls update expires_at --collection-group=KIND --enable-ttl
// (correctness never depends on it: expired records are judged reclaimable on read).
// `purge_expired()` leaves alone entities of the kind that are not its records (an auto-id key,
// another schema), and logs `purge_skipped_foreign` once.
//
// Endpoint and credentials: `DATASTORE_EMULATOR_HOST` (or an explicit `http://` endpoint)
// means plain HTTP with no token; otherwise https://datastore.googleapis.com with
// `auth::google_default_credentials()`.
//
// Thread safety: safe to share between any number of threads; calls run concurrently.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "idempotency/backend.h"
#include "idempotency/google_auth.h"
#include "idempotency/record.h"

namespace idempotency {

/// Options for DatastoreLock. Fill with designated initializers.
struct DatastoreOptions {
  BackendOptions backend;
  /// The Google Cloud project; empty means `GOOGLE_CLOUD_PROJECT`, else the metadata server.
  std::string project;
  /// The database id; empty (or "(default)", its name in the console) means the default
  /// database.
  std::string database;
  /// The namespace; empty means the default namespace.
  std::string namespace_id;
  /// The entity kind holding the records.
  std::string kind = "IdempotencyRecord";
  /// Base URL ("https://host" or "http://host:port"); empty means `http://` +
  /// `DATASTORE_EMULATOR_HOST` when set, else https://datastore.googleapis.com.
  std::string endpoint;
  /// Where access tokens come from; nullptr means none for an `http://` endpoint (an emulator)
  /// and `auth::google_default_credentials()` otherwise.
  std::shared_ptr<auth::TokenSource> credentials;
  /// Attempts per operation (ABORTED and transient failures), at least 1.
  int max_attempts = 10;
  /// The first back-off; it doubles per attempt up to `max_backoff`, with full jitter.
  std::chrono::milliseconds initial_backoff = std::chrono::milliseconds(10);
  /// The longest single back-off.
  std::chrono::milliseconds max_backoff = std::chrono::seconds(2);
  /// Timeout of one HTTP request.
  std::chrono::milliseconds request_timeout = std::chrono::seconds(30);
  /// Expired keys `purge_expired()` reads per query batch, 1..500; they are deleted in
  /// transactions of at most 25 entities (the Datastore emulator's entity-group limit).
  std::size_t purge_batch_size = 500;
};

/// parse_datastore_url() reads `datastore://PROJECT[/NAMESPACE]?kind=K&database=D` into a copy
/// of `base` (PROJECT may be empty: `datastore:///ns` takes the project from the environment).
/// Throws `std::invalid_argument` for another scheme or an unknown parameter.
[[nodiscard]] DatastoreOptions parse_datastore_url(std::string_view url,
                                                   DatastoreOptions base = {});

/// datastore_key_name() returns the Datastore key name `key` is stored under (the key itself,
/// or "sha256:" + hex for keys Datastore would refuse; see the header comment).
[[nodiscard]] std::string datastore_key_name(std::string_view key);

/// DatastoreLock stores records as Datastore entities.
class DatastoreLock final : public LockBackend {
 public:
  /// The longest result stored: an entity holds at most 1,048,572 bytes, and 8 KiB of that
  /// are left for the record's key, kind, namespace, claim token and fingerprint. Those are
  /// not bounded (a fingerprint is the caller's), so complete() also counts the entity as
  /// Datastore does (with 1 KiB to spare) and, when the result would not fit beside them,
  /// completes the key without it, logged as `result_too_large`.
  static constexpr std::size_t kMaxResultBytes = 1'048'572 - 8 * 1024;

  /// DatastoreLock() resolves the project, endpoint and credentials; it makes no Datastore call.
  /// Throws `std::invalid_argument` for a bad option and `StoreError` when no project can be
  /// found.
  explicit DatastoreLock(DatastoreOptions options = {});
  ~DatastoreLock() override;

  /// project() returns the project this backend writes to.
  [[nodiscard]] const std::string& project() const noexcept;

 protected:
  ClaimResult do_claim(std::string_view key, std::chrono::milliseconds lease,
                       const ClaimRequest& request) override;
  bool do_complete(const Claim& claim, std::optional<std::string> result) override;
  void do_release(const Claim& claim) override;
  std::optional<TimePoint> do_extend(const Claim& claim, std::chrono::milliseconds lease) override;
  std::size_t do_purge_expired() override;
  std::optional<Record> do_inspect(std::string_view key) override;
  [[nodiscard]] std::size_t do_max_result_bytes() const noexcept override {
    return kMaxResultBytes;
  }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idempotency
