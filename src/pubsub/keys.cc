// Ready key functions for idempotent().
#include <string>
#include <string_view>
#include <utility>

#include "default_key_text.h"
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
    return prefixed(prefix, internal::default_key_text(m));
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
