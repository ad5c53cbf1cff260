// One reader of the control messages the kernel-UDP port asks for (cmsg.h): apart from the three
// receive paths that use it so that each message's layout is decoded once.
#include "ports/udp/cmsg.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>

#include <cstring>

namespace uroce {

RxControl parse_rx_control(const msghdr& h) {
  RxControl out;
  auto& m = const_cast<msghdr&>(h);  // CMSG_NXTHDR takes no const; nothing is written
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    // IP_TOS arrives as one byte; accept an int too, as some kernels' IP_TOS cmsgs are.
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1))
      out.tos = *CMSG_DATA(c);
    // IPV6_TCLASS is an int (ipv6(7)); its low byte is the Traffic Class.
    if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS &&
        c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int v;
      std::memcpy(&v, CMSG_DATA(c), sizeof v);
      out.tos = static_cast<uint8_t>(v);
    }
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL &&
        c->cmsg_len >= CMSG_LEN(sizeof(uint32_t))) {
      uint32_t drops;
      std::memcpy(&drops, CMSG_DATA(c), sizeof drops);
      out.overflow_drops = drops;
    }
    if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
        c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int v;
      std::memcpy(&v, CMSG_DATA(c), sizeof v);
      if (v > 0) out.gro_segment = static_cast<size_t>(v);
    }
    const bool err4 = c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR;
    const bool err6 = c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR;
    if ((err4 || err6) && c->cmsg_len >= CMSG_LEN(sizeof(sock_extended_err))) {
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(c), sizeof ee);
      out.error = ee;
      out.error_offender = {};
      // SO_EE_OFFENDER: who sent the ICMP, a sockaddr_in or sockaddr_in6 after the error.
      const size_t room = c->cmsg_len - CMSG_LEN(sizeof ee);
      const uint8_t* off = CMSG_DATA(c) + sizeof ee;
      sa_family_t family = AF_UNSPEC;
      if (room >= sizeof family) std::memcpy(&family, off, sizeof family);
      if (family == AF_INET && room >= sizeof(sockaddr_in)) {
        sockaddr_in from;
        std::memcpy(&from, off, sizeof from);
        out.error_offender = wire::IpAddr(ntohl(from.sin_addr.s_addr));
      } else if (family == AF_INET6 && room >= sizeof(sockaddr_in6)) {
        sockaddr_in6 from;
        std::memcpy(&from, off, sizeof from);
        out.error_offender = wire::IpAddr::from_bytes(from.sin6_addr.s6_addr);
      }
    }
  }
  return out;
}

}  // namespace uroce
