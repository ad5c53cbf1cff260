// The socket plumbing doctor's probes share, for IPv4 and IPv6 alike: socket addresses of either
// family, ICMP and ICMPv6 errors from a socket's error queue (IP_RECVERR, IPV6_RECVERR), the TOS
// byte or Traffic Class of a received datagram (IP_RECVTOS, IPV6_RECVTCLASS), waiting for a
// reply with a deadline, and how ECN and DSCP read in a TOS byte (the Traffic Class has the same
// layout, RFC 2474 and 3168).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <sys/socket.h>
#include <sys/types.h>

#include "transport/wire/ip.h"

namespace uroce::doctor {

// The socket address of ip:port: a sockaddr_in for an IPv4(-mapped) address, else a
// sockaddr_in6 with scope_id (the interface of a link-local address). Returns its length.
socklen_t make_sockaddr(const wire::IpAddr& ip, uint16_t port, uint32_t scope_id,
                        sockaddr_storage* out);
// The address family doctor's sockets for ip use: AF_INET for an IPv4(-mapped) one, else AF_INET6.
inline int family_of(const wire::IpAddr& ip) {
  return ip.is_v4() ? AF_INET : AF_INET6;
}
// "10.0.0.2:4791", "[fd00::2]:4791" (RFC 3986's brackets around an IPv6 address).
std::string host_port(const wire::IpAddr& ip, uint16_t port);

// An ICMP (or ICMPv6) error the kernel queued on a socket for a datagram it sent (IP_RECVERR,
// IPV6_RECVERR), or a local one (EMSGSIZE: larger than the interface or the known path MTU).
struct IcmpError {
  bool local = false;          // raised by this host (SO_EE_ORIGIN_LOCAL), not received
  int err = 0;                 // the errno it maps to (ECONNREFUSED, EHOSTUNREACH, EMSGSIZE, …)
  uint8_t type = 0, code = 0;  // ICMP's, or ICMPv6's when v6
  uint32_t info = 0;  // ICMP "fragmentation needed", ICMPv6 "packet too big": the next hop's MTU
  wire::IpAddr offender{};  // who sent it; unspecified (::) when unknown
  bool v6 = false;          // type and code are ICMPv6's (RFC 4443), not ICMP's (RFC 792)
  // "port unreachable from 10.0.0.2", "fragmentation needed (MTU 1500) from 10.0.1.1",
  // "packet too big (next hop MTU 1280) from fd00::1"
  std::string text() const;
  // The peer's host said nothing listens there (ICMP 3/3, ICMPv6 1/4), received, not local.
  bool port_unreachable() const;
};
// The oldest error queued on fd, if any (non-blocking).
std::optional<IcmpError> read_icmp_error(int fd);
// Turns IP_RECVERR (IPV6_RECVERR on an AF_INET6 socket) on; false if the kernel refuses.
bool enable_recverr(int fd, int family);

// One datagram read without waiting: its length (<= 0: none), its source and its TOS byte or
// Traffic Class (from IP_RECVTOS or IPV6_RECVTCLASS; 0 on a socket that does not report it).
struct Datagram {
  ssize_t len = -1;
  wire::IpAddr from{};
  uint8_t tos = 0;
};
Datagram recv_datagram(int fd, uint8_t* buf, size_t size);

// Waits until fd is readable (or has an error queued, POLLERR) or the deadline passes; false on
// timeout.
bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline);

// "DSCP 26, ECT(0)"; ecn_name: "ECT(0)" (RFC 3168's names of the ECN field's four values).
std::string describe_tos(uint8_t tos);
const char* ecn_name(uint8_t tos);
inline uint8_t dscp_of(uint8_t tos) {
  return tos >> 2;
}
inline uint8_t ecn_of(uint8_t tos) {
  return tos & 3;
}

}  // namespace uroce::doctor
