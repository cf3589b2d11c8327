#include "jwt.h"

#include <openssl/evp.h>

#include <algorithm>
#include <memory>
#include <utility>

namespace idempotency::oidc::internal {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const noexcept { EVP_MD_CTX_free(ctx); }
};
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

bool is_base64url(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

// nlohmann parses without exceptions and reports failure as a discarded value.
std::optional<nlohmann::json> decode_json_object(std::string_view segment) {
  std::optional<std::string> text = base64url_decode(segment);
  if (!text) return std::nullopt;
  nlohmann::json value = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!value.is_object()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::string> base64url_decode(std::string_view text) {
  // EVP_DecodeBlock speaks the standard alphabet with padding and skips surrounding
  // whitespace; translate, re-pad, and let nothing else through.
  if (text.size() % 4 == 1 || text.size() > kMaxTokenBytes * 64) return std::nullopt;
  if (!std::all_of(text.begin(), text.end(), is_base64url)) return std::nullopt;
  std::string standard(text);
  std::replace(standard.begin(), standard.end(), '-', '+');
  std::replace(standard.begin(), standard.end(), '_', '/');
  const std::size_t padding = (4 - standard.size() % 4) % 4;
  standard.append(padding, '=');
  if (standard.empty()) return std::string();

  std::string out(standard.size() / 4 * 3, '\0');
  const int written = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(standard.data()),
                                      static_cast<int>(standard.size()));
  if (written < 0 || static_cast<std::size_t>(written) != out.size()) return std::nullopt;
  // EVP_DecodeBlock counts the padding as zero bytes of output.
  out.resize(out.size() - padding);
  return out;
}

std::optional<Jwt> parse_jwt(std::string_view token) {
  if (token.size() > kMaxTokenBytes) return std::nullopt;
  const std::size_t first = token.find('.');
  if (first == std::string_view::npos) return std::nullopt;
  const std::size_t second = token.find('.', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  if (token.find('.', second + 1) != std::string_view::npos) return std::nullopt;

  Jwt jwt;
  jwt.signing_input = token.substr(0, second);
  std::optional<nlohmann::json> header = decode_json_object(token.substr(0, first));
  if (!header) return std::nullopt;
  std::optional<nlohmann::json> claims =
      decode_json_object(token.substr(first + 1, second - first - 1));
  if (!claims) return std::nullopt;
  std::optional<std::string> signature = base64url_decode(token.substr(second + 1));
  if (!signature) return std::nullopt;
  jwt.header = std::move(*header);
  jwt.claims = std::move(*claims);
  jwt.signature = std::move(*signature);
  return jwt;
}

bool verify_rs256(EVP_PKEY* key, std::string_view signing_input, std::string_view signature) {
  if (key == nullptr || signature.empty()) return false;
  MdCtxPtr ctx(EVP_MD_CTX_new());
  if (!ctx) return false;
  // RSA keys default to PKCS#1 v1.5 padding, which is what RS256 means.
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) != 1) return false;
  return EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                          signature.size(),
                          reinterpret_cast<const unsigned char*>(signing_input.data()),
                          signing_input.size()) == 1;
}

}  // namespace idempotency::oidc::internal
