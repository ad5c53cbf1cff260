// The control messages a received datagram, or an error-queue entry, comes with — read in one
// place for the port's receive (UdpPort::receive), its error queue (UdpPort::read_errors) and the
// share's pass-on of another member's datagrams (UdpShare::pass_on), which ask for the same
// ones: IP_TOS (IP_RECVTOS) or IPV6_TCLASS (IPV6_RECVTCLASS), UDP_GRO's segment size,
// SO_RXQ_OVFL's drop count and IP_RECVERR's / IPV6_RECVERR's sock_extended_err with the ICMP's
// sender (ip(7), ipv6(7), udp(7), socket(7)).
#pragma once

#include <sys/socket.h>
#include <time.h>  // before linux/errqueue.h, which uses struct timespec without it

#include <linux/errqueue.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "transport/wire/ip.h"

namespace uroce {

struct RxControl {
  // The IPv4 TOS byte or IPv6 Traffic Class: DSCP << 2 | ECN (IP_TOS, IPV6_TCLASS); 0 when the
  // message has none.
  uint8_t tos = 0;
  // UDP GRO: the buffer holds datagrams of this many bytes, the last possibly shorter; 0: one
  // datagram.
  size_t gro_segment = 0;
  // The socket's running count of drops, wrapping at 2^32 (SO_RXQ_OVFL); absent: none reported.
  std::optional<uint32_t> overflow_drops;
  // An error-queue entry's error (IP_RECVERR): ee_origin, ee_type and ee_code say what it was.
  std::optional<sock_extended_err> error;
  // Who sent the ICMP or ICMPv6 of `error` (SO_EE_OFFENDER), IPv4-mapped for IPv4; :: when not
  // given.
  wire::IpAddr error_offender{};
};

// Reads every control message of `h` (the kernel writes one error per error-queue entry; were
// there two IP_RECVERRs, the last would be kept).
RxControl parse_rx_control(const msghdr& h);

}  // namespace uroce
