// parse_push() into a Message the caller holds (internal to idempotency::pubsub): the push
// wrapper parses into the Message it keeps for the delivery, where a returned Message would be
// moved twice more (out of the variant, into the admission), each a dozen members.
//
// Thread safety: pure function.
#pragma once

#include <optional>

#include "idempotency/pubsub/message.h"

namespace idempotency::pubsub::internal {

/// parse_push_into() reads `request` into `out`, a default-constructed Message, as parse_push()
/// does, or returns why it cannot; `out` is then partly filled and to be dropped.
[[nodiscard]] std::optional<ParseError> parse_push_into(const PushRequest& request,
                                                        const ParseOptions& options, Message& out);

}  // namespace idempotency::pubsub::internal
