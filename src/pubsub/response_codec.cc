// Stored responses as CBOR: binary-safe bodies without base64; decoded by nlohmann-json.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "idempotency/errors.h"
#include "idempotency/pubsub/response.h"

namespace idempotency {

namespace {

// The few CBOR (RFC 8949) items a stored response needs, written straight into the output:
// one is stored per delivery, and building a JSON document to serialize it cost more than the
// claim it is stored with. Decoding stays with nlohmann-json.
void put_head(std::string& out, unsigned major, std::uint64_t value) {
  const auto type = static_cast<char>(major << 5U);
  if (value < 24) {
    out.push_back(static_cast<char>(type | static_cast<char>(value)));
    return;
  }
  int bytes = 8;
  char size = 27;
  if (value <= 0xFFU) {
    bytes = 1;
    size = 24;
  } else if (value <= 0xFFFFU) {
    bytes = 2;
    size = 25;
  } else if (value <= 0xFFFFFFFFU) {
    bytes = 4;
    size = 26;
  }
  out.push_back(static_cast<char>(type | size));
  for (int i = bytes - 1; i >= 0; --i) {
    out.push_back(static_cast<char>((value >> (8U * static_cast<unsigned>(i))) & 0xFFU));
  }
}

void put_text(std::string& out, std::string_view text) {
  put_head(out, 3, text.size());
  out.append(text);
}

void put_bytes(std::string& out, std::string_view bytes) {
  put_head(out, 2, bytes.size());
  out.append(bytes);
}

}  // namespace

std::string Codec<pubsub::PushResponse>::encode(const pubsub::PushResponse& response) {
  std::string out;
  std::size_t size = 64 + response.body.size();
  for (const auto& h : response.headers) size += h.name.size() + h.value.size() + 20;
  out.reserve(size);
  // {"v": 1, "status": int, "headers": [[name, value]...], "body": bytes}, names and values
  // as byte strings so that any bytes survive.
  put_head(out, 5, 4);
  put_text(out, "v");
  put_head(out, 0, 1);
  put_text(out, "status");
  if (response.status >= 0) {
    put_head(out, 0, static_cast<std::uint64_t>(response.status));
  } else {
    put_head(out, 1, static_cast<std::uint64_t>(-(static_cast<std::int64_t>(response.status) + 1)));
  }
  put_text(out, "headers");
  put_head(out, 4, response.headers.size());
  for (const auto& h : response.headers) {
    put_head(out, 4, 2);
    put_bytes(out, h.name);
    put_bytes(out, h.value);
  }
  put_text(out, "body");
  put_bytes(out, response.body);
  return out;
}

pubsub::PushResponse Codec<pubsub::PushResponse>::decode(std::string_view bytes) {
  const auto doc = nlohmann::json::from_cbor(bytes.begin(), bytes.end(), true, false);
  auto text = [](const nlohmann::json& j) {
    const auto& b = j.get_binary();
    return std::string(b.begin(), b.end());
  };
  try {
    if (doc.is_discarded() || doc.at("v") != 1) throw std::invalid_argument("version");
    pubsub::PushResponse r;
    r.status = doc.at("status").get<int>();
    for (const auto& h : doc.at("headers")) r.headers.push_back({text(h.at(0)), text(h.at(1))});
    r.body = text(doc.at("body"));
    return r;
  } catch (const std::exception&) {
    throw StoreError("stored response: the record's result is not a stored response");
  }
}

}  // namespace idempotency
