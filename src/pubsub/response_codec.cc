// Stored responses as CBOR: binary-safe bodies without base64, via nlohmann-json.
#include <nlohmann/json.hpp>

#include "idempotency/errors.h"
#include "idempotency/pubsub/response.h"

namespace idempotency {

std::string Codec<pubsub::PushResponse>::encode(const pubsub::PushResponse& response) {
  nlohmann::json headers = nlohmann::json::array();
  for (const auto& h : response.headers) {
    headers.push_back(nlohmann::json::array(
        {nlohmann::json::binary_t(std::vector<std::uint8_t>(h.name.begin(), h.name.end())),
         nlohmann::json::binary_t(std::vector<std::uint8_t>(h.value.begin(), h.value.end()))}));
  }
  const nlohmann::json doc = {{"v", 1},
                              {"status", response.status},
                              {"headers", std::move(headers)},
                              {"body", nlohmann::json::binary_t(std::vector<std::uint8_t>(
                                           response.body.begin(), response.body.end()))}};
  const std::vector<std::uint8_t> cbor = nlohmann::json::to_cbor(doc);
  return {cbor.begin(), cbor.end()};
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
