#include "tools/doctor/icmp_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/icmp6.h>
#include <netinet/ip_icmp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

namespace uroce::doctor {
namespace {

uint16_t inet_checksum(const uint8_t* p, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < n; i += 2) sum += uint32_t(p[i]) << 8 | p[i + 1];
  if (n & 1) sum += uint32_t(p[n - 1]) << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

}  // namespace

std::unique_ptr<Pinger> Pinger::open(const wire::IpAddr& src, const wire::IpAddr& dst,
                                     uint32_t scope_id, std::string* why) {
  const bool v6 = !dst.is_v4();
  const int family = v6 ? AF_INET6 : AF_INET;
  const int proto = v6 ? int{IPPROTO_ICMPV6} : int{IPPROTO_ICMP};
  bool raw = false;
  int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, proto);
  if (fd < 0) {
    fd = socket(family, SOCK_RAW | SOCK_CLOEXEC, proto);
    raw = true;
  }
  if (fd < 0) {
    *why = std::string("no ") + (v6 ? "ICMPv6" : "ICMP") +
           " socket: needs net.ipv4.ping_group_range to include this group, or root "
           "(CAP_NET_RAW)";
    return nullptr;
  }
  sockaddr_storage a, d;
  const socklen_t alen = make_sockaddr(src, 0, scope_id, &a);
  const socklen_t dlen = make_sockaddr(dst, 0, scope_id, &d);
  // PROBE: DF on every request (IPv6: no fragmenting here), and the kernel's cached path MTU
  // ignored, so each size is really tried on the wire (only the interface's own MTU stops one
  // here, with EMSGSIZE).
  int on = 1;
  int pmtu = v6 ? IPV6_PMTUDISC_PROBE : IP_PMTUDISC_PROBE;
  const bool opts = v6 ? setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof pmtu) == 0 &&
                             setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &on, sizeof on) == 0
                       : setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu) == 0 &&
                             setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof on) == 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), alen) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&d), dlen) != 0 || !opts ||
      !enable_recverr(fd, family)) {
    *why = std::string(v6 ? "ICMPv6" : "ICMP") + " socket from " + src.to_string() + " to " +
           dst.to_string() + ": " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  auto p = std::unique_ptr<Pinger>(new Pinger(fd, raw, v6));
  std::random_device rd;
  p->id_ = static_cast<uint16_t>(rd());
  return p;
}

Pinger::~Pinger() {
  close(fd_);
}

EchoResult Pinger::echo(size_t ip_bytes, uint8_t tos, int wait_ms) {
  EchoResult r;
  const size_t ip_header = v6_ ? 40 : 20;
  if (ip_bytes < ip_header + 8) ip_bytes = ip_header + 8;
  int t = tos;
  if (v6_) {
    setsockopt(fd_, IPPROTO_IPV6, IPV6_TCLASS, &t, sizeof t);
  } else {
    setsockopt(fd_, IPPROTO_IP, IP_TOS, &t, sizeof t);
  }
  while (read_icmp_error(fd_)) {
  }  // errors of earlier probes are theirs
  const uint16_t seq = ++seq_;
  std::vector<uint8_t> pkt(ip_bytes - ip_header);
  pkt[0] = v6_ ? ICMP6_ECHO_REQUEST : ICMP_ECHO;
  pkt[4] = uint8_t(id_ >> 8);
  pkt[5] = uint8_t(id_);
  pkt[6] = uint8_t(seq >> 8);
  pkt[7] = uint8_t(seq);
  for (size_t i = 8; i < pkt.size(); ++i) pkt[i] = uint8_t(i);
  if (!v6_) {
    // ICMPv6's checksum covers a pseudo-header with the addresses: the kernel fills it in on
    // ICMPv6 sockets, raw and datagram alike (RFC 3542 3.1).
    const uint16_t ck = inet_checksum(pkt.data(), pkt.size());
    pkt[2] = uint8_t(ck >> 8);
    pkt[3] = uint8_t(ck);
  }
  const auto sent_at = std::chrono::steady_clock::now();
  if (send(fd_, pkt.data(), pkt.size(), 0) < 0) {
    IcmpError e;
    e.local = true;
    e.err = errno;
    socklen_t len = sizeof e.info;
    if (errno == EMSGSIZE) {
      if (v6_) {
        getsockopt(fd_, IPPROTO_IPV6, IPV6_MTU, &e.info, &len);
      } else {
        getsockopt(fd_, IPPROTO_IP, IP_MTU, &e.info, &len);
      }
    }
    r.error = e;
    return r;
  }
  const auto deadline = sent_at + std::chrono::milliseconds(wait_ms);
  while (wait_readable(fd_, deadline)) {
    if (auto e = read_icmp_error(fd_)) {
      r.error = e;
      if (!e->local) return r;  // an ICMP error about our request (frag needed, unreachable)
      continue;
    }
    std::vector<uint8_t> buf(ip_bytes + 64);
    const Datagram d = recv_datagram(fd_, buf.data(), buf.size());
    const ssize_t n = d.len;
    if (n <= 0) continue;
    size_t off = 0;
    uint8_t tos_in = d.tos;
    // A raw ICMPv6 socket sees every ICMPv6 message to this host (our own request too, on
    // loopback), without the IPv6 header: the Traffic Class comes with IPV6_RECVTCLASS.
    if (raw_ && v6_ && (size_t(n) < 8 || (uint16_t(buf[4]) << 8 | buf[5]) != id_)) continue;
    if (raw_ && !v6_) {  // a raw socket sees the IP header, and every ICMP message to this host
      const size_t ihl = size_t(buf[0] & 0xf) * 4;
      if (size_t(n) < ihl + 8) continue;
      tos_in = buf[1];
      off = ihl;
      if ((uint16_t(buf[off + 4]) << 8 | buf[off + 5]) != id_) continue;
    }
    if (size_t(n) < off + 8 || buf[off] != (v6_ ? ICMP6_ECHO_REPLY : ICMP_ECHOREPLY) ||
        (uint16_t(buf[off + 6]) << 8 | buf[off + 7]) != seq)
      continue;
    r.answered = true;
    r.reply_tos = tos_in;
    r.rtt_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - sent_at)
                   .count();
    return r;
  }
  return r;
}

}  // namespace uroce::doctor
