#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "idempotency/detail/ascii.h"
#include "idempotency/pubsub/message.h"

namespace idempotency::pubsub {

std::optional<std::string_view> find_header(const std::vector<Header>& headers,
                                            std::string_view name) {
  for (const Header& header : headers) {
    if (detail::iequals_ascii(header.name, name)) return std::string_view(header.value);
  }
  return std::nullopt;
}

}  // namespace idempotency::pubsub
