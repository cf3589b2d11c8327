// Google credentials: service-account JWT, authorized_user refresh token, metadata server.
#include "idempotency/google_auth.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "auth/http_client.h"
#include "idempotency/detail/base64.h"

namespace idempotency::auth {
namespace {

using detail::HttpClient;
using detail::HttpResponse;
using Json = nlohmann::json;

constexpr const char* kDefaultTokenUri = "https://oauth2.googleapis.com/token";
constexpr const char* kDefaultMetadataHost = "metadata.google.internal";

std::string env(const char* name) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read-only use
  return v != nullptr ? std::string(v) : std::string();
}

std::shared_ptr<const Clock> clock_of(const CredentialsOptions& o) {
  return o.clock ? o.clock : system_clock();
}

// Where `gcloud auth application-default login` writes its file, as Google's libraries look
// for it: CLOUDSDK_CONFIG when set, else ~/.config/gcloud. Empty when neither can be told.
std::string well_known_file() {
  std::string dir = env("CLOUDSDK_CONFIG");
  if (dir.empty()) {
    const std::string home = env("HOME");
    if (home.empty()) return {};
    dir = home + "/.config/gcloud";
  }
  return dir + "/application_default_credentials.json";
}

std::string metadata_base(const CredentialsOptions& o) {
  std::string host = o.metadata_host;
  if (host.empty()) host = env("GCE_METADATA_HOST");
  if (host.empty()) host = kDefaultMetadataHost;
  return "http://" + host + "/computeMetadata/v1/";
}

// Short, secret-free text from an OAuth error reply: the `error` and `error_description`
// fields only, never the body as a whole.
std::string describe_failure(const HttpResponse& r) {
  if (r.too_large) return r.transport_error;
  if (!r.transport_error.empty()) return "cannot reach it: " + r.transport_error;
  std::string out = "HTTP " + std::to_string(r.status);
  try {
    const Json j = Json::parse(r.body);
    if (j.is_object()) {
      if (j.contains("error") && j["error"].is_string()) {
        out += ": " + j["error"].get<std::string>();
      }
      if (j.contains("error_description") && j["error_description"].is_string()) {
        out += ": " + j["error_description"].get<std::string>().substr(0, 200);
      }
    }
  } catch (const Json::exception&) {
    // not JSON: the status alone says enough
  }
  return out;
}

struct Token {
  std::string value;
  std::chrono::seconds lifetime{0};
};

Token parse_token(const HttpResponse& r, const std::string& source) {
  if (r.status != 200) throw AuthError("google auth: " + source + ": " + describe_failure(r));
  try {
    const Json j = Json::parse(r.body);
    Token t;
    t.value = j.at("access_token").get<std::string>();
    t.lifetime = std::chrono::seconds(j.value("expires_in", 3600));
    if (t.value.empty()) throw AuthError("google auth: " + source + ": an empty access_token");
    return t;
  } catch (const Json::exception&) {
    throw AuthError("google auth: " + source + ": the reply has no access_token");
  }
}

// Caches one token. One caller at a time fetches, outside the mutex: while the cached token
// is still valid the others keep using it, and once it has expired they wait for that fetch
// rather than each starting their own. A failed fetch is remembered for `refresh_retry`, so a
// token endpoint that is down costs one fetch per back-off, not one per call.
class CachedSource : public TokenSource {
 public:
  explicit CachedSource(CredentialsOptions options)
      : options_(std::move(options)), clock_(clock_of(options_)) {
    if (options_.refresh_retry.count() < 0) {
      throw AuthError("google auth: refresh_retry must not be negative");
    }
  }

  std::string access_token() final {
    std::unique_lock lock(mutex_);
    for (;;) {
      const TimePoint now = clock_->now();
      const bool valid = usable(now);
      if (valid && now < refresh_at_) return token_;
      if (now < retry_at_) {  // the last fetch failed a moment ago
        if (valid) return token_;
        throw AuthError(failure_);
      }
      if (!fetching_) break;
      if (valid) return token_;  // another caller is refreshing it
      fetched_.wait(lock);
    }
    fetching_ = true;
    lock.unlock();
    try {
      const TimePoint start = clock_->now();
      Token t = fetch(start);
      const auto margin = std::min<std::chrono::seconds>(options_.refresh_margin, t.lifetime / 2);
      lock.lock();
      token_ = std::move(t.value);
      expires_at_ = start + t.lifetime;
      refresh_at_ = expires_at_ - margin;
      retry_at_ = TimePoint{};
      fetching_ = false;
      fetched_.notify_all();
      return token_;
    } catch (const AuthError& e) {
      if (!lock.owns_lock()) lock.lock();
      fetching_ = false;
      fetched_.notify_all();
      failure_ = e.what();
      const TimePoint now = clock_->now();
      retry_at_ = now + options_.refresh_retry;
      if (usable(now)) return token_;
      throw;
    } catch (...) {
      if (!lock.owns_lock()) lock.lock();
      fetching_ = false;
      fetched_.notify_all();
      throw;
    }
  }

  void invalidate(const std::string& token) final {
    std::lock_guard lock(mutex_);
    if (token.empty() || token != token_) return;  // already replaced: nothing to drop
    token_.clear();
    expires_at_ = refresh_at_ = TimePoint{};
  }

 protected:
  virtual Token fetch(TimePoint now) = 0;
  CredentialsOptions options_;
  HttpClient http_;

 private:
  // Called with mutex_ held.
  [[nodiscard]] bool usable(TimePoint now) const { return !token_.empty() && now < expires_at_; }

  std::shared_ptr<const Clock> clock_;
  std::mutex mutex_;
  std::condition_variable fetched_;  // a fetch ended, well or not
  bool fetching_ = false;
  std::string token_;
  TimePoint expires_at_;
  TimePoint refresh_at_;
  TimePoint retry_at_;   // no fetch before this, after one failed
  std::string failure_;  // what the failed fetch said
};

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

class ServiceAccountSource final : public CachedSource {
 public:
  ServiceAccountSource(const Json& file, std::string path, CredentialsOptions options)
      : CachedSource(std::move(options)), path_(std::move(path)) {
    email_ = file.at("client_email").get<std::string>();
    key_id_ = file.value("private_key_id", "");
    token_uri_ = file.value("token_uri", kDefaultTokenUri);
    const std::string pem = file.at("private_key").get<std::string>();
    std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    key_.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
    if (!key_) {
      throw AuthError("google auth: service account key file " + path_ +
                      ": private_key is not a PEM private key");
    }
  }

  std::string source() const override {
    return "service account key file " + path_ + " (token endpoint " + token_uri_ + ")";
  }

 private:
  Token fetch(TimePoint now) override {
    const std::int64_t iat =
        std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
    Json header = {{"alg", "RS256"}, {"typ", "JWT"}};
    if (!key_id_.empty()) header["kid"] = key_id_;
    const Json claims = {{"iss", email_},
                         {"scope", options_.scope},
                         {"aud", token_uri_},
                         {"iat", iat},
                         {"exp", iat + 3600}};
    const std::string signing_input = idempotency::detail::base64url_encode(header.dump()) + "." +
                                      idempotency::detail::base64url_encode(claims.dump());
    const std::string jwt =
        signing_input + "." + idempotency::detail::base64url_encode(sign(signing_input));
    const std::string form =
        "grant_type=" + detail::url_encode("urn:ietf:params:oauth:grant-type:jwt-bearer") +
        "&assertion=" + jwt;
    HttpResponse r =
        http_.request("POST", token_uri_, {"Content-Type: application/x-www-form-urlencoded"}, form,
                      options_.timeout);
    return parse_token(r, source());
  }

  std::string sign(const std::string& input) {
    std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx(EVP_MD_CTX_new());
    std::size_t size = 0;
    if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key_.get()) != 1 ||
        EVP_DigestSignUpdate(ctx.get(), input.data(), input.size()) != 1 ||
        EVP_DigestSignFinal(ctx.get(), nullptr, &size) != 1) {
      throw AuthError("google auth: " + source() + ": cannot sign the JWT (RS256)");
    }
    std::string sig(size, '\0');
    if (EVP_DigestSignFinal(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &size) != 1) {
      throw AuthError("google auth: " + source() + ": cannot sign the JWT (RS256)");
    }
    sig.resize(size);
    return sig;
  }

  std::string path_;
  std::string email_;
  std::string key_id_;
  std::string token_uri_;
  std::unique_ptr<EVP_PKEY, PkeyFree> key_;
};

class AuthorizedUserSource final : public CachedSource {
 public:
  AuthorizedUserSource(const Json& file, std::string path, CredentialsOptions options)
      : CachedSource(std::move(options)), path_(std::move(path)) {
    client_id_ = file.at("client_id").get<std::string>();
    client_secret_ = file.at("client_secret").get<std::string>();
    refresh_token_ = file.at("refresh_token").get<std::string>();
    token_uri_ = file.value("token_uri", kDefaultTokenUri);
    quota_project_ = file.value("quota_project_id", "");
  }

  std::string source() const override {
    return "authorized_user file " + path_ + " (token endpoint " + token_uri_ + ")";
  }

  std::string quota_project() const override { return quota_project_; }

 private:
  Token fetch(TimePoint /*now*/) override {
    const std::string form =
        "grant_type=refresh_token&client_id=" + detail::url_encode(client_id_) +
        "&client_secret=" + detail::url_encode(client_secret_) +
        "&refresh_token=" + detail::url_encode(refresh_token_);
    HttpResponse r =
        http_.request("POST", token_uri_, {"Content-Type: application/x-www-form-urlencoded"}, form,
                      options_.timeout);
    return parse_token(r, source());
  }

  std::string path_;
  std::string client_id_;
  std::string client_secret_;
  std::string refresh_token_;
  std::string token_uri_;
  std::string quota_project_;
};

class MetadataSource final : public CachedSource {
 public:
  explicit MetadataSource(CredentialsOptions options)
      : CachedSource(std::move(options)),
        url_(metadata_base(options_) + "instance/service-accounts/default/token") {}

  std::string source() const override { return "metadata server " + url_; }

 private:
  Token fetch(TimePoint /*now*/) override {
    HttpResponse r = http_.request("GET", url_, {"Metadata-Flavor: Google"}, "", options_.timeout);
    return parse_token(r, source());
  }

  std::string url_;
};

}  // namespace

std::shared_ptr<TokenSource> credentials_from_file(const std::string& path,
                                                   CredentialsOptions options) {
  std::ifstream in(path);
  if (!in) throw AuthError("google auth: credentials file " + path + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  Json file;
  try {
    file = Json::parse(text.str());
  } catch (const Json::exception&) {
    throw AuthError("google auth: credentials file " + path + ": not valid JSON");
  }
  const std::string type = file.is_object() ? file.value("type", "") : "";
  try {
    if (type == "service_account") {
      return std::make_shared<ServiceAccountSource>(file, path, std::move(options));
    }
    if (type == "authorized_user") {
      return std::make_shared<AuthorizedUserSource>(file, path, std::move(options));
    }
  } catch (const Json::exception&) {
    throw AuthError("google auth: credentials file " + path + " (" + type +
                    "): a required field is missing or not a string");
  }
  throw AuthError("google auth: credentials file " + path + ": unsupported type \"" +
                  type.substr(0, 40) + "\" (expected service_account or authorized_user)");
}

std::shared_ptr<TokenSource> metadata_credentials(CredentialsOptions options) {
  return std::make_shared<MetadataSource>(std::move(options));
}

std::shared_ptr<TokenSource> google_default_credentials(CredentialsOptions options) {
  std::string file = options.credentials_file;
  if (file.empty()) file = env("GOOGLE_APPLICATION_CREDENTIALS");
  if (!file.empty()) {
    try {
      return credentials_from_file(file, std::move(options));
    } catch (const AuthError& e) {
      throw AuthError(std::string(e.what()) + " [from GOOGLE_APPLICATION_CREDENTIALS]");
    }
  }
  const std::string gcloud_file = well_known_file();
  std::error_code ignored;
  if (!gcloud_file.empty() && std::filesystem::exists(gcloud_file, ignored)) {
    try {
      return credentials_from_file(gcloud_file, std::move(options));
    } catch (const AuthError& e) {
      throw AuthError(std::string(e.what()) + " [gcloud's application default credentials]");
    }
  }
  return metadata_credentials(std::move(options));
}

std::string metadata_project_id(const CredentialsOptions& options) {
  const std::string url = metadata_base(options) + "project/project-id";
  HttpClient http;
  HttpResponse r = http.request("GET", url, {"Metadata-Flavor: Google"}, "", options.timeout);
  if (r.status != 200 || r.body.empty()) {
    throw AuthError("google auth: metadata server " + url + ": " + describe_failure(r));
  }
  return r.body;
}

}  // namespace idempotency::auth
