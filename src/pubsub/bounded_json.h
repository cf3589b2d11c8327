// JSON parsing with bounds on nesting depth and value count (internal to idempotency::pubsub).
//
// On simdjson: a push envelope is parsed on every delivery, and nlohmann-json's lexer and
// document were a quarter of the gateway's instructions per request (DECISIONS.md, "Push
// envelopes are parsed with simdjson"). simdjson validates the whole document (grammar, UTF-8,
// escapes) before anything reads it, and keeps it as a flat tape: no allocation per value.
//
// Thread safety: a JsonDocument belongs to one thread. Small documents share a parser per
// thread, so a thread must not hold two JsonDocuments' results at once.
#pragma once

#include <simdjson.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

namespace idempotency::pubsub::internal {

/// Deeper than any envelope (a structured CloudEvent nests four levels).
inline constexpr std::size_t kMaxJsonDepth = 32;
/// Far above any envelope (100 attributes are about 220 values).
inline constexpr std::size_t kMaxJsonValues = 100'000;

/// Why a body was not accepted as JSON.
enum class JsonFailure { kSyntax, kTooDeep, kTooManyValues };

/// JsonDocument parses one JSON text and keeps what its root refers to.
class JsonDocument {
 public:
  JsonDocument() = default;
  ~JsonDocument();
  JsonDocument(const JsonDocument&) = delete;
  JsonDocument& operator=(const JsonDocument&) = delete;

  /// parse() parses `text` strictly (one value, no comments, valid UTF-8; a leading UTF-8 byte
  /// order mark is skipped; an integer beyond 64 bits is refused) within `kMaxJsonDepth` levels
  /// and `kMaxJsonValues` values, counting keys. The root stays valid until the next parse()
  /// or the end of this object. Throws only std::bad_alloc.
  [[nodiscard]] std::variant<simdjson::dom::element, JsonFailure> parse(std::string_view text);

 private:
  // A body larger than a thread's shared parser gets one of its own, freed with this object:
  // a 13 MB envelope must not leave its buffers behind on every thread that ever parsed one.
  std::unique_ptr<simdjson::dom::parser> own_;
};

/// json_failure_reason() is the one-line reason for a failure, naming `what` ("body", "data").
[[nodiscard]] std::string json_failure_reason(JsonFailure failure, std::string_view what);

}  // namespace idempotency::pubsub::internal
