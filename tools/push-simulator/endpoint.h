// Endpoint: one push endpoint, reached over the gateway's UpstreamPool (Boost.Beast; keep-alive
// connections with TCP_NODELAY, each request written in one go).
//
// Thread safety: send() runs on the io_context it is given; the simulator has one thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "idempotency/pubsub/message.h"
#include "upstream_pool.h"

namespace idempotency::push_sim {

/// An endpoint URL split: `origin` scheme://host[:port], `target` path and query ("/" at least).
struct EndpointUrl {
  std::string origin;
  std::string target;
};

/// split_endpoint_url() checks an http(s) URL and splits it. Throws std::invalid_argument with a
/// one-line reason.
[[nodiscard]] EndpointUrl split_endpoint_url(const std::string& url);

/// What one request got: the status when an answer came, else a one-line error.
struct AttemptResult {
  std::optional<int> status;
  std::string error;
};

/// Endpoint sends push requests to one URL.
class Endpoint {
 public:
  /// Endpoint() connects lazily; `request_timeout` bounds the whole exchange (connect, write,
  /// read): when it passes the connection is closed and the request ends without an answer, as
  /// Pub/Sub's push request ends at the ack deadline. Throws std::invalid_argument for a bad URL.
  Endpoint(const std::string& url, std::chrono::milliseconds connect_timeout,
           std::chrono::milliseconds request_timeout, std::size_t max_idle);

  /// target() is the request target every request to this endpoint uses.
  [[nodiscard]] const std::string& target() const { return url_.target; }

  /// send() POSTs `request` and calls `done` once, on a thread running `io`, with the answer or
  /// the error. Never throws but std::bad_alloc.
  void send(std::shared_ptr<const pubsub::PushRequest> request, boost::asio::io_context& io,
            std::function<void(AttemptResult)> done) const;

 private:
  EndpointUrl url_;
  gateway::UpstreamPool pool_;
};

}  // namespace idempotency::push_sim
