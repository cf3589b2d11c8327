// The default key's rule as a view into the message (internal to idempotency::pubsub):
// default_key() copies what it names, and key_from_message_id() builds its key from it with
// one allocation, not a copy of the id and then another.
//
// Thread safety: pure function.
#pragma once

#include <string_view>

#include "idempotency/pubsub/message.h"

namespace idempotency::pubsub::internal {

/// default_key_text() is the text default_key() returns, as a view into `message`; empty when
/// default_key() returns none.
[[nodiscard]] std::string_view default_key_text(const Message& message) noexcept;

}  // namespace idempotency::pubsub::internal
