#include "backend_url.h"

#include <stdexcept>

#include "exit_codes.h"

namespace idempotency::cli {

BackendUrl parse_url(std::string_view url) {
  try {
    return BackendUrl::parse(url);
  } catch (const std::invalid_argument& e) {
    throw usage_error(one_line(e.what()));
  }
}

std::unique_ptr<LockBackend> open_existing_backend(std::string_view url) {
  BackendUrl parsed = parse_url(url);
  try {
    const BackendEntry& entry = backend_for(parsed);
    return entry.open_existing ? entry.open_existing(parsed) : entry.open(parsed, {});
  } catch (const std::invalid_argument& e) {
    throw usage_error(one_line(e.what()));
  }
}

const BackendEntry& sql_backend(std::string_view scheme, std::string_view what) {
  const BackendEntry* found = find_backend(scheme);
  if (found != nullptr && found->schema) return *found;
  std::string names;
  for (const auto* entry : registered_backends()) {
    if (entry->schema) names += (names.empty() ? "" : ", ") + entry->schemes.front();
  }
  throw usage_error(std::string(what) + " (backends with an SQL schema: " + names + ")");
}

std::string as_usage(const std::function<std::string()>& call) {
  try {
    return call();
  } catch (const std::invalid_argument& e) {
    throw usage_error(one_line(e.what()));
  }
}

std::string one_line(std::string_view message) {
  std::string out;
  for (const char c : message) {
    if (c == '\n' || c == '\r') {
      if (!out.empty() && out.back() != ' ') out += "; ";
    } else {
      out += c;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  return out;
}

}  // namespace idempotency::cli
