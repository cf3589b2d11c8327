// UpstreamPool: the two entry points to the one exchange. forward() runs it on the calling
// thread's own io_context until it completes; forward_async() starts it on the caller's
// io_context (on a strand of its own when several threads run it) and hands the reply to a
// callback.
#include "upstream_pool.h"

#include <openssl/ssl.h>

#include <atomic>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "upstream_internal.h"

namespace idempotency::gateway {
namespace {

namespace asio = upstream_detail::asio;
namespace ssl = upstream_detail::ssl;
using upstream_detail::Clock;
using upstream_detail::one_line;

std::atomic<std::uint64_t> next_pool_id{1};

}  // namespace

UpstreamPool::UpstreamPool(UpstreamUrl url, UpstreamOptions options) {
  auto impl = std::make_shared<Impl>();
  impl->id = next_pool_id.fetch_add(1, std::memory_order_relaxed);
  impl->url = std::move(url);
  impl->options = options;
  impl->origin = upstream_detail::parse_origin(impl->url.origin);
  if (!impl->origin.valid) {
    impl->setup_error = "the upstream URL is not valid";
  } else if (impl->origin.tls) {
    try {
      auto& context = impl->tls.emplace(ssl::context::tls_client);
      SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION);
      boost::system::error_code ec;
      context.set_default_verify_paths(ec);
      if (!ec) context.set_verify_mode(ssl::verify_peer, ec);
      if (ec) impl->setup_error = "TLS setup: " + one_line(ec.message());
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      impl->tls.reset();
      impl->setup_error = std::string("TLS setup: ") + one_line(e.what());
    }
  }
  impl_ = std::move(impl);
}

UpstreamPool::~UpstreamPool() = default;

UpstreamReply UpstreamPool::forward(const pubsub::PushRequest& request,
                                    std::optional<std::int64_t> fence) const {
  const auto start = Clock::now();
  asio::io_context& io = upstream_detail::thread_io();
  std::optional<UpstreamReply> reply;
  // Borrowed: this call outlives the exchange.
  Impl::exchange(impl_,
                 std::shared_ptr<const pubsub::PushRequest>(std::shared_ptr<void>(), &request),
                 fence, io, io.get_executor(), start, Impl::OnBadAlloc::kThrow, Impl::Begin::kNow,
                 /*on_strand=*/false, [&reply](UpstreamReply r) { reply = std::move(r); });
  // Only this thread runs `io`, and only here: it runs until this exchange is over (handlers
  // an earlier exchange left behind, such as a cancelled watchdog's, run on the way). A
  // std::bad_alloc in a step propagates out of run_one().
  while (!reply) {
    if (io.stopped()) io.restart();
    io.run_one();
  }
  return std::move(*reply);
}

void UpstreamPool::forward_async(std::shared_ptr<const pubsub::PushRequest> request,
                                 std::optional<std::int64_t> fence, asio::io_context& io,
                                 std::function<void(UpstreamReply)> done,
                                 LoopThreads threads) const {
  const auto start = Clock::now();
  // The exchange's steps and its watchdog must never run at once: a strand of its own when
  // several threads run `io` (a strand is an allocation and a lock per exchange, so not when
  // one does).
  asio::any_io_executor executor = threads == LoopThreads::kOne
                                       ? asio::any_io_executor(io.get_executor())
                                       : asio::any_io_executor(asio::make_strand(io));
  // Set up here (so a std::bad_alloc is the caller's, as before), started from the executor:
  // `done` is never called before this returns.
  Impl::exchange(impl_, std::move(request), fence, io, executor, start, Impl::OnBadAlloc::kReply,
                 Impl::Begin::kPosted, /*on_strand=*/threads != LoopThreads::kOne, std::move(done));
}

}  // namespace idempotency::gateway
