// Keys are customer data: feed a recognisable key through every path that logs or throws
// and prove it never appears in a log line or a what().
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/guard.h"
#include "idempotency/key.h"
#include "idempotency/memory_lock.h"
#include "idempotency/once.h"
#include "support/faulty_backend.h"
#include "support/log_capture.h"

namespace idempotency::testing {
// A result type whose stored bytes can never be read back: the `stored_result_unreadable` path.
struct Unreadable {};

}  // namespace idempotency::testing

template <>
struct idempotency::Codec<idempotency::testing::Unreadable> {
  static std::string encode(const idempotency::testing::Unreadable&) { return "x"; }
  static idempotency::testing::Unreadable decode(std::string_view) {
    throw std::runtime_error("unreadable");
  }
};

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kSecretKey = "orders:secret-123";
constexpr const char* kSecret = "secret-123";

std::string what_of(auto&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

TEST(KeyPrivacy, NoLogLineOrExceptionEverContainsTheKey) {
  LogCapture logs;
  auto clock = std::make_shared<ManualClock>();
  InMemoryLock store(BackendOptions{.ttl = milliseconds(1000), .clock = clock});
  FaultyBackend backend(store);
  std::string texts;

  // Duplicate and InProgress.
  { auto held = lock(kSecretKey, backend); }
  texts += what_of([&] { (void)lock(kSecretKey, backend); });
  {
    auto live = mutex("orders:secret-123:m", backend);
    texts += what_of([&] { (void)mutex("orders:secret-123:m", backend); });
  }
  // complete failing, fenced out, release failing.
  backend.fail_complete = true;
  { auto held = lock("orders:secret-123:a", backend); }
  backend.fail_complete = false;
  backend.fence_out_complete = true;
  { auto held = lock("orders:secret-123:b", backend); }
  backend.fence_out_complete = false;
  backend.fail_release = true;
  texts += what_of([&] {
    auto held = lock("orders:secret-123:c", backend);
    throw std::runtime_error("work failed");
  });
  backend.fail_release = false;
  // Store errors, oversize keys, the sizing warning.
  backend.fail_claim = true;
  texts += what_of([&] { (void)lock(kSecretKey, backend); });
  backend.fail_claim = false;
  texts += what_of([&] { (void)lock(std::string(kSecretKey) + std::string(2000, 'x'), backend); });
  // An unknown outcome, a mutex asked to complete, a stored result that cannot be read.
  texts += what_of([&] {
    (void)once("orders:secret-123:u", backend,
               []() -> std::string { throw OutcomeUnknown("went silent"); });
  });
  {
    auto serialized = mutex("orders:secret-123:m2", backend);
    (void)serialized.complete();
  }
  { lock("orders:secret-123:r", backend).complete("receipt"); }
  (void)once("orders:secret-123:r", backend, [] { return Unreadable{}; });

  EXPECT_GE(logs.count("outcome_unknown"), 1);
  EXPECT_GE(logs.count("mutex_complete_refused"), 1);
  EXPECT_GE(logs.count("stored_result_unreadable"), 1);

  EXPECT_GE(logs.count("complete_failed"), 1);
  EXPECT_GE(logs.count("fenced_out"), 1);
  EXPECT_GE(logs.count("release_failed"), 1);
  EXPECT_GE(logs.count("sizing_invariant"), 1);
  const std::string all = logs.all_text() + texts;
  EXPECT_THAT(all, Not(HasSubstr(kSecret)));
  EXPECT_THAT(logs.all_text(), HasSubstr(key_fingerprint(kSecretKey + std::string(":a"))));
}

TEST(KeyPrivacy, TheFingerprintIsStableShortAndNotTheKey) {
  EXPECT_EQ(key_fingerprint(kSecretKey), key_fingerprint(kSecretKey));
  EXPECT_EQ(key_fingerprint(kSecretKey).size(), 12U);
  EXPECT_NE(key_fingerprint(kSecretKey), key_fingerprint("orders:secret-124"));
  // SHA-256("abc") starts ba7816bf8f01: the fingerprint is a standard hash, reproducible by
  // an operator with sha256sum.
  EXPECT_EQ(key_fingerprint("abc"), "ba7816bf8f01");
}

TEST(KeyPrivacy, KeyValidationMessagesNameTheProblemNotTheKey) {
  EXPECT_THAT(what_of([] { validate_key(""); }), HasSubstr("empty"));
  EXPECT_THAT(
      what_of([] { validate_key(std::string(kSecretKey) + std::string(kMaxKeyBytes, 'x')); }),
      ::testing::AllOf(HasSubstr("limit"), Not(HasSubstr(kSecret))));
}

// Issue 11, defect 6: seed 2 requires a non-blank key.
TEST(KeyValidation, ABlankKeyIsRejectedWithAMessageThatNamesTheProblem) {
  for (const std::string& blank : std::vector<std::string>{" ", "   ", "\t", " \r\n", "\v\f \t"}) {
    SCOPED_TRACE("blank key of " + std::to_string(blank.size()) + " bytes");
    EXPECT_THAT(what_of([&] { validate_key(blank); }), HasSubstr("blank"));
  }
  // Keys are bytes: anything else is an ordinary key, padding and non-ASCII spaces included.
  for (const std::string& key :
       std::vector<std::string>{" k ", "\t0", std::string("\0", 1), "\xc2\xa0"}) {
    EXPECT_NO_THROW(validate_key(key));
  }
}

TEST(KeyValidation, EveryEntryPointRefusesABlankKeyBeforeAnyStoreCall) {
  InMemoryLock store(BackendOptions{});
  FaultyBackend backend(store);
  EXPECT_THROW((void)backend.claim("  ", milliseconds(1000)), std::invalid_argument);
  EXPECT_THROW((void)lock("\t", backend), std::invalid_argument);
  EXPECT_THROW((void)mutex(" \n", backend), std::invalid_argument);
  EXPECT_EQ(backend.claims.load(), 0);
}

}  // namespace
}  // namespace idempotency::testing
