#include "tools/doctor/net_util.h"

#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

namespace uroce::doctor {
namespace {

// A message header for recvmsg: one buffer, the source address, room for control messages.
msghdr message_to(sockaddr_storage* from, iovec* iov, uint8_t* ctrl, size_t ctrl_len) {
  msghdr h{};
  h.msg_name = from;
  h.msg_namelen = sizeof *from;
  h.msg_iov = iov;
  h.msg_iovlen = 1;
  h.msg_control = ctrl;
  h.msg_controllen = ctrl_len;
  return h;
}

// The address in a sockaddr of either family (an IPv4 one IPv4-mapped); unspecified for others.
wire::IpAddr ip_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    sockaddr_in s;
    std::memcpy(&s, &a, sizeof s);
    return wire::IpAddr(ntohl(s.sin_addr.s_addr));
  }
  if (a.ss_family == AF_INET6) {
    sockaddr_in6 s;
    std::memcpy(&s, &a, sizeof s);
    return wire::IpAddr::from_bytes(s.sin6_addr.s6_addr);
  }
  return {};
}

// ICMPv6 (RFC 4443 3.1-3.3) in the words text() uses for ICMP.
std::string icmp6_text(uint8_t type, uint8_t code, uint32_t info) {
  if (type == 1) {
    switch (code) {
      case 0:
        return "no route to destination";
      case 1:
        return "administratively prohibited (a filter REJECTs it)";
      case 3:
        return "address unreachable";
      case 4:
        return "port unreachable";
      case 5:
      case 6:
        return "rejected by a policy or reject route (a filter REJECTs it)";
      default:
        return "destination unreachable (ICMPv6 code " + std::to_string(code) + ")";
    }
  }
  if (type == 2) return "packet too big (next hop MTU " + std::to_string(info) + ")";
  if (type == 3) return "time exceeded (a routing loop, or the hop limit ran out)";
  return "ICMPv6 type " + std::to_string(type) + " code " + std::to_string(code);
}

}  // namespace

socklen_t make_sockaddr(const wire::IpAddr& ip, uint16_t port, uint32_t scope_id,
                        sockaddr_storage* out) {
  std::memset(out, 0, sizeof *out);
  if (ip.is_v4()) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(ip.v4());
    a.sin_port = htons(port);
    std::memcpy(out, &a, sizeof a);
    return sizeof a;
  }
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  std::memcpy(&a.sin6_addr, ip.data(), 16);
  a.sin6_port = htons(port);
  a.sin6_scope_id = scope_id;
  std::memcpy(out, &a, sizeof a);
  return sizeof a;
}

std::string host_port(const wire::IpAddr& ip, uint16_t port) {
  std::string s = ip.is_v4() ? ip.to_string() : std::string("[").append(ip.to_string()).append("]");
  return s.append(":").append(std::to_string(port));
}

bool IcmpError::port_unreachable() const {
  return !local && (v6 ? type == 1 && code == 4 : type == 3 && code == 3);
}

std::string IcmpError::text() const {
  std::string t;
  if (local) {
    if (err == EMSGSIZE) return "larger than this host's route MTU " + std::to_string(info);
    // A veth refuses a packet larger than its other end's MTU this way: the drop a switch
    // port with a smaller MTU makes in silence.
    if (err == ENOBUFS)
      return "dropped as they leave this host (ENOBUFS: the interface refused them; a veth does "
             "for a packet larger than its other end's MTU)";
    return std::string("refused by this host: ") + std::strerror(err);
  }
  if (v6) {
    t = icmp6_text(type, code, info);
  } else if (type == 3) {
    switch (code) {
      case 0:
        t = "network unreachable";
        break;
      case 1:
        t = "host unreachable";
        break;
      case 3:
        t = "port unreachable";
        break;
      case 4:
        t = "fragmentation needed (next hop MTU " + std::to_string(info) + ")";
        break;
      case 9:
      case 10:
      case 13:
        t = "administratively prohibited (a filter REJECTs it)";
        break;
      default:
        t = "destination unreachable (code " + std::to_string(code) + ")";
    }
  } else if (type == 11) {
    t = "time exceeded (a routing loop, or the TTL ran out)";
  } else {
    t = "ICMP type " + std::to_string(type) + " code " + std::to_string(code);
  }
  if (offender != wire::IpAddr{}) t.append(" from ").append(offender.to_string());
  return t;
}

bool enable_recverr(int fd, int family) {
  int on = 1;
  return family == AF_INET6 ? setsockopt(fd, IPPROTO_IPV6, IPV6_RECVERR, &on, sizeof on) == 0
                            : setsockopt(fd, IPPROTO_IP, IP_RECVERR, &on, sizeof on) == 0;
}

std::optional<IcmpError> read_icmp_error(int fd) {
  uint8_t data[2048];
  alignas(cmsghdr) uint8_t ctrl[512];
  sockaddr_storage from{};
  iovec iov{data, sizeof data};
  msghdr h = message_to(&from, &iov, ctrl, sizeof ctrl);
  if (recvmsg(fd, &h, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return std::nullopt;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
    const bool v4 = c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR;
    const bool v6 = c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR;
    if (!v4 && !v6) continue;
    sock_extended_err ee;
    std::memcpy(&ee, CMSG_DATA(c), sizeof ee);
    IcmpError e;
    e.local = ee.ee_origin == SO_EE_ORIGIN_LOCAL;
    e.err = static_cast<int>(ee.ee_errno);
    e.type = ee.ee_type;
    e.code = ee.ee_code;
    e.info = ee.ee_info;
    e.v6 = ee.ee_origin == SO_EE_ORIGIN_ICMP6;
    // The offender's address follows the extended error in the same control message (a
    // sockaddr_in or, on an IPv6 socket, a sockaddr_in6).
    const size_t room = c->cmsg_len - CMSG_LEN(sizeof ee);
    if (c->cmsg_len > CMSG_LEN(sizeof ee) && room >= sizeof(sockaddr_in)) {
      sockaddr_storage off{};
      std::memcpy(&off, CMSG_DATA(c) + sizeof ee, std::min(room, sizeof off));
      if (off.ss_family == AF_INET || (off.ss_family == AF_INET6 && room >= sizeof(sockaddr_in6)))
        e.offender = ip_of(off);
    }
    return e;
  }
  return std::nullopt;
}

Datagram recv_datagram(int fd, uint8_t* buf, size_t size) {
  alignas(cmsghdr) uint8_t ctrl[128];
  sockaddr_storage from{};
  iovec iov{buf, size};
  msghdr h = message_to(&from, &iov, ctrl, sizeof ctrl);
  Datagram d;
  d.len = recvmsg(fd, &h, MSG_DONTWAIT);
  if (d.len <= 0) return d;
  d.from = ip_of(from);
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1))
      d.tos = *CMSG_DATA(c);
    // IPv6 reports the Traffic Class as an int (RFC 3542 6.5), not a byte.
    if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS &&
        c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int tc;
      std::memcpy(&tc, CMSG_DATA(c), sizeof tc);
      d.tos = static_cast<uint8_t>(tc);
    }
  }
  return d;
}

bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r > 0) return true;  // POLLIN, or POLLERR: an error is queued
    if (r < 0 && errno != EINTR) return false;
  }
}

const char* ecn_name(uint8_t tos) {
  static constexpr const char* kEcn[4] = {"Not-ECT", "ECT(1)", "ECT(0)", "CE"};
  return kEcn[ecn_of(tos)];
}

std::string describe_tos(uint8_t tos) {
  return "DSCP " + std::to_string(dscp_of(tos)) + ", " + ecn_name(tos);
}

}  // namespace uroce::doctor
