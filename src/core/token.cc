#include "token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <string.h>  // explicit_bzero: OPENSSL_cleanse costs three times as much per token
#include <sys/random.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <new>
#include <string>

#include "idempotency/detail/base64.h"
#include "idempotency/errors.h"

namespace idempotency::detail {

namespace {

// 15 characters of 6 random bits each (90 bits) from 12 bytes of the stream: a string that
// short is stored inside std::string (no heap block), and a claim copies its token into the
// operation, the record and its answer. 90 bits keep two live claims of one key apart: their
// tokens meet with a chance of 2^-90.
constexpr std::size_t kTokenBytes = 12;
constexpr std::size_t kTokenChars = 15;
constexpr std::size_t kKeyBytes = 32;       // a ChaCha20 key
constexpr std::size_t kPoolBytes = 4096;    // tokens handed out per refill: 341
constexpr unsigned kRefillsPerSeed = 1024;  // a fresh key from the kernel every 4 MiB of tokens

// Bumped in a forked child, whose copy of a generator holds its parent's key and unused bytes.
std::atomic<unsigned> fork_generation{0};

// ChaCha20 of zeros is its keystream; encrypted in one call per refill.
const std::array<unsigned char, kPoolBytes + kKeyBytes> kZeros{};

void fill_from_kernel(unsigned char* out, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::getrandom(out, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("claim token: getrandom failed");
    out += n;
    size -= static_cast<std::size_t>(n);
  }
}

// One thread's token source: a ChaCha20 keystream keyed from the kernel (getrandom), drawn
// 4 KiB at a time. Each refill also draws the next key and re-keys at once ("fast key
// erasure"), so the state left in memory cannot recompute bytes already handed out. Nothing
// here is shared between threads, so no lock is taken: OpenSSL's RAND_bytes takes five
// library-wide locks per call. OpenSSL supplies the cipher; where it has no ChaCha20 (a
// FIPS-only configuration), the pool is refilled from RAND_bytes instead.
class TokenGenerator {
 public:
  TokenGenerator() : ctx_(EVP_CIPHER_CTX_new()) {
    if (ctx_ == nullptr) throw std::bad_alloc();
  }
  ~TokenGenerator() {
    EVP_CIPHER_CTX_free(ctx_);
    OPENSSL_cleanse(stream_.data(), stream_.size());
  }
  TokenGenerator(const TokenGenerator&) = delete;
  TokenGenerator& operator=(const TokenGenerator&) = delete;

  // The next kTokenBytes never handed out before, in this process or (after a fork) its
  // parent. The caller wipes them once copied.
  unsigned char* take() {
    const unsigned generation = fork_generation.load(std::memory_order_relaxed);
    if (generation != generation_ || refills_ == kRefillsPerSeed) seed(generation);
    if (used_ + kTokenBytes > kPoolBytes) refill();
    unsigned char* out = stream_.data() + used_;
    used_ += kTokenBytes;
    return out;
  }

 private:
  void seed(unsigned generation) {
    std::array<unsigned char, kKeyBytes> key{};
    fill_from_kernel(key.data(), key.size());
    keyed_ = EVP_EncryptInit_ex2(ctx_, EVP_chacha20(), key.data(), kZeros.data(), nullptr) == 1;
    OPENSSL_cleanse(key.data(), key.size());
    generation_ = generation;
    refills_ = 0;
    used_ = kPoolBytes;  // whatever is left came from the old key (or the parent's)
  }

  void refill() {
    int produced = 0;
    if (!keyed_) {
      if (RAND_bytes(stream_.data(), static_cast<int>(kPoolBytes)) != 1) {
        throw Error("claim token: the system random generator failed");
      }
    } else if (EVP_EncryptUpdate(ctx_, stream_.data(), &produced, kZeros.data(),
                                 static_cast<int>(stream_.size())) != 1 ||
               static_cast<std::size_t>(produced) != stream_.size() ||
               EVP_EncryptInit_ex2(ctx_, nullptr, stream_.data() + kPoolBytes, kZeros.data(),
                                   nullptr) != 1) {
      throw Error("claim token: ChaCha20 failed");
    }
    OPENSSL_cleanse(stream_.data() + kPoolBytes, kKeyBytes);  // the key now lives in ctx_ only
    used_ = 0;
    ++refills_;
  }

  EVP_CIPHER_CTX* ctx_;
  bool keyed_ = false;
  std::array<unsigned char, kPoolBytes + kKeyBytes> stream_{};  // the pool, then the next key
  std::size_t used_ = kPoolBytes;
  unsigned generation_ = 0;
  unsigned refills_ = kRefillsPerSeed;  // seeds on first use
};

}  // namespace

std::string new_claim_token() {
  static const int registered =
      ::pthread_atfork(nullptr, nullptr, [] { fork_generation.fetch_add(1); });
  (void)registered;
  thread_local TokenGenerator generator;
  unsigned char* bytes = generator.take();
  // Encoded on the stack, then the first 15 characters (the 16th is dropped): a string of the
  // encoder's whole output would be too long for std::string's own buffer.
  std::array<char, base64_buffer_size(kTokenBytes)> text;
  (void)base64url_encode_into(text.data(), {reinterpret_cast<const char*>(bytes), kTokenBytes});
  std::string token(text.data(), kTokenChars);
  // Neither the handed-out bytes nor their text linger in memory.
  ::explicit_bzero(bytes, kTokenBytes);
  ::explicit_bzero(text.data(), text.size());
  return token;
}

}  // namespace idempotency::detail
