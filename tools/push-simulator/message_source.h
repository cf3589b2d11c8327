// Where the run's messages come from: generated (--messages, --attribute, --key-attribute,
// --ordering-keys) or read from a JSON-lines file (--input), and the messageIds Pub/Sub would
// give them.
//
// Thread safety: functions taking a generator must not share it between threads.
#pragma once

#include <chrono>
#include <istream>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace idempotency::push_sim {

/// One published message.
struct SimMessage {
  std::string id;
  /// Bytes, sent base64-encoded in a wrapped envelope. Empty: an attributes-only message (Pub/Sub
  /// has no "empty but present" data: its JSON then has no "data" member).
  std::string data;
  std::map<std::string, std::string> attributes;
  std::string ordering_key;  ///< Empty: no ordering key.
  std::chrono::system_clock::time_point publish_time;
};

/// What generate_messages() makes.
struct GenerateSpec {
  int count = 10;
  std::vector<std::pair<std::string, std::string>> attributes;
  std::string key_attribute;  ///< With `keys` > 0: a value drawn from key-1 .. key-<keys>.
  int keys = 0;
  int ordering_keys = 0;  ///< > 0: each message gets one of ok-1 .. ok-<ordering_keys>.
};

/// A malformed --input line; what() names the line number and what is wrong.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// new_message_id() is a fresh 16-digit decimal id, as Pub/Sub's look.
[[nodiscard]] std::string new_message_id(std::mt19937_64& random);

/// generate_messages() makes `spec.count` messages with data "message <n>" and fresh ids.
[[nodiscard]] std::vector<SimMessage> generate_messages(const GenerateSpec& spec,
                                                        std::mt19937_64& random);

/// read_messages() reads one JSON object per line (blank lines skipped): "data" (text) or
/// "data_base64", "attributes" (string values), "orderingKey", "messageId" (a fresh one when
/// absent); `extra` attributes are added where the line has none of that name, and
/// `ordering_keys` > 0 gives lines without an orderingKey one. A line without data (or with
/// empty data) is an attributes-only message. Throws InputError, also for a message with
/// neither data nor an attribute, which Pub/Sub refuses to publish.
[[nodiscard]] std::vector<SimMessage> read_messages(
    std::istream& in, const std::vector<std::pair<std::string, std::string>>& extra,
    int ordering_keys, std::mt19937_64& random);

}  // namespace idempotency::push_sim
