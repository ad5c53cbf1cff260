#include "tools/doctor/roce_probe.h"

#include <arpa/inet.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "cm/mad.h"
#include "tools/doctor/net_util.h"
#include "transport/wire/icrc.h"
#include "transport/wire/wire.h"

namespace uroce::doctor {
namespace {

constexpr uint16_t kRocePort = 4791;
constexpr uint32_t kGsiQpn = 1;
constexpr uint32_t kGsiQkey = 0x80010000;  // IBTA 13.5.1: the GSI's well-known Q_Key

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Where the answer can be read: a UDP socket on src:4791 of our own, or a raw socket that
// sees a copy of every UDP datagram (when a uroce process holds the port). false and *why when
// neither is possible.
// The TOS byte (IPv4) or Traffic Class (IPv6) of each datagram fd receives, as a control message.
void want_tos(int fd, bool v6) {
  int on = 1;
  if (v6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &on, sizeof on);
  } else {
    setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof on);
  }
}

bool open_listener(const wire::IpAddr& src, uint32_t scope_id, Fd& fd, bool& raw,
                   std::string* why) {
  const bool v6 = !src.is_v4();
  const int family = v6 ? AF_INET6 : AF_INET;
  fd.fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd.fd < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  int on = 1;
  if (v6) setsockopt(fd.fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
  sockaddr_storage a;
  const socklen_t alen = make_sockaddr(src, kRocePort, scope_id, &a);
  if (bind(fd.fd, reinterpret_cast<const sockaddr*>(&a), alen) == 0) {
    want_tos(fd.fd, v6);
    raw = false;
    return true;
  }
  const int bind_err = errno;
  close(fd.fd);
  // An IPv4 raw socket hands over the IP header too; an IPv6 one only what follows it (the UDP
  // header), with the source in the address and the Traffic Class as a control message.
  fd.fd = socket(family, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_UDP);
  if (fd.fd >= 0) {
    if (v6) want_tos(fd.fd, true);
    raw = true;
    return true;
  }
  *why = "cannot hear the answer: " + host_port(src, kRocePort) + " is taken (" +
         std::strerror(bind_err) +
         ": a uroce process has the device open) and a raw socket needs root or CAP_NET_RAW";
  return false;
}

}  // namespace

std::vector<uint8_t> build_sidr_probe(const wire::IpAddr& src, const wire::IpAddr& dst,
                                      uint16_t src_port, uint32_t request_id, uint64_t tid) {
  wire::Packet p;
  p.bth.opcode = static_cast<uint8_t>(wire::Opcode::kUdSendOnly);
  p.bth.dest_qp = kGsiQpn;
  p.bth.psn = request_id & 0xffffff;
  p.deth.qkey = kGsiQkey;
  p.deth.src_qp = kGsiQpn;
  cm::SidrReq req;
  req.request_id = request_id;
  req.service_id = kProbeServiceId;
  cm::Mad mad;
  cm::encode(req, tid, mad);
  std::vector<uint8_t> out(wire::kBthBytes + wire::kDethBytes + mad.size() + 4);
  const size_t hdr = wire::build_headers(p, out.data());
  std::memcpy(out.data() + hdr, mad.data(), mad.size());
  const size_t ib = hdr + mad.size();
  uint32_t crc;
  if (src.is_v4() && dst.is_v4()) {
    wire::Ipv4UdpFraming f;
    f.src_ip = src.v4();
    f.dst_ip = dst.v4();
    f.src_port = src_port;
    crc = wire::icrc(f, {out.data(), ib});
  } else {
    wire::Ipv6UdpFraming f;
    f.src = src;
    f.dst = dst;
    f.src_port = src_port;
    crc = wire::icrc(f, {out.data(), ib});
  }
  wire::store_le32(out.data() + ib, crc);
  out.resize(ib + 4);
  return out;
}

std::optional<SidrAnswer> parse_sidr_answer(std::span<const uint8_t> udp_payload,
                                            uint32_t request_id) {
  if (udp_payload.size() < wire::kBthBytes + 4) return std::nullopt;
  wire::Packet p;
  if (wire::parse(udp_payload.first(udp_payload.size() - 4), p) != wire::ParseError::kOk)
    return std::nullopt;
  if (p.bth.opcode != static_cast<uint8_t>(wire::Opcode::kUdSendOnly) || p.bth.dest_qp != kGsiQpn ||
      p.payload.size() < cm::kMadBytes)
    return std::nullopt;
  cm::MadHeader h;
  const auto mad = p.payload.first(cm::kMadBytes);
  if (!cm::parse_header(mad, &h) || h.attr_id != static_cast<uint16_t>(cm::AttrId::kSidrRep))
    return std::nullopt;
  const cm::SidrRep rep = cm::decode_sidr_rep(mad.data() + cm::kMadHeaderBytes);
  if (rep.request_id != request_id) return std::nullopt;
  return SidrAnswer{static_cast<uint8_t>(rep.status)};
}

const char* sidr_status_text(uint8_t status) {
  switch (static_cast<cm::SidrStatus>(status)) {
    case cm::SidrStatus::kQpValid:
      return "QP valid";
    case cm::SidrStatus::kServiceIdNotSupported:
      return "service ID not supported";
    case cm::SidrStatus::kRejected:
      return "rejected";
    case cm::SidrStatus::kNoQp:
      return "no QP";
    case cm::SidrStatus::kRedirect:
      return "redirect";
    case cm::SidrStatus::kUnsupportedVersion:
      return "unsupported version";
  }
  return "unknown status";
}

RoceProbeResult probe_udp4791(const wire::IpAddr& src, const wire::IpAddr& dst, uint32_t scope_id,
                              int attempts, int wait_ms) {
  RoceProbeResult r;
  if (src.is_v4() != dst.is_v4()) {  // doctor.cc never asks; a caller that does gets a reason
    r.detail = "cannot probe " + dst.to_string() + " from " + src.to_string() +
               ": the addresses are of two families";
    return r;
  }
  const bool v6 = !src.is_v4();
  const int family = v6 ? AF_INET6 : AF_INET;
  Fd rx, tx;
  bool raw = false;
  if (!open_listener(src, scope_id, rx, raw, &r.detail)) return r;
  // The request leaves from an unconnected DF socket of its own, so its IP ID is 0 (what the
  // ICRC was computed over) and the kernel queues the ICMP errors it provokes here. (IPv6: the
  // ICRC covers no such field; the socket is unfragmented, as RoCE's are.)
  tx.fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage from;
  const socklen_t from_len = make_sockaddr(src, 0, scope_id, &from);
  int pmtu = v6 ? IPV6_PMTUDISC_DO : IP_PMTUDISC_DO;
  if (tx.fd < 0 || bind(tx.fd, reinterpret_cast<const sockaddr*>(&from), from_len) != 0 ||
      (v6 ? setsockopt(tx.fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof pmtu)
          : setsockopt(tx.fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu)) != 0 ||
      !enable_recverr(tx.fd, family)) {
    r.detail = "cannot send from " + src.to_string() + ": " + std::strerror(errno);
    return r;
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  getsockname(tx.fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  // The port sits at one offset in both sockaddr_in and sockaddr_in6.
  const uint16_t src_port = ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  std::random_device rd;
  const uint32_t request_id = rd() | 1;
  const uint64_t tid = uint64_t{rd()} << 32 | rd();
  const std::vector<uint8_t> probe = build_sidr_probe(src, dst, src_port, request_id, tid);
  sockaddr_storage to;
  const socklen_t to_len = make_sockaddr(dst, kRocePort, scope_id, &to);
  for (r.attempts = 1; r.attempts <= attempts; ++r.attempts) {
    const auto sent_at = std::chrono::steady_clock::now();
    if (sendto(tx.fd, probe.data(), probe.size(), 0, reinterpret_cast<const sockaddr*>(&to),
               to_len) < 0 &&
        errno != ECONNREFUSED && errno != EHOSTUNREACH) {
      r.outcome = RoceProbeResult::Outcome::kIcmpError;
      r.detail = std::string("send failed: ") + std::strerror(errno);
      return r;
    }
    const auto deadline = sent_at + std::chrono::milliseconds(wait_ms);
    pollfd p[2] = {{rx.fd, POLLIN, 0}, {tx.fd, POLLIN, 0}};
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || poll(p, 2, static_cast<int>(left.count())) <= 0) break;
      if (p[1].revents) {
        if (auto e = read_icmp_error(tx.fd)) {
          r.outcome = e->port_unreachable() ? RoceProbeResult::Outcome::kPortUnreachable
                                            : RoceProbeResult::Outcome::kIcmpError;
          r.detail = e->text();
          return r;
        }
        uint8_t junk[64];
        (void)recv(tx.fd, junk, sizeof junk, MSG_DONTWAIT);
      }
      if (!(p[0].revents & POLLIN)) continue;
      uint8_t buf[2048];
      const Datagram d = recv_datagram(rx.fd, buf, sizeof buf);
      if (d.len <= 0) continue;
      std::span<const uint8_t> payload(buf, static_cast<size_t>(d.len));
      uint8_t tos = d.tos;
      wire::IpAddr from_ip = d.from;
      if (raw && v6) {  // a UDP header before the payload: only datagrams to 4791 count
        if (payload.size() < 8 || (uint16_t(payload[2]) << 8 | payload[3]) != kRocePort) continue;
        payload = payload.subspan(8);
      } else if (raw) {  // an IP header and a UDP header before the payload: only to 4791 count
        if (payload.size() < 20) continue;
        const size_t ihl = size_t(payload[0] & 0xf) * 4;
        if (payload.size() < ihl + 8) continue;
        tos = payload[1];
        from_ip = wire::IpAddr(uint32_t(payload[12]) << 24 | uint32_t(payload[13]) << 16 |
                               uint32_t(payload[14]) << 8 | payload[15]);
        if ((uint16_t(payload[ihl + 2]) << 8 | payload[ihl + 3]) != kRocePort) continue;
        payload = payload.subspan(ihl + 8);
      }
      if (from_ip != dst) continue;
      if (auto a = parse_sidr_answer(payload, request_id)) {
        r.outcome = RoceProbeResult::Outcome::kAnswered;
        r.sidr_status = a->status;
        r.reply_tos = tos;
        r.rtt_us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - sent_at)
                .count();
        return r;
      }
    }
  }
  r.attempts = attempts;
  r.outcome = RoceProbeResult::Outcome::kSilence;
  r.detail = raw ? "listened through a raw socket" : "";
  return r;
}

}  // namespace uroce::doctor
