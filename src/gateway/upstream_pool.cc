// UpstreamPool: forward() ties the pieces together — build the request, take an idle
// connection of the calling thread or open one, run the exchange, retry only a request that
// provably never left a dead idle connection.
#include "upstream_pool.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "upstream_internal.h"

namespace idempotency::gateway {
namespace {

namespace http = upstream_detail::http;
namespace ssl = upstream_detail::ssl;
using upstream_detail::build_request;
using upstream_detail::Clock;
using upstream_detail::no_answer;
using upstream_detail::not_sent;
using upstream_detail::one_line;
using upstream_detail::thread_context;
using upstream_detail::ThreadContext;

std::atomic<std::uint64_t> next_pool_id{1};

}  // namespace

UpstreamPool::UpstreamPool(UpstreamUrl url, UpstreamOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->id = next_pool_id.fetch_add(1, std::memory_order_relaxed);
  impl_->url = std::move(url);
  impl_->options = options;
  impl_->origin = upstream_detail::parse_origin(impl_->url.origin);
  if (!impl_->origin.valid) {
    impl_->setup_error = "the upstream URL is not valid";
    return;
  }
  if (impl_->origin.tls) {
    try {
      auto& context = impl_->tls.emplace(ssl::context::tls_client);
      SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION);
      boost::system::error_code ec;
      context.set_default_verify_paths(ec);
      if (!ec) context.set_verify_mode(ssl::verify_peer, ec);
      if (ec) impl_->setup_error = "TLS setup: " + one_line(ec.message());
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      impl_->tls.reset();
      impl_->setup_error = std::string("TLS setup: ") + one_line(e.what());
    }
  }
}

UpstreamPool::~UpstreamPool() = default;

UpstreamReply UpstreamPool::forward(const pubsub::PushRequest& request,
                                    std::optional<std::int64_t> fence) const {
  const auto start = Clock::now();
  const auto deadline = start + impl_->options.timeout;
  const auto connect_deadline =
      start + std::min(impl_->options.connect_timeout, impl_->options.timeout);
  bool maybe_sent = false;
  UpstreamReply reply;
  try {
    http::request<http::string_body> out;
    if (!impl_->setup_error.empty()) {
      reply = not_sent(impl_->setup_error);
    } else if (auto reason = build_request(request, fence, impl_->url, impl_->origin, out)) {
      reply = not_sent(std::move(*reason));
    } else {
      ThreadContext& context = thread_context();
      context.evict(start);
      auto connection = context.take(impl_->id);
      bool retry = connection != nullptr;
      for (;;) {
        if (!connection) {
          if (auto error = impl_->connect(context.ioc, connect_deadline, connection);
              !error.empty()) {
            reply = not_sent(std::move(error));
            break;
          }
        }
        reply =
            impl_->exchange(context.ioc, std::move(connection), out, deadline, retry, maybe_sent);
        if (!retry) break;
      }
    }
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    // Asio reports a failure to create its reactor (no file descriptors left) by throwing.
    reply = maybe_sent ? no_answer(one_line(e.what())) : not_sent(one_line(e.what()));
  }
  reply.elapsed = Clock::now() - start;
  return reply;
}

}  // namespace idempotency::gateway
