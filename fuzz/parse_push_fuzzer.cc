// libFuzzer target for idempotency::pubsub::parse_push().
//
// The input is a plain-text HTTP request in the envelope fixtures' format (tests/pubsub/
// http_text.h): a request line, `Name: value` header lines, an empty line, the body. So the
// seed corpus is the fixtures, and any crash reproduces as a readable fixture.
//
// Besides the sanitizers' checks it asserts the parser's promises: a ParseError reason is one
// non-empty short line, parsing is deterministic, and no body is taken for JSON that
// nlohmann-json refuses.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "http_text.h"
#include "idempotency/pubsub/message.h"

namespace {

using idempotency::pubsub::DeliveryForm;
using idempotency::pubsub::Message;
using idempotency::pubsub::ParseError;
using idempotency::pubsub::ParseErrorKind;
using idempotency::pubsub::ParseOptions;

void check(bool ok) {
  if (!ok) std::abort();
}

void check_result(const std::variant<Message, ParseError>& result) {
  if (const auto* error = std::get_if<ParseError>(&result)) {
    check(!error->reason.empty() && error->reason.size() < 200);
    check(error->reason.find('\n') == std::string::npos);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto request = idempotency::pubsub::testing::parse_http_text(text);

  // Auto-detection, then every forced form and tight limits on the same request.
  const auto detected = idempotency::pubsub::parse_push(request);
  check_result(detected);
  check(detected.index() == idempotency::pubsub::parse_push(request).index());

  ParseOptions options;
  if (size % 7 == 0) options.max_body_bytes = size / 2;
  if (size % 3 == 0) options.max_attributes = 1;
  switch (size % 5) {
    case 0:
      break;
    case 1:
      options.form = DeliveryForm::kWrapped;
      break;
    case 2:
      options.form = DeliveryForm::kUnwrapped;
      break;
    case 3:
      options.form = DeliveryForm::kCloudEventBinary;
      break;
    default:
      options.form = DeliveryForm::kCloudEventStructured;
      break;
  }
  check_result(idempotency::pubsub::parse_push(request, options));

  if (const auto* message = std::get_if<Message>(&detected)) {
    (void)idempotency::pubsub::default_key(*message);
    check(message->headers.size() == request.headers.size());
  }

  // Differential: the envelope parser (simdjson) is never laxer than nlohmann-json, the
  // reference the parser replaced. A body it takes for JSON, nlohmann-json accepts too.
  if (request.method == "POST") {
    const auto wrapped = idempotency::pubsub::parse_push(request, {.form = DeliveryForm::kWrapped});
    const auto* error = std::get_if<ParseError>(&wrapped);
    const bool took_json = error == nullptr || (error->kind != ParseErrorKind::kMalformedJson &&
                                                error->kind != ParseErrorKind::kBodyTooLarge);
    if (took_json) check(nlohmann::json::accept(request.body));
  }
  return 0;
}
