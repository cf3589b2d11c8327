// The SQL form of the state machine: the table, and one statement per operation, each a
// single round trip that re-expresses the core's `transition()` on the server (the
// counterpart of redis_script.lua; the differential test holds both to the pure function).
//
// Parameters, by statement (all binary; `now` is NULL to use the server's clock):
//   claim    $1 key, $2 now, $3 lease ms, $4 ttl ms, $5 claim token, $6 fingerprint
//   complete $1 key, $2 now, $3 fence, $4 result, $5 ttl ms
//   release  $1 key, $2 now, $3 fence, $4 ttl ms
//   extend   $1 key, $2 now, $3 fence, $4 claim token, $5 lease ms, $6 ttl ms
//   purge    $1 now, $2 batch size
//   record   $1 key
//   wait     $1 key, $2 now (a waiter's registration, on its own connection)
//   unwait   $1 key
// States are stored as 1 CLAIMED, 2 DONE; instants as epoch milliseconds. `waiters` counts
// the once() waiters in other processes that LISTEN for the key (DECISIONS.md, issue 15).
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include "idempotency/key.h"
#include "postgres_internal.h"

namespace idempotency::postgres_detail {
namespace {

constexpr std::size_t kMaxIdentifierPart = 48;

// The server clock in epoch milliseconds; clock_timestamp() is the instant the statement
// reads it, not the transaction start.
constexpr const char* kServerNow = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

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

// `n`, the statement's one instant: the caller's clock when $<param> is set, else the server's.
std::string now_from(const char* param) {
  return std::string("WITH c AS MATERIALIZED (SELECT coalesce(") + param + "::bigint, " +
         kServerNow + ") AS n)";
}

std::string claim_sql(const std::string& t) {
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
  // A record whose answer writes nothing (a replay, a live holder, the caller's own live
  // claim) is answered from the statement's snapshot, `kept`, and the INSERT then inserts
  // nothing: no row lock, no new row version, no WAL, so a duplicate costs no commit flush.
  // Each such answer holds only while `n` (read after the snapshot was taken) is before an
  // instant of the record, so it held at the snapshot. Otherwise every conflict rewrites the
  // row (with itself when nothing changes, as a row inserted since the snapshot may be kept)
  // so RETURNING always yields the record as it now stands: one round trip either way.
  const std::string columns =
      "r.state, r.fence, r.lease_expiry, (r.claim_token = $5), r.result, r.fingerprint, "
      "r.expires_at";
  return now_from("$2") + ", kept AS MATERIALIZED (SELECT " + columns + " FROM " + t +
         " AS r, c WHERE r.key = $1 AND c.n < r.expires_at AND (r.state <> 1 OR c.n < "
         "r.lease_expiry)), up AS (INSERT INTO " +
         t +
         " AS r (key, state, fence, lease_expiry, expires_at, claim_token, result, "
         "fingerprint) SELECT $1, 1, 1, c.n + $3, c.n + $3 + $4, $5, NULL, $6 FROM c "
         "WHERE NOT EXISTS (SELECT 1 FROM kept) "
         "ON CONFLICT (key) DO UPDATE SET state = " +
         pick("1", "r.state") + ", fence = " + pick("r.fence + 1", "r.fence") +
         ", lease_expiry = " + pick("excluded.lease_expiry", "r.lease_expiry") +
         ", expires_at = " + pick("excluded.expires_at", "r.expires_at") +
         ", claim_token = " + pick("excluded.claim_token", "r.claim_token") +
         ", result = " + pick("NULL", "r.result") +
         ", fingerprint = " + pick("excluded.fingerprint", "r.fingerprint") + " RETURNING " +
         columns + ") SELECT * FROM kept UNION ALL SELECT * FROM up";
}

// complete() and release() wake cross-instance waiters in the same round trip, and only when
// one is registered on the row: NOTIFY takes a database-wide lock held through the commit's
// WAL flush, so notifying on every commit would serialise them all. `u.waiters` is the count
// on the row version this statement locked and changed, so a waiter's registration either
// committed before it (counted here: notified) or waits for the row lock and then sees the
// settled row (it does not wait).
std::string notifying(const std::string& channel, const std::string& update) {
  return now_from("$2") + ", u AS (" + update +
         ") SELECT u.fence FROM u LEFT JOIN LATERAL (SELECT pg_notify('" + channel +
         "', left(encode(sha256($1), 'hex'), 12)) WHERE u.waiters > 0) AS notified ON true";
}

}  // namespace

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
         "  fingerprint bytea,\n"
         "  waiters integer NOT NULL DEFAULT 0  -- once() waiters LISTENing for this key\n"
         ");\n"
         "-- Tables made before the waiters column (issue 15) get it here; a no-op otherwise.\n"
         "ALTER TABLE " +
         t.quoted + " ADD COLUMN IF NOT EXISTS waiters integer NOT NULL DEFAULT 0;\n" +
         "CREATE INDEX IF NOT EXISTS " + t.quoted_index + " ON " + t.quoted + " (expires_at);\n";
}

std::string create_table_sql(const TableName& t, int lock_timeout_ms) {
  // The advisory lock first, without the limit: another process's DDL holds it at most about
  // that long. Then the limit, for the table's own lock, for the rest of this transaction (the
  // statements of one simple query are one transaction).
  return "SELECT pg_advisory_xact_lock(hashtext('gcp-pubsub-idempotency " + t.quoted +
         "')); SELECT set_config('lock_timeout', '" + std::to_string(lock_timeout_ms) +
         "', true); " + ddl(t);
}

std::string table_state_sql(const TableName& t) {
  return "SELECT to_regclass('" + t.quoted +
         "') IS NOT NULL, EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('" +
         t.quoted + "') AND attname = 'waiters' AND NOT attisdropped)";
}

Statements statements(const TableName& table) {
  const std::string& t = table.quoted;
  Statements s;
  s.channel = "idempotency_" + key_fingerprint(t);
  s.claim = {
      "idem_claim", claim_sql(t), {kByteaOid, kInt8Oid, kInt8Oid, kInt8Oid, kByteaOid, kByteaOid}};
  // complete(): fence match on a live record; CLAIMED -> DONE, a DONE one stays as it is.
  s.complete = {
      "idem_complete",
      notifying(s.channel, "UPDATE " + t +
                               " AS r SET state = 2, "
                               "result = CASE WHEN r.state = 1 THEN $4 ELSE r.result END, "
                               "expires_at = CASE WHEN r.state = 1 THEN c.n + $5 ELSE "
                               "r.expires_at END FROM c WHERE r.key = $1 AND r.fence = $3 AND "
                               "c.n < r.expires_at RETURNING r.fence, r.waiters"),
      {kByteaOid, kInt8Oid, kInt8Oid, kByteaOid, kInt8Oid}};
  // release(): expires the lease in place and advances the fence; never deletes.
  s.release = {"idem_release",
               notifying(s.channel, "UPDATE " + t +
                                        " AS r SET lease_expiry = c.n, fence = r.fence + 1, "
                                        "claim_token = ''::bytea, "
                                        "expires_at = greatest(r.expires_at, c.n + $4) "
                                        "FROM c WHERE r.key = $1 AND r.fence = $3 AND "
                                        "r.state = 1 AND c.n < r.expires_at "
                                        "RETURNING r.fence, r.waiters"),
               {kByteaOid, kInt8Oid, kInt8Oid, kInt8Oid}};
  // extend(): fence and token on a live CLAIMED row (a release empties the token); no NOTIFY,
  // since nobody waits for a lease to grow, and NOTIFY's commit-time lock would serialize
  // every heartbeat.
  s.extend = {"idem_extend",
              now_from("$2") + " UPDATE " + t +
                  " AS r SET lease_expiry = c.n + $5, "
                  "expires_at = greatest(r.expires_at, c.n + $5 + $6) "
                  "FROM c WHERE r.key = $1 AND r.fence = $3 AND r.state = 1 AND "
                  "r.claim_token = $4 AND $4 <> ''::bytea AND c.n < r.expires_at "
                  "RETURNING r.lease_expiry",
              {kByteaOid, kInt8Oid, kInt8Oid, kByteaOid, kInt8Oid, kInt8Oid}};
  // purge: a bounded batch past expires_at, skipping rows a claim holds locked right now.
  s.purge = {"idem_purge",
             now_from("$1") + ", victims AS (SELECT v.key FROM " + t +
                 " AS v, c WHERE v.expires_at <= c.n LIMIT $2 FOR UPDATE OF v SKIP LOCKED) "
                 "DELETE FROM " +
                 t + " AS d USING victims, c WHERE d.key = victims.key AND d.expires_at <= c.n",
             {kInt8Oid, kInt8Oid}};
  s.record = {"idem_record",
              "SELECT state, fence, lease_expiry, expires_at, claim_token, result, "
              "fingerprint FROM " +
                  t + " WHERE key = $1",
              {kByteaOid}};
  // A waiter's registration, on its listening connection after LISTEN: counted only on a live
  // CLAIMED row, the one state that a complete or release will still notify about; no row
  // back means "settled or lapsed: claim again now". The row lock orders it against complete.
  // A released row is CLAIMED with its lease ended at the release's instant, which a waiter
  // whose clock is behind the releaser's reads as live: its emptied token tells it apart.
  s.wait = {"idem_wait",
            now_from("$2") + " UPDATE " + t +
                " AS r SET waiters = r.waiters + 1 FROM c WHERE r.key = $1 AND r.state = 1 AND "
                "r.claim_token <> ''::bytea AND c.n < r.lease_expiry AND c.n < r.expires_at "
                "RETURNING r.fence",
            {kByteaOid, kInt8Oid}};
  // Its deregistration when the wait ends. Never below zero: the row may have been purged and
  // made anew meanwhile. One that never runs (a crashed waiter) leaves the count high, which
  // costs the key's later completes a NOTIFY each, never a missed wake-up.
  s.unwait = {"idem_unwait",
              "UPDATE " + t + " SET waiters = waiters - 1 WHERE key = $1 AND waiters > 0",
              {kByteaOid}};
  return s;
}

}  // namespace idempotency::postgres_detail
