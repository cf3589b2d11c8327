// `idem purge-expired`: physically delete the records past their `expires_at`.
#include <ostream>

#include "backend_url.h"
#include "commands.h"

namespace idempotency::cli {

ExitCode run_purge_expired(const std::string& backend_url, std::ostream& out) {
  auto backend = open_existing_backend(backend_url);
  const std::size_t deleted = backend->purge_expired();
  out << "purged " << deleted << " expired record" << (deleted == 1 ? "" : "s") << "\n";
  return ExitCode::kOk;
}

}  // namespace idempotency::cli
