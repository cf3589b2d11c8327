// CRC16-XMODEM and the hash-tag rule of the Redis Cluster specification ("Keys distribution
// model"). Bitwise rather than table-driven: a key is a few dozen bytes, hashed once per call.
#include "redis_cluster_slot.h"

namespace idempotency::redis_detail {

std::uint16_t crc16_xmodem(std::string_view bytes) noexcept {
  std::uint16_t crc = 0;
  for (const char c : bytes) {
    crc ^= static_cast<std::uint16_t>(static_cast<unsigned char>(c) << 8U);
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000U) != 0 ? static_cast<std::uint16_t>((crc << 1U) ^ 0x1021U)
                                 : static_cast<std::uint16_t>(crc << 1U);
    }
  }
  return crc;
}

std::uint16_t key_slot(std::string_view key) noexcept {
  const std::size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const std::size_t close = key.find('}', open + 1);
    // "{}" is no tag: the whole key is hashed, as the server does.
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<std::uint16_t>(crc16_xmodem(key) % kClusterSlots);
}

}  // namespace idempotency::redis_detail
