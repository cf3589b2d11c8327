// pubsub-push-sim's pieces in process. The delivery forms are read back with the library's own
// push parser, so a form the gateway or a worker could not read fails here.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "envelope.h"
#include "idempotency/pubsub/message.h"
#include "message_source.h"
#include "options.h"
#include "retry.h"
#include "summary.h"

namespace idempotency::push_sim {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

SimMessage sample() {
  return SimMessage{
      .id = "4242",
      .data = std::string("order \x01\xff", 8),
      .attributes = {{"po", "PO-7"}, {"test_behavior", "fail_first"}},
      .ordering_key = "ok-1",
      .publish_time = std::chrono::system_clock::time_point(milliseconds(1'614'366'835'749))};
}

DeliveryContext context() {
  return DeliveryContext{.subscription = "projects/p/subscriptions/s",
                         .topic = "projects/p/topics/t",
                         .path = "/push?x=1",
                         .delivery_attempt = 3};
}

pubsub::Message parsed(const pubsub::PushRequest& request) {
  auto result = pubsub::parse_push(request);
  if (auto* error = std::get_if<pubsub::ParseError>(&result)) {
    ADD_FAILURE() << "the library cannot parse it: " << error->reason;
    return {};
  }
  return std::get<pubsub::Message>(result);
}

TEST(PushSimEnvelope, WrappedCarriesEveryFieldInBothSpellings) {
  const auto request = build_request(Form::kWrapped, sample(), context());
  EXPECT_EQ(request.method, "POST");
  EXPECT_EQ(request.path, "/push?x=1");
  const auto body = nlohmann::json::parse(request.body);
  EXPECT_EQ(body["message"]["messageId"], "4242");
  EXPECT_EQ(body["message"]["message_id"], "4242");
  EXPECT_EQ(body["message"]["publishTime"], "2021-02-26T19:13:55.749Z");
  EXPECT_EQ(body["message"]["publish_time"], "2021-02-26T19:13:55.749Z");
  EXPECT_EQ(body["deliveryAttempt"], 3);
  const auto m = parsed(request);
  EXPECT_EQ(m.form, pubsub::DeliveryForm::kWrapped);
  EXPECT_EQ(m.message_id, "4242");
  EXPECT_EQ(m.data, sample().data);
  EXPECT_EQ(m.attributes, sample().attributes);
  EXPECT_EQ(m.ordering_key, "ok-1");
  EXPECT_EQ(m.delivery_attempt, 3);
  EXPECT_EQ(m.subscription, "projects/p/subscriptions/s");
}

TEST(PushSimEnvelope, WrappedWithoutADeadLetterPolicyHasNoDeliveryAttempt) {
  auto c = context();
  c.delivery_attempt.reset();
  auto m = sample();
  m.ordering_key.clear();
  m.attributes.clear();
  const auto body = nlohmann::json::parse(build_request(Form::kWrapped, m, c).body);
  EXPECT_FALSE(body.contains("deliveryAttempt"));
  EXPECT_FALSE(body["message"].contains("orderingKey"));
  EXPECT_FALSE(body["message"].contains("attributes"));
}

TEST(PushSimEnvelope, UnwrappedSendsRawDataAndMetadataHeaders) {
  auto c = context();
  c.bearer = "tok";
  const auto request = build_request(Form::kUnwrapped, sample(), c);
  EXPECT_EQ(request.body, sample().data);
  EXPECT_EQ(request.header("x-goog-pubsub-message-id"), "4242");
  EXPECT_EQ(request.header("x-goog-pubsub-subscription-name"), "projects/p/subscriptions/s");
  EXPECT_EQ(request.header("x-goog-pubsub-ordering-key"), "ok-1");
  EXPECT_EQ(request.header("x-goog-pubsub-publish-time"), "2021-02-26T19:13:55.749Z");
  EXPECT_EQ(request.header("po"), "PO-7");
  EXPECT_EQ(request.header("Authorization"), "Bearer tok");
  const auto m = parsed(request);
  EXPECT_EQ(m.form, pubsub::DeliveryForm::kUnwrapped);
  EXPECT_EQ(m.message_id, "4242");
  EXPECT_EQ(m.data, sample().data);
  EXPECT_EQ(m.ordering_key, "ok-1");
}

TEST(PushSimEnvelope, CloudEventBinaryModeHasCeHeadersAndMessagePublishedData) {
  const auto request = build_request(Form::kCloudEvent, sample(), context());
  EXPECT_EQ(request.header("ce-id"), "4242");
  EXPECT_EQ(request.header("ce-specversion"), "1.0");
  EXPECT_EQ(request.header("ce-type"), "google.cloud.pubsub.topic.v1.messagePublished");
  EXPECT_EQ(request.header("ce-source"), "//pubsub.googleapis.com/projects/p/topics/t");
  const auto m = parsed(request);
  EXPECT_EQ(m.form, pubsub::DeliveryForm::kCloudEventBinary);
  EXPECT_EQ(m.message_id, "4242");
  EXPECT_EQ(m.cloud_event_id, "4242");
  EXPECT_EQ(m.data, sample().data);
  EXPECT_EQ(m.attributes, sample().attributes);
}

// Pub/Sub's JSON leaves out an empty bytes field, so an attributes-only message has no "data"
// member: a handler that reads message["data"] unconditionally must fail here, not in
// production. Both JSON forms carry the same `message` object.
TEST(PushSimEnvelope, AnAttributesOnlyMessageHasNoDataMember) {
  auto m = sample();
  m.data.clear();
  for (const Form form : {Form::kWrapped, Form::kCloudEvent}) {
    SCOPED_TRACE(form == Form::kWrapped ? "wrapped" : "cloudevent");
    const auto request = build_request(form, m, context());
    const auto body = nlohmann::json::parse(request.body);
    EXPECT_FALSE(body["message"].contains("data")) << request.body;
    EXPECT_EQ(body["message"]["attributes"]["po"], "PO-7");
    const auto parsed_message = parsed(request);
    EXPECT_EQ(parsed_message.message_id, "4242");
    EXPECT_TRUE(parsed_message.data.empty());
    EXPECT_EQ(parsed_message.attributes, m.attributes);
  }
  const auto with_data =
      nlohmann::json::parse(build_request(Form::kWrapped, sample(), context()).body);
  EXPECT_TRUE(with_data["message"].contains("data")) << "a message with data still carries it";
}

TEST(PushSimVerdict, OnlyPubSubsAckCodesAck) {
  for (int status : {102, 200, 201, 202, 204}) {
    EXPECT_EQ(classify(status, false), Verdict::kAck) << status;
  }
  for (int status : {100, 203, 205, 206, 299, 301, 400, 404, 409, 429, 500, 503}) {
    EXPECT_EQ(classify(status, false), Verdict::kNack) << status;
  }
  EXPECT_EQ(classify(std::nullopt, false), Verdict::kNack) << "connection error";
  EXPECT_EQ(classify(200, true), Verdict::kDeadlineExpired) << "a late 200 is not an ack";
  EXPECT_EQ(classify(std::nullopt, true), Verdict::kDeadlineExpired);
}

TEST(PushSimBackoff, ExponentialDoublesFromTheMinimumUpToTheMaximum) {
  const RetryPolicy policy{.kind = RetryPolicy::Kind::kExponential,
                           .min_backoff = seconds(10),
                           .max_backoff = seconds(600)};
  const std::vector<int> expected_s{10, 20, 40, 80, 160, 320, 600, 600};
  for (std::size_t i = 0; i < expected_s.size(); ++i) {
    EXPECT_EQ(backoff(policy, static_cast<int>(i) + 1), seconds(expected_s[i])) << i + 1;
  }
  EXPECT_EQ(backoff(policy, 1000), seconds(600)) << "no overflow after many nacks";
}

TEST(PushSimBackoff, ImmediateHasNoPerMessageWaitAndTimeScaleShrinksEveryWait) {
  const RetryPolicy immediate{.kind = RetryPolicy::Kind::kImmediate};
  EXPECT_EQ(backoff(immediate, 1), milliseconds(0));
  EXPECT_EQ(backoff(immediate, 50), milliseconds(0));
  EXPECT_EQ(scaled(seconds(10), 0.01), milliseconds(100));
  EXPECT_EQ(scaled(seconds(600), 0.001), milliseconds(600));
  EXPECT_EQ(scaled(milliseconds(1), 0.001), milliseconds(1)) << "a wait never rounds to zero";
  EXPECT_EQ(scaled(milliseconds(0), 0.5), milliseconds(0));
}

// The push back-off that paces the immediate policy: a nack pauses the subscription 100 ms,
// each later nack doubles the pause up to 60 s, nacks during a pause change nothing, and an ack
// resets the step (the pause under way still runs out).
TEST(PushSimBackoff, PushBackoffPausesFrom100MsDoublingTo60SAndAnAckResetsIt) {
  using Clock = PushBackoff::Clock;
  const Clock::time_point t0{};
  PushBackoff b;
  EXPECT_EQ(b.step(), milliseconds(0));
  EXPECT_LE(b.resume_at(), t0) << "no pause before any nack";

  Clock::time_point now = t0 + seconds(1);
  b.on_nack(now, 1.0);
  EXPECT_EQ(b.step(), milliseconds(100));
  EXPECT_EQ(b.resume_at(), now + milliseconds(100));
  b.on_nack(now + milliseconds(50), 1.0);
  EXPECT_EQ(b.step(), milliseconds(100)) << "a nack during the pause does not grow it";
  EXPECT_EQ(b.resume_at(), now + milliseconds(100)) << "nor lengthen it";

  const std::vector<int> expected_ms{200,    400,    800,    1'600,  3'200,  6'400,
                                     12'800, 25'600, 51'200, 60'000, 60'000, 60'000};
  for (std::size_t i = 0; i < expected_ms.size(); ++i) {
    now = b.resume_at();
    b.on_nack(now, 1.0);
    EXPECT_EQ(b.step(), milliseconds(expected_ms[i])) << i;
    EXPECT_EQ(b.resume_at(), now + milliseconds(expected_ms[i])) << i;
  }

  const auto pause_end = b.resume_at();
  b.on_ack();
  EXPECT_EQ(b.step(), milliseconds(0));
  EXPECT_EQ(b.resume_at(), pause_end) << "the pause under way runs out";
  b.on_nack(pause_end, 1.0);
  EXPECT_EQ(b.step(), milliseconds(100)) << "after an ack, the next nack starts over";

  PushBackoff fast;
  fast.on_nack(t0, 0.01);
  EXPECT_EQ(fast.resume_at(), t0 + milliseconds(1)) << "--time-scale scales the pause";
  for (int i = 0; i < 20; ++i) fast.on_nack(fast.resume_at(), 0.01);
  EXPECT_EQ(fast.step(), seconds(60));
  const auto before = fast.resume_at();
  fast.on_nack(before, 0.01);
  EXPECT_EQ(fast.resume_at(), before + milliseconds(600)) << "60 s at 1%";
}

std::variant<Options, OptionsExit> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "pubsub-push-sim");
  std::vector<const char*> argv;
  argv.reserve(args.size());
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_options(static_cast<int>(argv.size()), argv.data());
}

std::string refusal(std::vector<std::string> args) {
  auto result = parse(std::move(args));
  auto* exit = std::get_if<OptionsExit>(&result);
  if (exit == nullptr) return "accepted";
  EXPECT_EQ(exit->code, 2);
  EXPECT_EQ(exit->text.find('\n'), std::string::npos) << "one line: " << exit->text;
  return exit->text;
}

TEST(PushSimOptions, DefaultsAreWhatTheHelpSays) {
  auto result = parse({"--endpoint", "http://127.0.0.1:1/push"});
  ASSERT_TRUE(std::holds_alternative<Options>(result));
  const auto& o = std::get<Options>(result);
  ASSERT_EQ(o.subscriptions.size(), 1U);
  EXPECT_EQ(o.subscriptions[0].name, "projects/sim-project/subscriptions/sub-1");
  EXPECT_EQ(o.form, Form::kWrapped);
  EXPECT_EQ(o.ack_deadline, seconds(10));
  EXPECT_EQ(o.retry.kind, RetryPolicy::Kind::kImmediate) << "Pub/Sub's default";
  EXPECT_EQ(o.retry.min_backoff, seconds(10));
  EXPECT_EQ(o.retry.max_backoff, seconds(600));
  EXPECT_EQ(o.max_delivery_attempts, 0);
  EXPECT_EQ(o.messages, 10);
  EXPECT_FALSE(o.seed.has_value());
}

TEST(PushSimOptions, NamedSubscriptionsGetFullNames) {
  auto result = parse({"--subscription", "a=http://127.0.0.1:1/", "--subscription",
                       "projects/x/subscriptions/b=http://127.0.0.1:2/", "--project", "p"});
  ASSERT_TRUE(std::holds_alternative<Options>(result));
  const auto& o = std::get<Options>(result);
  ASSERT_EQ(o.subscriptions.size(), 2U);
  EXPECT_EQ(o.subscriptions[0].name, "projects/p/subscriptions/a");
  EXPECT_EQ(o.subscriptions[1].name, "projects/x/subscriptions/b");
  EXPECT_EQ(o.subscriptions[1].url, "http://127.0.0.1:2/");
}

TEST(PushSimOptions, BadValuesAreRefusedWithTheFlagNamed) {
  const std::string e = "--endpoint";
  const std::string url = "http://127.0.0.1:1/";
  EXPECT_NE(refusal({}).find("--endpoint"), std::string::npos);
  EXPECT_NE(refusal({e, "ftp://x/"}).find("--endpoint"), std::string::npos);
  EXPECT_NE(refusal({e, url, "--form", "soap"}).find("--form"), std::string::npos);
  EXPECT_NE(refusal({e, url, "--retry", "sometimes"}).find("--retry"), std::string::npos);
  EXPECT_NE(refusal({e, url, "--ack-deadline", "5s"}).find("--ack-deadline"), std::string::npos);
  EXPECT_NE(refusal({e, url, "--ack-deadline", "ten"}).find("--ack-deadline"), std::string::npos);
  EXPECT_NE(refusal({e, url, "--min-backoff", "20s", "--max-backoff", "10s"}).find("--min"),
            std::string::npos);
  EXPECT_NE(refusal({e, url, "--max-delivery-attempts", "4"}).find("--max-delivery-attempts"),
            std::string::npos);
  EXPECT_NE(refusal({e, url, "--dead-letter", "/tmp/x"}).find("--dead-letter"), std::string::npos);
  EXPECT_NE(refusal({e, url, "--duplicate-rate", "1.5"}).find("--duplicate-rate"),
            std::string::npos);
  EXPECT_NE(refusal({e, url, "--time-scale", "0"}).find("--time-scale"), std::string::npos);
  EXPECT_NE(refusal({e, url, "--concurrency", "0"}).find("--concurrency"), std::string::npos);
  EXPECT_NE(refusal({e, url, "--keys", "3"}).find("--key-attribute"), std::string::npos);
  EXPECT_NE(refusal({e, url, "--attribute", "novalue"}).find("--attribute"), std::string::npos);
  EXPECT_NE(refusal({e, url, "--oidc-jwks-out", "/tmp/j"}).find("--oidc"), std::string::npos);
  EXPECT_NE(refusal({"--subscription", "a=" + url, "--subscription", "a=" + url}).find("twice"),
            std::string::npos);
  EXPECT_NE(refusal({e, url, "--input", "f.jsonl", "--messages", "3"}).find("--messages"),
            std::string::npos);
  EXPECT_NE(refusal({e, url, "--no-such-flag"}).find("--no-such-flag"), std::string::npos);
  // Flags that would be silently ignored are refused, naming them.
  for (const auto& keys : std::vector<std::vector<std::string>>{
           {"--key-attribute", "po", "--keys", "3"}, {"--keys", "3"}, {"--key-attribute", "po"}}) {
    std::vector<std::string> args{e, url, "--input", "f.jsonl"};
    args.insert(args.end(), keys.begin(), keys.end());
    const std::string text = refusal(args);
    EXPECT_NE(text.find("--key-attribute/--keys"), std::string::npos) << text;
    EXPECT_NE(text.find("--input"), std::string::npos) << text;
  }
  EXPECT_NE(refusal({e, url, "--max-backoff", "20s"}).find("--retry exponential"),
            std::string::npos);
  EXPECT_NE(refusal({e, url, "--retry", "immediate", "--min-backoff", "1s"}).find("--min-backoff"),
            std::string::npos);
  EXPECT_TRUE(std::holds_alternative<Options>(
      parse({e, url, "--retry", "exponential", "--min-backoff", "1s", "--max-backoff", "20s"})));
}

TEST(PushSimMessages, GeneratedMessagesDrawKeysAndOrderingKeysReproducibly) {
  std::mt19937_64 a(7);
  std::mt19937_64 b(7);
  const GenerateSpec spec{.count = 50,
                          .attributes = {{"env", "test"}},
                          .key_attribute = "po",
                          .keys = 3,
                          .ordering_keys = 2};
  const auto one = generate_messages(spec, a);
  const auto two = generate_messages(spec, b);
  ASSERT_EQ(one.size(), 50U);
  std::set<std::string> ids;
  std::set<std::string> pos;
  for (std::size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i].id, two[i].id) << "same seed, same ids";
    ids.insert(one[i].id);
    pos.insert(one[i].attributes.at("po"));
    EXPECT_EQ(one[i].attributes.at("env"), "test");
    EXPECT_TRUE(one[i].ordering_key == "ok-1" || one[i].ordering_key == "ok-2");
  }
  EXPECT_EQ(ids.size(), 50U) << "messageIds are distinct";
  EXPECT_EQ(pos, (std::set<std::string>{"key-1", "key-2", "key-3"}));
}

TEST(PushSimMessages, InputLinesKeepTheirFieldsAndBadLinesNameTheirNumber) {
  std::mt19937_64 random(1);
  std::istringstream in(
      R"({"data": "hello", "attributes": {"a": "1"}, "orderingKey": "k", "messageId": "m-1"})"
      "\n\n"
      R"({"data_base64": "AAH/"})"
      "\n");
  const auto messages = read_messages(in, {{"a", "ignored"}, {"b", "2"}}, 0, random);
  ASSERT_EQ(messages.size(), 2U);
  EXPECT_EQ(messages[0].id, "m-1");
  EXPECT_EQ(messages[0].data, "hello");
  EXPECT_EQ(messages[0].attributes.at("a"), "1") << "the line's own attribute wins";
  EXPECT_EQ(messages[0].attributes.at("b"), "2");
  EXPECT_EQ(messages[0].ordering_key, "k");
  EXPECT_EQ(messages[1].data, std::string("\x00\x01\xff", 3));
  EXPECT_FALSE(messages[1].id.empty());

  std::istringstream bad("{\"data\": \"ok\"}\n{\"attributes\": {\"a\": 1}}\n");
  try {
    (void)read_messages(bad, {}, 0, random);
    FAIL() << "a number attribute was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

// An --input line without data, or with empty data, is an attributes-only message (sent
// without a "data" member); one with neither data nor an attribute is refused, as Pub/Sub
// refuses to publish it.
TEST(PushSimMessages, AnInputLineWithoutDataIsAttributesOnly) {
  std::mt19937_64 random(1);
  std::istringstream in(R"({"attributes": {"a": "1"}})"
                        "\n"
                        R"({"data": "", "attributes": {"a": "2"}})"
                        "\n");
  const auto messages = read_messages(in, {}, 0, random);
  ASSERT_EQ(messages.size(), 2U);
  for (const auto& m : messages) {
    EXPECT_TRUE(m.data.empty());
    const auto body = nlohmann::json::parse(build_request(Form::kWrapped, m, context()).body);
    EXPECT_FALSE(body["message"].contains("data")) << body.dump();
  }

  std::istringstream empty(R"({"data": "ok"})"
                           "\n"
                           R"({"messageId": "m-2"})"
                           "\n");
  try {
    (void)read_messages(empty, {}, 0, random);
    FAIL() << "a message with neither data nor an attribute was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  std::istringstream extra(R"({"messageId": "m-3"})"
                           "\n");
  EXPECT_EQ(read_messages(extra, {{"b", "2"}}, 0, random).at(0).attributes.at("b"), "2")
      << "an --attribute makes it a message";
}

TEST(PushSimSummary, PercentilesAndJsonCarryTheCounts) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({5, 1, 3, 2, 4}, 50), 3);
  EXPECT_EQ(percentile({5, 1, 3, 2, 4}, 99), 5);
  Stats s;
  s.acked = 7;
  s.dead_lettered = 1;
  s.unsettled = 2;
  s.answers["500"] = 4;
  s.acked_after_dead_letter = 3;
  const auto json = summary_json(s);
  EXPECT_EQ(json["acked_after_dead_letter"], 3);
  EXPECT_EQ(json["acked"], 7);
  EXPECT_EQ(json["dead_lettered"], 1);
  EXPECT_EQ(json["unsettled"], 2);
  EXPECT_EQ(json["answers"]["500"], 4);
  EXPECT_NE(summary_text(s).find("dead-lettered      1"), std::string::npos);
}

}  // namespace
}  // namespace idempotency::push_sim
