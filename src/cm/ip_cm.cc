#include "cm/ip_cm.h"

#include <cstring>

namespace uroce::cm {
namespace {

void put32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

uint32_t get32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

std::optional<std::vector<uint8_t>> make_ip_private_data(const IpCmHeader& h,
                                                         std::span<const uint8_t> user,
                                                         size_t field_len) {
  if (kIpCmHeaderBytes + user.size() > field_len) return std::nullopt;
  std::vector<uint8_t> out(kIpCmHeaderBytes + user.size(), 0);
  out[0] = kIpCmVersion;
  out[1] = static_cast<uint8_t>(h.ip_version << 4);
  out[2] = static_cast<uint8_t>(h.src_port >> 8);
  out[3] = static_cast<uint8_t>(h.src_port);
  put32(&out[4 + 12], h.src_ip);   // source address, IPv4 in the last 4 of 16 bytes
  put32(&out[20 + 12], h.dst_ip);  // destination address
  if (!user.empty()) std::memcpy(out.data() + kIpCmHeaderBytes, user.data(), user.size());
  return out;
}

std::optional<IpCmHeader> parse_ip_private_data(std::span<const uint8_t> pd) {
  if (pd.size() < kIpCmHeaderBytes || pd[0] != kIpCmVersion || (pd[1] >> 4) != 4)
    return std::nullopt;
  IpCmHeader h;
  h.ip_version = 4;
  h.src_port = static_cast<uint16_t>((pd[2] << 8) | pd[3]);
  h.src_ip = get32(&pd[16]);
  h.dst_ip = get32(&pd[32]);
  return h;
}

}  // namespace uroce::cm
