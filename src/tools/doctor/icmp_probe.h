// ICMP echo probes from a given source address to a peer: reachability and round trip, the
// path MTU (echo requests with DF set, of the sizes RoCE packets of each MTU have — the reply
// is as large, so both directions are measured), and whether the path keeps the TOS byte
// (Linux answers an echo with the request's TOS byte, DSCP and ECN alike: RFC 792 leaves it
// open, net/ipv4/icmp.c's icmp_reply copies it).
//
// The socket: an unprivileged ICMP datagram socket where net.ipv4.ping_group_range allows it,
// else a raw one (root or CAP_NET_RAW); without either no echo can be sent and the checks
// that need one are skipped with that reason.
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
  // nullptr and *why when no ICMP socket can be had or src_ip is not this host's.
  static std::unique_ptr<Pinger> open(uint32_t src_ip, uint32_t dst_ip, std::string* why);
  ~Pinger();
  Pinger(const Pinger&) = delete;
  Pinger& operator=(const Pinger&) = delete;

  // One echo request of ip_bytes (IP header included, at least 28) with DF set and this TOS
  // byte; waits up to wait_ms for its reply.
  EchoResult echo(size_t ip_bytes, uint8_t tos, int wait_ms);
  bool raw() const { return raw_; }

 private:
  Pinger(int fd, bool raw) : fd_(fd), raw_(raw) {}  // fd is connected to the peer (open)
  int fd_;
  bool raw_;
  uint16_t id_ = 0;  // raw sockets: our echo identifier (datagram sockets: the kernel's)
  uint16_t seq_ = 0;
};

}  // namespace uroce::doctor
