#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "idempotency/pubsub/message.h"

namespace idempotency::pubsub {
namespace {

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string_view> find_header(const std::vector<Header>& headers,
                                            std::string_view name) {
  for (const Header& header : headers) {
    if (iequals(header.name, name)) return std::string_view(header.value);
  }
  return std::nullopt;
}

}  // namespace idempotency::pubsub
