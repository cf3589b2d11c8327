#include "endpoint.h"

#include <stdexcept>
#include <utility>

namespace idempotency::push_sim {

EndpointUrl split_endpoint_url(const std::string& url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    throw std::invalid_argument("the URL must start with http:// or https://");
  }
  const auto slash = url.find_first_of("/?", scheme_end + 3);
  EndpointUrl out{.origin = url.substr(0, slash),
                  .target = slash == std::string::npos ? "/" : url.substr(slash)};
  if (out.target.front() == '?') out.target = "/" + out.target;
  if (out.target.find('#') != std::string::npos) {
    throw std::invalid_argument("the URL must not have a fragment");
  }
  // The gateway's parser checks the scheme, host, port and the absence of credentials.
  (void)gateway::parse_upstream_url(out.origin);
  return out;
}

Endpoint::Endpoint(const std::string& url, std::chrono::milliseconds connect_timeout,
                   std::chrono::milliseconds request_timeout, std::size_t max_idle)
    : url_(split_endpoint_url(url)),
      pool_(gateway::UpstreamUrl{.origin = url_.origin, .base_path = ""},
            gateway::UpstreamOptions{.connect_timeout = connect_timeout,
                                     .timeout = request_timeout,
                                     .max_idle = max_idle}) {}

void Endpoint::send(std::shared_ptr<const pubsub::PushRequest> request, boost::asio::io_context& io,
                    std::function<void(AttemptResult)> done) const {
  pool_.forward_async(
      std::move(request), std::nullopt, io, [done = std::move(done)](gateway::UpstreamReply reply) {
        if (reply.kind == gateway::UpstreamReply::Kind::kResponse) {
          done({.status = reply.response.status, .error = {}});
        } else {
          done({.status = std::nullopt, .error = reply.error.empty() ? "no answer" : reply.error});
        }
      });
}

}  // namespace idempotency::push_sim
