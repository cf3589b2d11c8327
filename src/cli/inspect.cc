// `idem inspect KEY`: one record, shown without its key.
#include <ostream>

#include "backend_url.h"
#include "commands.h"
#include "idempotency/clock.h"
#include "idempotency/key.h"
#include "liveness.h"

namespace idempotency::cli {
namespace {

std::string state_line(const Record& record, Millis now) {
  const std::string line = record.state == RecordState::kDone ? "DONE" : "CLAIMED";
  switch (liveness(record, now)) {
    case Liveness::kTtlLapsed:
      return line + " (reclaimable: ttl lapsed; the next delivery runs again)";
    case Liveness::kLeaseLapsed:
      return line + " (reclaimable: lease lapsed; the next delivery reclaims it)";
    case Liveness::kDone:
      return line + " (duplicates are suppressed)";
    case Liveness::kHeld:
      break;
  }
  return line + " (held: lease live)";
}

// Tokens are random hex by default, but a caller may choose its own: escape what is not
// printable so the terminal shows exactly one line.
std::string printable(const std::string& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out += c;
    } else {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    }
  }
  return out;
}

}  // namespace

ExitCode run_inspect(const std::string& backend_url, const std::string& key, std::ostream& out) {
  auto backend = open_existing_backend(backend_url);
  const auto record = backend->inspect(key);
  const std::string id = key_fingerprint(key);
  if (!record) throw CliError(ExitCode::kNoRecord, "no record for key " + id);
  const Millis now = now_millis();
  out << "key_fingerprint: " << id << "\n"
      << "state:           " << state_line(*record, now) << "\n"
      << "fence:           " << record->fence << "\n"
      << "lease_expiry:    " << format_rfc3339(from_millis(record->lease_expiry)) << "\n"
      << "expires_at:      " << format_rfc3339(from_millis(record->expires_at)) << "\n"
      << "claim_token:     " << printable(record->claim_token) << "\n"
      << "result:          "
      << (record->result ? std::to_string(record->result->size()) + " bytes" : "none") << "\n"
      << "fingerprint:     " << (record->fingerprint ? "present" : "absent") << "\n"
      << "judged at:       " << format_rfc3339(from_millis(now)) << " (this host's clock)\n";
  return ExitCode::kOk;
}

}  // namespace idempotency::cli
