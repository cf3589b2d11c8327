// ForwardingBackend: a decorator that overrides nothing still reaches every operation of the
// backend it wraps, extend, wait_for_change and stored_records included, and an owned backend lives
// as long as its decorator. A backend that cannot read its records back says so.
#include "idempotency/forwarding_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <stop_token>

#include "idempotency/errors.h"
#include "idempotency/memory_lock.h"
#include "support/claim_matchers.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;

// No claim here is meant to lapse: a lease far longer than any pause between two calls
// (real time, TSan), so that "held" and "completed" never depend on how quickly they follow.
constexpr milliseconds kLease = std::chrono::minutes(1);

// A memory store that says when it is asked to wait, instead of sleeping as the default does:
// the stand-in for a Redis or PostgreSQL backend that wakes on a notification.
class NotifyingStore final : public ForwardingBackend {
 public:
  NotifyingStore() : ForwardingBackend(std::make_shared<InMemoryLock>()) {}
  std::atomic<int> waits{0};

 protected:
  void do_wait_for_change(std::string_view, milliseconds, const std::stop_token&) override {
    ++waits;
  }
};

// A decorator that changes nothing.
class Plain final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
};

TEST(ForwardingBackend, ADecoratorThatOverridesNothingForwardsEveryOperation) {
  NotifyingStore store;
  Plain decorated(store);
  EXPECT_EQ(decorated.ttl(), store.ttl());
  Claim c = won(decorated.claim("k", kLease));
  held(store.claim("k", kLease));
  EXPECT_TRUE(decorated.complete(c, std::string("r")));
  EXPECT_EQ(done(store.claim("k", kLease)).result, std::optional<std::string>("r"));
  Claim other = won(decorated.claim("other", kLease));
  const auto extended = decorated.extend(other, std::chrono::hours(1));
  ASSERT_TRUE(extended.has_value());
  EXPECT_EQ(held(store.claim("other", kLease)).lease_expiry, *extended);
  decorated.release(other);
  EXPECT_EQ(won(store.claim("other", kLease)).fence, other.fence + 2);
  EXPECT_EQ(decorated.stored_records(), std::optional<std::size_t>(2));
  EXPECT_EQ(decorated.inspect("k"), store.inspect("k"));
  EXPECT_EQ(decorated.inspect("k")->state, RecordState::kDone);
  EXPECT_EQ(decorated.purge_expired(), 0U);
  // A one-hour wait returns at once: the wrapped store's wait was called, not the default
  // sleep.
  decorated.wait_for_change("k", std::chrono::hours(1), std::stop_token{});
  EXPECT_EQ(store.waits.load(), 1);
}

// A backend that implements only the protocol, as a user's own may.
class ProtocolOnly final : public LockBackend {
 public:
  ProtocolOnly() : LockBackend(BackendOptions{}) {}

 protected:
  ClaimResult do_claim(std::string_view, milliseconds, const ClaimRequest&) override {
    return HeldByOther{};
  }
  bool do_complete(const Claim&, std::optional<std::string>) override { return false; }
  void do_release(const Claim&) override {}
  std::optional<TimePoint> do_extend(const Claim&, milliseconds) override { return std::nullopt; }
  std::size_t do_purge_expired() override { return 0; }
};

TEST(ForwardingBackend, ABackendWithoutInspectionSaysSoThroughItsDecorators) {
  ProtocolOnly bare;
  Plain decorated(bare);
  EXPECT_THROW((void)bare.inspect("k"), NotInspectable);
  EXPECT_THROW((void)decorated.inspect("k"), NotInspectable);
  EXPECT_THROW((void)decorated.inspect(""), std::invalid_argument) << "validated first";
}

TEST(ForwardingBackend, AnOwnedBackendLivesAsLongAsItsDecorator) {
  auto inner = std::make_shared<InMemoryLock>();
  std::weak_ptr<InMemoryLock> watch = inner;
  auto decorated = std::make_unique<Plain>(std::move(inner));
  EXPECT_FALSE(watch.expired());
  Claim c = won(decorated->claim("k", kLease));
  EXPECT_TRUE(decorated->complete(c));
  decorated.reset();
  EXPECT_TRUE(watch.expired());
  EXPECT_THROW(Plain(std::shared_ptr<LockBackend>()), std::invalid_argument);
}

}  // namespace
}  // namespace idempotency::testing
