// Linked into idem_with_fake_backend: registers the fake backend before idem's main() runs,
// the one line by which that idem learns a backend its sources never name.
#include "backends/fake_backend.h"

namespace {

const bool kRegistered = (idempotency::testing::register_fake_backend(), true);

}  // namespace
