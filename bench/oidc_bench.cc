// oidc_bench: what OidcVerifier::verify() costs a push, for a token it has not verified before
// and for one it has (Pub/Sub sends the same token for up to an hour). bench/run.sh runs it in
// the throughput part; it prints one JSON line per case.
//
//   oidc_bench [SECONDS]
//
// The tokens are RS256 over a 2048-bit key, as Google's, with Pub/Sub's claims; the key set is
// a file. "fresh" cycles through more distinct tokens than the verifier remembers, so every
// call checks a signature; "repeated" sends one token throughout.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "idempotency/oidc.h"
#include "test_tokens.h"

namespace {

using idempotency::OidcOptions;
using idempotency::OidcVerifier;
using idempotency::pubsub::PushRequest;
using Clock = std::chrono::steady_clock;

constexpr char kAudience[] = "https://push.example.com/handler";
constexpr char kEmail[] = "pusher@proj.iam.gserviceaccount.com";
constexpr int kFreshTokens = 256;  // more than the verifier remembers (64)

// Calls verify() on `requests` in turn for `seconds`; every call must pass. Prints the rate.
void measure(const char* name, const OidcVerifier& verifier,
             const std::vector<PushRequest>& requests, double seconds) {
  std::size_t calls = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    for (int i = 0; i < 64; ++i, ++calls) {
      if (auto reason = verifier.verify(requests[calls % requests.size()])) {
        std::fprintf(stderr, "oidc_bench: %s: refused: %s\n", name, reason->c_str());
        std::exit(1);
      }
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "{\"kind\":\"oidc\",\"tokens\":\"%s\",\"calls\":%zu,\"seconds\":%.3f,"
      "\"us_per_verify\":%.3f}\n",
      name, calls, elapsed, elapsed * 1e6 / static_cast<double>(calls));
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  const idempotency::testing::TestKey key;
  const std::string jwks_path = "/tmp/oidc_bench_" + std::to_string(getpid()) + ".json";
  std::ofstream(jwks_path) << idempotency::testing::jwks({{"kid-1", &key}});
  const OidcVerifier verifier(
      OidcOptions{.audience = kAudience, .allowed_emails = {kEmail}, .jwks_file = jwks_path});

  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  std::vector<PushRequest> fresh;
  for (int i = 0; i < kFreshTokens; ++i) {
    const nlohmann::json header = {{"alg", "RS256"}, {"kid", "kid-1"}, {"typ", "JWT"}};
    const nlohmann::json claims = {{"aud", kAudience},
                                   {"azp", std::to_string(1000000 + i)},
                                   {"email", kEmail},
                                   {"email_verified", true},
                                   {"exp", now + 3540},
                                   {"iat", now - 60},
                                   {"iss", "https://accounts.google.com"},
                                   {"sub", std::to_string(1000000 + i)}};
    fresh.push_back(
        idempotency::testing::bearer_request(idempotency::testing::mint(key, header, claims)));
  }
  const std::vector<PushRequest> repeated = {fresh.front()};
  measure("fresh", verifier, fresh, seconds);
  measure("repeated", verifier, repeated, seconds);
  std::remove(jwks_path.c_str());
  return 0;
}
