// key_slot(): the Redis Cluster hash slot of a key, as the server computes it (CRC16-XMODEM of
// the key, or of its {hash tag}, mod 16384), so a cluster client sends each command straight
// to the node that serves the key instead of relying on MOVED redirects.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <string_view>

namespace idempotency::redis_detail {

/// The number of hash slots in a Redis Cluster.
inline constexpr std::uint16_t kClusterSlots = 16384;

/// crc16_xmodem() is CRC-16/XMODEM (polynomial 0x1021, initial value 0, no reflection) of
/// `bytes`, the checksum Redis Cluster hashes keys with.
[[nodiscard]] std::uint16_t crc16_xmodem(std::string_view bytes) noexcept;

/// key_slot() is the slot of `key`: only the part between the first '{' and the first '}'
/// after it is hashed when that part is non-empty (a hash tag), else the whole key.
[[nodiscard]] std::uint16_t key_slot(std::string_view key) noexcept;

}  // namespace idempotency::redis_detail
