#include "key_input.h"

#include <iterator>
#include <stdexcept>

#include "exit_codes.h"
#include "idempotency/key.h"

namespace idempotency::cli {

std::string read_key(const std::string& argument, std::istream& in) {
  std::string key = argument;
  if (argument == "-") {
    key.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) throw usage_error("could not read the key from stdin");
    // One line end, "\n" or "\r\n": a lone trailing "\r" is the key's own.
    if (!key.empty() && key.back() == '\n') {
      key.pop_back();
      if (!key.empty() && key.back() == '\r') key.pop_back();
    }
  }
  try {
    validate_key(key);  // its message names the problem, never the key
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  return key;
}

}  // namespace idempotency::cli
