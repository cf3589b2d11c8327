// Start-up warnings: configurations the gateway accepts but that can lose or repeat work in
// a setting the operator may not have meant.
//
// Thread safety: call once, at start.
#pragma once

#include "config.h"

namespace idempotency::gateway {

/// warn_of_risky_setups() logs one warning line for each risky part of `config`: a lease an
/// upstream call can outlast with no heartbeat, `--key ordering-key` (it completes a whole
/// stream), and a store local to the instance on Cloud Run (`K_SERVICE` set).
void warn_of_risky_setups(const Config& config);

}  // namespace idempotency::gateway
