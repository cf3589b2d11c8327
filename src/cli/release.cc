// `idem release KEY`: break-glass for a claim whose holder is gone but whose lease is long.
#include <ostream>

#include "backend_url.h"
#include "commands.h"
#include "idempotency/clock.h"
#include "idempotency/key.h"
#include "liveness.h"

namespace idempotency::cli {

ExitCode run_release(const std::string& backend_url, const std::string& key, bool confirmed,
                     std::ostream& out) {
  auto backend = open_existing_backend(backend_url);
  const std::string id = key_fingerprint(key);
  const auto before = backend->inspect(key);
  if (!before) throw CliError(ExitCode::kNoRecord, "no record for key " + id);
  if (before->state == RecordState::kDone) {
    throw CliError(ExitCode::kRefused, "refused: the record of key " + id +
                                           " is DONE, not stuck; it expires with its ttl at " +
                                           format_rfc3339(from_millis(before->expires_at)));
  }
  std::string plan =
      "release the CLAIMED record of key " + id + " at fence " + std::to_string(before->fence) +
      " (lease_expiry " + format_rfc3339(from_millis(before->lease_expiry)) +
      "): the lease ends now and the fence advances to " + std::to_string(before->fence + 1) +
      ", so the next delivery reclaims the key and the current holder "
      "can no longer complete";
  // Break-glass is for a holder that is gone; a live lease (which a heartbeat keeps live while
  // its holder works) says it may not be.
  const Millis now = now_millis();
  if (liveness(*before, now) == Liveness::kHeld) {
    plan += "; the lease is still live for " + std::to_string((before->lease_expiry - now) / 1000) +
            " s by this host's clock: if its holder is still working, the next delivery runs "
            "the work beside it";
  }
  if (!confirmed) {
    out << "would " << plan << "\n";
    throw CliError(ExitCode::kConfirmationRequired,
                   "confirmation required: nothing changed; re-run with --yes to release");
  }
  backend->release(Claim{.key = key,
                         .fence = before->fence,
                         .lease_expiry = from_millis(before->lease_expiry),
                         .claim_token = before->claim_token});
  const auto after = backend->inspect(key);
  // A release clears the token; a claim by the next delivery meanwhile raises the fence too,
  // but sets one.
  if (after && after->fence == before->fence + 1 && after->state == RecordState::kClaimed &&
      after->claim_token.empty()) {
    out << "released: " << plan << "\n";
    return ExitCode::kOk;
  }
  if (!after || *after == *before) {
    out << "nothing to release: the record of key " << id
        << " was already past its expires_at, so the next delivery claims it afresh\n";
    return ExitCode::kOk;
  }
  throw CliError(ExitCode::kRefused, "not released: the record of key " + id +
                                         " changed meanwhile (a new claim or a completion); "
                                         "inspect it again");
}

}  // namespace idempotency::cli
