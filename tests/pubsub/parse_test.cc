// parse_push(): real envelopes of every delivery form, and every malformed case with its exact
// one-line reason, which must never carry the message id, data or attributes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "http_text.h"
#include "idempotency/pubsub/message.h"
#include "support/base64.h"

namespace idempotency::pubsub::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;

PushRequest fixture(const std::string& name) {
  std::ifstream in(std::string(IDEMPOTENCY_PUBSUB_ENVELOPES_DIR) + "/" + name, std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << name;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_http_text(text);
}

Message parsed(const PushRequest& request, const ParseOptions& options = {}) {
  auto result = parse_push(request, options);
  if (auto* error = std::get_if<ParseError>(&result)) {
    ADD_FAILURE() << "unexpected parse error: " << error->reason;
    return {};
  }
  return std::get<Message>(std::move(result));
}

ParseError failed(const PushRequest& request, const ParseOptions& options = {}) {
  auto result = parse_push(request, options);
  if (!std::holds_alternative<ParseError>(result)) {
    ADD_FAILURE() << "expected a parse error";
    return {};
  }
  return std::get<ParseError>(std::move(result));
}

PushRequest json_post(std::string body) {
  return {.method = "POST",
          .headers = {{"Content-Type", "application/json"}, {"User-Agent", "CloudPubSub-Google"}},
          .body = std::move(body)};
}

PushRequest binary_event(std::string body) {
  return {.method = "POST",
          .headers = {{"Content-Type", "application/json"},
                      {"ce-id", "1096434104173400"},
                      {"ce-specversion", "1.0"},
                      {"ce-type", "google.cloud.pubsub.topic.v1.messagePublished"}},
          .body = std::move(body)};
}

PushRequest structured_event(std::string body) {
  return {.method = "POST",
          .headers = {{"Content-Type", "application/cloudevents+json"}},
          .body = std::move(body)};
}

// ---- Wrapped envelopes -------------------------------------------------------------------

TEST(ParseWrapped, BothSpellingsAsPubSubSendsThem) {
  Message m = parsed(fixture("wrapped_both_spellings.http"));
  EXPECT_EQ(m.form, DeliveryForm::kWrapped);
  EXPECT_EQ(m.message_id, "2070443601311540");
  EXPECT_EQ(m.publish_time, "2021-02-26T19:13:55.749Z");
  EXPECT_EQ(m.data, R"({"status": "Hello there"})");
  EXPECT_THAT(m.attributes, ElementsAre(Pair("Content-Type", "application/json")));
  EXPECT_EQ(m.subscription, "projects/myproject/subscriptions/mysubscription");
  EXPECT_EQ(m.ordering_key, std::nullopt);
  EXPECT_EQ(m.delivery_attempt, std::nullopt);
  EXPECT_EQ(m.cloud_event_id, std::nullopt);
  EXPECT_EQ(default_key(m), "2070443601311540");
  EXPECT_EQ(m.header("user-agent"), "CloudPubSub-Google");
}

TEST(ParseWrapped, CamelCaseOnly) {
  Message m = parsed(fixture("wrapped_camel_case.http"));
  EXPECT_EQ(m.form, DeliveryForm::kWrapped);
  EXPECT_EQ(m.message_id, "136969346945");
  EXPECT_EQ(m.publish_time, "2014-10-02T15:01:23.045123456Z");
  EXPECT_EQ(m.data, "Hello Cloud Pub/Sub! Here is my message!");
  EXPECT_THAT(m.attributes, ElementsAre(Pair("key", "value")));
}

TEST(ParseWrapped, SnakeCaseOnly) {
  Message m = parsed(fixture("wrapped_snake_case.http"));
  EXPECT_EQ(m.message_id, "136969346945");
  EXPECT_EQ(m.publish_time, "2014-10-02T15:01:23.045123456Z");
  EXPECT_EQ(m.data, "Hello Cloud Pub/Sub! Here is my message!");
  EXPECT_EQ(default_key(m), "136969346945");
}

TEST(ParseWrapped, AttributesOnlyMessageHasEmptyData) {
  Message m = parsed(fixture("wrapped_attributes_only.http"));
  EXPECT_EQ(m.message_id, "9876543210");
  EXPECT_THAT(m.data, IsEmpty());
  EXPECT_THAT(m.attributes,
              ElementsAre(Pair("bucketId", "my-bucket"), Pair("eventType", "OBJECT_FINALIZE"),
                          Pair("objectId", "photos/cat.jpg")));
}

TEST(ParseWrapped, DeliveryAttempt) {
  Message m = parsed(fixture("wrapped_delivery_attempt.http"));
  EXPECT_EQ(m.delivery_attempt, 5);
  EXPECT_EQ(m.data, "order po-123");
  EXPECT_THAT(m.attributes, IsEmpty());
}

TEST(ParseWrapped, DeliveryAttemptSnakeCase) {
  Message m = parsed(json_post(R"({"message": {"messageId": "1"}, "delivery_attempt": 7})"));
  EXPECT_EQ(m.delivery_attempt, 7);
}

TEST(ParseWrapped, OrderingKey) {
  Message m = parsed(fixture("wrapped_ordering_key.http"));
  EXPECT_EQ(m.ordering_key, "some-key");
  EXPECT_EQ(m.message_id, "2980761766361540");
}

TEST(ParseWrapped, NullMembersAreAbsent) {
  Message m = parsed(json_post(
      R"({"message": {"messageId": null, "message_id": "42", "data": null, "attributes": null,
          "orderingKey": null}, "subscription": null, "deliveryAttempt": null})"));
  EXPECT_EQ(m.message_id, "42");
  EXPECT_THAT(m.data, IsEmpty());
  EXPECT_EQ(m.subscription, std::nullopt);
  EXPECT_EQ(m.delivery_attempt, std::nullopt);
}

TEST(ParseWrapped, CamelCaseWinsWhenSpellingsDisagree) {
  Message m = parsed(json_post(R"({"message": {"messageId": "camel", "message_id": "snake"}})"));
  EXPECT_EQ(m.message_id, "camel");
}

// A name given twice means its last value, as the app behind the gateway most likely reads it
// (nlohmann-json, and most JSON parsers): the key used must be the one the app sees.
TEST(ParseWrapped, ANameGivenTwiceMeansItsLastValue) {
  Message m = parsed(json_post(
      R"({"message": {"messageId": "first", "data": "AA==", "messageId": "last", "data": "AQ=="},)"
      R"( "subscription": "s1", "deliveryAttempt": 1, "subscription": "s2", "deliveryAttempt": 2})"));
  EXPECT_EQ(m.message_id, "last");
  EXPECT_EQ(m.data, std::string(1, '\x01'));
  EXPECT_EQ(m.subscription, "s2");
  EXPECT_EQ(m.delivery_attempt, 2);
}

// Attributes too: the last value of a name is the one that counts, for its type and for the
// limit on how many there are.
TEST(ParseWrapped, AnAttributeGivenTwiceMeansItsLastValue) {
  const auto with = [](const std::string& attributes) {
    return json_post(R"({"message": {"messageId": "1", "attributes": {)" + attributes + "}}}");
  };
  EXPECT_THAT(parsed(with(R"("k": "first", "j": "x", "k": "last")")).attributes,
              ElementsAre(Pair("j", "x"), Pair("k", "last")));
  EXPECT_THAT(parsed(with(R"("k": 1, "k": "last")")).attributes, ElementsAre(Pair("k", "last")));
  EXPECT_EQ(failed(with(R"("k": "first", "k": 1)")).reason,
            "message.attributes values must be strings");
  // Three fields, two names: within a limit of two.
  EXPECT_THAT(parsed(with(R"("a": "1", "b": "2", "a": "3")"), {.max_attributes = 2}).attributes,
              ElementsAre(Pair("a", "3"), Pair("b", "2")));
  EXPECT_EQ(failed(with(R"("a": "1", "b": "2", "c": "3")"), {.max_attributes = 2}).reason,
            "message.attributes has more than 2 entries");
}

TEST(ParseWrapped, BinaryDataDecodesByteForByte) {
  Message m = parsed(json_post(R"({"message": {"messageId": "1", "data": "AP8ACg=="}})"));
  EXPECT_EQ(m.data, std::string("\x00\xff\x00\n", 4));
}

TEST(ParseWrapped, EmptyDataString) {
  Message m = parsed(json_post(R"({"message": {"messageId": "1", "data": ""}})"));
  EXPECT_THAT(m.data, IsEmpty());
}

TEST(ParseWrapped, DataLargerThanOneDecoderChunk) {
  // 3 MiB of bytes encode to 4 MiB of base64: several 1 MiB decoder chunks.
  std::string raw(3 << 20, '\0');
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i * 7 + i / 251);
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string encoded;  // a test-side reference encoder, independent of the library
  for (std::size_t i = 0; i < raw.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(raw[i]) << 16) |
                       (static_cast<unsigned char>(raw[i + 1]) << 8) |
                       static_cast<unsigned char>(raw[i + 2]);
    for (int shift : {18, 12, 6, 0}) encoded += kAlphabet[(v >> shift) & 63];
  }
  Message m = parsed(json_post(R"({"message": {"messageId": "1", "data": ")" + encoded + R"("}})"));
  EXPECT_EQ(m.data, raw);
}

TEST(ParseWrapped, PaddingAtAChunkBoundaryMayBeFollowedOnlyByWhitespace) {
  // 1 MiB of base64 ending in padding, exactly one decoder chunk, then more text.
  std::string chunk((1 << 20) - 4, 'A');
  chunk += "AA==";
  Message m = parsed(json_post(R"({"message": {"data": ")" + chunk + R"(\n"}})"));
  EXPECT_EQ(m.data.size(), ((1 << 20) - 4) / 4 * 3 + 1);
  ParseError e = failed(json_post(R"({"message": {"data": ")" + chunk + R"(AAAA"}})"));
  EXPECT_EQ(e.reason, "message.data is not valid base64");
}

// ---- Checking data without decoding it (ParseOptions::decode_data = false) ----------------

constexpr ParseOptions kCheckOnly{.decode_data = false};

// What the full parse and the check-only parse say of `data` (a JSON string's content) as a
// push's message.data.
struct Verdicts {
  bool decoded;
  bool checked;
};
Verdicts verdicts(const std::string& data) {
  const auto request = json_post(R"({"message": {"data": ")" + data + R"("}})");
  return {std::holds_alternative<Message>(parse_push(request)),
          std::holds_alternative<Message>(parse_push(request, kCheckOnly))};
}

TEST(ParseCheckOnly, ValidDataIsCheckedAndNotDecoded) {
  Message m =
      parsed(json_post(R"({"message": {"messageId": "1", "data": "AP8ACg=="}})"), kCheckOnly);
  EXPECT_EQ(m.message_id, "1");
  EXPECT_THAT(m.data, IsEmpty());
  ParseError e = failed(json_post(R"({"message": {"data": "AP8ACg="}})"), kCheckOnly);
  EXPECT_EQ(e.kind, ParseErrorKind::kBadBase64);
  EXPECT_EQ(e.reason, "message.data is not valid base64");
}

TEST(ParseCheckOnly, AnUnwrappedBodyIsNotCopied) {
  Message m = parsed(fixture("unwrapped_write_metadata.http"), kCheckOnly);
  EXPECT_EQ(m.form, DeliveryForm::kUnwrapped);
  EXPECT_THAT(m.data, IsEmpty());
}

// The check must refuse exactly what decoding refuses, or a message one accepts and the other
// nacks would be redelivered until it dead-letters. Random text: whole groups of digits (across
// a 64-character decoder block), then a short tail heavy in padding and bytes outside the
// alphabet, with whitespace anywhere.
TEST(ParseCheckOnly, RefusesExactlyWhatDecodingRefuses) {
  static constexpr char kDigits[] = "AQz09+/";
  static constexpr char kTail[] = "AQ/=====-_*.";
  static constexpr char kSpace[] = " \t\r\n";
  std::mt19937 random(20261203);
  int accepted = 0;
  int refused = 0;
  for (int i = 0; i < 100'000; ++i) {
    std::string data;
    for (auto n = random() % 20 * 4; n > 0; --n) data += kDigits[random() % (sizeof kDigits - 1)];
    for (auto n = random() % 7; n > 0; --n) data += kTail[random() % (sizeof kTail - 1)];
    for (auto n = random() % 3; n > 0; --n) {
      data.insert(random() % (data.size() + 1), 1, kSpace[random() % (sizeof kSpace - 1)]);
    }
    std::string escaped;
    for (const char c : data) {
      if (c == '\t') {
        escaped += "\\t";
      } else if (c == '\r') {
        escaped += "\\r";
      } else if (c == '\n') {
        escaped += "\\n";
      } else {
        escaped += c;
      }
    }
    const Verdicts v = verdicts(escaped);
    ASSERT_EQ(v.checked, v.decoded) << "data: [" << escaped << "]";
    ++(v.decoded ? accepted : refused);
  }
  EXPECT_GT(accepted, 10'000) << "the generator must reach valid text often";
  EXPECT_GT(refused, 10'000);
}

// Both read a run of digits 16 bytes at a time and the rest a byte at a time. Any one byte a
// JSON string can carry, at any place across the first blocks of a longer text, then each
// ending, gets the same verdict from both, and some of each.
TEST(ParseCheckOnly, AgreesWithDecodingForAnyByteAnywhereInALongText) {
  static constexpr char kDigits[] = "AZaz09+/";
  std::vector<std::string> bytes = {"\\t", "\\r", "\\n", "\\u0000", "\\u00ff"};
  for (char c = 0x20; c < 0x7f; ++c) {
    if (c != '"' && c != '\\') bytes.emplace_back(1, c);
  }
  int accepted = 0;
  int refused = 0;
  for (std::size_t place = 0; place < 48; ++place) {
    for (const std::string& byte : bytes) {
      for (const char* ending : {"", "=", "==", "A=", "AA==", "AAA"}) {
        std::string data;
        for (std::size_t i = 0; i < 64; ++i) data += kDigits[i % (sizeof kDigits - 1)];
        data.insert(place, byte);
        data += ending;
        const Verdicts v = verdicts(data);
        ASSERT_EQ(v.checked, v.decoded) << "data: [" << data << "]";
        ++(v.decoded ? accepted : refused);
      }
    }
  }
  EXPECT_GT(accepted, 1'000);
  EXPECT_GT(refused, 1'000);
}

// The decoder reads 1 MiB at a time; the check reads the text whole. Texts that end around
// that boundary, with padding and what may follow it there, get the same verdicts.
TEST(ParseCheckOnly, AgreesWithDecodingAroundTheDecodersChunkBoundary) {
  for (std::size_t digits = (1 << 20) - 8; digits <= (1 << 20) + 4; ++digits) {
    for (const char* tail : {"", "AA==", "AA==\\n", "AA==AAAA",
                             "AA=\\n=", "AAA=", "A===", "==", "AA==\\n==", "AA==\\n\\t "}) {
      const Verdicts v = verdicts(std::string(digits, 'A') + tail);
      ASSERT_EQ(v.checked, v.decoded) << digits << " digits, then [" << tail << "]";
    }
  }
  std::string chunk((1 << 20) - 4, 'A');
  chunk += "AA==";
  parsed(json_post(R"({"message": {"data": ")" + chunk + R"(\n"}})"), kCheckOnly);
  ParseError e = failed(json_post(R"({"message": {"data": ")" + chunk + R"(AAAA"}})"), kCheckOnly);
  EXPECT_EQ(e.reason, "message.data is not valid base64");
}

// ---- Unwrapped deliveries ----------------------------------------------------------------

TEST(ParseUnwrapped, WriteMetadataHeaders) {
  Message m = parsed(fixture("unwrapped_write_metadata.http"));
  EXPECT_EQ(m.form, DeliveryForm::kUnwrapped);
  EXPECT_EQ(m.data, R"({"status": "Hello there"})");
  EXPECT_EQ(m.message_id, "2980761766361540");
  EXPECT_EQ(m.publish_time, "2024-02-06T22:41:19.574Z");
  EXPECT_EQ(m.subscription, "projects/user-project/subscriptions/mysub-unwrapped");
  EXPECT_EQ(m.ordering_key, "some-key");
  EXPECT_EQ(m.delivery_attempt, std::nullopt);
  // Attributes arrive as plain headers: kept as headers, not guessed into attributes.
  EXPECT_THAT(m.attributes, IsEmpty());
  EXPECT_EQ(m.header("content-type"), "application/json");
  EXPECT_EQ(default_key(m), "2980761766361540");
}

// With unwrapping, attributes arrive as bare headers: a message published with CloudEvents
// binding attributes (ce-id, ce-specversion) or a Content-Type attribute of
// application/cloudevents+json is still a Pub/Sub delivery, because Eventarc never sends the
// x-goog-pubsub-* headers.
TEST(ParseUnwrapped, WriteMetadataWinsOverCloudEventLookalikeAttributes) {
  Message m = parsed(fixture("unwrapped_cloudevent_attributes.http"));
  EXPECT_EQ(m.form, DeliveryForm::kUnwrapped);
  EXPECT_EQ(m.data, R"({"status": "Hello there"})");
  EXPECT_EQ(m.message_id, "2980761766361541");
  EXPECT_EQ(m.cloud_event_id, std::nullopt);
  EXPECT_EQ(default_key(m), "2980761766361541");
}

TEST(ParseUnwrapped, WithoutMetadataThereIsNoDefaultKey) {
  Message m = parsed(fixture("unwrapped_no_metadata.http"));
  EXPECT_EQ(m.form, DeliveryForm::kUnwrapped);
  EXPECT_EQ(m.data, R"({"status": "Hello there"})");
  EXPECT_EQ(m.message_id, std::nullopt);
  EXPECT_EQ(default_key(m), std::nullopt);
}

TEST(ParseUnwrapped, NonJsonBodyIsData) {
  Message m = parsed(json_post("not json at all \x01\xff"));
  EXPECT_EQ(m.form, DeliveryForm::kUnwrapped);
  EXPECT_EQ(m.data, "not json at all \x01\xff");
}

TEST(ParseUnwrapped, MetadataHeadersWinOverAnEnvelopeLookingBody) {
  PushRequest r = json_post(R"({"message": {"messageId": "inner", "data": 5}})");
  r.headers.push_back({"x-goog-pubsub-message-id", "outer"});
  Message m = parsed(r);
  EXPECT_EQ(m.form, DeliveryForm::kUnwrapped);
  EXPECT_EQ(m.message_id, "outer");
  EXPECT_EQ(m.data, r.body);
}

// Each write-metadata header alone, in any case, makes the delivery unwrapped: the envelope-like
// body is the data, and the ce-id beside it is an attribute, not a CloudEvent.
TEST(ParseUnwrapped, EachMetadataHeaderAloneMeansUnwrapped) {
  for (const char* name : {"X-Goog-PubSub-Message-Id", "x-goog-pubsub-publish-time",
                           "X-GOOG-PUBSUB-SUBSCRIPTION-NAME", "x-Goog-Pubsub-Ordering-Key"}) {
    PushRequest r = json_post(R"({"message": {"messageId": "inner"}})");
    r.headers.push_back({"ce-id", "looks-like-an-event"});
    r.headers.push_back({name, "v"});
    EXPECT_EQ(parsed(r).form, DeliveryForm::kUnwrapped) << name;
  }
}

TEST(ParseUnwrapped, JsonBodyWithoutAnObjectMessageIsData) {
  for (const char* body : {R"({"message": "hi"})", R"({"order": 1})", "[1, 2]", "{}"}) {
    Message m = parsed(json_post(body));
    EXPECT_EQ(m.form, DeliveryForm::kUnwrapped) << body;
    EXPECT_EQ(m.data, body);
  }
}

TEST(ParseUnwrapped, HugeUserJsonIsDataNotAnError) {
  std::string deep = R"({"message": {"x": )" + std::string(100, '[') + std::string(100, ']') + "}}";
  std::string many = "{\"v\": [";
  for (int i = 0; i < 120'000; ++i) many += "1,";
  many += "1]}";
  for (const std::string& body : {deep, many}) {
    Message m = parsed(json_post(body));
    EXPECT_EQ(m.form, DeliveryForm::kUnwrapped);
    EXPECT_EQ(m.data, body);
  }
}

TEST(ParseUnwrapped, HeaderValuesAreTrimmed) {
  PushRequest r = json_post("x");
  r.headers.push_back({"X-GOOG-PUBSUB-MESSAGE-ID", " \t123 "});
  EXPECT_EQ(parsed(r).message_id, "123");
}

// Pub/Sub sends each attribute as a header named by its key: an attribute named like a
// metadata header comes beside the real one, in an order that is Google's. Two values are
// refused rather than one picked (the message id would be the key); one value twice is the same.
TEST(ParseUnwrapped, AMetadataHeaderSentTwiceWithTwoValuesIsRefused) {
  for (const char* name : {"x-goog-pubsub-message-id", "x-goog-pubsub-publish-time",
                           "x-goog-pubsub-subscription-name", "x-goog-pubsub-ordering-key"}) {
    PushRequest r = json_post("data");
    r.headers.push_back({name, "2980761766361540"});
    r.headers.push_back({"X-Goog-PubSub-" + std::string(name + 14), "1111111111111111"});
    const ParseError e = failed(r);
    EXPECT_EQ(e.kind, ParseErrorKind::kWrongType) << name;
    EXPECT_EQ(e.reason, std::string(name) + " is sent twice with two values");
    EXPECT_EQ(e.reason.find("2980761766361540"), std::string::npos) << "no value in the reason";
  }
  PushRequest underscored = json_post("data");
  underscored.headers.push_back({"x-goog-pubsub-message-id", "2980761766361540"});
  underscored.headers.push_back({"X_Goog_PubSub_Message_Id", "1111111111111111"});
  EXPECT_EQ(failed(underscored).reason, "x-goog-pubsub-message-id is sent twice with two values")
      << "an app behind a CGI-style server reads the underscored one as the same header";
  PushRequest same = json_post("data");
  same.headers.push_back({"x-goog-pubsub-message-id", "2980761766361540"});
  same.headers.push_back({"x-goog-pubsub-message-id", " 2980761766361540"});
  EXPECT_EQ(parsed(same).message_id, "2980761766361540");
}

TEST(ParseUnwrapped, ForcedFormTakesAnEnvelopeAsData) {
  PushRequest r = fixture("wrapped_both_spellings.http");
  Message m = parsed(r, {.form = DeliveryForm::kUnwrapped});
  EXPECT_EQ(m.form, DeliveryForm::kUnwrapped);
  EXPECT_EQ(m.data, r.body);
  EXPECT_EQ(m.message_id, std::nullopt);
}

// ---- CloudEvents -------------------------------------------------------------------------

TEST(ParseCloudEvent, EventarcBinaryMode) {
  Message m = parsed(fixture("eventarc_binary.http"));
  EXPECT_EQ(m.form, DeliveryForm::kCloudEventBinary);
  EXPECT_EQ(m.cloud_event_id, "2070443601311540");
  EXPECT_EQ(m.message_id, "2070443601311540");
  EXPECT_EQ(m.data, "hello world");
  EXPECT_THAT(m.attributes, ElementsAre(Pair("attr1", "attr1-value")));
  EXPECT_EQ(m.subscription,
            "projects/my-project/subscriptions/eventarc-us-central1-trigger-sub-123");
  EXPECT_EQ(m.header("CE-SOURCE"), "//pubsub.googleapis.com/projects/my-project/topics/my-topic");
}

TEST(ParseCloudEvent, KeyFallsBackToCeIdOnlyWhenTheBodyHasNoMessageId) {
  Message m = parsed(fixture("eventarc_binary_no_message_id.http"));  // CE-ID upper-cased
  EXPECT_EQ(m.form, DeliveryForm::kCloudEventBinary);
  EXPECT_EQ(m.message_id, std::nullopt);
  EXPECT_EQ(default_key(m), "2070443601311540");

  Message both = parsed(binary_event(R"({"message": {"messageId": "from-body"}})"));
  EXPECT_EQ(both.cloud_event_id, "1096434104173400");
  EXPECT_EQ(default_key(both), "from-body");

  Message empty_id = parsed(binary_event(R"({"message": {"messageId": ""}})"));
  EXPECT_EQ(default_key(empty_id), "1096434104173400");
}

TEST(ParseCloudEvent, SpecVersionHeaderAloneMeansBinaryMode) {
  PushRequest r = json_post(R"({"message": {"messageId": "1"}})");
  r.headers.push_back({"Ce-Specversion", "1.0"});
  Message m = parsed(r);
  EXPECT_EQ(m.form, DeliveryForm::kCloudEventBinary);
  EXPECT_EQ(m.cloud_event_id, std::nullopt);
  EXPECT_EQ(default_key(m), "1");
}

TEST(ParseCloudEvent, CeIdHeaderAloneMeansBinaryMode) {
  PushRequest r = json_post(R"({"message": {"messageId": "1"}})");
  r.headers.push_back({"CE-ID", "e7"});
  Message m = parsed(r);
  EXPECT_EQ(m.form, DeliveryForm::kCloudEventBinary);
  EXPECT_EQ(m.cloud_event_id, "e7");
}

TEST(ParseCloudEvent, StructuredMode) {
  Message m = parsed(fixture("cloudevent_structured.http"));
  EXPECT_EQ(m.form, DeliveryForm::kCloudEventStructured);
  EXPECT_EQ(m.cloud_event_id, "2070443601311540");
  EXPECT_EQ(m.message_id, "2070443601311540");
  EXPECT_EQ(m.publish_time, "2021-02-26T19:13:55.749Z");
  EXPECT_EQ(m.data, "hello world");
  EXPECT_THAT(m.attributes, ElementsAre(Pair("attr1", "attr1-value")));
}

TEST(ParseCloudEvent, StructuredContentTypeIsCaseInsensitive) {
  PushRequest r = structured_event(R"({"id": "e1", "data": {"message": {}}})");
  r.headers = {{"CONTENT-TYPE", " Application/CloudEvents+JSON ;charset=utf-8"}};
  Message m = parsed(r);
  EXPECT_EQ(m.form, DeliveryForm::kCloudEventStructured);
  EXPECT_EQ(default_key(m), "e1");
}

// As every header lookup: the first Content-Type is the one read.
TEST(ParseCloudEvent, TheFirstContentTypeDecidesStructuredMode) {
  PushRequest first = structured_event(R"({"id": "e1", "data": {"message": {}}})");
  first.headers.push_back({"Content-Type", "application/json"});
  EXPECT_EQ(parsed(first).form, DeliveryForm::kCloudEventStructured);
  PushRequest second = json_post(R"({"message": {"messageId": "1"}})");
  second.headers.push_back({"Content-Type", "application/cloudevents+json"});
  EXPECT_EQ(parsed(second).form, DeliveryForm::kWrapped);
}

// ---- Headers -----------------------------------------------------------------------------

TEST(ParseHeaders, LookupIgnoresCaseAndReturnsTheFirst) {
  PushRequest r{.headers = {{"X-Custom", "one"}, {"x-custom", "two"}}};
  EXPECT_EQ(r.header("x-CUSTOM"), "one");
  EXPECT_EQ(r.header("x-custom-other"), std::nullopt);
  EXPECT_EQ(find_header(r.headers, "X-CUSTOM"), "one");
}

TEST(ParseHeaders, MessageKeepsEveryRequestHeader) {
  PushRequest r = fixture("unwrapped_write_metadata.http");
  Message m = parsed(r);
  ASSERT_EQ(m.headers.size(), r.headers.size());
  EXPECT_EQ(m.headers[0].name, "Host");
}

TEST(ParseHeaders, FormNames) {
  EXPECT_EQ(to_string(DeliveryForm::kWrapped), "wrapped");
  EXPECT_EQ(to_string(DeliveryForm::kUnwrapped), "unwrapped");
  EXPECT_EQ(to_string(DeliveryForm::kCloudEventBinary), "cloudevent-binary");
  EXPECT_EQ(to_string(DeliveryForm::kCloudEventStructured), "cloudevent-structured");
}

// ---- Malformed input ---------------------------------------------------------------------

// Customer values planted in every malformed request: none may reach a reason.
constexpr const char* kSecretId = "SECRET-ID-7731";
constexpr const char* kSecretData = "U0VDUkVULURBVEE=";  // "SECRET-DATA"
constexpr const char* kSecretAttribute = "SECRET-ATTR";

std::string message_with(const std::string& extra) {
  return std::string(R"({"messageId": ")") + kSecretId + R"(", "attributes": {"k": ")" +
         kSecretAttribute + R"("})" + extra + "}";
}

struct MalformedCase {
  const char* name;
  PushRequest request;
  ParseOptions options;
  ParseErrorKind kind;
  const char* reason;
};

std::vector<MalformedCase> malformed_cases() {
  std::string too_many =
      R"({"message": {"messageId": ")" + std::string(kSecretId) + R"(", "attributes": {)";
  for (int i = 0; i <= 100; ++i) {
    too_many += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\": \"" +
                kSecretAttribute + "\"";
  }
  too_many += "}}}";
  std::string deep = R"({"message": {"messageId": ")" + std::string(kSecretId) + R"(", "x": )" +
                     std::string(40, '[') + std::string(40, ']') + "}}";
  std::string many = R"({"message": {"messageId": ")" + std::string(kSecretId) + R"(", "x": [)";
  for (int i = 0; i < 100'001; ++i) many += "0,";
  many += "0]}}";
  const std::string msg = message_with("");
  const std::string env = R"({"message": )" + msg;
  using K = ParseErrorKind;
  PushRequest get = json_post(env + "}");
  get.method = "GET";
  return {
      {"Method", get, {}, K::kMethodNotAllowed, "method must be POST"},
      {"BodyTooLarge",
       json_post(env + "}"),
       {.max_body_bytes = 16},
       K::kBodyTooLarge,
       "body is larger than 16 bytes"},
      {"BodyOverSixteenMebibytes",
       json_post(env + "}" + std::string(16 * 1024 * 1024, ' ')),
       {},
       K::kBodyTooLarge,
       "body is larger than 16777216 bytes"},
      {"BinaryNotJson",
       binary_event(std::string("{\"message\": ") + kSecretId),
       {},
       K::kMalformedJson,
       "body is not valid JSON"},
      {"StructuredNotJson",
       structured_event(kSecretData),
       {},
       K::kMalformedJson,
       "body is not valid JSON"},
      {"ForcedWrappedNotJson",
       json_post(kSecretData),
       {.form = DeliveryForm::kWrapped},
       K::kMalformedJson,
       "body is not valid JSON"},
      {"TrailingGarbage",
       binary_event(env + "} " + kSecretId),
       {},
       K::kMalformedJson,
       "body is not valid JSON"},
      {"TooDeep",
       binary_event(deep),
       {},
       K::kMalformedJson,
       "body nests JSON deeper than 32 levels"},
      {"TooManyValues",
       binary_event(many),
       {},
       K::kMalformedJson,
       "body holds more than 100000 JSON values"},
      {"BodyNotObject",
       binary_event(std::string("[\"") + kSecretId + "\"]"),
       {},
       K::kWrongType,
       "body must be a JSON object"},
      {"MessageMissing",
       binary_event(std::string(R"({"id": ")") + kSecretId + "\"}"),
       {},
       K::kMissingField,
       "message is missing"},
      {"MessageNotObject",
       binary_event(std::string(R"({"message": ")") + kSecretId + "\"}"),
       {},
       K::kWrongType,
       "message must be an object"},
      {"DataNotString",
       json_post(R"({"message": )" + message_with(R"(, "data": 12345)") + "}"),
       {},
       K::kWrongType,
       "message.data must be a string"},
      {"DataNotBase64",
       json_post(R"({"message": )" + message_with(R"(, "data": "SECRET-DATA!")") + "}"),
       {},
       K::kBadBase64,
       "message.data is not valid base64"},
      {"DataUnpadded",
       json_post(R"({"message": )" + message_with(R"(, "data": "U0VDUkVULURBVEE")") + "}"),
       {},
       K::kBadBase64,
       "message.data is not valid base64"},
      {"DataUrlSafeAlphabet",
       json_post(R"({"message": )" + message_with(R"(, "data": "U0VD-_VU")") + "}"),
       {},
       K::kBadBase64,
       "message.data is not valid base64"},
      {"DataAfterPadding",
       json_post(R"({"message": )" + message_with(R"(, "data": "U0VDUkVULURBVEE=QUJD")") + "}"),
       {},
       K::kBadBase64,
       "message.data is not valid base64"},
      {"MessageIdNotString",
       json_post(R"({"message": {"messageId": 2070443601311540}})"),
       {},
       K::kWrongType,
       "message.messageId must be a string"},
      {"SnakeMessageIdNotString",
       json_post(R"({"message": {"message_id": [1]}})"),
       {},
       K::kWrongType,
       "message.message_id must be a string"},
      {"PublishTimeNotString",
       json_post(R"({"message": {"publishTime": 1614366835}})"),
       {},
       K::kWrongType,
       "message.publishTime must be a string"},
      {"OrderingKeyNotString",
       json_post(R"({"message": {"orderingKey": true}})"),
       {},
       K::kWrongType,
       "message.orderingKey must be a string"},
      {"AttributesNotObject",
       json_post(R"({"message": {"attributes": [")" + std::string(kSecretAttribute) + "\"]}}"),
       {},
       K::kWrongType,
       "message.attributes must be an object"},
      {"AttributeValueNotString",
       json_post(R"({"message": {"attributes": {"SECRET-KEY": 42}}})"),
       {},
       K::kWrongType,
       "message.attributes values must be strings"},
      {"TooManyAttributes",
       json_post(too_many),
       {},
       K::kTooManyAttributes,
       "message.attributes has more than 100 entries"},
      {"TooManyAttributesConfigured",
       json_post(env + "}"),
       {.max_attributes = 0},
       K::kTooManyAttributes,
       "message.attributes has more than 0 entries"},
      {"SubscriptionNotString",
       json_post(R"({"message": )" + msg + R"(, "subscription": 1})"),
       {},
       K::kWrongType,
       "subscription must be a string"},
      {"DeliveryAttemptString",
       json_post(env + R"(, "deliveryAttempt": "5"})"),
       {},
       K::kWrongType,
       "deliveryAttempt must be a non-negative integer that fits an int"},
      {"DeliveryAttemptNegative",
       json_post(env + R"(, "deliveryAttempt": -1})"),
       {},
       K::kWrongType,
       "deliveryAttempt must be a non-negative integer that fits an int"},
      {"DeliveryAttemptFraction",
       json_post(env + R"(, "delivery_attempt": 1.5})"),
       {},
       K::kWrongType,
       "delivery_attempt must be a non-negative integer that fits an int"},
      {"DeliveryAttemptOverflow",
       json_post(env + R"(, "deliveryAttempt": 1099511627776})"),
       {},
       K::kWrongType,
       "deliveryAttempt must be a non-negative integer that fits an int"},
      {"StructuredNotObject",
       structured_event("[1]"),
       {},
       K::kWrongType,
       "body must be a JSON object"},
      {"StructuredIdNotString",
       structured_event(R"({"id": 7, "data": {"message": {}}})"),
       {},
       K::kWrongType,
       "id must be a string"},
      {"StructuredDataMissing",
       structured_event(std::string(R"({"id": ")") + kSecretId + "\"}"),
       {},
       K::kMissingField,
       "data is missing"},
      {"StructuredDataBase64",
       structured_event(std::string(R"({"data_base64": ")") + kSecretData + "\"}"),
       {},
       K::kWrongType,
       "data_base64 is not supported, data must be an object"},
      {"StructuredDataNotObject",
       structured_event(std::string(R"({"data": ")") + kSecretData + "\"}"),
       {},
       K::kWrongType,
       "data must be a JSON object"},
      {"StructuredMessageMissing",
       structured_event(R"({"data": {}})"),
       {},
       K::kMissingField,
       "data.message is missing"},
      {"StructuredBadBase64",
       structured_event(R"({"data": {"message": )" + message_with(R"(, "data": "%%%")") + "}}"),
       {},
       K::kBadBase64,
       "data.message.data is not valid base64"},
      {"StructuredAttributes",
       structured_event(R"({"data": {"message": {"attributes": "x"}}})"),
       {},
       K::kWrongType,
       "data.message.attributes must be an object"},
      {"StructuredDeliveryAttempt",
       structured_event(R"({"data": {"message": {}, "deliveryAttempt": -3}})"),
       {},
       K::kWrongType,
       "data.deliveryAttempt must be a non-negative integer that fits an int"},
  };
}

class ParseMalformed : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(ParseMalformed, YieldsItsOneLineReasonWithoutCustomerData) {
  const MalformedCase& c = GetParam();
  ParseError e = failed(c.request, c.options);
  EXPECT_EQ(e.reason, c.reason);
  EXPECT_EQ(e.kind, c.kind);
  EXPECT_THAT(e.reason, Not(HasSubstr("\n")));
  for (const char* secret : {kSecretId, kSecretData, "SECRET", "2070443601311540"}) {
    EXPECT_THAT(e.reason, Not(HasSubstr(secret)));
  }
}

INSTANTIATE_TEST_SUITE_P(All, ParseMalformed, ::testing::ValuesIn(malformed_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ParseLimits, ExactlyTheLimitsAreAccepted) {
  std::string hundred = R"({"message": {"attributes": {)";
  for (int i = 0; i < 100; ++i) {
    hundred += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\": \"v\"";
  }
  hundred += "}}}";
  EXPECT_EQ(parsed(json_post(hundred)).attributes.size(), 100u);

  PushRequest r = json_post(R"({"message": {"messageId": "1"}})");
  EXPECT_EQ(parsed(r, {.max_body_bytes = r.body.size()}).message_id, "1");

  // Google enforces the 1024-byte value limit; the parser accepts longer values.
  std::string long_value(4096, 'v');
  EXPECT_EQ(parsed(json_post(R"({"message": {"attributes": {"k": ")" + long_value + "\"}}}"))
                .attributes.at("k"),
            long_value);
}

TEST(ParseLimits, TheLargestLegalMessageIsAcceptedWrappedByDefault) {
  // 10 MB of data (Pub/Sub's limit) and 100 attributes at their size limits, wrapped.
  const std::string data(10'000'000, '\xff');
  std::string attributes;
  for (int i = 0; i < 100; ++i) {
    attributes += (i ? "," : "") + std::string("\"") + std::string(250, 'k') + std::to_string(i) +
                  "\": \"" + std::string(1024, 'v') + "\"";
  }
  PushRequest r =
      json_post(R"({"message": {"messageId": "1", "data": ")" + idempotency::testing::base64(data) +
                R"(", "attributes": {)" + attributes + "}}}");
  ASSERT_GT(r.body.size(), 13'000'000u);
  const Message m = parsed(r);
  EXPECT_EQ(m.data.size(), data.size());
  EXPECT_EQ(m.attributes.size(), 100u);
}

TEST(ParseLimits, MethodIsCheckedFirstThenSize) {
  // Method first, then size: both are refused before anything parses the body.
  PushRequest r = json_post(std::string(64, '{'));
  r.method = "PUT";
  EXPECT_EQ(failed(r, {.max_body_bytes = 8}).kind, ParseErrorKind::kMethodNotAllowed);
  r.method = "POST";
  EXPECT_EQ(failed(r, {.max_body_bytes = 8}).kind, ParseErrorKind::kBodyTooLarge);
}

}  // namespace
}  // namespace idempotency::pubsub::testing
