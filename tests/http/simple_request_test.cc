// simple_request(): the plainest whole requests read without Beast's parser, and everything
// else left to the strict reading. The differential test is the contract: whatever
// simple_request() accepts, the strict reading as the connection drives it (HeaderScan, then
// Beast's request parser for the header, then eagerly for the body) accepts as one whole
// request read the same way: method, target, version 1.1, every field in order, body,
// keep-alive and the bytes used.
#include "simple_request.h"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "support/plain_http_cases.h"

#include "request_guard.h"
#include "request_parser.h"

namespace idempotency::http::detail {
namespace {

constexpr std::size_t kHeaderLimit = 4096;
constexpr std::uint64_t kBodyLimit = 1 << 20;

// What the strict reading makes of `bytes`, as Connection drives it.
struct StrictReading {
  bool whole = false;  // one complete request, no refusal
  pubsub::PushRequest request;
  unsigned version = 0;
  bool keep_alive = false;
  std::size_t used = 0;
};

StrictReading strict_reads(std::string_view bytes, std::size_t header_limit = kHeaderLimit,
                           std::uint64_t body_limit = kBodyLimit) {
  HeaderScan scan;
  if (scan.scan(bytes, header_limit) != HeaderScan::Verdict::kComplete) return {};
  RequestParser parser;
  parser.header_limit(static_cast<std::uint32_t>(header_limit));
  parser.body_limit(body_limit);
  parser.eager(false);
  boost::beast::error_code ec;
  std::size_t used = parser.put(boost::asio::const_buffer(bytes.data(), bytes.size()), ec);
  if (ec || !parser.is_header_done()) return {};
  if (!parser.expect().empty()) return {};  // the connection acts on it before the body
  if (!parser.is_done()) {
    parser.eager(true);
    used += parser.put(boost::asio::const_buffer(bytes.data() + used, bytes.size() - used), ec);
    if (ec == boost::beast::http::error::need_more) ec = {};
    if (ec || !parser.is_done()) return {};
  }
  StrictReading out;
  out.whole = true;
  out.request = std::move(parser.request());
  out.version = parser.version();
  out.keep_alive = parser.keep_alive();
  out.used = used;
  return out;
}

// Whether the two readings agree in everything the connection hands on; says where not.
::testing::AssertionResult same_reading(std::string_view bytes, const SimpleRequest& ours,
                                        const StrictReading& strict) {
  const auto where = [&](std::string_view what) {
    return ::testing::AssertionFailure()
           << what << " differs for " << ::testing::PrintToString(std::string(bytes));
  };
  if (!strict.whole) return where("the strict reading refuses it; whether it");
  if (strict.version != 11) return where("the version");
  if (ours.request.method != strict.request.method) return where("the method");
  if (ours.request.path != strict.request.path) return where("the target");
  if (ours.request.headers.size() != strict.request.headers.size()) return where("the fields");
  for (std::size_t i = 0; i < ours.request.headers.size(); ++i) {
    if (ours.request.headers[i].name != strict.request.headers[i].name ||
        ours.request.headers[i].value != strict.request.headers[i].value) {
      return where("field " + std::to_string(i));
    }
  }
  if (ours.request.body != strict.request.body) return where("the body");
  if (ours.keep_alive != strict.keep_alive) return where("keep-alive");
  if (ours.size != strict.used) return where("the bytes used");
  return ::testing::AssertionSuccess();
}

const std::string kPush =
    "POST /push?token=abc HTTP/1.1\r\nHost: gateway:8080\r\nUser-Agent: APIs-Google; "
    "(+https://developers.google.com/webmasters/APIs-Google.html)\r\n"
    "Content-Type: application/json\r\nAuthorization: Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln\r\n"
    "Content-Length: 27\r\nAccept-Encoding: gzip, deflate, br\r\n\r\n"
    "{\"message\":{\"data\":\"aGk=\"}}";

TEST(SimpleRequest, ReadsAPushAsTheStrictReadingDoes) {
  const auto ours = simple_request(kPush, kHeaderLimit, kBodyLimit);
  ASSERT_TRUE(ours);
  EXPECT_EQ(ours->request.method, "POST");
  EXPECT_EQ(ours->request.path, "/push?token=abc");
  ASSERT_EQ(ours->request.headers.size(), 6U);
  EXPECT_EQ(ours->request.headers[3].name, "Authorization");
  EXPECT_EQ(ours->request.headers[3].value, "Bearer eyJhbGciOiJSUzI1NiJ9.e30.c2ln");
  EXPECT_EQ(ours->request.body, "{\"message\":{\"data\":\"aGk=\"}}");
  EXPECT_EQ(ours->size, kPush.size());
  EXPECT_TRUE(ours->keep_alive);
  EXPECT_TRUE(same_reading(kPush, *ours, strict_reads(kPush)));
}

TEST(SimpleRequest, TrimsValuesReadsCloseInAnyCaseAndLeavesAPipelinedRequest) {
  const std::string first =
      "GET /healthz HTTP/1.1\r\nhost:\tlocalhost \r\nX-A: \xe9t\xe9\t1\r\nX-Empty:   \r\n"
      "CONNECTION: Keep-Alive , Close\r\n\r\n";
  const std::string bytes = first + "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  const auto ours = simple_request(bytes, kHeaderLimit, kBodyLimit);
  ASSERT_TRUE(ours);
  EXPECT_EQ(ours->size, first.size());  // no Content-Length: no body
  EXPECT_TRUE(ours->request.body.empty());
  EXPECT_EQ(ours->request.headers[0].value, "localhost");
  EXPECT_EQ(ours->request.headers[2].value, "");
  EXPECT_FALSE(ours->keep_alive);
  EXPECT_TRUE(same_reading(bytes, *ours, strict_reads(bytes)));
}

// The limits' edges, each compared with the strict reading: a header of exactly the header
// limit and a body of exactly the body limit are read; a byte more of either is left to it.
TEST(SimpleRequest, TakesTheLimitsEdgesAsTheStrictReadingDoes) {
  const std::string start = "POST / HTTP/1.1\r\nContent-Length: 2\r\nX-Pad: ";
  const std::string end = "\r\n\r\n";
  const std::string exact =
      start + std::string(kHeaderLimit - start.size() - end.size(), 'p') + end + "ok";
  const auto read = simple_request(exact, kHeaderLimit, kBodyLimit);
  ASSERT_TRUE(read);
  EXPECT_TRUE(same_reading(exact, *read, strict_reads(exact)));
  const std::string over =
      start + std::string(kHeaderLimit - start.size() - end.size() + 1, 'p') + end + "ok";
  EXPECT_FALSE(simple_request(over, kHeaderLimit, kBodyLimit));

  const std::string body = "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nok";
  const auto at_limit = simple_request(body, kHeaderLimit, 2);
  ASSERT_TRUE(at_limit);
  EXPECT_TRUE(same_reading(body, *at_limit, strict_reads(body, kHeaderLimit, 2)));
  EXPECT_FALSE(simple_request(body, kHeaderLimit, 1));

  const std::string digits18 = "POST / HTTP/1.1\r\nContent-Length: 000000000000000002\r\n\r\nok";
  const auto read18 = simple_request(digits18, kHeaderLimit, kBodyLimit);
  ASSERT_TRUE(read18);
  EXPECT_TRUE(same_reading(digits18, *read18, strict_reads(digits18)));
  EXPECT_FALSE(simple_request("POST / HTTP/1.1\r\nContent-Length: 0000000000000000002\r\n\r\nok",
                              kHeaderLimit, kBodyLimit));
}

TEST(SimpleRequest, LeavesEveryOtherFormToTheStrictReading) {
  const std::string ok_fields = "Host: x\r\nContent-Length: 2\r\n\r\nhi";
  std::string many = "POST / HTTP/1.1\r\n";
  for (int i = 0; i < 33; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  const std::vector<std::string> others = {
      "POST / HTTP/1.0\r\n" + ok_fields,  // another version
      "POST / HTTP/2.0\r\n" + ok_fields,
      "POST / HTTP/1.1 \r\n" + ok_fields,  // a space after the version
      "POST  / HTTP/1.1\r\n" + ok_fields,  // two spaces
      " POST / HTTP/1.1\r\n" + ok_fields,  // no method
      "PO(ST / HTTP/1.1\r\n" + ok_fields,  // not a token
      "POST  HTTP/1.1\r\n" + ok_fields,    // no target
      "POST /a\x7f HTTP/1.1\r\n" + ok_fields,
      "POST /a\tb HTTP/1.1\r\n" + ok_fields,
      "POST / HTTP/1.1\n" + ok_fields,  // bare LF
      many + ok_fields,                 // more fields than it keeps
  };
  for (const auto& bytes :
       idempotency::testing::declined_fields("POST / HTTP/1.1\r\n", ok_fields)) {
    EXPECT_FALSE(simple_request(bytes, kHeaderLimit, kBodyLimit))
        << ::testing::PrintToString(bytes);
  }
  for (const auto& bytes : others) {
    EXPECT_FALSE(simple_request(bytes, kHeaderLimit, kBodyLimit))
        << ::testing::PrintToString(bytes);
  }
  std::string thirty_two = "POST / HTTP/1.1\r\n";
  for (int i = 0; i < 30; ++i) thirty_two += "X-" + std::to_string(i) + ": v\r\n";
  thirty_two += ok_fields;
  const auto read = simple_request(thirty_two, kHeaderLimit, kBodyLimit);
  ASSERT_TRUE(read);
  EXPECT_TRUE(same_reading(thirty_two, *read, strict_reads(thirty_two)));
}

TEST(SimpleRequest, WhatItAcceptsTheStrictReadingReadsAlikeUnderMutation) {
  const std::vector<std::string> seeds = {
      kPush,
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world",
      "GET /metrics HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n",
      "POST /p HTTP/1.1\r\ncontent-length: 0\r\nX-Trace: a\tb\r\nConnection: keep-alive\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n!",
      "POST / HTTP/1.1\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\n",
      "POST / HTTP/1.1\r\nProxy-Connection: close\r\nContent-Length: 0\r\n\r\n",
      "PUT /x HTTP/1.1\r\nConnection: Upgrade, Keep-Alive\r\nContent-Length: 1\r\n\r\n!",
      "POST / HTTP/1.0\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok",
      "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nokGET / HTTP/1.1\r\nHost: b\r\n\r\n",
  };
  idempotency::testing::expect_agreement_under_mutation(
      seeds, 20261204, 200'000, [](const std::string& bytes) {
        const auto ours = simple_request(bytes, kHeaderLimit, kBodyLimit);
        if (!ours) return false;
        EXPECT_TRUE(same_reading(bytes, *ours, strict_reads(bytes)));
        return true;
      });
}

}  // namespace
}  // namespace idempotency::http::detail
