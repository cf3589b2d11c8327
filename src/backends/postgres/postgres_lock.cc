// PostgresLock's operations: each one statement from postgres_sql.cc (prepared per connection,
// or sent whole behind a transaction-mode pooler) run by Impl::run() on a pooled connection
// (postgres_impl.h), retried when a connection breaks or a transaction conflicts, and given up
// (the connection closed) when the server does not answer by statement_timeout + kAnswerMargin.
#include "idempotency/postgres_lock.h"

#include <libpq-fe.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "idempotency/detail/decimal.h"
#include "idempotency/errors.h"
#include "idempotency/key.h"
#include "postgres_impl.h"
#include "postgres_internal.h"

namespace idempotency {

using idempotency::detail::is_decimal_digits;
using postgres_detail::bad_shape;
using postgres_detail::expect_shape;
using postgres_detail::get_bool;
using postgres_detail::get_bytes;
using postgres_detail::get_int;
using postgres_detail::get_state;
using postgres_detail::kBoolOid;
using postgres_detail::kByteaOid;
using postgres_detail::kInt2Oid;
using postgres_detail::kInt8Oid;
using postgres_detail::Params;
using postgres_detail::ResultPtr;

PostgresLock::PostgresLock(std::string_view conninfo_or_url, const PostgresOptions& options)
    : LockBackend(options.backend), impl_(std::make_unique<Impl>(conninfo_or_url, options)) {}

PostgresLock::~PostgresLock() = default;

std::string PostgresLock::schema(std::string_view table) {
  return postgres_detail::ddl(postgres_detail::parse_table(table));
}

WaitCounts PostgresLock::wait_counts() const noexcept { return impl_->waits.counts(); }

ClaimResult PostgresLock::do_claim(std::string_view key, std::chrono::milliseconds lease,
                                   const ClaimRequest& request) {
  if (request.claim_token.empty()) {
    // The port always sets one; the answer below is judged by it.
    throw std::invalid_argument("claim token is empty");
  }
  Params p;
  p.bytes(key);
  p.clock();  // read by run(), once it holds a connection
  p.int8(static_cast<std::int64_t>(lease.count()));
  p.int8(static_cast<std::int64_t>(ttl().count()));
  p.bytes(std::string_view(request.claim_token));
  p.bytes(request.fingerprint);
  return impl_->run(impl_->sql.claim, "claim", key, p, [&](const PGresult* r) -> ClaimResult {
    expect_shape(r, "claim", 1, 1,
                 {kInt2Oid, kInt8Oid, kInt8Oid, kBoolOid, kByteaOid, kByteaOid, kInt8Oid});
    const RecordState state = get_state(r, 0, 0, "claim");
    const std::int64_t fence = get_int(r, 0, 1, "claim");
    const TimePoint lease_expiry = from_millis(get_int(r, 0, 2, "claim"));
    const bool mine = get_bool(r, 0, 3, "claim");
    if (fence < 1) bad_shape("claim", "fence " + std::to_string(fence));
    if (state == RecordState::kDone) {
      return AlreadyDone{get_bytes(r, 0, 4), get_bytes(r, 0, 5),
                         from_millis(get_int(r, 0, 6, "claim"))};
    }
    if (mine) return Won{Claim{std::string(key), fence, lease_expiry, request.claim_token}};
    return HeldByOther{lease_expiry, get_bytes(r, 0, 5)};
  });
}

bool PostgresLock::do_complete(const Claim& claim, std::optional<std::string> result) {
  Params p;
  p.bytes(std::string_view(claim.key));
  p.clock();  // read by run(), once it holds a connection
  p.int8(claim.fence);
  p.bytes(result);
  p.int8(static_cast<std::int64_t>(ttl().count()));
  return impl_->run(impl_->sql.complete, "complete", claim.key, p, [](const PGresult* r) {
    expect_shape(r, "complete", 0, 1, {kInt8Oid});
    return PQntuples(r) == 1;
  });
}

void PostgresLock::do_release(const Claim& claim) {
  Params p;
  p.bytes(std::string_view(claim.key));
  p.clock();  // read by run(), once it holds a connection
  p.int8(claim.fence);
  p.int8(static_cast<std::int64_t>(ttl().count()));
  impl_->run(impl_->sql.release, "release", claim.key, p,
             [](const PGresult* r) { expect_shape(r, "release", 0, 1, {kInt8Oid}); });
}

std::optional<TimePoint> PostgresLock::do_extend(const Claim& claim,
                                                 std::chrono::milliseconds lease) {
  Params p;
  p.bytes(std::string_view(claim.key));
  p.clock();  // read by run(), once it holds a connection
  p.int8(claim.fence);
  p.bytes(std::string_view(claim.claim_token));
  p.int8(static_cast<std::int64_t>(lease.count()));
  p.int8(static_cast<std::int64_t>(ttl().count()));
  return impl_->run(impl_->sql.extend, "extend", claim.key, p,
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
    const auto deleted =
        impl_->run(impl_->sql.purge, "purge_expired", {}, p, [](const PGresult* r) {
          const char* n = PQcmdTuples(const_cast<PGresult*>(r));
          if (n == nullptr || !is_decimal_digits(n)) bad_shape("purge_expired", "no row count");
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
      impl_->sql.record, "record", key, p, [](const PGresult* r) -> std::optional<Record> {
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

}  // namespace idempotency
