// key_slot(): the Redis Cluster specification's own examples, and agreement with the server's
// CLUSTER KEYSLOT on the fixture's cluster for keys shaped like ours and for every hash-tag
// corner (empty tag, nested braces, unclosed brace, binary bytes).
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "redis_cluster_slot.h"
#include "redis_connection.h"
#include "support/test_servers.h"

namespace idempotency::testing {
namespace {

using redis_detail::crc16_xmodem;
using redis_detail::key_slot;

TEST(RedisClusterSlot, MatchesTheSpecificationsVectors) {
  // "The CRC16 … output for '123456789' is 0x31C3" (cluster spec, CRC16 reference).
  EXPECT_EQ(crc16_xmodem("123456789"), 0x31C3);
  EXPECT_EQ(key_slot("123456789"), 0x31C3 % 16384);
  EXPECT_EQ(key_slot(""), 0);
  // Hash tags, as the specification's examples state them.
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("{user1000}.followers"), key_slot("user1000"));
  EXPECT_EQ(key_slot("foo{}{bar}"), crc16_xmodem("foo{}{bar}") % 16384);  // empty tag: all
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));                 // first '{' to '}'
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));                  // first tag only
  EXPECT_EQ(key_slot("foo{bar"), crc16_xmodem("foo{bar") % 16384);        // unclosed: all
}

// The first node of the fixture's redis+cluster:// URL.
struct Seed {
  std::string host;
  int port = 0;
};
Seed first_seed() {
  const std::string url = redis_cluster_url();
  if (url.empty()) {
    if (std::getenv("CI") != nullptr) ADD_FAILURE() << "no Redis Cluster fixture";
    throw std::runtime_error("no Redis Cluster: run through ctest (the redis_server fixture)");
  }
  const std::string rest = url.substr(url.find("://") + 3);
  const std::string first = rest.substr(0, rest.find(','));
  const std::size_t colon = first.rfind(':');
  return {first.substr(0, colon), std::stoi(first.substr(colon + 1))};
}

TEST(RedisClusterSlot, AgreesWithTheServersClusterKeyslot) {
  const Seed seed = first_seed();
  auto conn = redis_detail::Connection::open(seed.host, seed.port, {});
  std::vector<std::string> keys = {"123456789",
                                   "idempotency:msg-1",
                                   "idempotency:{tenant}:m",
                                   "a{}b",
                                   "{{x}}",
                                   "x}{y}",
                                   "{",
                                   "}",
                                   std::string("\0\xff{\x80}", 5)};
  for (int i = 0; i < 200; ++i) keys.push_back("idem_contract:" + std::to_string(i * 7919));
  for (const std::string& key : keys) {
    auto reply = conn->command({"CLUSTER", "KEYSLOT", key});
    ASSERT_NE(reply, nullptr) << conn->error();
    ASSERT_EQ(reply->type, REDIS_REPLY_INTEGER);
    EXPECT_EQ(reply->integer, key_slot(key)) << "key #" << &key - keys.data();
  }
}

}  // namespace
}  // namespace idempotency::testing
