// The Google credentials component against a local token endpoint and metadata-server double:
// service-account JWT (signature and claims verified by the double), authorized_user refresh,
// metadata server (Metadata-Flavor required), caching, refresh before expiry on a ManualClock,
// one refresh for concurrent callers, and errors that name the source and the reason.
#include "idempotency/google_auth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "support/temp_dir.h"

namespace idempotency::testing {
namespace {

using Json = nlohmann::json;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

std::string private_pem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<std::size_t>(n));
  BIO_free(bio);
  return pem;
}

std::string base64url_decode(std::string s) {
  for (char& c : s) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  while (s.size() % 4 != 0) s.push_back('=');
  std::string out(s.size(), '\0');
  const int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  std::size_t size = n < 0 ? 0 : static_cast<std::size_t>(n);
  if (!s.empty() && s.back() == '=') --size;
  if (s.size() >= 2 && s[s.size() - 2] == '=') --size;
  out.resize(size);
  return out;
}

// A token endpoint (POST /token) and a metadata server (GET /computeMetadata/v1/...).
class GoogleDouble {
 public:
  explicit GoogleDouble(EVP_PKEY* public_key) : key_(public_key) {
    server_.set_tcp_nodelay(true);
    server_.Post("/token", [this](const httplib::Request& req, httplib::Response& res) {
      std::this_thread::sleep_for(latency_.load());
      fetches_++;
      std::lock_guard lock(mutex_);
      if (fail_status_ != 0) {
        res.status = fail_status_;
        res.set_content(fail_body_, "application/json");
        return;
      }
      if (req.get_param_value("grant_type") == "urn:ietf:params:oauth:grant-type:jwt-bearer") {
        verify_jwt(req.get_param_value("assertion"));
      } else if (req.get_param_value("grant_type") == "refresh_token") {
        refresh_ok_ = req.get_param_value("refresh_token") == "rt/secret" &&
                      req.get_param_value("client_id") == "cid" &&
                      req.get_param_value("client_secret") == "csecret";
      }
      answer(res, "tok-" + std::to_string(fetches_.load()));
    });
    server_.Get("/computeMetadata/v1/instance/service-accounts/default/token",
                [this](const httplib::Request& req, httplib::Response& res) {
                  if (req.get_header_value("Metadata-Flavor") != "Google") {
                    res.status = 403;
                    return;
                  }
                  fetches_++;
                  answer(res, "md-" + std::to_string(fetches_.load()));
                });
    server_.Get("/computeMetadata/v1/project/project-id",
                [](const httplib::Request& req, httplib::Response& res) {
                  if (req.get_header_value("Metadata-Flavor") != "Google") {
                    res.status = 403;
                    return;
                  }
                  res.set_content("md-project", "application/text");
                });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~GoogleDouble() {
    server_.stop();
    thread_.join();
  }
  GoogleDouble(const GoogleDouble&) = delete;
  GoogleDouble& operator=(const GoogleDouble&) = delete;

  [[nodiscard]] std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  [[nodiscard]] std::string token_uri() const { return "http://" + host() + "/token"; }

  void fail_with(int status, std::string body) {
    std::lock_guard lock(mutex_);
    fail_status_ = status;
    fail_body_ = std::move(body);
  }

  std::atomic<int> fetches_{0};
  std::atomic<std::chrono::milliseconds> latency_{std::chrono::milliseconds(0)};
  int expires_in_ = 3600;
  std::int64_t expected_iat_ = 0;
  std::vector<std::string> jwt_problems_;  // empty when every JWT verified
  int jwts_seen_ = 0;
  bool refresh_ok_ = false;
  std::atomic<std::size_t> padding_{0};  // bytes of filler in each token reply

 private:
  void answer(httplib::Response& res, const std::string& token) const {
    Json reply = {{"access_token", token}, {"expires_in", expires_in_}, {"token_type", "Bearer"}};
    if (padding_ != 0) reply["padding"] = std::string(padding_.load(), 'x');
    res.set_content(reply.dump(), "application/json");
  }

  void verify_jwt(const std::string& jwt) {
    ++jwts_seen_;
    const auto dot1 = jwt.find('.');
    const auto dot2 = jwt.rfind('.');
    if (dot1 == std::string::npos || dot1 == dot2) {
      jwt_problems_.emplace_back("shape");
      return;
    }
    const std::string input = jwt.substr(0, dot2);
    const std::string sig = base64url_decode(jwt.substr(dot2 + 1));
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    const bool ok =
        EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, key_) == 1 &&
        EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                         reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
    EVP_MD_CTX_free(ctx);
    if (!ok) jwt_problems_.emplace_back("signature");
    const Json header = Json::parse(base64url_decode(jwt.substr(0, dot1)));
    const Json claims = Json::parse(base64url_decode(jwt.substr(dot1 + 1, dot2 - dot1 - 1)));
    if (header["alg"] != "RS256" || header["kid"] != "key-1") jwt_problems_.emplace_back("header");
    if (claims["iss"] != "sa@proj.iam.gserviceaccount.com") jwt_problems_.emplace_back("iss");
    if (claims["aud"] != token_uri()) jwt_problems_.emplace_back("aud");
    if (claims["scope"] != kDatastoreScopeForTest) jwt_problems_.emplace_back("scope");
    if (claims["iat"] != expected_iat_) jwt_problems_.emplace_back("iat");
    if (claims["exp"] != expected_iat_ + 3600) jwt_problems_.emplace_back("exp");
  }

  static constexpr const char* kDatastoreScopeForTest = auth::kDatastoreScope;
  EVP_PKEY* key_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  int fail_status_ = 0;
  std::string fail_body_;
};

class GoogleAuthTest : public ::testing::Test {
 protected:
  GoogleAuthTest() : key_(EVP_RSA_gen(2048)), google_(key_.get()) {
    google_.expected_iat_ = to_millis(clock_->now()) / 1000;
  }

  std::string write_service_account() {
    std::string path = dir_.file("sa.json");
    std::ofstream(path) << Json{
        {"type", "service_account"},
        {"project_id", "proj"},
        {"private_key_id", "key-1"},
        {"private_key", private_pem(key_.get())},
        {"client_email", "sa@proj.iam.gserviceaccount.com"},
        {"token_uri",
         google_.token_uri()}}.dump();
    return path;
  }

  auth::CredentialsOptions options() {
    return auth::CredentialsOptions{.clock = clock_, .metadata_host = google_.host()};
  }

  PkeyPtr key_;
  GoogleDouble google_;
  TempDir dir_;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
};

TEST_F(GoogleAuthTest, AServiceAccountJwtIsSignedAndExchanged) {
  auto creds = auth::credentials_from_file(write_service_account(), options());
  EXPECT_EQ(creds->access_token(), "tok-1");
  EXPECT_EQ(google_.jwts_seen_, 1);
  EXPECT_THAT(google_.jwt_problems_, ::testing::IsEmpty());
  EXPECT_THAT(creds->source(), HasSubstr("service account key file"));
}

TEST_F(GoogleAuthTest, ATokenIsFetchedOnceForManyCalls) {
  auto creds = auth::credentials_from_file(write_service_account(), options());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(creds->access_token(), "tok-1");
  EXPECT_EQ(google_.fetches_, 1);
}

TEST_F(GoogleAuthTest, ATokenIsRefreshedBeforeItExpires) {
  auto creds = auth::credentials_from_file(write_service_account(), options());
  EXPECT_EQ(creds->access_token(), "tok-1");
  clock_->advance(seconds(3600 - 300 - 1));  // just inside the 5 min margin: still cached
  EXPECT_EQ(creds->access_token(), "tok-1");
  clock_->advance(seconds(2));
  google_.expected_iat_ = to_millis(clock_->now()) / 1000;
  EXPECT_EQ(creds->access_token(), "tok-2");
  EXPECT_EQ(google_.fetches_, 2);
  EXPECT_THAT(google_.jwt_problems_, ::testing::IsEmpty());
}

TEST_F(GoogleAuthTest, ConcurrentCallersCauseOneRefresh) {
  google_.latency_ = std::chrono::milliseconds(200);
  auto creds = auth::credentials_from_file(write_service_account(), options());
  std::vector<std::thread> threads;
  threads.reserve(8);
  std::atomic<int> right{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      if (creds->access_token() == "tok-1") right++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(right, 8);
  EXPECT_EQ(google_.fetches_, 1);
}

// The token endpoint is briefly down when the refresh comes due, minutes before the cached
// token expires: the cached token keeps being served, the refresh is tried again once per
// back-off, and only a token that has actually expired makes the failure an error.
TEST_F(GoogleAuthTest, AFailedRefreshKeepsServingTheStillValidToken) {
  auto creds = auth::credentials_from_file(write_service_account(), options());
  EXPECT_EQ(creds->access_token(), "tok-1");
  clock_->advance(seconds(3600 - 300 + 1));  // inside the refresh margin
  google_.fail_with(503, R"({"error":"temporarily_unavailable"})");
  EXPECT_EQ(creds->access_token(), "tok-1");
  EXPECT_EQ(google_.fetches_, 2);
  EXPECT_EQ(creds->access_token(), "tok-1");
  EXPECT_EQ(google_.fetches_, 2) << "no new fetch within the back-off";
  clock_->advance(seconds(2));  // past the 1 s back-off
  EXPECT_EQ(creds->access_token(), "tok-1");
  EXPECT_EQ(google_.fetches_, 3);
  clock_->advance(seconds(300));  // the token has expired
  EXPECT_THROW((void)creds->access_token(), auth::AuthError);
  EXPECT_EQ(google_.fetches_, 4);
  EXPECT_THROW((void)creds->access_token(), auth::AuthError);
  EXPECT_EQ(google_.fetches_, 4) << "the failure is handed on within the back-off";
  google_.fail_with(0, "");
  clock_->advance(seconds(2));
  google_.expected_iat_ = to_millis(clock_->now()) / 1000;
  EXPECT_EQ(creds->access_token(), "tok-5");
  EXPECT_THAT(google_.jwt_problems_, ::testing::IsEmpty());
}

// Many callers while a slow refresh fails: one fetch, not one per caller in turn (each as long
// as the timeout), and every caller still gets the valid token.
TEST_F(GoogleAuthTest, CallersDuringAFailingRefreshCauseOneFetch) {
  auto creds = auth::credentials_from_file(write_service_account(), options());
  EXPECT_EQ(creds->access_token(), "tok-1");
  clock_->advance(seconds(3600 - 300 + 1));
  google_.fail_with(503, R"({"error":"temporarily_unavailable"})");
  google_.latency_ = std::chrono::milliseconds(200);
  std::vector<std::thread> threads;
  threads.reserve(8);
  std::atomic<int> right{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      try {
        if (creds->access_token() == "tok-1") right++;
      } catch (const auth::AuthError&) {
        // counted as not right
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(right, 8);
  EXPECT_LE(google_.fetches_ - 1, 2);
}

// With no valid token, callers that arrive while a fetch runs wait for it and share its
// failure, rather than each repeating it.
TEST_F(GoogleAuthTest, CallersWithoutAValidTokenShareOneFailedFetch) {
  google_.fail_with(503, R"({"error":"temporarily_unavailable"})");
  google_.latency_ = std::chrono::milliseconds(200);
  auto creds = auth::credentials_from_file(write_service_account(), options());
  std::vector<std::thread> threads;
  threads.reserve(8);
  std::atomic<int> failed{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      try {
        (void)creds->access_token();
      } catch (const auth::AuthError& e) {
        if (std::string(e.what()).find("HTTP 503") != std::string::npos) failed++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed, 8);
  EXPECT_LE(google_.fetches_, 2);
}

// A token an API refused (401) is dropped once; a stale report about an older one is ignored.
TEST_F(GoogleAuthTest, InvalidateDropsOnlyTheRefusedCachedToken) {
  auto creds = auth::credentials_from_file(write_service_account(), options());
  EXPECT_EQ(creds->access_token(), "tok-1");
  creds->invalidate("tok-0");
  EXPECT_EQ(creds->access_token(), "tok-1");
  creds->invalidate("tok-1");
  EXPECT_EQ(creds->access_token(), "tok-2");
  creds->invalidate("tok-1");  // another caller refused with the old token: already replaced
  EXPECT_EQ(creds->access_token(), "tok-2");
  EXPECT_EQ(google_.fetches_, 2);
}

// A reply is read up to a bound (1 MiB for a token endpoint), with an error that says so.
TEST_F(GoogleAuthTest, AnOverlongReplyIsRefusedWithAClearError) {
  google_.padding_ = std::size_t{2} << 20;
  auto creds = auth::credentials_from_file(write_service_account(), options());
  EXPECT_THAT([&] { (void)creds->access_token(); },
              ::testing::ThrowsMessage<auth::AuthError>(HasSubstr("longer than 1048576 bytes")));
}

TEST_F(GoogleAuthTest, AnAuthorizedUserFileUsesItsRefreshToken) {
  const std::string path = dir_.file("user.json");
  std::ofstream(path) << Json{
      {"type", "authorized_user"},
      {"client_id", "cid"},
      {"client_secret", "csecret"},
      {"refresh_token", "rt/secret"},
      {"token_uri",
       google_.token_uri()}}.dump();
  auto creds = auth::credentials_from_file(path, options());
  EXPECT_EQ(creds->access_token(), "tok-1");
  EXPECT_TRUE(google_.refresh_ok_);
  EXPECT_EQ(creds->access_token(), "tok-1");
  EXPECT_EQ(google_.fetches_, 1);
}

TEST_F(GoogleAuthTest, TheMetadataServerIsAskedWithMetadataFlavor) {
  auto creds = auth::metadata_credentials(options());
  EXPECT_EQ(creds->access_token(), "md-1");
  EXPECT_EQ(creds->access_token(), "md-1");
  EXPECT_EQ(auth::metadata_project_id(options()), "md-project");
  httplib::Client plain("http://" + google_.host());
  auto r = plain.Get("/computeMetadata/v1/instance/service-accounts/default/token");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);  // the double insists on the header, so the client sent it
}

TEST_F(GoogleAuthTest, DefaultCredentialsPreferTheFileThenTheMetadataServer) {
  ::setenv("GCE_METADATA_HOST", google_.host().c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
  ::unsetenv("GOOGLE_APPLICATION_CREDENTIALS");              // NOLINT(concurrency-mt-unsafe)
  // No gcloud well-known file, whatever the machine running the test has in its home.
  ::setenv("CLOUDSDK_CONFIG", dir_.file("no-gcloud").c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
  auto metadata = auth::google_default_credentials(auth::CredentialsOptions{.clock = clock_});
  EXPECT_THAT(metadata->source(), HasSubstr("metadata server http://" + google_.host()));
  EXPECT_EQ(metadata->access_token(), "md-1");
  const std::string sa = write_service_account();
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", sa.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
  auto file = auth::google_default_credentials(auth::CredentialsOptions{.clock = clock_});
  EXPECT_THAT(file->source(), HasSubstr("service account key file"));
  EXPECT_EQ(file->access_token(), "tok-2");
  ::unsetenv("GOOGLE_APPLICATION_CREDENTIALS");  // NOLINT(concurrency-mt-unsafe)
  ::unsetenv("GCE_METADATA_HOST");               // NOLINT(concurrency-mt-unsafe)
  ::unsetenv("CLOUDSDK_CONFIG");                 // NOLINT(concurrency-mt-unsafe)
}

// `gcloud auth application-default login` writes an authorized_user file to a well-known place;
// it comes after GOOGLE_APPLICATION_CREDENTIALS and before the metadata server, and its quota
// project is what API calls are billed to.
TEST_F(GoogleAuthTest, DefaultCredentialsReadGcloudsWellKnownFileBeforeTheMetadataServer) {
  ::setenv("GCE_METADATA_HOST", google_.host().c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
  ::unsetenv("GOOGLE_APPLICATION_CREDENTIALS");              // NOLINT(concurrency-mt-unsafe)
  const std::string config = dir_.file("gcloud");
  std::filesystem::create_directories(config);
  ::setenv("CLOUDSDK_CONFIG", config.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
  std::ofstream(config + "/application_default_credentials.json") << Json{
      {"type", "authorized_user"},
      {"client_id", "cid"},
      {"client_secret", "csecret"},
      {"refresh_token", "rt/secret"},
      {"quota_project_id", "billed-project"},
      {"token_uri", google_.token_uri()}}.dump();
  auto gcloud = auth::google_default_credentials(auth::CredentialsOptions{.clock = clock_});
  EXPECT_THAT(gcloud->source(), HasSubstr("authorized_user file " + config));
  EXPECT_EQ(gcloud->access_token(), "tok-1");
  EXPECT_TRUE(google_.refresh_ok_);
  EXPECT_EQ(gcloud->quota_project(), "billed-project");
  // GOOGLE_APPLICATION_CREDENTIALS still comes first.
  const std::string sa = write_service_account();
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", sa.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
  auto file = auth::google_default_credentials(auth::CredentialsOptions{.clock = clock_});
  EXPECT_THAT(file->source(), HasSubstr("service account key file"));
  EXPECT_EQ(file->quota_project(), "");
  ::unsetenv("GOOGLE_APPLICATION_CREDENTIALS");  // NOLINT(concurrency-mt-unsafe)
  // A malformed well-known file is an error naming it, not a silent fall-through.
  std::ofstream(config + "/application_default_credentials.json") << "{";
  try {
    (void)auth::google_default_credentials(auth::CredentialsOptions{.clock = clock_});
    ADD_FAILURE() << "expected AuthError";
  } catch (const auth::AuthError& e) {
    EXPECT_THAT(e.what(), HasSubstr("gcloud's application default credentials"));
  }
  ::unsetenv("GCE_METADATA_HOST");  // NOLINT(concurrency-mt-unsafe)
  ::unsetenv("CLOUDSDK_CONFIG");    // NOLINT(concurrency-mt-unsafe)
}

TEST_F(GoogleAuthTest, ARefusedExchangeNamesTheSourceAndReasonButNoSecret) {
  google_.fail_with(400,
                    R"({"error":"invalid_grant","error_description":"Invalid JWT Signature."})");
  const std::string path = write_service_account();
  auto creds = auth::credentials_from_file(path, options());
  try {
    (void)creds->access_token();
    FAIL() << "expected AuthError";
  } catch (const auth::AuthError& e) {
    EXPECT_THAT(e.what(), HasSubstr("service account key file " + path));
    EXPECT_THAT(e.what(), HasSubstr("HTTP 400: invalid_grant: Invalid JWT Signature."));
    EXPECT_THAT(e.what(), Not(HasSubstr("PRIVATE KEY")));
  }
}

TEST_F(GoogleAuthTest, AnUnreachableMetadataServerIsNamed) {
  auto creds = auth::metadata_credentials(
      auth::CredentialsOptions{.clock = clock_, .metadata_host = "127.0.0.1:1"});
  try {
    (void)creds->access_token();
    FAIL() << "expected AuthError";
  } catch (const auth::AuthError& e) {
    EXPECT_THAT(e.what(), HasSubstr("metadata server http://127.0.0.1:1/"));
    EXPECT_THAT(e.what(), HasSubstr("cannot reach it"));
  }
}

TEST_F(GoogleAuthTest, BadFilesAreNamedWithTheProblem) {
  EXPECT_THAT([&] { (void)auth::credentials_from_file(dir_.file("missing.json"), options()); },
              ::testing::ThrowsMessage<auth::AuthError>(HasSubstr("cannot be read")));
  const std::string odd = dir_.file("odd.json");
  std::ofstream(odd) << R"({"type":"external_account"})";
  EXPECT_THAT([&] { (void)auth::credentials_from_file(odd, options()); },
              ::testing::ThrowsMessage<auth::AuthError>(HasSubstr("unsupported type")));
  const std::string broken = dir_.file("broken.json");
  std::ofstream(broken) << R"({"type":"service_account","client_email":"x","private_key":"nope"})";
  EXPECT_THAT([&] { (void)auth::credentials_from_file(broken, options()); },
              ::testing::ThrowsMessage<auth::AuthError>(HasSubstr("not a PEM private key")));
}

}  // namespace
}  // namespace idempotency::testing
