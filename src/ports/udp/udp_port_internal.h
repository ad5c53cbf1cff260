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

sockaddr_in make_addr(uint32_t ip, uint16_t port);

// A UDP socket with DF set (IP_PMTUDISC_DO: never fragment, EMSGSIZE instead), bound to ip:port
// (in the port's SO_REUSEPORT group with `reuseport`), with IP_RECVERR on: ICMP errors for what
// it sends are queued for the port to read (udp_port.h). -1 and errno on failure.
int bound_socket(uint32_t ip, uint16_t port, bool reuseport = false);

}  // namespace udp_port_detail

// The relay socket's receive batch: each datagram's relay header, sender and buffers.
struct UdpPort::RelayRx {
  UdpShare::RelayHeader hdr[UdpPort::kRxBatch];
  sockaddr_in from[UdpPort::kRxBatch];
  iovec iov[UdpPort::kRxBatch][2];
  mmsghdr msgs[UdpPort::kRxBatch];
  uint32_t seen = 0;
  uint32_t idle_passes = 0;
};

}  // namespace uroce
