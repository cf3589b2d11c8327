// PostgreSQL over TLS, against the fixture's server and its test CA (certificate for
// `localhost` only): libpq's sslmode, sslrootcert, sslcert and sslkey pass through the URL;
// a wrong CA, a wrong host name, a missing client certificate and a server without TLS are
// refused with a one-line StoreError that never shows a password or a key's contents.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "idempotency/errors.h"
#include "idempotency/postgres_lock.h"
#include "postgres_admin.h"
#include "support/claim_matchers.h"
#include "support/temp_dir.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::Not;

// replaced() is `text` with its first `from` replaced by `to`; fails the test when absent.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "no '" << from << "' in the test URL";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// password_of() is a URL's password ("" when it has none).
std::string password_of(const std::string& url) {
  const auto start = url.find("://") + 3;
  const auto at = url.find('@', start);
  const auto colon = url.find(':', start);
  if (at == std::string::npos || colon == std::string::npos || colon > at) return "";
  return url.substr(colon + 1, at - colon - 1);
}

// parameter() is the value of a URL's `name=` parameter ("" when absent).
std::string parameter(const std::string& url, const std::string& name) {
  const auto at = url.find(name + "=");
  if (at == std::string::npos) return "";
  const auto start = at + name.size() + 1;
  return url.substr(start, url.find('&', start) - start);
}

class PostgresTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = postgres_tls_url();
    if (url_.empty()) {
      if (std::getenv("CI") != nullptr) GTEST_FAIL() << "CI is set but no PostgreSQL with TLS";
      GTEST_SKIP() << "no PostgreSQL test server with TLS (set POSTGRES_TLS_URL)";
    }
    table_ = unique_name("idem_tls");
    password_ = password_of(url_);
  }

  // expect_refused() checks that no PostgresLock opens at `url`: a StoreError that says
  // `why` in one line, without the password.
  void expect_refused(const std::string& url, const std::string& why,
                      const std::string& secret = "") {
    try {
      const PostgresLock lock(url, {.table = table_});
      ADD_FAILURE() << "connected; expected: " << why;
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), HasSubstr("cannot connect"));
      EXPECT_THAT(e.what(), HasSubstr(why));
      EXPECT_THAT(e.what(), Not(HasSubstr("\n")));
      for (const std::string& s : {password_, secret}) {
        if (!s.empty()) {
          EXPECT_THAT(e.what(), Not(HasSubstr(s)));
        }
      }
    }
  }

  std::string url_;
  std::string table_;
  std::string password_;
};

TEST_F(PostgresTlsTest, VerifyFullWithTheTestCaConnectsAndEveryConnectionIsEncrypted) {
  const std::string app = unique_name("idem_tls_app");
  PostgresLock lock(url_ + "&application_name=" + app, {.table = table_});
  EXPECT_TRUE(lock.complete(won(lock.claim("tls-key", milliseconds(60'000))), "r"));
  Admin admin(postgres_url());
  const std::string of_app =
      " FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE "
      "a.application_name = '" +
      app + "'";
  EXPECT_NE(admin.exec("SELECT count(*)" + of_app), "0");
  EXPECT_EQ(admin.exec("SELECT count(*)" + of_app + " AND NOT s.ssl"), "0");
}

TEST_F(PostgresTlsTest, ACaThatDidNotSignTheServerCertificateIsRefused) {
  expect_refused(replaced(url_, postgres_ca(), postgres_wrong_ca()), "certificate verify failed");
}

TEST_F(PostgresTlsTest, AHostNameTheCertificateDoesNotNameIsRefused) {
  expect_refused(replaced(url_, "@localhost:", "@127.0.0.1:"), "does not match host name");
}

TEST_F(PostgresTlsTest, VerifyCaChecksTheCaButNotTheHostName) {
  const std::string url =
      replaced(replaced(url_, "@localhost:", "@127.0.0.1:"), "verify-full", "verify-ca");
  PostgresLock lock(url, {.table = table_});
  EXPECT_TRUE(lock.complete(won(lock.claim("verify-ca-key", milliseconds(60'000))), "r"));
}

TEST_F(PostgresTlsTest, AClientCertificateAuthenticatesWithoutAPassword) {
  const std::string url = postgres_client_cert_url();
  ASSERT_FALSE(url.empty()) << "the fixture made no client certificate URL";
  PostgresLock lock(url, {.table = table_});
  EXPECT_TRUE(lock.complete(won(lock.claim("client-cert-key", milliseconds(60'000))), "r"));
  // Without its certificate the same role is turned away: the certificate did the work.
  expect_refused(url.substr(0, url.find("&sslcert=")), "requires a valid client certificate");
}

TEST_F(PostgresTlsTest, NeitherAKeyPassphraseNorAKeysContentsAppearInTheError) {
  const std::string client_cert = parameter(postgres_client_cert_url(), "sslcert");
  ASSERT_FALSE(client_cert.empty()) << "the fixture made no client certificate";
  const TempDir dir;
  const std::string key = dir.file("client.key");
  const std::string contents = "S3cretKeyMaterialThatIsNotAKey";
  std::ofstream(key) << "-----BEGIN PRIVATE KEY-----\n"
                     << contents << "\n-----END PRIVATE KEY-----\n";
  ::chmod(key.c_str(), 0600);  // libpq refuses a key others can read, before it reads it
  const std::string passphrase = "Key-Pa55phrase-77";
  const std::string url =
      url_ + "&sslcert=" + client_cert + "&sslkey=" + key + "&sslpassword=" + passphrase;
  expect_refused(url, "private key", contents);
  expect_refused(url, "private key", passphrase);
}

TEST_F(PostgresTlsTest, RequireAgainstAServerWithoutTlsIsRefused) {
  // The fixture's PgBouncer speaks no TLS to its clients.
  const std::string bouncer = pgbouncer_url();
  if (bouncer.empty()) {
    if (std::getenv("CI") != nullptr) GTEST_FAIL() << "CI is set but no PgBouncer";
    GTEST_SKIP() << "no PgBouncer (set PGBOUNCER_URL)";
  }
  password_ = password_of(bouncer);
  expect_refused(bouncer + "?sslmode=require", "does not support SSL");
}

}  // namespace
}  // namespace idempotency::testing
