// A fake backend added to the registry in one place, for the tests that show a registered
// backend is reachable from open_backend() and from idem. `fake://INNER` opens the backend the
// URL INNER names, wrapped in a decorator that changes nothing: so it also shows that
// inspection works through a decorated backend.
#pragma once

#include "idempotency/forwarding_backend.h"

namespace idempotency::testing {

/// FakeBackend is what a `fake://` URL opens.
class FakeBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
};

/// register_fake_backend() registers the scheme "fake"; later calls do nothing.
void register_fake_backend();

}  // namespace idempotency::testing
