// SendingBackend: wraps any backend and says it sends its asynchronous calls
// (LockBackend::sends_async()), as Redis does on its shared connections, while they still run
// through the default (blocking) path: for tests of what callers and decorators do with the
// answer.
#pragma once

#include "idempotency/forwarding_backend.h"

namespace idempotency::testing {

class SendingBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

 protected:
  [[nodiscard]] bool do_sends_async() const noexcept override { return true; }
};

}  // namespace idempotency::testing
