#include "support/file_tail.h"

#include <fstream>
#include <iterator>

namespace idempotency::testing {

std::string file_tail(const std::string& path, std::size_t bytes) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > bytes) text.erase(0, text.size() - bytes);
  return text;
}

}  // namespace idempotency::testing
