// IpAddr's text forms: inet_ntop/inet_pton (pure conversions, no sockets), with IPv4-mapped
// addresses shown and accepted as dotted quads, the way `ip addr` and rdma-core print RoCEv2 GIDs
// that carry IPv4 addresses.
#include "transport/wire/ip.h"

#include <arpa/inet.h>

#include <cstring>

namespace uroce::wire {

std::string IpAddr::to_string() const {
  char buf[INET6_ADDRSTRLEN];
  if (is_v4()) {
    // inet_ntop(AF_INET6) would print "::ffff:10.0.0.1".
    if (!inet_ntop(AF_INET, data() + 12, buf, sizeof buf)) return "?";
  } else if (!inet_ntop(AF_INET6, data(), buf, sizeof buf)) {
    return "?";
  }
  return buf;
}

std::optional<IpAddr> IpAddr::parse(std::string_view s) {
  // inet_pton needs a NUL-terminated string; the longest IPv6 text is INET6_ADDRSTRLEN - 1 long.
  // A NUL inside `s` would end the text early and let trailing bytes through: refused.
  char buf[INET6_ADDRSTRLEN];
  if (s.empty() || s.size() >= sizeof buf || s.find('\0') != std::string_view::npos)
    return std::nullopt;
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  std::array<uint8_t, 16> b{};
  if (s.find(':') != std::string_view::npos) {
    if (inet_pton(AF_INET6, buf, b.data()) != 1) return std::nullopt;
    return IpAddr(b);
  }
  // AF_INET inet_pton takes only a full dotted quad (not inet_aton's "10.1" or hex forms).
  uint8_t v4[4];
  if (inet_pton(AF_INET, buf, v4) != 1) return std::nullopt;
  return IpAddr(uint32_t(v4[0]) << 24 | uint32_t(v4[1]) << 16 | uint32_t(v4[2]) << 8 | v4[3]);
}

}  // namespace uroce::wire
