#include "bounded_json.h"

#include <cstddef>
#include <string>

namespace idempotency::pubsub::internal {
namespace {

using nlohmann::json;

// A SAX consumer that keeps nothing but counters and stops at the first bound crossed.
class BoundsCheck {
 public:
  bool null() { return value(); }
  bool boolean(bool /*v*/) { return value(); }
  bool number_integer(json::number_integer_t /*v*/) { return value(); }
  bool number_unsigned(json::number_unsigned_t /*v*/) { return value(); }
  bool number_float(json::number_float_t /*v*/, const json::string_t& /*s*/) { return value(); }
  bool string(json::string_t& /*s*/) { return value(); }
  bool binary(json::binary_t& /*b*/) { return value(); }
  bool start_object(std::size_t /*n*/) { return open(); }
  bool key(json::string_t& /*k*/) { return value(); }
  bool end_object() { return close(); }
  bool start_array(std::size_t /*n*/) { return open(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t /*pos*/, const std::string& /*token*/,
                   const json::exception& /*e*/) {
    failure_ = JsonFailure::kSyntax;
    return false;
  }

  [[nodiscard]] JsonFailure failure() const { return failure_; }

 private:
  bool value() {
    if (++values_ > kMaxJsonValues) {
      failure_ = JsonFailure::kTooManyValues;
      return false;
    }
    return true;
  }
  bool open() {
    if (++depth_ > kMaxJsonDepth) {
      failure_ = JsonFailure::kTooDeep;
      return false;
    }
    return value();
  }
  bool close() {
    --depth_;
    return true;
  }

  std::size_t depth_ = 0;
  std::size_t values_ = 0;
  JsonFailure failure_ = JsonFailure::kSyntax;
};

// The bounds check in front of nlohmann-json's own document builder: one pass over the text
// both refuses what crosses a bound and builds the document (a push is parsed on every
// delivery; checking first and parsing again cost a second pass).
class BoundedDocument {
 public:
  explicit BoundedDocument(json& doc) : build_(doc, /*allow_exceptions_=*/false) {}

  bool null() { return check_.null() && build_.null(); }
  bool boolean(bool v) { return check_.boolean(v) && build_.boolean(v); }
  bool number_integer(json::number_integer_t v) {
    return check_.number_integer(v) && build_.number_integer(v);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    return check_.number_unsigned(v) && build_.number_unsigned(v);
  }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return check_.number_float(v, s) && build_.number_float(v, s);
  }
  bool string(json::string_t& s) { return check_.string(s) && build_.string(s); }
  bool binary(json::binary_t& b) { return check_.binary(b) && build_.binary(b); }
  bool start_object(std::size_t n) { return check_.start_object(n) && build_.start_object(n); }
  bool key(json::string_t& k) { return check_.key(k) && build_.key(k); }
  bool end_object() { return check_.end_object() && build_.end_object(); }
  bool start_array(std::size_t n) { return check_.start_array(n) && build_.start_array(n); }
  bool end_array() { return check_.end_array() && build_.end_array(); }
  bool parse_error(std::size_t pos, const std::string& token, const json::exception& e) {
    (void)build_.parse_error(pos, token, e);
    return check_.parse_error(pos, token, e);
  }

  [[nodiscard]] JsonFailure failure() const { return check_.failure(); }

 private:
  BoundsCheck check_;
  nlohmann::detail::json_sax_dom_parser<json> build_;
};

}  // namespace

std::variant<json, JsonFailure> parse_bounded_json(std::string_view text) {
  json doc;
  BoundedDocument parse(doc);
  if (!json::sax_parse(text, &parse)) return parse.failure();
  if (doc.is_discarded()) return JsonFailure::kSyntax;
  return doc;
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
