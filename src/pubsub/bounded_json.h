// JSON parsing with bounds on nesting depth and value count (internal to idempotency::pubsub).
//
// nlohmann-json builds one node per value, so a hostile body within the size limit could still
// cost many times its size in memory. A first SAX pass (no allocation beyond its own state)
// rejects bodies that nest too deep or hold too many values; only then is the tree built.
//
// Thread safety: pure function.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

namespace idempotency::pubsub::internal {

/// Deeper than any envelope (a structured CloudEvent nests four levels).
inline constexpr std::size_t kMaxJsonDepth = 32;
/// Far above any envelope (100 attributes are about 220 values).
inline constexpr std::size_t kMaxJsonValues = 100'000;

/// Why a body was not accepted as JSON.
enum class JsonFailure { kSyntax, kTooDeep, kTooManyValues };

/// parse_bounded_json() parses `text` strictly (one value, no comments, valid UTF-8) within
/// `kMaxJsonDepth` and `kMaxJsonValues`. It never throws.
[[nodiscard]] std::variant<nlohmann::json, JsonFailure> parse_bounded_json(std::string_view text);

/// json_failure_reason() is the one-line reason for a failure, naming `what` ("body", "data").
[[nodiscard]] std::string json_failure_reason(JsonFailure failure, std::string_view what);

}  // namespace idempotency::pubsub::internal
