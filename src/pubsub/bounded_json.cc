#include "bounded_json.h"

#include <cstddef>
#include <new>
#include <string>

namespace idempotency::pubsub::internal {
namespace {

using simdjson::dom::element;

// What a thread's shared parser keeps between calls; larger bodies get a parser of their own.
constexpr std::size_t kSharedCapacity = std::size_t{64} * 1024;
constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

// Counts values as nlohmann-json's SAX events did (every value, container and key), stopping
// once past the bound. Depth is already bounded by the parser, so the recursion is too.
bool within_value_bound(element value, std::size_t& count) {
  if (++count > kMaxJsonValues) return false;
  simdjson::dom::array array;
  if (value.get_array().get(array) == simdjson::SUCCESS) {
    for (element item : array) {
      if (!within_value_bound(item, count)) return false;
    }
  }
  simdjson::dom::object object;
  if (value.get_object().get(object) == simdjson::SUCCESS) {
    for (simdjson::dom::key_value_pair field : object) {
      if (++count > kMaxJsonValues || !within_value_bound(field.value, count)) return false;
    }
  }
  return true;
}

// Each value takes at least two bytes of text with its separator (`0,`), so a shorter text
// cannot cross the bound and is not walked.
constexpr std::size_t kShortestText = 2 * kMaxJsonValues;

}  // namespace

JsonDocument::~JsonDocument() = default;

std::variant<element, JsonFailure> JsonDocument::parse(std::string_view text) {
  if (text.substr(0, kByteOrderMark.size()) == kByteOrderMark) {
    text.remove_prefix(kByteOrderMark.size());
  }
  simdjson::dom::parser* parser = nullptr;
  if (text.size() <= kSharedCapacity) {
    thread_local simdjson::dom::parser shared(kSharedCapacity);
    thread_local bool ready = shared.allocate(kSharedCapacity, kMaxJsonDepth) == simdjson::SUCCESS;
    if (!ready) throw std::bad_alloc();
    parser = &shared;
  } else {
    own_ = std::make_unique<simdjson::dom::parser>(text.size());
    if (own_->allocate(text.size(), kMaxJsonDepth) != simdjson::SUCCESS) throw std::bad_alloc();
    parser = own_.get();
  }
  element root;
  // Copied into the parser's padded buffer: simdjson reads in 64-byte blocks.
  const auto error = parser->parse(text.data(), text.size(), /*realloc_if_needed=*/true).get(root);
  if (error == simdjson::MEMALLOC) throw std::bad_alloc();
  if (error == simdjson::DEPTH_ERROR) return JsonFailure::kTooDeep;
  if (error != simdjson::SUCCESS) return JsonFailure::kSyntax;
  std::size_t count = 0;
  if (text.size() >= kShortestText && !within_value_bound(root, count)) {
    return JsonFailure::kTooManyValues;
  }
  return root;
}

std::string json_failure_reason(JsonFailure failure, std::string_view what) {
  std::string reason(what);
  switch (failure) {
    case JsonFailure::kSyntax:
      return reason + " is not valid JSON";
    case JsonFailure::kTooDeep:
      return reason + " nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    case JsonFailure::kTooManyValues:
      return reason + " holds more than " + std::to_string(kMaxJsonValues) + " JSON values";
  }
  return reason + " is not valid JSON";
}

}  // namespace idempotency::pubsub::internal
