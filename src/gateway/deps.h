// GatewayDeps: what every request-handling mode shares, built once by main().
//
// Thread safety: a plain aggregate of shareable, thread-safe parts.
#pragma once

#include <boost/asio/io_context.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "config.h"
#include "idempotency/backend.h"
#include "idempotency/pubsub/idempotent_async.h"
#include "idempotency/pubsub/message.h"
#include "metrics.h"
#include "upstream_pool.h"

namespace idempotency::gateway {

/// Authenticate returns a one-line reason to refuse a request with 401, or nothing.
using Authenticate = std::function<std::optional<std::string>(const pubsub::PushRequest&)>;

struct GatewayDeps {
  /// The store, already wrapped in a MeteredBackend.
  std::shared_ptr<LockBackend> backend;
  std::shared_ptr<const UpstreamPool> upstream;
  std::shared_ptr<Metrics> metrics;
  /// Empty when OIDC is off.
  Authenticate authenticate;
  /// The HTTP server's event loop, where upstream exchanges run.
  std::shared_ptr<boost::asio::io_context> loop;
  /// Runs work that may block (store calls, the idempotency-key mode) on the worker pool.
  pubsub::RunBlocking run_blocking;
  /// The pushes not yet finished (pubsub mode), their completes after the ack included:
  /// waited for before the store and the workers go.
  std::shared_ptr<pubsub::PendingDeliveries> pending_deliveries;
};

}  // namespace idempotency::gateway
