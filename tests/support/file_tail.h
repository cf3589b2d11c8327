// file_tail(): the end of a file, for a failure message that explains itself.
#pragma once

#include <cstddef>
#include <string>

namespace idempotency::testing {

/// file_tail() returns the last `bytes` bytes of the file at `path` (all of it when shorter;
/// "" when it cannot be read).
[[nodiscard]] std::string file_tail(const std::string& path, std::size_t bytes = 2000);

}  // namespace idempotency::testing
