#include "tools/doctor/icmp_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "engine/config.h"

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

std::unique_ptr<Pinger> Pinger::open(uint32_t src_ip, uint32_t dst_ip, std::string* why) {
  bool raw = false;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_ICMP);
  if (fd < 0) {
    fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
    raw = true;
  }
  if (fd < 0) {
    *why =
        "no ICMP socket: needs net.ipv4.ping_group_range to include this group, or root "
        "(CAP_NET_RAW)";
    return nullptr;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(src_ip);
  sockaddr_in d{};
  d.sin_family = AF_INET;
  d.sin_addr.s_addr = htonl(dst_ip);
  // PROBE: DF on every request, and the kernel's cached path MTU ignored, so each size is
  // really tried on the wire (only the interface's own MTU stops one here, with EMSGSIZE).
  int pmtu = IP_PMTUDISC_PROBE, on = 1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&d), sizeof d) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof on) != 0 || !enable_recverr(fd)) {
    *why = "ICMP socket from " + format_ipv4(src_ip) + " to " + format_ipv4(dst_ip) + ": " +
           std::strerror(errno);
    close(fd);
    return nullptr;
  }
  auto p = std::unique_ptr<Pinger>(new Pinger(fd, raw));
  std::random_device rd;
  p->id_ = static_cast<uint16_t>(rd());
  return p;
}

Pinger::~Pinger() {
  close(fd_);
}

EchoResult Pinger::echo(size_t ip_bytes, uint8_t tos, int wait_ms) {
  EchoResult r;
  constexpr size_t kIpIcmp = 20 + 8;
  if (ip_bytes < kIpIcmp) ip_bytes = kIpIcmp;
  int t = tos;
  setsockopt(fd_, IPPROTO_IP, IP_TOS, &t, sizeof t);
  while (read_icmp_error(fd_)) {
  }  // errors of earlier probes are theirs
  const uint16_t seq = ++seq_;
  std::vector<uint8_t> pkt(ip_bytes - 20);
  pkt[0] = ICMP_ECHO;
  pkt[4] = uint8_t(id_ >> 8);
  pkt[5] = uint8_t(id_);
  pkt[6] = uint8_t(seq >> 8);
  pkt[7] = uint8_t(seq);
  for (size_t i = 8; i < pkt.size(); ++i) pkt[i] = uint8_t(i);
  const uint16_t ck = inet_checksum(pkt.data(), pkt.size());
  pkt[2] = uint8_t(ck >> 8);
  pkt[3] = uint8_t(ck);
  const auto sent_at = std::chrono::steady_clock::now();
  if (send(fd_, pkt.data(), pkt.size(), 0) < 0) {
    IcmpError e;
    e.local = true;
    e.err = errno;
    socklen_t len = sizeof e.info;
    if (errno == EMSGSIZE) getsockopt(fd_, IPPROTO_IP, IP_MTU, &e.info, &len);
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
    if (raw_) {  // a raw socket sees the IP header, and every ICMP message to this host
      const size_t ihl = size_t(buf[0] & 0xf) * 4;
      if (size_t(n) < ihl + 8) continue;
      tos_in = buf[1];
      off = ihl;
      if ((uint16_t(buf[off + 4]) << 8 | buf[off + 5]) != id_) continue;
    }
    if (size_t(n) < off + 8 || buf[off] != ICMP_ECHOREPLY ||
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
