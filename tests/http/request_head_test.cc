// settle_head() (src/http/request_head.h) on its own: each rule of a request's head, at its
// edges, without a server.
#include "request_head.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace idempotency::http::detail {
namespace {

constexpr unsigned kHttp10 = 10;

pubsub::PushRequest request(std::string target, std::vector<pubsub::Header> headers,
                            std::string method = "POST") {
  pubsub::PushRequest r;
  r.method = std::move(method);
  r.path = std::move(target);
  r.headers = std::move(headers);
  return r;
}

// The status settle_head() refuses with, or 0 when it accepts.
int status(pubsub::PushRequest r, unsigned version = kHttp11) {
  const auto refusal = settle_head(r, version);
  return refusal ? refusal->status : 0;
}

TEST(SettleHead, AnOrdinaryRequestPassesUnchanged) {
  auto r = request("/push?token=a", {{"host", "gateway:8080"}, {"Content-Length", "2"}});
  EXPECT_EQ(settle_head(r, kHttp11), std::nullopt);
  EXPECT_EQ(r.path, "/push?token=a");
  EXPECT_EQ(r.headers.size(), 2U);
  EXPECT_EQ(r.headers[0].value, "gateway:8080");
}

TEST(SettleHead, HostIsOneAndValidInHttp11) {
  EXPECT_EQ(status(request("/", {})), 400);
  EXPECT_EQ(status(request("/", {}), kHttp10), 0) << "HTTP/1.0 has no Host to require";
  EXPECT_EQ(status(request("/", {{"Host", "a"}, {"HOST", "a"}})), 400) << "two, even alike";
  EXPECT_EQ(status(request("/", {{"Host", "a"}, {"Host", "b"}}), kHttp10), 400);
  EXPECT_EQ(status(request("/", {{"Host", ""}})), 0) << "empty: a target without authority";
  for (const char* valid :
       {"example.com", "EXAMPLE.com:443", "[::1]:8080", "[::1]", "10.0.0.1", "a%41", "a:"}) {
    EXPECT_EQ(status(request("/", {{"Host", valid}})), 0) << valid;
  }
  for (const char* invalid : {"a b", "a/b", "user@a", "a?b", "a#b", "a\"b", "a:b:c", "a:8o", "[x",
                              "a]", "[]", "[::1]x", "a[b]"}) {
    EXPECT_EQ(status(request("/", {{"Host", invalid}})), 400) << invalid;
  }
}

TEST(SettleHead, ContentLengthIsOneFieldOfOneNumber) {
  const auto cl = [](std::vector<pubsub::Header> lengths) {
    lengths.insert(lengths.begin(), {"Host", "a"});
    return status(request("/", std::move(lengths)));
  };
  EXPECT_EQ(cl({}), 0) << "none: no body";
  EXPECT_EQ(cl({{"Content-Length", "0"}}), 0);
  EXPECT_EQ(cl({{"content-length", "10485760"}}), 0);
  EXPECT_EQ(cl({{"Content-Length", "2"}, {"CONTENT-LENGTH", "2"}}), 400) << "two, even alike";
  for (const char* invalid : {"2, 2", "2,2", "+2", "-1", "0x2", "2 2", "", " "}) {
    EXPECT_EQ(cl({{"Content-Length", invalid}}), 400) << '"' << invalid << '"';
  }
}

TEST(SettleHead, TransferEncodingIsChunkedAloneAndNeverInHttp10) {
  const auto te = [](const char* value, unsigned version = kHttp11) {
    return status(request("/", {{"Host", "a"}, {"Transfer-Encoding", value}}), version);
  };
  EXPECT_EQ(te("chunked"), 0);
  EXPECT_EQ(te("CHUNKED"), 0);
  EXPECT_EQ(te("chunked", kHttp10), 400);
  EXPECT_EQ(te("gzip"), 400) << "chunked not last: the body's end is unknown";
  EXPECT_EQ(te("chunked, gzip"), 400);
  EXPECT_EQ(te("chunked,chunked"), 400) << "chunked twice";
  EXPECT_EQ(te("chunked , chunked"), 400);
  EXPECT_EQ(te("gzip, chunked"), 501) << "a coding this server does not undo";
  EXPECT_EQ(te("gzip,\tchunked"), 501);
  EXPECT_EQ(te("chunked;a=b"), 400) << "chunked has no parameters";
  EXPECT_EQ(te("chunked,"), 0) << "an empty list element is no coding (RFC 9110 §5.6.1)";
  EXPECT_EQ(te(" , chunked"), 0);
  EXPECT_EQ(te(","), 400) << "no coding at all";
  // The fields make one list, in order.
  const auto two = [](const char* first, const char* second) {
    return status(
        request("/", {{"Host", "a"}, {"Transfer-Encoding", first}, {"Transfer-Encoding", second}}));
  };
  EXPECT_EQ(two("gzip", "chunked"), 501);
  EXPECT_EQ(two("chunked", "chunked"), 400);
  EXPECT_EQ(two("chunked", "gzip"), 400);
}

TEST(SettleHead, AnAbsoluteFormTargetBecomesItsPathWithItsAuthorityAsTheHost) {
  struct Case {
    const char* target;
    const char* path;
    const char* host;
  };
  for (const Case& c : {Case{"http://example.com/a/b?c=d", "/a/b?c=d", "example.com"},
                        Case{"HTTPS://example.com:8443", "/", "example.com:8443"},
                        Case{"http://example.com?c=d", "/?c=d", "example.com"},
                        Case{"http://[::1]:80/x", "/x", "[::1]:80"}}) {
    SCOPED_TRACE(c.target);
    auto r = request(c.target, {{"Content-Length", "0"}, {"Host", "elsewhere"}});
    ASSERT_EQ(settle_head(r, kHttp11), std::nullopt);
    EXPECT_EQ(r.path, c.path);
    ASSERT_EQ(r.headers.size(), 2U);
    EXPECT_EQ(r.headers[1].value, c.host);
  }
  // HTTP/1.0 may come without Host: the target's authority becomes one.
  auto r = request("http://example.com/x", {});
  ASSERT_EQ(settle_head(r, kHttp10), std::nullopt);
  ASSERT_EQ(r.headers.size(), 1U);
  EXPECT_EQ(r.headers[0].name, "Host");
  EXPECT_EQ(r.headers[0].value, "example.com");
}

TEST(SettleHead, OtherTargetsAreRefusedAndTheRequestLeftAsItCame) {
  for (const char* target : {"push", "ftp://example.com/x", "http:/x", "http://", "http:///x",
                             "http://u@h/x", "http://a b/", "http://:80/x", "http://h:x/", "//"}) {
    SCOPED_TRACE(target);
    auto r = request(target, {{"Host", "a"}});
    const auto refusal = settle_head(r, kHttp11);
    if (std::string(target) == "//") {
      EXPECT_EQ(refusal, std::nullopt) << "an origin-form path, if an odd one";
      continue;
    }
    ASSERT_NE(refusal, std::nullopt);
    EXPECT_EQ(refusal->status, 400);
    EXPECT_EQ(r.path, target);
    EXPECT_EQ(r.headers[0].value, "a");
  }
  EXPECT_EQ(status(request("*", {{"Host", "a"}}, "OPTIONS")), 0);
  EXPECT_EQ(status(request("*", {{"Host", "a"}}, "GET")), 400);
}

// RFC 3986 §5.2.4: a client sends no dot segments; one that does would reach the handler (and
// an app behind a base path) under another path than the one it names.
TEST(SettleHead, ADotSegmentInThePathIsRefusedAnywhereElseItIsNot) {
  for (const char* target : {"/../admin", "/a/./b", "/a/..", "/.", "/%2e%2E/x", "/a/.%2E/b",
                             "http://h/../x", "HTTP://h/a/./b?q"}) {
    SCOPED_TRACE(target);
    EXPECT_EQ(status(request(target, {{"Host", "h"}})), 400);
  }
  for (const char* target : {"/", "/a/.b", "/...", "/a..b/c", "/.well-known/x", "/a/b?x=/../y",
                             "/%2e%2e%2e", "/a%2F..", "http://h?/../", "//"}) {
    SCOPED_TRACE(target);
    EXPECT_EQ(status(request(target, {{"Host", "h"}})), 0);
  }
}

// A fragment is no part of a request target (RFC 9112 §3.2: a path and a query): let through,
// `/api` + `/..#x` reached the app, which reads the path up to the `#` as `/api/..`: `/`.
TEST(SettleHead, AFragmentInTheTargetIsRefused) {
  for (const char* target : {"/..#x", "/.#", "/%2e%2e#", "/a/..#x", "/push#frag", "/push?q#f",
                             "http://h/push#frag", "http://h/..#", "http://h#x", "http://h?q#f"}) {
    SCOPED_TRACE(target);
    EXPECT_EQ(status(request(target, {{"Host", "h"}})), 400);
  }
}

// A segment's parameters (`;...`) are not part of its name to Tomcat and Spring, which read
// `/a/..;/admin` as `/admin`: a dot segment with parameters is a dot segment.
TEST(SettleHead, ADotSegmentWithParametersIsADotSegment) {
  for (const char* target :
       {"/a/..;/admin", "/..;x", "/.;", "/a/%2e%2e;jsessionid=1/b", "http://h/..;/x"}) {
    SCOPED_TRACE(target);
    EXPECT_EQ(status(request(target, {{"Host", "h"}})), 400);
  }
  for (const char* target : {"/a;b/c", "/...;x", "/a/b;..", "/.well-known;x/y", "/a?x=..;"}) {
    SCOPED_TRACE(target);
    EXPECT_EQ(status(request(target, {{"Host", "h"}})), 0);
  }
}

}  // namespace
}  // namespace idempotency::http::detail
