// ECMP: which of several equal-cost egress ports a switch sends a flow to, chosen by hashing the
// flow's IPv4/UDP 5-tuple (RoCEv2: the destination port is always 4791, so the UDP source port —
// uroce derives it from the QPN, Annex A17.5.1.2 — is the entropy). The hash function is
// selectable, as on a switch ASIC, and each switch has its own seed and hash offset (which bits
// of the hash pick the member). The offset matters: CRCs are linear, so two seeds change a
// CRC by a constant XOR and the same bits of it pick the same member up to a fixed permutation —
// switches of successive tiers then make correlated choices (hash polarisation) however they
// are seeded; other bits of the CRC are other linear functions of the tuple and decorrelate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace uroce::sim {

enum class EcmpHash : uint8_t {
  kCrc32,  // CRC-32 (IEEE) of the seed and the 5-tuple, big-endian fields
  kCrc16,  // CRC-16/CCITT of the 5-tuple, the seed as the initial value
  kXor,    // the 5-tuple's words XORed and folded to 16 bits ("XOR16" on switch ASICs)
  kL3,     // CRC-32 of the seed and the addresses only: the UDP source port is ignored
};

struct FiveTuple {
  uint32_t src_ip = 0, dst_ip = 0;  // host byte order
  uint16_t src_port = 0, dst_port = 4791;
  uint8_t proto = 17;  // UDP
};

uint32_t ecmp_hash(EcmpHash h, uint32_t seed, const FiveTuple& t);
// The width of a function's hash, bits.
inline int hash_bits(EcmpHash h) {
  return h == EcmpHash::kCrc16 || h == EcmpHash::kXor ? 16 : 32;
}
// A hash offset for a switch with `seed`: 0..16 for 32-bit hashes, 0..8 for 16-bit ones (at
// least 8 bits always remain).
inline int hash_offset(EcmpHash h, uint32_t seed) {
  return int((seed >> 8) % uint32_t(hash_bits(h) - 7));
}
// Which of `n` (> 0) members a hash picks: the bits from `offset` up, modulo n.
inline uint32_t ecmp_pick(uint32_t hash, int offset, uint32_t n) {
  return (hash >> offset) % n;
}

const char* to_string(EcmpHash h);  // "crc32", "crc16", "xor", "l3"
std::optional<EcmpHash> parse_ecmp_hash(const std::string& s);

}  // namespace uroce::sim
