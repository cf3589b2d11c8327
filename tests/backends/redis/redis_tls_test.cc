// rediss:// against the fixture's TLS port (tests/support/servers/redis.sh): what verification
// refuses (another CA, a host the certificate does not name, no client certificate where one is
// required, a handshake that never completes), AUTH and a reconnect over TLS, a cross-instance
// wake-up over TLS, and one-line errors with no password and no key material. The contract
// suites run over TLS in contract_redis ("RedisTls/…").
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/redis_lock.h"
#include "redis_connection.h"
#include "redis_test_util.h"
#include "redis_tls.h"
#include "support/eventually.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kTlsPassword = "s3cr3t-TLS-PW";

// The fixture's TLS port and the certificates it made.
struct TlsFixture {
  RedisEndpoint endpoint;  // of the fixture's rediss:// URL
  std::string url;
  std::filesystem::path certs;  // ca.crt, other-ca.crt, client.crt/.key, server.crt/.key

  // A rediss:// URL on the fixture's TLS port: `userinfo@` (when given), `host`, `query`.
  [[nodiscard]] std::string url_to(std::string_view host, std::string_view query,
                                   std::string_view userinfo = "") const {
    std::string u = "rediss://";
    if (!userinfo.empty()) u += std::string(userinfo) + "@";
    return u + std::string(host) + ":" + std::to_string(endpoint.port) + "?" + std::string(query);
  }
  [[nodiscard]] std::string file(const char* name) const { return (certs / name).string(); }
  // ca=, cert= and key= as the fixture's URL has them, with `ca` as the trust anchor.
  [[nodiscard]] std::string files(const char* ca = "ca.crt") const {
    return "ca=" + file(ca) + "&cert=" + file("client.crt") + "&key=" + file("client.key");
  }
};

TlsFixture tls_fixture() {
  TlsFixture f;
  f.url = redis_tls_url();
  if (f.url.empty()) {
    throw std::runtime_error(
        "no Redis TLS port: run through ctest (the redis_server fixture starts one)");
  }
  f.endpoint = parse_redis_url(f.url);
  f.certs = std::filesystem::path(f.endpoint.tls->ca_file).parent_path();
  return f;
}

// A raw connection to the fixture's TLS port, for commands the lock never sends.
class TlsAdmin {
 public:
  explicit TlsAdmin(const TlsFixture& f)
      : context_(*f.endpoint.tls),
        connection_(redis_detail::Connection::open(f.endpoint.host, f.endpoint.port,
                                                   {.connect_timeout = std::chrono::seconds(5),
                                                    .command_timeout = std::chrono::seconds(5),
                                                    .tls = &context_})) {}

  // text() runs a command and returns its string or integer reply.
  std::string text(const std::vector<std::string_view>& args) {
    redis_detail::ReplyPtr r = connection_->command(args);
    if (!r) throw std::runtime_error(connection_->error());
    if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
    if (r->str != nullptr) return std::string(r->str, r->len);
    return "(array)";
  }

  // subscribers() counts the connections subscribed to `channel` (PUBSUB NUMSUB).
  long long subscribers(const std::string& channel) {
    redis_detail::ReplyPtr r = connection_->command({"PUBSUB", "NUMSUB", channel});
    if (!r) throw std::runtime_error(connection_->error());
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) throw std::runtime_error("NUMSUB?");
    return r->element[1]->integer;
  }

 private:
  redis_detail::TlsContext context_;
  redis_detail::ConnectionPtr connection_;
};

// The StoreError a RedisLock on `url` throws at construction ("" when it connected).
std::string connect_error(const std::string& url,
                          milliseconds connect_timeout = milliseconds(5000)) {
  try {
    RedisLock lock(url, RedisOptions{.pool_size = 1, .connect_timeout = connect_timeout});
    return "";
  } catch (const StoreError& e) {
    return e.what();
  }
}

void expect_one_clean_line(const std::string& message) {
  EXPECT_THAT(message, Not(HasSubstr("\n")));
  EXPECT_THAT(message, Not(HasSubstr(kTlsPassword)));
  EXPECT_THAT(message, Not(HasSubstr("PRIVATE KEY")));
}

TEST(RedisTls, ACertificateFromAnotherCaIsRefused) {
  const TlsFixture f = tls_fixture();
  const std::string error = connect_error(f.url_to(
      "127.0.0.1", f.files("other-ca.crt") + "&sni=localhost", std::string(":") + kTlsPassword));
  EXPECT_THAT(error, HasSubstr("TLS handshake with 127.0.0.1:" + std::to_string(f.endpoint.port) +
                               " failed: certificate verify failed"));
  expect_one_clean_line(error);
}

TEST(RedisTls, AHostTheCertificateDoesNotNameIsRefused) {
  const TlsFixture f = tls_fixture();
  // The certificate names DNS:localhost only: neither the address nor another name passes.
  std::string error = connect_error(f.url_to("127.0.0.1", f.files()));
  EXPECT_THAT(error, HasSubstr("certificate verify failed: IP address mismatch"));
  expect_one_clean_line(error);
  error = connect_error(f.url_to("127.0.0.1", f.files() + "&sni=redis.example.com"));
  EXPECT_THAT(error, HasSubstr("certificate verify failed: hostname mismatch"));
  expect_one_clean_line(error);
  // The name it does carry passes, as the URL's host or as sni=; verify=ca skips the name only.
  EXPECT_EQ(connect_error(f.url_to("localhost", f.files())), "");
  EXPECT_EQ(connect_error(f.url_to("127.0.0.1", f.files() + "&sni=localhost")), "");
  EXPECT_EQ(connect_error(f.url_to("127.0.0.1", f.files() + "&verify=ca")), "");
  EXPECT_THAT(connect_error(f.url_to("127.0.0.1", f.files("other-ca.crt") + "&verify=ca")),
              HasSubstr("certificate verify failed"));
}

TEST(RedisTls, AServerThatRequiresAClientCertificateRefusesAConnectionWithoutOne) {
  const TlsFixture f = tls_fixture();
  const std::string error =
      connect_error(f.url_to("127.0.0.1", "ca=" + f.file("ca.crt") + "&sni=localhost"));
  // TLS 1.3: the client's handshake ends before the server checks it, so the refusal meets
  // the first command, as the server's alert or, when the server's close overtakes it, as a
  // reset.
  EXPECT_THAT(error, AnyOf(HasSubstr("certificate required"), HasSubstr("reset by peer"),
                           HasSubstr("closed the connection")));
  expect_one_clean_line(error);
  EXPECT_EQ(connect_error(f.url), "");  // the fixture's URL carries the client certificate
}

TEST(RedisTls, AHandshakeThatNeverCompletesEndsAtTheConnectTimeout) {
  const TlsFixture f = tls_fixture();
  // A listener that never accepts: the kernel completes the TCP handshake, nobody answers TLS.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string url = "rediss://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "?" +
                          f.files() + "&sni=localhost";
  const std::string error = connect_error(url, milliseconds(200));
  ::close(listener);
  EXPECT_THAT(error, HasSubstr("TLS handshake with 127.0.0.1:"));
  EXPECT_THAT(error, HasSubstr("connect_timeout"));
}

TEST(RedisTls, ATlsUrlOnAPlainPortIsOneClearLine) {
  const std::string plain = fixture_redis_url();
  const RedisEndpoint ep = parse_redis_url(plain);
  const TlsFixture f = tls_fixture();
  // The plain port reads the ClientHello as the start of a command and waits for its end.
  const std::string error = connect_error(
      "rediss://" + ep.host + ":" + std::to_string(ep.port) + "?" + f.files(), milliseconds(200));
  EXPECT_THAT(error, HasSubstr("TLS handshake with"));
  EXPECT_THAT(error, HasSubstr("is this the server's TLS port?"));
  expect_one_clean_line(error);
}

TEST(RedisTls, FilesThatCannotBeLoadedAreNamedWithoutTheirContents) {
  const TlsFixture f = tls_fixture();
  const std::string userinfo = std::string(":") + kTlsPassword;
  const std::string missing = (f.certs / "no-such-ca.crt").string();
  std::string error = connect_error(f.url_to("localhost", "ca=" + missing, userinfo));
  EXPECT_THAT(error, HasSubstr("cannot load ca=" + missing + ": No such file or directory"));
  expect_one_clean_line(error);
  // A key that is not the certificate's: named, never printed.
  error = connect_error(f.url_to(
      "localhost",
      "ca=" + f.file("ca.crt") + "&cert=" + f.file("client.crt") + "&key=" + f.file("other-ca.key"),
      userinfo));
  EXPECT_THAT(error,
              HasSubstr("cannot load key=" + f.file("other-ca.key") + ": key values mismatch"));
  expect_one_clean_line(error);
  // A key file that is no key: OpenSSL's reason, not the file's text.
  const std::filesystem::path junk = f.certs / (unique_name("junk") + ".key");
  std::ofstream(junk)
      << "-----BEGIN PRIVATE KEY-----\nSECRET-KEY-MATERIAL\n-----END PRIVATE KEY-----\n";
  error = connect_error(
      f.url_to("localhost",
               "ca=" + f.file("ca.crt") + "&cert=" + f.file("client.crt") + "&key=" + junk.string(),
               userinfo));
  std::filesystem::remove(junk);
  EXPECT_THAT(error, HasSubstr("cannot load key=" + junk.string()));
  EXPECT_THAT(error, Not(HasSubstr("SECRET-KEY-MATERIAL")));
  expect_one_clean_line(error);
}

TEST(RedisTls, AuthWorksOverTlsAndAConnectionTheServerClosesIsReplaced) {
  const TlsFixture f = tls_fixture();
  TlsAdmin admin(f);
  const std::string user = unique_name("tls_user");
  const std::string password = std::string(kTlsPassword) + "-" + user;
  ASSERT_EQ(admin.text({"ACL", "SETUSER", user, "on", ">" + password, "~*", "&*", "+@all"}), "OK");
  {
    RedisLock lock(f.url_to("localhost", f.files(), user + ":" + password),
                   RedisOptions{.key_prefix = unique_name("idem_tls") + ":", .pool_size = 2});
    const Claim first = won(lock.claim("k1", milliseconds(60'000)));
    EXPECT_TRUE(lock.complete(first, "r"));
    // The server drops every connection of this user; the next call finds its pooled one
    // closed and retries once on a fresh one (a TLS close must read as "closed", not "error").
    EXPECT_NE(admin.text({"CLIENT", "KILL", "USER", user}), "0");
    EXPECT_EQ(outcome(lock.claim("k1", milliseconds(60'000))), std::string("AlreadyDone"));
    EXPECT_EQ(won(lock.claim("k2", milliseconds(60'000))).fence, 1);
  }
  const std::string error =
      connect_error(f.url_to("localhost", f.files(), user + ":wrong-" + password));
  EXPECT_THAT(error, HasSubstr("AUTH failed"));
  EXPECT_THAT(error, Not(HasSubstr(password)));
  EXPECT_EQ(admin.text({"ACL", "DELUSER", user}), "1");
}

TEST(RedisTls, AWaiterIsWokenByTheKeysMessageOverTls) {
  const TlsFixture f = tls_fixture();
  const std::string prefix = unique_name("idem_tls_wait") + ":";
  RedisLock holder(f.url, RedisOptions{.key_prefix = prefix});
  RedisLock waiter(f.url, RedisOptions{.key_prefix = prefix});
  const Claim c = won(holder.claim("k", std::chrono::minutes(1)));
  // The jthread's stop token ends the wait should the test fail before the message.
  std::jthread waiting([&](const std::stop_token& stop) {
    waiter.wait_for_change("k", std::chrono::minutes(2), stop);
  });
  // The key's message is published by hand, once the waiter is subscribed over TLS: a complete
  // landing between its SUBSCRIBE and its read of the record would rightly end the wait as
  // settled, without the message; with the record still claimed, only the message can end it.
  TlsAdmin admin(f);
  ASSERT_TRUE(eventually([&] { return admin.subscribers(prefix + "k") == 1; }));
  EXPECT_EQ(admin.text({"PUBLISH", prefix + "k", "done"}), "1");
  waiting.join();
  const RedisWaitCounts counts = waiter.wait_counts();
  EXPECT_EQ(counts.notified, 1U);
  EXPECT_EQ(counts.timed_out + counts.unavailable + counts.settled + counts.stopped, 0U);
  EXPECT_TRUE(holder.complete(c, "r"));
}

}  // namespace
}  // namespace idempotency::testing
