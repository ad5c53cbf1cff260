// What the kernel-UDP port's files share (udp_port.h is the port): its sockets' making, used by
// the set-up (udp_port.cc) and the send path (udp_port_tx.cc), and the receive buffers of the
// relay socket, made by the set-up and read by the receive path (udp_port_rx.cc). Internal to
// the port.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>

#include "ports/udp/share.h"
#include "ports/udp/udp_port.h"

namespace uroce {

namespace udp_port_detail {

// A socket address of either family: sockaddr_in for an IPv4-mapped address, sockaddr_in6 for
// an IPv6 one (with the interface index of a link-local address). A device's sockets are all of
// its address's family, so a destination of the other family never reaches one (tx_commit).
struct SockAddr {
  union {
    sockaddr sa;
    sockaddr_in v4;
    sockaddr_in6 v6;
  } u{};
  static SockAddr make(const wire::IpAddr& ip, uint16_t port, uint32_t scope_id = 0);
  // What recvmsg wrote at `p` (`len` bytes): false when it is no address of either family.
  static bool read(const void* p, socklen_t len, wire::IpAddr* ip, uint16_t* port);
  sockaddr* get() { return &u.sa; }
  socklen_t len() const { return u.sa.sa_family == AF_INET6 ? sizeof u.v6 : sizeof u.v4; }
};

// A UDP socket with DF set (IP_PMTUDISC_DO / IPV6_PMTUDISC_DO: never fragment, EMSGSIZE
// instead), bound to ip:port (in the port's SO_REUSEPORT group with `reuseport`), with
// IP_RECVERR / IPV6_RECVERR on: ICMP errors for what it sends are queued for the port to read
// (udp_port.h). An IPv6 one is IPV6_V6ONLY: it neither receives nor sends IPv4. -1 and errno on
// failure.
int bound_socket(const wire::IpAddr& ip, uint32_t scope_id, uint16_t port, bool reuseport = false);

}  // namespace udp_port_detail

// The relay socket's receive batch: each datagram's relay header, sender and buffers.
struct UdpPort::RelayRx {
  UdpShare::RelayHeader hdr[UdpPort::kRxBatch];
  sockaddr_in6 from[UdpPort::kRxBatch];  // either family (SockAddr::read)
  iovec iov[UdpPort::kRxBatch][2];
  mmsghdr msgs[UdpPort::kRxBatch];
  uint32_t seen = 0;
  uint32_t idle_passes = 0;
};

}  // namespace uroce
