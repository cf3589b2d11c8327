// Ready key functions for idempotent().
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "idempotency/key.h"
#include "idempotency/pubsub/idempotent.h"

namespace idempotency::pubsub {
namespace {

std::string prefixed(const std::string& prefix, std::string_view value) {
  // No value, or a blank one: no key, so the caller fails closed instead of sharing one key
  // (the prefix) among every message without a real value.
  if (is_blank_key(value)) return {};
  std::string key;  // one allocation at most (a Pub/Sub message id is 16 digits and more)
  key.reserve(prefix.size() + value.size());
  key.append(prefix).append(value);
  return key;
}

}  // namespace

KeyFunction key_from_message_id(std::string prefix) {
  return [prefix = std::move(prefix)](const Message& m) {
    std::optional<std::string> id = default_key(m);
    if (!id) return std::string();
    // Without a prefix the id's copy is the key: no second one.
    if (prefix.empty()) return is_blank_key(*id) ? std::string() : std::move(*id);
    return prefixed(prefix, *id);
  };
}

KeyFunction key_from_attribute(std::string name, std::string prefix) {
  return [name = std::move(name), prefix = std::move(prefix)](const Message& m) {
    auto it = m.attributes.find(name);
    return it == m.attributes.end() ? std::string() : prefixed(prefix, it->second);
  };
}

KeyFunction key_from_ordering_key(std::string prefix) {
  return [prefix = std::move(prefix)](const Message& m) {
    return prefixed(prefix, m.ordering_key.value_or(""));
  };
}

KeyFunction key_from_header(std::string name, std::string prefix) {
  return [name = std::move(name), prefix = std::move(prefix)](const Message& m) {
    return prefixed(prefix, m.header(name).value_or(""));
  };
}

}  // namespace idempotency::pubsub
