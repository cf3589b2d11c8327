// Codecs: how `once` stores an operation's result as bytes in the DONE record, so that a
// duplicate on another instance can replay it.
//
// A codec for T is a type with `static std::string encode(const T&)` and
// `static T decode(std::string_view)`; decode throws on bytes it cannot read. Ready codecs:
// `std::string`, `std::vector<std::byte>`, and `JsonCodec<T>` (json_codec.h) where
// nlohmann-json is available. Specialize `idempotency::Codec<T>` for your own types.
//
// Thread safety: codecs are stateless.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace idempotency {

/// Codec<T> is specialized for every T `once` can store; the primary template is undefined.
template <class T>
struct Codec;

/// Codec<void> is the empty codec of operations that return nothing: nothing is stored.
template <>
struct Codec<void> {};

/// Codec<std::string> stores the bytes as they are.
template <>
struct Codec<std::string> {
  /// encode() returns `value` unchanged.
  static std::string encode(const std::string& value) { return value; }
  /// decode() returns a copy of `bytes`; it never throws on content, any bytes are a string.
  static std::string decode(std::string_view bytes) { return std::string(bytes); }
};

/// Codec<std::vector<std::byte>> stores the bytes as they are.
template <>
struct Codec<std::vector<std::byte>> {
  /// encode() copies the bytes of `value` into a string, one char per byte.
  static std::string encode(const std::vector<std::byte>& value) {
    std::string out(value.size(), '\0');
    if (!value.empty()) std::memcpy(out.data(), value.data(), value.size());
    return out;
  }
  /// decode() copies `bytes` back into a byte vector; it never throws on content.
  static std::vector<std::byte> decode(std::string_view bytes) {
    std::vector<std::byte> out(bytes.size());
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
};

/// CodecFor<C, T> holds when C can encode and decode T.
template <class C, class T>
concept CodecFor = requires(const T& value, std::string_view bytes) {
  { C::encode(value) } -> std::convertible_to<std::string>;
  { C::decode(bytes) } -> std::convertible_to<T>;
};

}  // namespace idempotency
