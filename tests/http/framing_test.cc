// The server's framing, over raw sockets: the handler gets the request exactly as sent (method,
// target, every field in order, a Content-Length or a chunked body), and every answer is framed
// by the server itself: the exact bytes for each HTTP version and for HEAD, none for 204 and 304,
// the handler's framing headers replaced by the server's, and a large answer to a client that does
// not read at once arriving whole.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "idempotency/http.h"
#include "support/raw_connection.h"

namespace idempotency::http {
namespace {

using idempotency::testing::RawConnection;

TEST(HttpFraming, TheHandlerGetsTheRequestAsSent) {
  Server server([](const pubsub::PushRequest& request) {
    std::string seen = request.method + " " + request.path + "\n";
    for (const auto& h : request.headers) seen += h.name + "=" + h.value + "\n";
    return pubsub::PushResponse{.status = 200, .headers = {}, .body = seen + request.body + "|"};
  });
  const int port = server.start("127.0.0.1", 0);
  RawConnection c(port);
  ASSERT_TRUE(c.is_open());
  // Two requests in one write (pipelined): a chunked body, then a Content-Length one.
  c.send(
      "PUT /a/b?c=d HTTP/1.1\r\nHost: x\r\nX-Two: 1\r\nx-two: 2\r\n"
      "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
      "POST / HTTP/1.1\r\nHost: y\r\nContent-Length: 3\r\nConnection: close\r\n\r\nxyz");
  ASSERT_TRUE(c.read_to_close());
  EXPECT_THAT(c.received(), ::testing::HasSubstr("\r\n\r\nPUT /a/b?c=d\nHost=x\nX-Two=1\nx-two=2\n"
                                                 "Transfer-Encoding=chunked\nabcde|"));
  EXPECT_THAT(c.received(), ::testing::HasSubstr("\r\n\r\nPOST /\nHost=y\nContent-Length=3\n"
                                                 "Connection=close\nxyz|"));
}

TEST(HttpFraming, EachVersionAndMethodGetsTheServersOwnFraming) {
  Server server([](const pubsub::PushRequest&) {
    // Framing headers from the handler never reach the wire: the server writes its own.
    return pubsub::PushResponse{.status = 201,
                                .headers = {{"X-A", "1"},
                                            {"Content-Length", "99"},
                                            {"Transfer-Encoding", "chunked"},
                                            {"Connection", "close"},
                                            {"Keep-Alive", "timeout=1"}},
                                .body = "ok"};
  });
  const int port = server.start("127.0.0.1", 0);
  RawConnection c(port);
  ASSERT_TRUE(c.is_open());

  // Each answer is read whole before the next request goes, so each starts where the last ended.
  std::size_t from = 0;
  const auto answer = [&](std::string_view request, std::string_view last) {
    c.send(request);
    c.read_until(last, std::chrono::seconds(5), from);
    const std::string got = c.received().substr(from);
    from = c.received().size();
    return got;
  };

  EXPECT_EQ(answer("GET / HTTP/1.1\r\nHost: x\r\n\r\n", "ok"),
            "HTTP/1.1 201 Created\r\nX-A: 1\r\nContent-Length: 2\r\n\r\nok");
  // HEAD: the length a GET would get, and no body.
  EXPECT_EQ(answer("HEAD / HTTP/1.1\r\nHost: x\r\n\r\n", "\r\n\r\n"),
            "HTTP/1.1 201 Created\r\nX-A: 1\r\nContent-Length: 2\r\n\r\n");
  // HTTP/1.0 closes by default, so staying open must be said.
  EXPECT_EQ(
      answer("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "ok"),
      "HTTP/1.0 201 Created\r\nX-A: 1\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok");
  // HTTP/1.1 stays open by default, so closing must be said.
  EXPECT_EQ(answer("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "ok"),
            "HTTP/1.1 201 Created\r\nX-A: 1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
  EXPECT_TRUE(c.read_to_close());
  EXPECT_EQ(c.received().size(), from);
}

// A proxy passing on its upstream's HEAD answer has no body to count: the length it declares
// is the one a GET would get. A GET's is always its body's.
TEST(HttpFraming, AHeadAnswerWithoutABodyKeepsTheLengthItDeclares) {
  Server server([](const pubsub::PushRequest&) {
    return pubsub::PushResponse{
        .status = 200, .headers = {{"Content-Length", "12345"}}, .body = ""};
  });
  RawConnection c(server.start("127.0.0.1", 0));
  ASSERT_TRUE(c.is_open());
  c.send("HEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(c.read_until("\r\n\r\n"), "HTTP/1.1 200 OK\r\nContent-Length: 12345\r\n\r\n");
  const std::size_t from = c.received().size();
  c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(c.read_until("\r\n\r\n", std::chrono::seconds(5), from).substr(from),
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
}

TEST(HttpFraming, NoContentAnswersHaveNoBodyAndAnInterimStatusIs500) {
  // The status comes from the request's path; each answer has a body the handler should not
  // have given it.
  Server server([](const pubsub::PushRequest& request) {
    return pubsub::PushResponse{
        .status = std::stoi(request.path.substr(1)), .headers = {{"X-A", "1"}}, .body = "oops"};
  });
  const int port = server.start("127.0.0.1", 0);
  RawConnection c(port);
  ASSERT_TRUE(c.is_open());
  std::size_t from = 0;
  const auto answer = [&](std::string_view path, std::string_view last) {
    c.send("GET " + std::string(path) + " HTTP/1.1\r\nHost: x\r\n\r\n");
    c.read_until(last, std::chrono::seconds(5), from);
    const std::string got = c.received().substr(from);
    from = c.received().size();
    return got;
  };
  // 204 and 304: no body and, for 204, no Content-Length (RFC 9110 §6.4.1, §8.6); the
  // connection stays usable, so the next answer starts right after.
  EXPECT_EQ(answer("/204", "\r\n\r\n"), "HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n");
  EXPECT_EQ(answer("/304", "\r\n\r\n"), "HTTP/1.1 304 Not Modified\r\nX-A: 1\r\n\r\n");
  // A 1xx is not a final answer: the client would wait for another one.
  EXPECT_THAT(answer("/103", "internal error\n"), ::testing::StartsWith("HTTP/1.1 500 "));
  EXPECT_EQ(answer("/200", "oops"), "HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 4\r\n\r\noops");
}

TEST(HttpFraming, ALargeAnswerToAClientNotReadingYetArrivesWhole) {
  // Far more than the socket buffers hold, so most of it is sent after the first write.
  std::string body(std::size_t{16} << 20, 'x');
  for (std::size_t i = 0; i < body.size(); i += 4096) body[i] = static_cast<char>('a' + i % 26);
  Server server([&body](const pubsub::PushRequest&) {
    return pubsub::PushResponse{.status = 200, .headers = {}, .body = body};
  });
  const int port = server.start("127.0.0.1", 0);
  RawConnection c(port);
  ASSERT_TRUE(c.is_open());
  c.send("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server's send fills up
  ASSERT_TRUE(c.read_to_close(std::chrono::seconds(20)));
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                           "\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(c.received().size(), head.size() + body.size());
  EXPECT_EQ(c.received().substr(0, head.size()), head);
  EXPECT_TRUE(c.received().substr(head.size()) == body);  // not EXPECT_EQ: 16 MiB in a failure
}

}  // namespace
}  // namespace idempotency::http
