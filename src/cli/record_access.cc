#include "record_access.h"

#include "exit_codes.h"
#include "idempotency/clock.h"
#include "idempotency/memory_lock.h"
#ifdef IDEMPOTENCY_HAVE_SQLITE
#include "idempotency/sqlite_lock.h"
#endif
#ifdef IDEMPOTENCY_HAVE_POSTGRES
#include "idempotency/postgres_lock.h"
#endif
#ifdef IDEMPOTENCY_HAVE_REDIS
#include "idempotency/redis_lock.h"
#endif
#ifdef IDEMPOTENCY_HAVE_DATASTORE
#include "idempotency/datastore_lock.h"
#endif

namespace idempotency::cli {

std::optional<Record> read_record(LockBackend& backend, std::string_view key) {
#ifdef IDEMPOTENCY_HAVE_SQLITE
  if (auto* sqlite = dynamic_cast<SqliteLock*>(&backend)) return sqlite->record(key);
#endif
#ifdef IDEMPOTENCY_HAVE_POSTGRES
  if (auto* postgres = dynamic_cast<PostgresLock*>(&backend)) return postgres->record(key);
#endif
#ifdef IDEMPOTENCY_HAVE_REDIS
  if (auto* redis = dynamic_cast<RedisLock*>(&backend)) return redis->record(key);
#endif
#ifdef IDEMPOTENCY_HAVE_DATASTORE
  if (auto* datastore = dynamic_cast<DatastoreLock*>(&backend)) return datastore->record(key);
#endif
  if (auto* memory = dynamic_cast<InMemoryLock*>(&backend)) return memory->record(key);
  throw usage_error("this backend's records cannot be inspected");
}

Liveness liveness(const Record& record, Millis now) {
  if (now >= record.expires_at) return Liveness::kTtlLapsed;
  if (record.state == RecordState::kClaimed && now >= record.lease_expiry) {
    return Liveness::kLeaseLapsed;
  }
  return Liveness::kLive;
}

Millis now_millis() { return to_millis(system_clock()->now()); }

}  // namespace idempotency::cli
