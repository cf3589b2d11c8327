// A record as a Datastore entity, both ways: which property holds which field, which are
// indexed, the strict reading that never takes a malformed entity for a record, and an
// entity's size as Datastore counts it.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "auth/http_client.h"
#include "datastore_wire.h"
#include "idempotency/detail/base64.h"
#include "idempotency/errors.h"

namespace idempotency::datastore_detail {

using Json = nlohmann::json;

Record record_from_entity(const Json& entity) {
  try {
    const Json& p = entity.at("properties");
    Record r;
    const auto state = json_int(p.at("state").at("integerValue"));
    if (state != static_cast<int>(RecordState::kClaimed) &&
        state != static_cast<int>(RecordState::kDone)) {
      throw StoreError("datastore: a record has an unknown state " + std::to_string(state));
    }
    r.state = static_cast<RecordState>(state);
    r.fence = json_int(p.at("fence").at("integerValue"));
    r.lease_expiry = json_int(p.at("lease_expiry_ms").at("integerValue"));
    r.expires_at = json_int(p.at("expires_at_ms").at("integerValue"));
    auto blob = [&p](const char* name) -> std::optional<std::string> {
      if (!p.contains(name) || !p[name].contains("blobValue")) return std::nullopt;
      std::string out;
      if (!decode_blob(p[name]["blobValue"].get<std::string>(), out)) {
        throw StoreError(std::string("datastore: a record's ") + name + " is not base64");
      }
      return out;
    };
    r.claim_token = blob("claim_token").value_or("");
    r.result = blob("result");
    r.fingerprint = blob("fingerprint");
    return r;
  } catch (const Json::exception&) {
    throw StoreError("datastore: a record entity is malformed (missing or mistyped property)");
  } catch (const std::invalid_argument&) {
    throw StoreError("datastore: a record entity has a malformed integer property");
  }
}

Json entity_properties(const Record& r) {
  auto integer = [](std::int64_t v) {
    return Json{{"integerValue", std::to_string(v)}, {"excludeFromIndexes", true}};
  };
  auto blob = [](const std::string& bytes) {
    return Json{{"blobValue", idempotency::detail::base64_encode(bytes)},
                {"excludeFromIndexes", true}};
  };
  Json props = {
      {"state", integer(static_cast<int>(r.state))},
      {"fence", integer(r.fence)},
      {"lease_expiry_ms", integer(r.lease_expiry)},
      {"expires_at_ms", integer(r.expires_at)},
      // Indexed: the purge query and a Datastore TTL policy read it.
      {"expires_at", Json{{"timestampValue", format_timestamp(r.expires_at)}}},
      {"claim_token", blob(r.claim_token)},
  };
  if (r.result) props["result"] = blob(*r.result);
  if (r.fingerprint) props["fingerprint"] = blob(*r.fingerprint);
  return props;
}

namespace {

// A string as Datastore stores it: its UTF-8 bytes + 1.
std::size_t string_size(const Json& s) { return s.get_ref<const std::string&>().size() + 1; }

// A blobValue's decoded length, from its base64 text (either alphabet, padded or not).
std::size_t blob_size(const Json& b) {
  const auto& text = b.get_ref<const std::string&>();
  std::size_t n = text.size();
  while (n > 0 && text[n - 1] == '=') --n;
  return n / 4 * 3 + (n % 4 == 0 ? 0 : n % 4 - 1);
}

std::size_t value_size(const Json& v) {
  if (v.contains("blobValue")) return blob_size(v["blobValue"]);
  if (v.contains("stringValue")) return string_size(v["stringValue"]);
  if (v.contains("booleanValue") || v.contains("nullValue")) return 1;
  return 8;  // integer, double, timestamp: all the entity_properties() writes besides blobs
}

}  // namespace

std::size_t entity_size(const Json& entity) {
  const Json& key = entity.at("key");
  std::size_t size = 16 + 32;
  const std::string ns = key.at("partitionId").value("namespaceId", "");
  if (!ns.empty()) size += ns.size() + 1;
  for (const Json& element : key.at("path")) {
    size += string_size(element.at("kind"));
    size += element.contains("name") ? string_size(element["name"]) : 8;
  }
  if (entity.contains("properties")) {
    for (const auto& [name, value] : entity["properties"].items()) {
      size += name.size() + 1 + value_size(value);
    }
  }
  return size;
}

}  // namespace idempotency::datastore_detail
