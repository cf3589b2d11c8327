// RFC 3339 timestamps for the instants a record stores.
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "idempotency/record.h"

namespace idempotency::cli {

/// rfc3339_utc() formats epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
[[nodiscard]] std::string rfc3339_utc(Millis epoch_ms);

}  // namespace idempotency::cli
