// OidcVerifier against a JWKS file: signatures, algorithms, claims, malformed tokens, reasons.
#include <openssl/evp.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "idempotency/clock.h"
#include "idempotency/oidc.h"
#include "support/temp_dir.h"
#include "test_tokens.h"

namespace idempotency {
namespace {

using nlohmann::json;
using testing::base64url;
using testing::bearer_request;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using testing::TestKey;

constexpr char kAudience[] = "https://push.example.com/handler?token=aud-secret-7f3a";
constexpr char kEmail[] = "pusher-9d21@proj-x.iam.gserviceaccount.com";
constexpr char kKid[] = "kid-5e8c41f0";

// One key pair for the whole suite: RSA generation is slow.
const TestKey& signing_key() {
  static const TestKey key;
  return key;
}
const TestKey& other_key() {
  static const TestKey key;
  return key;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

class OidcVerifierTest : public ::testing::Test {
 protected:
  OidcVerifierTest() { write_file(jwks_path_, testing::jwks({{kKid, &signing_key()}})); }

  [[nodiscard]] std::int64_t now() const { return to_millis(clock_->now()) / 1000; }

  [[nodiscard]] OidcOptions options() const {
    return OidcOptions{.audience = kAudience,
                       .allowed_emails = {"someone-else@example.com", kEmail},
                       .jwks_file = jwks_path_,
                       .clock = clock_};
  }

  [[nodiscard]] json header(const std::string& alg = "RS256") const {
    return {{"alg", alg}, {"kid", kKid}, {"typ", "JWT"}};
  }

  // Claims as Pub/Sub sends them, issued a minute ago, good for the rest of the hour.
  [[nodiscard]] json claims() const {
    return {{"aud", kAudience},
            {"azp", "1122334455"},
            {"email", kEmail},
            {"email_verified", true},
            {"exp", now() + 3540},
            {"iat", now() - 60},
            {"iss", "https://accounts.google.com"},
            {"sub", "1122334455"}};
  }

  // A verifier of options() that reads its key set again once it is `max_age` old.
  [[nodiscard]] OidcVerifier verifier_refreshing_every(std::chrono::minutes max_age) const {
    OidcOptions opts = options();
    opts.jwks_max_age = max_age;
    return OidcVerifier(opts);
  }

  // A push carrying a good token, signed with signing_key().
  [[nodiscard]] pubsub::PushRequest good_request() const {
    return bearer_request(testing::mint(signing_key(), header(), claims()));
  }

  [[nodiscard]] std::optional<std::string> verify(const std::string& token) const {
    return verifier_.verify(bearer_request(token));
  }
  [[nodiscard]] std::optional<std::string> verify_claims(const json& claims) const {
    return verify(testing::mint(signing_key(), header(), claims));
  }

  idempotency::testing::TempDir dir_;
  std::string jwks_path_ = dir_.file("jwks.json");
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  OidcVerifier verifier_{options()};
};

TEST_F(OidcVerifierTest, ValidTokenPasses) {
  EXPECT_EQ(verify_claims(claims()), std::nullopt);
  // Again, now from the cache.
  EXPECT_EQ(verify_claims(claims()), std::nullopt);
}

TEST_F(OidcVerifierTest, BothIssuerSpellingsPass) {
  for (const char* issuer : {"https://accounts.google.com", "accounts.google.com"}) {
    json c = claims();
    c["iss"] = issuer;
    EXPECT_EQ(verify_claims(c), std::nullopt) << issuer;
  }
}

TEST_F(OidcVerifierTest, LowercaseBearerSchemeAndAudienceArrayPass) {
  pubsub::PushRequest request;
  request.headers.push_back(
      {"authorization", "bearer  " + testing::mint(signing_key(), header(), claims())});
  EXPECT_EQ(verifier_.verify(request), std::nullopt);
  json c = claims();
  c["aud"] = json::array({"https://other.example.com", kAudience});
  EXPECT_EQ(verify_claims(c), std::nullopt);
}

TEST_F(OidcVerifierTest, FlippedSignatureByteIsRefused) {
  const std::string input = base64url(header().dump()) + "." + base64url(claims().dump());
  std::string signature = signing_key().sign(input, EVP_sha256());
  signature[signature.size() / 2] = static_cast<char>(signature[signature.size() / 2] ^ 0x01);
  EXPECT_EQ(verify(input + "." + base64url(signature)), "signature invalid");
}

TEST_F(OidcVerifierTest, FlippedClaimIsRefused) {
  const std::string token = testing::mint(signing_key(), header(), claims());
  json c = claims();
  c["email"] = "attacker@example.com";
  const std::string signature = token.substr(token.rfind('.'));
  EXPECT_EQ(verify(base64url(header().dump()) + "." + base64url(c.dump()) + signature),
            "signature invalid");
}

TEST_F(OidcVerifierTest, TokenSignedWithAnotherKeyIsRefused) {
  EXPECT_EQ(verify(testing::mint(other_key(), header(), claims())), "signature invalid");
}

TEST_F(OidcVerifierTest, EmptySignatureIsRefused) {
  const std::string token = testing::mint(signing_key(), header(), claims());
  EXPECT_EQ(verify(token.substr(0, token.rfind('.') + 1)), "signature invalid");
}

TEST_F(OidcVerifierTest, WrongAudienceIsRefused) {
  for (const json& aud : {json("https://push.example.com/other"), json(""), json(nullptr),
                          json(std::string(kAudience) + "/"), json::array({"x", "y"})}) {
    json c = claims();
    c["aud"] = aud;
    EXPECT_EQ(verify_claims(c), "audience mismatch") << aud;
  }
  json c = claims();
  c.erase("aud");
  EXPECT_EQ(verify_claims(c), "audience mismatch");
}

TEST_F(OidcVerifierTest, ExpiredTokenIsRefusedAfterTheSkew) {
  const std::string token = testing::mint(signing_key(), header(), claims());
  clock_->advance(std::chrono::seconds(3540 + 59));  // past exp, within the 60 s skew
  EXPECT_EQ(verify(token), std::nullopt);
  clock_->advance(std::chrono::seconds(1));
  EXPECT_EQ(verify(token), "token expired");
  clock_->advance(std::chrono::hours(24));
  EXPECT_EQ(verify(token), "token expired");
}

TEST_F(OidcVerifierTest, HourOldTokenPassesUntilItsExp) {
  json c = claims();
  c["iat"] = now() - 3590;
  c["exp"] = now() + 10;
  EXPECT_EQ(verify_claims(c), std::nullopt);
}

TEST_F(OidcVerifierTest, IssuedInTheFutureBeyondTheSkewIsRefused) {
  json c = claims();
  c["iat"] = now() + 60;
  EXPECT_EQ(verify_claims(c), std::nullopt);  // within the skew
  c["iat"] = now() + 61;
  EXPECT_EQ(verify_claims(c), "token not yet valid");
  c = claims();
  c["nbf"] = now() + 3000;
  EXPECT_EQ(verify_claims(c), "token not yet valid");
}

TEST_F(OidcVerifierTest, MissingOrNonNumericTimesAreMalformed) {
  for (const char* name : {"exp", "iat"}) {
    json c = claims();
    c.erase(name);
    EXPECT_EQ(verify_claims(c), "malformed token") << name;
    c[name] = std::to_string(now());
    EXPECT_EQ(verify_claims(c), "malformed token") << name;
  }
}

TEST_F(OidcVerifierTest, AlgNoneWithEmptySignatureIsRefused) {
  for (const char* alg : {"none", "None", "NONE"}) {
    json h = header(alg);
    EXPECT_EQ(verify(testing::mint_unsigned(h, claims())), "unsupported algorithm") << alg;
  }
  json h = header();
  h.erase("alg");
  EXPECT_EQ(verify(testing::mint_unsigned(h, claims())), "unsupported algorithm");
}

TEST_F(OidcVerifierTest, Hs256WithThePublicKeyAsSecretIsRefused) {
  // The classic key-confusion attack: a verifier that lets the token pick the algorithm
  // would check this HMAC with the (public) RSA key bytes and accept it.
  const std::string pem = signing_key().public_pem();
  ASSERT_THAT(pem, StartsWith("-----BEGIN PUBLIC KEY-----"));
  EXPECT_EQ(verify(testing::mint_hs256(pem, header("HS256"), claims())), "unsupported algorithm");
  const std::string der_ish = signing_key().jwk(kKid)["n"].get<std::string>();
  EXPECT_EQ(verify(testing::mint_hs256(der_ish, header("HS256"), claims())),
            "unsupported algorithm");
}

TEST_F(OidcVerifierTest, OtherRsaAlgorithmsAreRefused) {
  EXPECT_EQ(verify(testing::mint(signing_key(), header("RS512"), claims(), EVP_sha512())),
            "unsupported algorithm");
  EXPECT_EQ(verify(testing::mint(signing_key(), header("RS384"), claims(), EVP_sha384())),
            "unsupported algorithm");
  // The right signature under a header that lies about the algorithm changes nothing.
  EXPECT_EQ(verify(testing::mint(signing_key(), header("PS256"), claims())),
            "unsupported algorithm");
  // An RS512 signature presented as RS256 fails the RS256 check.
  EXPECT_EQ(verify(testing::mint(signing_key(), header("RS256"), claims(), EVP_sha512())),
            "signature invalid");
}

TEST_F(OidcVerifierTest, WrongIssuerIsRefused) {
  for (const json& iss : {json("https://evil.example.com"), json("https://accounts.google.com/"),
                          json("http://accounts.google.com"), json(""), json(42)}) {
    json c = claims();
    c["iss"] = iss;
    EXPECT_EQ(verify_claims(c), "issuer not Google") << iss;
  }
  json c = claims();
  c.erase("iss");
  EXPECT_EQ(verify_claims(c), "issuer not Google");
}

TEST_F(OidcVerifierTest, EmailOutsideTheAllowListIsRefused) {
  for (const json& email :
       {json("attacker@example.com"), json(std::string(kEmail) + "."), json("PUSHER-9D21@proj-x"),
        json(""), json(nullptr), json::array({kEmail})}) {
    json c = claims();
    c["email"] = email;
    EXPECT_EQ(verify_claims(c), "email not allowed") << email;
  }
  json c = claims();
  c.erase("email");
  EXPECT_EQ(verify_claims(c), "email not allowed");
}

TEST_F(OidcVerifierTest, UnverifiedEmailIsRefused) {
  for (const json& verified : {json(false), json("false"), json(1), json(nullptr)}) {
    json c = claims();
    c["email_verified"] = verified;
    EXPECT_EQ(verify_claims(c), "email not verified") << verified;
  }
  json c = claims();
  c.erase("email_verified");
  EXPECT_EQ(verify_claims(c), "email not verified");
  c["email_verified"] = "true";  // the spelling of older Google tokens
  EXPECT_EQ(verify_claims(c), std::nullopt);
}

TEST_F(OidcVerifierTest, MissingOrOtherAuthorizationIsNoBearerToken) {
  pubsub::PushRequest request;
  EXPECT_EQ(verifier_.verify(request), "no bearer token");
  const std::string token = testing::mint(signing_key(), header(), claims());
  for (const std::string& value :
       {std::string("Basic dXNlcjpwYXNz"), std::string("Bearer"), std::string("Bearer "),
        std::string("Bearer   "), "Bearer" + token, "Token " + token, "Bearer " + token + " x",
        std::string()}) {
    request.headers = {{"Authorization", value}};
    EXPECT_EQ(verifier_.verify(request), "no bearer token") << value;
  }
}

TEST_F(OidcVerifierTest, MalformedTokensAreRefused) {
  const std::string token = testing::mint(signing_key(), header(), claims());
  const std::string h = token.substr(0, token.find('.'));
  const std::string signature = token.substr(token.rfind('.') + 1);
  const std::string c = base64url(claims().dump());
  const std::vector<std::string> malformed = {
      h + "." + c,                          // two segments
      token + "." + signature,              // four segments
      "..",                                 // three empty segments
      h + "=." + c + "." + signature,       // padding
      h + "." + c + "." + signature + "*",  // outside the alphabet
      h + "." + c + "+." + signature,       // standard, not url, alphabet
      h.substr(0, 5) + "\n" + h.substr(5) + "." + c + "." + signature,  // whitespace
      h + "." + c + "x." + signature,                                   // a length no encoding has
      base64url("{not json") + "." + c + "." + signature,
      base64url("[\"RS256\"]") + "." + c + "." + signature,  // JSON, not an object
      h + "." + base64url("\"claims\"") + "." + signature,
      h + "." + base64url("") + "." + signature,
      token + std::string(20000, 'A'),  // oversized
  };
  for (const std::string& bad : malformed) {
    EXPECT_EQ(verify(bad), "malformed token") << bad.substr(0, 200);
  }
}

TEST_F(OidcVerifierTest, CriticalHeaderIsRefused) {
  json h = header();
  h["crit"] = json::array({"exp"});
  EXPECT_EQ(verify(testing::mint(signing_key(), h, claims())), "malformed token");
}

TEST_F(OidcVerifierTest, MissingOrUnknownKidIsUnknownSigningKey) {
  json h = header();
  h.erase("kid");
  EXPECT_EQ(verify(testing::mint(signing_key(), h, claims())), "unknown signing key");
  h["kid"] = "kid-unknown";
  EXPECT_EQ(verify(testing::mint(signing_key(), h, claims())), "unknown signing key");
}

TEST_F(OidcVerifierTest, KeyRotationInTheFileIsPickedUpAfterTheRefreshInterval) {
  EXPECT_EQ(verify_claims(claims()), std::nullopt);  // loads the file
  write_file(jwks_path_, testing::jwks({{kKid, &signing_key()}, {"kid-new", &other_key()}}));
  json h = header();
  h["kid"] = "kid-new";
  // Within the minute the file is not read again.
  clock_->advance(std::chrono::seconds(59));
  EXPECT_EQ(verify(testing::mint(other_key(), h, claims())), "unknown signing key");
  clock_->advance(std::chrono::seconds(1));
  EXPECT_EQ(verify(testing::mint(other_key(), h, claims())), std::nullopt);
  EXPECT_EQ(verify_claims(claims()), std::nullopt);
}

// A token verified once is not checked against its signature again while the key that checked
// it is still in the key set (Pub/Sub sends one for up to an hour), but everything else about
// it is judged on every use.
TEST_F(OidcVerifierTest, ARepeatedTokenIsJudgedAgainOnEveryUse) {
  const OidcVerifier verifier = verifier_refreshing_every(std::chrono::hours(2));  // > the token
  const auto request = good_request();
  for (int use = 0; use < 3; ++use) EXPECT_EQ(verifier.verify(request), std::nullopt) << use;
  clock_->advance(std::chrono::seconds(3540 + 60));  // exp, plus the skew
  EXPECT_EQ(verifier.verify(request), "token expired");
  EXPECT_EQ(verifier.verify(request), "token expired");
}

TEST_F(OidcVerifierTest, ARepeatedTokenIsRefusedOnceItsKeyLeavesTheKeySet) {
  const OidcVerifier verifier = verifier_refreshing_every(std::chrono::minutes(10));
  const auto request = good_request();
  EXPECT_EQ(verifier.verify(request), std::nullopt);
  write_file(jwks_path_, testing::jwks({{"kid-new", &other_key()}}));
  clock_->advance(std::chrono::minutes(5));  // the key set is not stale yet
  EXPECT_EQ(verifier.verify(request), std::nullopt);
  clock_->advance(std::chrono::minutes(5));  // now it is, and is read again
  EXPECT_EQ(verifier.verify(request), "unknown signing key");
}

// The key set may name another key by the same kid: the token is checked against that one.
TEST_F(OidcVerifierTest, ARepeatedTokenIsCheckedAgainstTheKeyItsKidNowNames) {
  const OidcVerifier verifier = verifier_refreshing_every(std::chrono::minutes(10));
  const auto request = good_request();
  EXPECT_EQ(verifier.verify(request), std::nullopt);
  write_file(jwks_path_, testing::jwks({{kKid, &other_key()}}));
  clock_->advance(std::chrono::minutes(10));
  EXPECT_EQ(verifier.verify(request), "signature invalid");
  // And back: the first key under its kid again, and the token passes.
  write_file(jwks_path_, testing::jwks({{kKid, &signing_key()}}));
  clock_->advance(std::chrono::minutes(10));
  EXPECT_EQ(verifier.verify(request), std::nullopt);
}

// Threads verifying the same tokens at once share what was verified (TSan runs this).
TEST_F(OidcVerifierTest, ThreadsVerifyingTheSameTokensAtOnceGetTheirVerdicts) {
  json wrong_audience = claims();
  wrong_audience["aud"] = "https://elsewhere.example.com/";
  const std::vector<std::pair<pubsub::PushRequest, std::optional<std::string>>> cases = {
      {bearer_request(testing::mint(signing_key(), header(), claims())), std::nullopt},
      {bearer_request(testing::mint(signing_key(), header(), wrong_audience)), "audience mismatch"},
      {bearer_request(testing::mint(other_key(), header(), claims())), "signature invalid"},
  };
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const auto& [request, verdict] = cases[(t + i) % cases.size()];
        if (verifier_.verify(request) != verdict) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(OidcVerifierTest, UnreadableOrUnusableKeyFileIsKeySetUnavailable) {
  OidcOptions opts = options();
  opts.jwks_file = dir_.file("missing.json");
  EXPECT_EQ(
      OidcVerifier(opts).verify(bearer_request(testing::mint(signing_key(), header(), claims()))),
      "key set unavailable: cannot open JWKS file: No such file or directory");

  const std::string token = testing::mint(signing_key(), header(), claims());
  write_file(jwks_path_, "not json");
  EXPECT_EQ(OidcVerifier(options()).verify(bearer_request(token)),
            "key set unavailable: key set is not JSON");
  write_file(jwks_path_, R"({"keys": {}})");
  EXPECT_EQ(OidcVerifier(options()).verify(bearer_request(token)),
            "key set unavailable: key set has no keys array");

  // Keys that are not RS256 signature keys, or too small to trust, are skipped.
  const TestKey small(1024);
  json rs512 = signing_key().jwk(kKid);
  rs512["alg"] = "RS512";
  json encryption = signing_key().jwk(kKid);
  encryption["use"] = "enc";
  json no_kid = signing_key().jwk(kKid);
  no_kid.erase("kid");
  json ec = {{"kty", "EC"}, {"kid", kKid}, {"crv", "P-256"}, {"x", "AA"}, {"y", "AA"}};
  json bad_n = signing_key().jwk(kKid);
  bad_n["n"] = "***";
  const json set = {{"keys", {small.jwk(kKid), rs512, encryption, no_kid, ec, bad_n, 7}}};
  write_file(jwks_path_, set.dump());
  EXPECT_EQ(OidcVerifier(options()).verify(bearer_request(token)),
            "key set unavailable: key set has no usable RS256 key");
}

TEST_F(OidcVerifierTest, KeyWithoutAlgOrUseIsAccepted) {
  json jwk = signing_key().jwk(kKid);
  jwk.erase("alg");
  jwk.erase("use");
  write_file(jwks_path_, json{{"keys", {jwk}}}.dump());
  EXPECT_EQ(OidcVerifier(options()).verify(
                bearer_request(testing::mint(signing_key(), header(), claims()))),
            std::nullopt);
}

TEST_F(OidcVerifierTest, ReasonsAreOneLineAndNameNoTokenContent) {
  std::vector<std::optional<std::string>> reasons;
  const std::string token = testing::mint(signing_key(), header(), claims());
  auto with = [&](const char* name, const json& value) {
    json c = claims();
    c[name] = value;
    return c;
  };
  reasons.push_back(verify_claims(with("aud", "https://wrong.example.com")));
  reasons.push_back(verify_claims(with("iss", "https://evil.example.com")));
  reasons.push_back(verify_claims(with("exp", now() - 3600)));
  reasons.push_back(verify_claims(with("iat", now() + 3600)));
  reasons.push_back(verify_claims(with("email", "intruder-4c1b@evil.example.com")));
  reasons.push_back(verify_claims(with("email_verified", false)));
  reasons.push_back(verify(testing::mint(other_key(), header(), claims())));
  reasons.push_back(verify(testing::mint_unsigned(header("none"), claims())));
  reasons.push_back(verify(testing::mint_hs256("k", header("HS256"), claims())));
  reasons.push_back(verify(token.substr(0, token.rfind('.'))));
  json h = header();
  h["kid"] = "kid-unknown-b7e2";
  reasons.push_back(verify(testing::mint(signing_key(), h, claims())));
  reasons.push_back(verifier_.verify({}));
  OidcOptions opts = options();
  opts.jwks_file = dir_.file("missing.json");
  reasons.push_back(OidcVerifier(opts).verify(bearer_request(token)));

  const std::vector<std::string> secrets = {
      kAudience,     "aud-secret",       "wrong.example.com", kEmail,
      "pusher-9d21", "intruder-4c1b",    "evil.example.com",  kKid,
      "5e8c41f0",    "kid-unknown-b7e2", "missing.json",      dir_.path().string()};
  for (const std::optional<std::string>& reason : reasons) {
    ASSERT_TRUE(reason.has_value());
    EXPECT_THAT(*reason, Not(HasSubstr("\n")));
    EXPECT_THAT(*reason, Not(HasSubstr("\r")));
    EXPECT_FALSE(reason->empty());
    for (const std::string& secret : secrets) {
      EXPECT_THAT(*reason, Not(HasSubstr(secret))) << *reason;
    }
  }
}

TEST(OidcOptionsTest, UnusableOptionsThrow) {
  const OidcOptions good{.audience = "a", .allowed_emails = {"e@x"}, .jwks_file = "/k.json"};
  EXPECT_NO_THROW(OidcVerifier{good});
  OidcOptions longest = good;
  longest.clock_skew = std::chrono::minutes(10);
  longest.jwks_min_refresh = longest.jwks_max_age = std::chrono::hours(24);
  longest.jwks_timeout = std::chrono::minutes(10);
  EXPECT_NO_THROW(OidcVerifier{longest});
  EXPECT_NO_THROW(OidcVerifier(OidcOptions{.audience = "a", .allowed_emails = {"e@x"}}));
  EXPECT_NO_THROW(OidcVerifier(OidcOptions{
      .audience = "a", .allowed_emails = {"e@x"}, .jwks_url = "http://localhost:8080/certs"}));

  std::vector<OidcOptions> bad(14, good);
  bad[0].audience.clear();
  bad[1].allowed_emails.clear();
  bad[2].allowed_emails.push_back("");
  bad[3].jwks_url = "https://example.com/certs";  // both sources
  bad[4].jwks_file.clear();
  bad[4].jwks_url = "http://example.com/certs";  // plain http off loopback
  bad[5].jwks_file.clear();
  bad[5].jwks_url = "file:///etc/passwd";
  bad[6].jwks_file.clear();
  bad[6].jwks_url = "http://localhost.evil.com/certs";
  bad[7].clock_skew = std::chrono::seconds(-1);
  bad[8].jwks_max_age = std::chrono::seconds(0);
  bad[9].jwks_timeout = std::chrono::milliseconds(0);
  // Past the bounds: seconds::max() in milliseconds overflows, and a "never refetch" would
  // have fetched the key set for every made-up kid.
  bad[10].jwks_min_refresh = std::chrono::seconds::max();
  bad[11].jwks_max_age = std::chrono::hours(25);
  bad[12].clock_skew = std::chrono::hours(2);
  bad[13].jwks_timeout = std::chrono::milliseconds::max();
  for (std::size_t i = 0; i < bad.size(); ++i) {
    EXPECT_THROW(OidcVerifier{bad[i]}, std::invalid_argument) << i;
  }
}

}  // namespace
}  // namespace idempotency
