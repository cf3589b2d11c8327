// simple_response(): the plainest whole responses read without Beast's parser, and everything
// else left to it. The differential test is the contract: whatever simple_response() accepts,
// Beast's parser (as the exchange drives it, status only) accepts as one whole response with
// the same status, the same keep-alive and the same length.
#include "simple_response.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "support/plain_http_cases.h"
#include "upstream_internal.h"

namespace idempotency::gateway::upstream_detail {
namespace {

constexpr std::uint64_t kBodyLimit = 1 << 20;

// What Beast's parser makes of `bytes`, fed as the exchange feeds it: the header (64 KiB
// limit), then the body eagerly.
struct BeastReading {
  bool whole = false;  // one complete response, no error, every byte used
  int status = 0;
  bool keep_alive = false;
};

BeastReading beast_reads(std::string_view bytes, std::uint64_t body_limit = kBodyLimit) {
  ResponseParser parser(false);
  parser.header_limit(64 * 1024);
  parser.body_limit(body_limit);
  beast::error_code ec;
  std::size_t used = 0;
  while (!parser.is_header_done() && used < bytes.size()) {
    used += parser.put(boost::asio::const_buffer(bytes.data() + used, bytes.size() - used), ec);
    if (ec) return {};
  }
  if (!parser.is_header_done()) return {};
  parser.eager(true);
  while (!parser.is_done() && used < bytes.size()) {
    used += parser.put(boost::asio::const_buffer(bytes.data() + used, bytes.size() - used), ec);
    if (ec) return {};
  }
  if (!parser.is_done() || used != bytes.size()) return {};
  return {true, parser.response().status, parser.keep_alive()};
}

const std::string kNginx =
    "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Thu, 03 Dec 2026 17:51:14 GMT\r\n"
    "Content-Type: text/plain\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n";

TEST(SimpleResponse, ReadsAnNginxReply) {
  const auto r = simple_response(kNginx, kBodyLimit);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->size, kNginx.size());
  EXPECT_TRUE(r->keep_alive);
}

TEST(SimpleResponse, ReadsTheBodyByLengthAndTheCloseInAnyCase) {
  const std::string bytes =
      "HTTP/1.1 503 Service Unavailable\r\ncontent-length:\t5 \r\nX-A: \xe9t\xe9\t1\r\n"
      "CONNECTION: Keep-Alive , Close\r\n\r\nhello";
  const auto r = simple_response(bytes, kBodyLimit);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->size, bytes.size());
  EXPECT_FALSE(r->keep_alive);
  const BeastReading beast = beast_reads(bytes);
  EXPECT_TRUE(beast.whole);
  EXPECT_EQ(beast.status, 503);
  EXPECT_FALSE(beast.keep_alive);
}

// The limits' edges, each compared with Beast: a body of exactly the limit and a header of
// exactly kSimpleHeaderLimit bytes are read; a byte more of either goes to Beast.
TEST(SimpleResponse, TakesTheLimitsEdgesAsBeastDoes) {
  const std::string at_limit = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  EXPECT_TRUE(simple_response(at_limit, 2));
  EXPECT_TRUE(beast_reads(at_limit, 2).whole);
  EXPECT_FALSE(simple_response(at_limit, 1));

  const std::string start = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Pad: ";
  const std::string end = "\r\n\r\n";
  const std::string exact =
      start + std::string(kSimpleHeaderLimit - start.size() - end.size(), 'p') + end;
  ASSERT_EQ(exact.size(), kSimpleHeaderLimit);
  const auto read = simple_response(exact, kBodyLimit);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->size, exact.size());
  EXPECT_TRUE(beast_reads(exact).whole);
  const std::string over =
      start + std::string(kSimpleHeaderLimit - start.size() - end.size() + 1, 'p') + end;
  EXPECT_FALSE(simple_response(over, kBodyLimit));

  const std::string digits18 = "HTTP/1.1 200 OK\r\nContent-Length: 000000000000000002\r\n\r\nok";
  const auto read18 = simple_response(digits18, kBodyLimit);
  ASSERT_TRUE(read18);
  const BeastReading beast18 = beast_reads(digits18);
  EXPECT_TRUE(beast18.whole);
  EXPECT_EQ(read18->size, digits18.size());
  EXPECT_FALSE(simple_response("HTTP/1.1 200 OK\r\nContent-Length: 0000000000000000002\r\n\r\nok",
                               kBodyLimit));
}

TEST(SimpleResponse, LeavesEveryOtherFormToBeast) {
  const std::string ok_fields = "Content-Length: 2\r\n\r\nhi";
  const std::vector<std::string> others = {
      "HTTP/1.0 200 OK\r\n" + ok_fields,                               // another version
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n" + ok_fields,  // interim
      "HTTP/1.1 101 Switching Protocols\r\n" + ok_fields,
      "HTTP/1.1 204 No Content\r\n" + ok_fields,  // Beast reads no body
      "HTTP/1.1 304 Not Modified\r\n" + ok_fields,
      "HTTP/1.1 600 Odd\r\n" + ok_fields,
      "HTTP/1.1 200\r\n" + ok_fields,  // no space after the status
      "HTTP/1.1 2000 OK\r\n" + ok_fields,
      "HTTP/1.1 200 O\x01K\r\n" + ok_fields,
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi!",  // a byte after it
      "HTTP/1.1 200 OK\r\n\r\n",                          // ends with the connection
      "HTTP/1.1 200 OK\r\nX-A: " + std::string(kSimpleHeaderLimit, 'a') + "\r\n" + ok_fields,
  };
  for (const auto& bytes : others) {
    EXPECT_FALSE(simple_response(bytes, kBodyLimit)) << bytes;
  }
  for (const auto& bytes :
       idempotency::testing::declined_fields("HTTP/1.1 200 OK\r\n", ok_fields)) {
    EXPECT_FALSE(simple_response(bytes, kBodyLimit)) << ::testing::PrintToString(bytes);
  }
  EXPECT_FALSE(simple_response("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", 2));
  EXPECT_TRUE(simple_response("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab", 2));
}

TEST(SimpleResponse, WhatItAcceptsBeastReadsAlikeUnderMutation) {
  const std::vector<std::string> seeds = {
      kNginx,
      "HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello world",
      "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
      "Connection: keep-alive, close\r\nX-Trace: a\tb\r\n\r\n{}",
      "HTTP/1.1 500 \r\ncontent-length: 0\r\n\r\n",
      "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nProxy-Connection: close\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 201 Created\r\nConnection: Upgrade, Keep-Alive\r\nContent-Length: 1\r\n\r\n!",
      "HTTP/1.1 200 OK\r\nContent-Length: 000000000000000002\r\nConnection: CLOSE\r\n\r\nok",
  };
  idempotency::testing::expect_agreement_under_mutation(
      seeds, 20261203, 200'000, [](const std::string& bytes) {
        const auto ours = simple_response(bytes, kBodyLimit);
        if (!ours) return false;
        const BeastReading beast = beast_reads(bytes);
        const auto shown = ::testing::PrintToString(bytes);
        EXPECT_TRUE(beast.whole) << "accepted what Beast refuses: " << shown;
        EXPECT_EQ(ours->status, beast.status) << shown;
        EXPECT_EQ(ours->keep_alive, beast.keep_alive) << shown;
        EXPECT_EQ(ours->size, bytes.size()) << shown;
        return true;
      });
}

}  // namespace
}  // namespace idempotency::gateway::upstream_detail
