// What the gateway tests send: Pub/Sub push envelopes, and requests through an independent,
// well-behaved HTTP client (cpp-httplib's).
#pragma once

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "support/base64.h"

namespace idempotency::testing {

/// envelope() is a wrapped push envelope for message `id`, whose data is `data` (default
/// "order <id>") base64-encoded as Pub/Sub sends it.
inline std::string envelope(const std::string& id,
                            const nlohmann::json& attributes = nlohmann::json::object(),
                            const std::string& data = {}) {
  return nlohmann::json{{"message",
                         {{"messageId", id},
                          {"data", base64(data.empty() ? "order " + id : data)},
                          {"attributes", attributes}}},
                        {"subscription", "projects/p/subscriptions/orders"},
                        {"deliveryAttempt", 1}}
      .dump();
}

/// Reply is what came back: status -1 when no answer did.
struct Reply {
  int status = -1;
  std::string body;
  httplib::Headers headers;
  [[nodiscard]] std::string header(const char* name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
  [[nodiscard]] bool has_header(const char* name) const { return headers.count(name) > 0; }
};

/// send() makes one request to 127.0.0.1:port on a new connection.
inline Reply send(int port, const std::string& method, const std::string& path,
                  const std::string& body = {}, const httplib::Headers& headers = {}) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(30, 0);
  client.set_write_timeout(30, 0);
  httplib::Request request;
  request.method = method;
  request.path = path;
  request.headers = headers;
  request.body = body;
  if (!body.empty()) request.set_header("Content-Type", "application/json");
  auto r = client.send(request);
  if (!r) return {};
  return {r->status, r->body, r->headers};
}

/// post() POSTs `body` to /push and returns the status.
inline int post(int port, const std::string& body) {
  return send(port, "POST", "/push", body).status;
}

/// redeliver_until_not_503() posts `body` as Pub/Sub redelivers a nacked push, every 100 ms,
/// until it is answered other than 503 or `deadline` passes; returns the last status.
inline int redeliver_until_not_503(int port, const std::string& body,
                                   std::chrono::steady_clock::time_point deadline) {
  int status = post(port, body);
  while (status == 503 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    status = post(port, body);
  }
  return status;
}

}  // namespace idempotency::testing
