#include "sim/ecmp.h"

#include <zlib.h>

namespace uroce::sim {
namespace {

size_t put(uint8_t* p, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = uint8_t(v >> (8 * (bytes - 1 - i)));
  return size_t(bytes);
}

// The 5-tuple as a switch's hash unit sees it: addresses, protocol, ports, network byte order.
size_t tuple_bytes(const FiveTuple& t, uint8_t* out, bool ports) {
  size_t n = 0;
  n += put(out + n, t.src_ip, 4);
  n += put(out + n, t.dst_ip, 4);
  if (!ports) return n;
  n += put(out + n, t.proto, 1);
  n += put(out + n, t.src_port, 2);
  n += put(out + n, t.dst_port, 2);
  return n;
}

uint32_t crc32_of(uint32_t seed, const uint8_t* b, size_t n) {
  uint8_t s[4];
  put(s, seed, 4);
  uLong c = crc32(0L, s, 4);
  return uint32_t(crc32(c, b, uInt(n)));
}

// CRC-16/CCITT (polynomial 0x1021, MSB first), bitwise: 13 bytes per packet need no table.
uint16_t crc16_ccitt(uint16_t init, const uint8_t* b, size_t n) {
  uint16_t c = init;
  for (size_t i = 0; i < n; ++i) {
    c ^= uint16_t(b[i] << 8);
    for (int k = 0; k < 8; ++k) c = (c & 0x8000) ? uint16_t((c << 1) ^ 0x1021) : uint16_t(c << 1);
  }
  return c;
}

}  // namespace

uint32_t ecmp_hash(EcmpHash h, uint32_t seed, const FiveTuple& t) {
  uint8_t b[16];
  switch (h) {
    case EcmpHash::kCrc32:
      return crc32_of(seed, b, tuple_bytes(t, b, true));
    case EcmpHash::kCrc16:
      return crc16_ccitt(uint16_t(seed ^ (seed >> 16)), b, tuple_bytes(t, b, true));
    case EcmpHash::kXor: {
      uint32_t x = t.src_ip ^ t.dst_ip ^ (uint32_t(t.src_port) << 16 | t.dst_port) ^ t.proto ^ seed;
      return (x ^ (x >> 16)) & 0xffff;
    }
    case EcmpHash::kL3:
      return crc32_of(seed, b, tuple_bytes(t, b, false));
  }
  return 0;
}

const char* to_string(EcmpHash h) {
  switch (h) {
    case EcmpHash::kCrc32:
      return "crc32";
    case EcmpHash::kCrc16:
      return "crc16";
    case EcmpHash::kXor:
      return "xor";
    case EcmpHash::kL3:
      return "l3";
  }
  return "?";
}

std::optional<EcmpHash> parse_ecmp_hash(const std::string& s) {
  for (EcmpHash h : {EcmpHash::kCrc32, EcmpHash::kCrc16, EcmpHash::kXor, EcmpHash::kL3})
    if (s == to_string(h)) return h;
  return std::nullopt;
}

}  // namespace uroce::sim
