#include "idempotency_key_mode.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <variant>

#include "idempotency/detail/ascii.h"
#include "idempotency/detail/field_syntax.h"
#include "idempotency/detail/hex.h"
#include "idempotency/detail/lease_keeper.h"
#include "idempotency/detail/sha256.h"
#include "idempotency/errors.h"
#include "idempotency/guard.h"
#include "idempotency/key.h"
#include "idempotency/log.h"

namespace idempotency::gateway {
namespace {

using pubsub::PushRequest;
using pubsub::PushResponse;

PushResponse plain(int status, std::string body) {
  return {.status = status,
          .headers = {{"Content-Type", "text/plain; charset=utf-8"}},
          .body = std::move(body) + "\n"};
}

int retry_after_seconds(TimePoint lease_expiry) {
  const auto left = std::chrono::duration_cast<std::chrono::seconds>(
      lease_expiry - std::chrono::system_clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 1, 600));
}

class Handler {
 public:
  Handler(const Config& config, GatewayDeps deps)
      : deps_(std::move(deps)),
        prefix_(config.key_prefix),
        lease_(config.lease),
        heartbeat_(config.heartbeat) {}

  PushResponse operator()(const PushRequest& request) const {
    if (deps_.authenticate) {
      if (auto reason = deps_.authenticate(request)) {
        log(LogRecord{Severity::kWarning, "unauthenticated", "refused a request: " + *reason, {}});
        deps_.metrics->count(outcome::kUnauthorized);
        return plain(401, *reason);
      }
    }
    if (request.method != "POST" && request.method != "PATCH") {
      // Method names are case-sensitive (RFC 9110 §9.1), but Flask, Django and others upper-case
      // them: passed through, a `post` would run there as a POST, unguarded and without its key.
      if (idempotency::detail::iequals_ascii(request.method, "POST") ||
          idempotency::detail::iequals_ascii(request.method, "PATCH")) {
        deps_.metrics->count(outcome::kBadRequest);
        return plain(400, "method names are case-sensitive: send POST or PATCH");
      }
      return passthrough(request);
    }
    // One key: the upstream, reading the last of two (or, behind a CGI-style server, an
    // `Idempotency_Key` as the same field), would act under another key than the one claimed.
    const auto keys =
        std::count_if(request.headers.begin(), request.headers.end(), [](const pubsub::Header& h) {
          return idempotency::detail::same_field_name(h.name, kIdempotencyKeyHeader);
        });
    if (keys > 1) {
      deps_.metrics->count(outcome::kBadRequest);
      return plain(400, "more than one Idempotency-Key header");
    }
    const auto header = request.header(kIdempotencyKeyHeader);
    if (!header || header->empty()) {
      deps_.metrics->count(outcome::kBadRequest);
      return plain(400, "missing Idempotency-Key header");
    }
    const std::string key = prefix_ + std::string(*header);
    if (key.size() > kMaxKeyBytes) {
      deps_.metrics->count(outcome::kBadRequest);
      return plain(400, "the Idempotency-Key header is longer than the limit");
    }
    const std::string fingerprint = request_fingerprint(request);
    ClaimResult claimed;
    try {
      claimed = deps_.backend->claim(key, lease_, ClaimRequest{.fingerprint = fingerprint});
    } catch (const StoreError& e) {
      log(LogRecord{Severity::kError,
                    "store_error",
                    "the idempotency store failed before forwarding; answering 503",
                    {{"key_fingerprint", key_fingerprint(key)}, {"error", e.what()}}});
      deps_.metrics->count(outcome::kBackendError);
      PushResponse r = plain(503, "idempotency store unavailable; retry later");
      r.headers.push_back({"Retry-After", "1"});
      return r;
    }
    if (auto* done = std::get_if<AlreadyDone>(&claimed)) return replay(*done, fingerprint, key);
    if (auto* held = std::get_if<HeldByOther>(&claimed)) {
      if (mismatched(held->fingerprint, fingerprint)) return mismatch(key);
      deps_.metrics->count(outcome::kConflict);
      PushResponse r = plain(409, "a request with this Idempotency-Key is in progress");
      r.headers.push_back({"Retry-After", std::to_string(retry_after_seconds(held->lease_expiry))});
      return r;
    }
    return forward_claimed(request, std::get<Won>(claimed).claim, key);
  }

 private:
  static bool mismatched(const std::optional<std::string>& stored, const std::string& mine) {
    return stored.has_value() && *stored != mine;
  }

  PushResponse mismatch(const std::string& key) const {
    log(LogRecord{Severity::kWarning,
                  "idempotency_key_reused",
                  "an Idempotency-Key was reused with a different request; answering 422",
                  {{"key_fingerprint", key_fingerprint(key)}}});
    deps_.metrics->count(outcome::kMismatch);
    return plain(422, "this Idempotency-Key was used with a different request");
  }

  PushResponse replay(const AlreadyDone& done, const std::string& fingerprint,
                      const std::string& key) const {
    if (mismatched(done.fingerprint, fingerprint)) return mismatch(key);
    if (!done.result) {
      // DONE without a stored response (written by something other than this mode).
      deps_.metrics->count(outcome::kDuplicate);
      PushResponse r{.status = 204};
      r.headers.push_back({kReplayedHeader, "true"});
      return r;
    }
    PushResponse stored;
    try {
      stored = Codec<PushResponse>::decode(*done.result);
    } catch (const StoreError& e) {
      log(LogRecord{Severity::kError,
                    "stored_response_unreadable",
                    "the stored response could not be decoded",
                    {{"key_fingerprint", key_fingerprint(key)}, {"error", e.what()}}});
      deps_.metrics->count(outcome::kError);
      return plain(500, "the stored response could not be read");
    }
    stored.headers.push_back({kReplayedHeader, "true"});
    deps_.metrics->count(outcome::kReplayed);
    return stored;
  }

  PushResponse forward_claimed(const PushRequest& request, const Claim& claim,
                               const std::string& key) const {
    // The key is renewed while the upstream works and, after a 2xx, until its response is
    // stored (as Guard::complete: a slow store must not let the lease lapse under this live
    // owner, or a retry would run the request again), and no longer: a silent upstream must
    // let the key lapse one lease later, and no renewal may race a release.
    detail::LeaseKeeper keeper(*deps_.backend, claim, lease_, heartbeat_);
    UpstreamReply reply;
    try {
      reply = deps_.upstream->forward(request, claim.fence);
    } catch (...) {
      // Out of memory, it may be after the request was sent, or even answered: the upstream
      // may have acted, so the key is held until its lease lapses, as for no answer.
      keeper.stop();
      throw;
    }
    const bool to_store = reply.kind == UpstreamReply::Kind::kResponse &&
                          reply.response.status >= 200 && reply.response.status <= 299;
    if (to_store) {
      keeper.finishing();
    } else {
      keeper.stop();
    }
    deps_.metrics->upstream_latency().observe(reply.elapsed);
    if (reply.kind == UpstreamReply::Kind::kNotSent) {
      // The upstream provably did not act: a retry may run at once.
      idempotency::detail::release_after_failure(*deps_.backend, claim);
      log(LogRecord{Severity::kWarning,
                    "upstream_unreachable",
                    "the upstream could not be reached; key released",
                    {{"key_fingerprint", key_fingerprint(key)}, {"error", reply.error}}});
      deps_.metrics->count(outcome::kNackUnreachable);
      return plain(502, "upstream unreachable: " + reply.error);
    }
    if (reply.kind == UpstreamReply::Kind::kNoAnswer) {
      // Sent and gone silent: it may still be acting, so a retry meanwhile gets 409 until the
      // lease lapses, and the fence guards the sink after that.
      log(LogRecord{Severity::kWarning,
                    "upstream_no_answer",
                    "the upstream did not answer; the key stays held until its lease lapses",
                    {{"key_fingerprint", key_fingerprint(key)},
                     {"fence", std::to_string(claim.fence)},
                     {"error", reply.error}}});
      deps_.metrics->count(outcome::kNackNoAnswer);
      return plain(504, "upstream did not answer: " + reply.error);
    }
    drop_our_headers(reply.response);
    mark_if_omitted(reply);
    if (!to_store) {
      idempotency::detail::release_after_failure(*deps_.backend, claim);
      deps_.metrics->count(outcome::kNackUpstream);
      return std::move(reply.response);
    }
    try {
      if (!deps_.backend->complete(claim, stored_form(reply.response))) {
        log(LogRecord{
            Severity::kError,
            "fenced_out",
            "a newer claim took the key while the upstream ran; not stored",
            {{"key_fingerprint", key_fingerprint(key)}, {"fence", std::to_string(claim.fence)}}});
      }
    } catch (const std::exception& e) {
      // The upstream's side effect happened: answer it, never turn it into a failure.
      log(LogRecord{Severity::kError,
                    "complete_failed",
                    "could not store the response; a retry may run the request again",
                    {{"key_fingerprint", key_fingerprint(key)}, {"error", e.what()}}});
    }
    keeper.stop();
    deps_.metrics->count(outcome::kHandled);
    return std::move(reply.response);
  }

  PushResponse passthrough(const PushRequest& request) const {
    auto reply = deps_.upstream->forward(request, std::nullopt);
    deps_.metrics->upstream_latency().observe(reply.elapsed);
    deps_.metrics->count(outcome::kPassthrough);
    switch (reply.kind) {
      case UpstreamReply::Kind::kResponse:
        drop_our_headers(reply.response);
        mark_if_omitted(reply);
        return std::move(reply.response);
      case UpstreamReply::Kind::kNotSent:
        return plain(502, "upstream unreachable: " + reply.error);
      case UpstreamReply::Kind::kNoAnswer:
        break;
    }
    return plain(504, "upstream did not answer: " + reply.error);
  }

  // The headers this mode adds are its own to say: an upstream's copy would tell the caller
  // of a first answer that it was a replay, or that a body is missing that is not.
  static void drop_our_headers(PushResponse& response) {
    std::erase_if(response.headers, [](const pubsub::Header& h) {
      return idempotency::detail::iequals_ascii(h.name, kReplayedHeader) ||
             idempotency::detail::iequals_ascii(h.name, kResponseOmittedHeader);
    });
  }

  // The response as stored: whole, or, when that is more than the store keeps (Datastore's
  // entity limit, under the default --max-response), without its body and marked as a body
  // over --max-response is: the caller gets it whole now, every replay the status and headers.
  std::string stored_form(const PushResponse& response) const {
    std::string whole = Codec<PushResponse>::encode(response);
    if (whole.size() <= deps_.backend->max_result_bytes()) return whole;
    PushResponse kept{.status = response.status, .headers = response.headers, .body = {}};
    kept.headers.push_back({kResponseOmittedHeader, "too-large"});
    return Codec<PushResponse>::encode(kept);
  }

  // A body over --max-response, cut off, or in a transfer coding the client does not undo, was
  // not kept: the caller (and every replay) gets the status and headers, which say the request
  // was applied, with a header saying why the body is missing.
  static void mark_if_omitted(UpstreamReply& reply) {
    if (!reply.truncated) return;
    reply.response.body.clear();
    const char* why = "too-large";
    if (reply.foreign_coding) {
      why = "transfer-coding";
    } else if (!reply.error.empty()) {
      why = "incomplete";  // the connection broke, or the deadline passed, mid-body
    }
    reply.response.headers.push_back({kResponseOmittedHeader, why});
  }

  GatewayDeps deps_;
  std::string prefix_;
  std::chrono::milliseconds lease_;
  std::chrono::milliseconds heartbeat_;
};

}  // namespace

std::string request_fingerprint(const PushRequest& request) {
  idempotency::detail::Sha256 digest;
  for (const std::string* part : {&request.method, &request.path, &request.body}) {
    digest.update(std::to_string(part->size()) + ":").update(*part);
  }
  const idempotency::detail::Sha256Digest bytes = digest.finish();
  return idempotency::detail::to_hex(bytes.data(), bytes.size());
}

http::Handler make_idempotency_key_handler(const Config& config, GatewayDeps deps) {
  auto handler = std::make_shared<const Handler>(config, std::move(deps));
  return [handler](const PushRequest& request) { return (*handler)(request); };
}

}  // namespace idempotency::gateway
