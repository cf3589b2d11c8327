// RedisLock's asynchronous claim and complete, on the I/O thread's connection (RedisLock::Impl).
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "idempotency/redis_lock.h"
#include "redis_lock_impl.h"

namespace idempotency {

void RedisLock::do_claim_async(std::string_view key, std::chrono::milliseconds lease,
                               ClaimRequest request, ClaimDone done) {
  if (!impl_->async_capable()) {
    LockBackend::do_claim_async(key, lease, std::move(request), std::move(done));
    return;
  }
  redis_detail::AsyncPipeline& pipeline = impl_->async_pipeline();
  if (impl_->claims_fresh()) {
    impl_->claim_fresh_async(pipeline, std::string(key), lease, request, ttl(), std::move(done));
    return;
  }
  impl_->claim_script_async(pipeline, std::string(key), lease, request, std::move(done));
}

bool RedisLock::do_sends_async() const noexcept { return impl_->async_capable(); }

void RedisLock::do_complete_async(const Claim& claim, std::optional<std::string> result,
                                  CompleteDone done) {
  if (!impl_->async_capable()) {
    LockBackend::do_complete_async(claim, std::move(result), std::move(done));
    return;
  }
  if (impl_->claims_fresh() && claim.fence == 1) {
    impl_->complete_joined(claim, result, std::move(done));
    return;
  }
  impl_->complete_alone(impl_->redis_key(claim.key), std::to_string(claim.fence),
                        optional_arg(result), std::move(done));
}

}  // namespace idempotency
