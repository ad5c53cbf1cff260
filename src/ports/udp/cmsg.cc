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
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR &&
        c->cmsg_len >= CMSG_LEN(sizeof(sock_extended_err))) {
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(c), sizeof ee);
      out.error = ee;
      out.error_offender_ip = 0;
      sockaddr_in from;  // SO_EE_OFFENDER: who sent the ICMP
      if (c->cmsg_len >= CMSG_LEN(sizeof ee + sizeof from)) {
        std::memcpy(&from, CMSG_DATA(c) + sizeof ee, sizeof from);
        if (from.sin_family == AF_INET) out.error_offender_ip = ntohl(from.sin_addr.s_addr);
      }
    }
  }
  return out;
}

}  // namespace uroce
