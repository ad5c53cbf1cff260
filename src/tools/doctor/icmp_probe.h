// ICMP echo probes from a given source address to a peer: reachability and round trip, the
// path MTU (echo requests with DF set, of the sizes RoCE packets of each MTU have — the reply
// is as large, so both directions are measured), and whether the path keeps the TOS byte
// (Linux answers an echo with the request's TOS byte, DSCP and ECN alike: RFC 792 leaves it
// open, net/ipv4/icmp.c's icmp_reply copies it).
//
// Over IPv6 the same with ICMPv6 echo (RFC 4443 4.1-4.2): Linux answers with the request's
// Traffic Class (net/ipv6/icmp.c, icmpv6_echo_reply), and IPV6_PMTUDISC_PROBE makes every size
// leave unfragmented whatever the kernel has cached, as IP_PMTUDISC_PROBE does for IPv4.
//
// The socket: an unprivileged ICMP (ICMPv6) datagram socket where net.ipv4.ping_group_range
// allows it (the one setting governs both families), else a raw one (root or CAP_NET_RAW);
// without either no echo can be sent and the checks that need one are skipped with that reason.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tools/doctor/net_util.h"

namespace uroce::doctor {

struct EchoResult {
  bool answered = false;
  double rtt_us = 0;
  uint8_t reply_tos = 0;
  std::optional<IcmpError> error;  // what stopped it, when something said so
};

class Pinger {
 public:
  // nullptr and *why when no ICMP socket can be had or src is not this host's. src and dst are
  // of one family (IPv4-mapped: ICMP; IPv6: ICMPv6); scope_id: the interface of a link-local
  // IPv6 pair.
  static std::unique_ptr<Pinger> open(const wire::IpAddr& src, const wire::IpAddr& dst,
                                      uint32_t scope_id, std::string* why);
  ~Pinger();
  Pinger(const Pinger&) = delete;
  Pinger& operator=(const Pinger&) = delete;

  // One echo request of ip_bytes (IP header included, at least 28; 48 over IPv6) with DF set
  // (IPv6: not fragmented) and this TOS byte (Traffic Class); waits up to wait_ms for its reply.
  EchoResult echo(size_t ip_bytes, uint8_t tos, int wait_ms);
  bool raw() const { return raw_; }
  bool v6() const { return v6_; }

 private:
  // fd is connected to the peer (open)
  Pinger(int fd, bool raw, bool v6) : fd_(fd), raw_(raw), v6_(v6) {}
  int fd_;
  bool raw_;
  bool v6_;
  uint16_t id_ = 0;  // raw sockets: our echo identifier (datagram sockets: the kernel's)
  uint16_t seq_ = 0;
};

}  // namespace uroce::doctor
