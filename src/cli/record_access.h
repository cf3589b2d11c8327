// Reading one key's stored record through whichever concrete backend a URL opened.
//
// `LockBackend` has no read operation; each shipped backend offers `record(key)` for
// inspection, reached here by its concrete type.
//
// Thread safety: as the backend's own `record()`.
#pragma once

#include <optional>
#include <string_view>

#include "idempotency/backend.h"
#include "idempotency/record.h"

namespace idempotency::cli {

/// read_record() returns `key`'s record as stored (possibly past its `expires_at`), if any.
/// Throws `StoreError` when the store fails and a usage CliError for a backend that cannot
/// be inspected.
[[nodiscard]] std::optional<Record> read_record(LockBackend& backend, std::string_view key);

/// Liveness is how a record answers a claim at a given instant.
enum class Liveness {
  /// CLAIMED with a live lease, or DONE within its ttl.
  kLive,
  /// CLAIMED and the lease lapsed: the next claim wins with fence + 1.
  kLeaseLapsed,
  /// Past `expires_at`: the record suppresses nothing and the next claim wins.
  kTtlLapsed,
};

/// liveness() judges `record` at `now` (epoch milliseconds), as `transition()` does.
[[nodiscard]] Liveness liveness(const Record& record, Millis now);

/// now_millis() is this host's clock in epoch milliseconds.
[[nodiscard]] Millis now_millis();

}  // namespace idempotency::cli
