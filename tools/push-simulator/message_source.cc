#include "message_source.h"

#include <nlohmann/json.hpp>

#include "codec.h"

namespace idempotency::push_sim {
namespace {

std::string ordering_key(int ordering_keys, std::mt19937_64& random) {
  std::uniform_int_distribution<int> pick(1, ordering_keys);
  return "ok-" + std::to_string(pick(random));
}

}  // namespace

std::string new_message_id(std::mt19937_64& random) {
  std::uniform_int_distribution<std::uint64_t> digits(1'000'000'000'000'000ULL,
                                                      9'999'999'999'999'999ULL);
  return std::to_string(digits(random));
}

std::vector<SimMessage> generate_messages(const GenerateSpec& spec, std::mt19937_64& random) {
  std::vector<SimMessage> out;
  out.reserve(static_cast<std::size_t>(spec.count));
  for (int n = 1; n <= spec.count; ++n) {
    SimMessage m{.id = new_message_id(random), .data = "message " + std::to_string(n)};
    for (const auto& [name, value] : spec.attributes) m.attributes[name] = value;
    if (spec.keys > 0) {
      std::uniform_int_distribution<int> pick(1, spec.keys);
      m.attributes[spec.key_attribute] = "key-" + std::to_string(pick(random));
    }
    if (spec.ordering_keys > 0) m.ordering_key = ordering_key(spec.ordering_keys, random);
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<SimMessage> read_messages(std::istream& in,
                                      const std::vector<std::pair<std::string, std::string>>& extra,
                                      int ordering_keys, std::mt19937_64& random) {
  std::vector<SimMessage> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "--input line " + std::to_string(number) + ": ";
    auto json = nlohmann::json::parse(line, nullptr, false);
    if (!json.is_object()) throw InputError(where + "not a JSON object");
    SimMessage m;
    if (json.contains("data") && json.contains("data_base64")) {
      throw InputError(where + "give \"data\" or \"data_base64\", not both");
    }
    if (json.contains("data")) {
      if (!json["data"].is_string()) throw InputError(where + "\"data\" is not a string");
      m.data = json["data"].get<std::string>();
    } else if (json.contains("data_base64")) {
      auto decoded = json["data_base64"].is_string()
                         ? base64_decode(json["data_base64"].get<std::string>())
                         : std::nullopt;
      if (!decoded) throw InputError(where + "\"data_base64\" is not base64 text");
      m.data = std::move(*decoded);
    }
    if (json.contains("attributes")) {
      if (!json["attributes"].is_object()) {
        throw InputError(where + "\"attributes\" is not an object");
      }
      for (const auto& [name, value] : json["attributes"].items()) {
        if (!value.is_string()) throw InputError(where + "attribute values must be strings");
        m.attributes[name] = value.get<std::string>();
      }
    }
    for (const auto& [name, value] : extra) m.attributes.emplace(name, value);
    if (m.data.empty() && m.attributes.empty()) {
      throw InputError(where +
                       "a message needs data or an attribute (Pub/Sub refuses one with neither)");
    }
    if (json.contains("orderingKey")) {
      if (!json["orderingKey"].is_string()) {
        throw InputError(where + "\"orderingKey\" is not a string");
      }
      m.ordering_key = json["orderingKey"].get<std::string>();
    } else if (ordering_keys > 0) {
      m.ordering_key = ordering_key(ordering_keys, random);
    }
    if (json.contains("messageId")) {
      if (!json["messageId"].is_string() || json["messageId"].get<std::string>().empty()) {
        throw InputError(where + "\"messageId\" is not a non-empty string");
      }
      m.id = json["messageId"].get<std::string>();
    } else {
      m.id = new_message_id(random);
    }
    out.push_back(std::move(m));
  }
  if (out.empty()) throw InputError("--input: the file holds no messages");
  return out;
}

}  // namespace idempotency::push_sim
