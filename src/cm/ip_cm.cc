#include "cm/ip_cm.h"

#include <cstdio>
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
  if (h.ip_version != 4 && h.ip_version != 6) return std::nullopt;
  const bool v4 = h.ip_version == 4;
  if (h.src.is_v4() != v4 || h.dst.is_v4() != v4) return std::nullopt;
  std::vector<uint8_t> out(kIpCmHeaderBytes + user.size(), 0);
  out[0] = kIpCmVersion;
  out[1] = static_cast<uint8_t>(h.ip_version << 4);
  out[2] = static_cast<uint8_t>(h.src_port >> 8);
  out[3] = static_cast<uint8_t>(h.src_port);
  if (v4) {
    put32(&out[4 + 12], h.src.v4());  // the last 4 of the 16 bytes; the 12 before stay zero
    put32(&out[20 + 12], h.dst.v4());
  } else {
    std::memcpy(&out[4], h.src.data(), 16);
    std::memcpy(&out[20], h.dst.data(), 16);
  }
  if (!user.empty()) std::memcpy(out.data() + kIpCmHeaderBytes, user.data(), user.size());
  return out;
}

std::optional<IpCmHeader> parse_ip_private_data(std::span<const uint8_t> pd) {
  if (pd.size() < kIpCmHeaderBytes || pd[0] != kIpCmVersion) return std::nullopt;
  IpCmHeader h;
  h.ip_version = pd[1] >> 4;
  h.src_port = static_cast<uint16_t>((pd[2] << 8) | pd[3]);
  if (h.ip_version == 4) {
    h.src = wire::IpAddr(get32(&pd[16]));
    h.dst = wire::IpAddr(get32(&pd[32]));
  } else if (h.ip_version == 6) {
    h.src = wire::IpAddr::from_bytes(&pd[4]);
    h.dst = wire::IpAddr::from_bytes(&pd[20]);
  } else {
    return std::nullopt;
  }
  return h;
}

std::string format_ip_port(const wire::IpAddr& ip, uint16_t port) {
  // snprintf, not std::string's operator+ or append: GCC 12 at -O3 warns (-Wrestrict) falsely on
  // those.
  const std::string a = ip.to_string();
  char buf[64];
  std::snprintf(buf, sizeof buf, ip.is_v4() ? "%s:%u" : "[%s]:%u", a.c_str(), unsigned{port});
  return buf;
}

}  // namespace uroce::cm
