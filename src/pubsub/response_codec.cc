// Stored responses as CBOR: binary-safe bodies without base64; decoded by nlohmann-json.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "idempotency/errors.h"
#include "idempotency/pubsub/response.h"

namespace idempotency {

namespace {

// The few CBOR (RFC 8949) items a stored response needs, written straight into the output:
// one is stored per delivery, and building a JSON document to serialize it cost more than the
// claim it is stored with. Decoding stays with nlohmann-json.
//
// Written through a cursor into a string sized once for the longest encoding: the usual
// status-only response is 30 bytes, and a push_back per byte cost more than the rest.
class CborWriter {
 public:
  // Bytes of an item's head at most (the major type and an 8-byte argument).
  static constexpr std::size_t kMaxHead = 9;

  explicit CborWriter(std::string& out) : out_(out), at_(out.data()) {}

  void head(unsigned major, std::uint64_t value) {
    const auto type = static_cast<unsigned char>(major << 5U);
    if (value < 24) {
      put(type | static_cast<unsigned char>(value));
      return;
    }
    int bytes = 8;
    unsigned char size = 27;
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
    put(type | size);
    for (int i = bytes - 1; i >= 0; --i) {
      put(static_cast<unsigned char>((value >> (8U * static_cast<unsigned>(i))) & 0xFFU));
    }
  }

  void text(std::string_view s) { string(3, s); }
  void bytes(std::string_view s) { string(2, s); }

  // Trims the output to what was written.
  void finish() { out_.resize(static_cast<std::size_t>(at_ - out_.data())); }

 private:
  void put(unsigned v) { *at_++ = static_cast<char>(v); }
  void string(unsigned major, std::string_view s) {
    head(major, s.size());
    if (!s.empty()) std::memcpy(at_, s.data(), s.size());
    at_ += s.size();
  }

  std::string& out_;
  char* at_;
};

}  // namespace

std::string Codec<pubsub::PushResponse>::encode(const pubsub::PushResponse& response) {
  // The longest encoding: the map's head, four keys (under 24 bytes each: one head byte), the
  // version, the status, the headers' array and each pair's, the body; every head at its
  // longest.
  constexpr std::size_t kFixed = 16 * CborWriter::kMaxHead + sizeof("vstatusheadersbody");
  std::size_t size = kFixed + response.body.size();
  for (const auto& h : response.headers) {
    size += 3 * CborWriter::kMaxHead + h.name.size() + h.value.size();
  }
  std::string out(size, '\0');
  CborWriter cbor(out);
  // {"v": 1, "status": int, "headers": [[name, value]...], "body": bytes}, names and values
  // as byte strings so that any bytes survive.
  cbor.head(5, 4);
  cbor.text("v");
  cbor.head(0, 1);
  cbor.text("status");
  if (response.status >= 0) {
    cbor.head(0, static_cast<std::uint64_t>(response.status));
  } else {
    cbor.head(1, static_cast<std::uint64_t>(-(static_cast<std::int64_t>(response.status) + 1)));
  }
  cbor.text("headers");
  cbor.head(4, response.headers.size());
  for (const auto& h : response.headers) {
    cbor.head(4, 2);
    cbor.bytes(h.name);
    cbor.bytes(h.value);
  }
  cbor.text("body");
  cbor.bytes(response.body);
  cbor.finish();
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
