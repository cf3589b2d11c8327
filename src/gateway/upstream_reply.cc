// The replies an exchange ends with, from how far the request got: provably not acted on
// (kNotSent), maybe acted on (kNoAnswer), or the response as read, with what the client will not
// pass on replaced or dropped. Apart from the exchange's steps (upstream_exchange.cc), which
// only decide when to call these.
#include <string>
#include <utility>

#include "upstream_internal.h"

namespace idempotency::gateway::upstream_detail {

namespace {

// The valid statuses (RFC 9110 §15); Beast's parser reads any three digits.
constexpr int kMinStatus = 100;
constexpr int kMaxStatus = 599;

}  // namespace

UpstreamReply not_sent(std::string error) {
  UpstreamReply reply;
  reply.kind = UpstreamReply::Kind::kNotSent;
  reply.error = std::move(error);
  return reply;
}

UpstreamReply no_answer(std::string error) {
  UpstreamReply reply;
  reply.kind = UpstreamReply::Kind::kNoAnswer;
  reply.error = std::move(error);
  return reply;
}

// Plain TCP reports exactly what the kernel took (upstream_internal.h says the rest).
UpstreamReply write_failed(const beast::error_code& ec, std::size_t written, bool tls,
                           bool timed_out, bool& maybe_sent) {
  if (!tls && written == 0) {
    maybe_sent = false;
    return not_sent(timed_out ? "timed out before the request was written"
                              : "write: " + one_line(ec.message()));
  }
  return no_answer(timed_out ? "timed out writing the request"
                             : "the connection broke while writing: " + one_line(ec.message()));
}

UpstreamReply read_reply(ResponseParser& parser, const beast::error_code& ec, bool timed_out) {
  if (!parser.is_header_done() && ec != http::error::body_limit) {
    if (timed_out) return no_answer("timed out waiting for the response");
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset) {
      return no_answer("the connection closed before a response: " + one_line(ec.message()));
    }
    return no_answer("no valid HTTP response: " + one_line(ec.message()));
  }
  UpstreamReply reply;
  reply.response = std::move(parser.response());
  if (const int status = reply.response.status; status < kMinStatus || status > kMaxStatus) {
    // RFC 9110 §15: a status outside 100..599 is invalid, and a client treats it as a server
    // error. Passed on, no server could frame it; taken for a success or a mere no-answer, it
    // would be stored, or hold the key for a whole lease.
    reply.response = {.status = 502,
                      .headers = {{"Content-Type", "text/plain; charset=utf-8"}},
                      .body = "the upstream answered with an invalid status code\n"};
    reply.error = "the upstream answered with status " + std::to_string(status);
    return reply;
  }
  drop_hop_by_hop(reply.response);
  if (!ec && parser.foreign_coding() && !reply.response.body.empty()) {
    // De-chunked, the body is still in the other coding, and its name went with the field.
    std::string().swap(reply.response.body);
    reply.truncated = true;
    reply.foreign_coding = true;
    reply.error = "the response body came in a transfer coding besides chunked";
    return reply;
  }
  if (ec) {
    // The status and header arrived, so the upstream answered; the body did not all come.
    std::string().swap(reply.response.body);  // its memory too
    reply.truncated = true;
    if (ec != http::error::body_limit) {
      reply.error = timed_out ? "timed out reading the response body"
                              : "the response body broke off: " + one_line(ec.message());
    }
  }
  return reply;
}

}  // namespace idempotency::gateway::upstream_detail
