#include "tools/doctor/net_util.h"

#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>

#include "engine/config.h"

namespace uroce::doctor {
namespace {

// A message header for recvmsg: one buffer, the source address, room for control messages.
msghdr message_to(sockaddr_in* from, iovec* iov, uint8_t* ctrl, size_t ctrl_len) {
  msghdr h{};
  h.msg_name = from;
  h.msg_namelen = sizeof *from;
  h.msg_iov = iov;
  h.msg_iovlen = 1;
  h.msg_control = ctrl;
  h.msg_controllen = ctrl_len;
  return h;
}

}  // namespace

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
  if (type == 3) {
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
  if (offender != 0) t += " from " + format_ipv4(offender);
  return t;
}

bool enable_recverr(int fd) {
  int on = 1;
  return setsockopt(fd, IPPROTO_IP, IP_RECVERR, &on, sizeof on) == 0;
}

std::optional<IcmpError> read_icmp_error(int fd) {
  uint8_t data[2048];
  alignas(cmsghdr) uint8_t ctrl[512];
  sockaddr_in from{};
  iovec iov{data, sizeof data};
  msghdr h = message_to(&from, &iov, ctrl, sizeof ctrl);
  if (recvmsg(fd, &h, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return std::nullopt;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
    if (c->cmsg_level != IPPROTO_IP || c->cmsg_type != IP_RECVERR) continue;
    sock_extended_err ee;
    std::memcpy(&ee, CMSG_DATA(c), sizeof ee);
    IcmpError e;
    e.local = ee.ee_origin == SO_EE_ORIGIN_LOCAL;
    e.err = static_cast<int>(ee.ee_errno);
    e.type = ee.ee_type;
    e.code = ee.ee_code;
    e.info = ee.ee_info;
    // The offender's address follows the extended error in the same control message.
    if (c->cmsg_len >= CMSG_LEN(sizeof ee + sizeof(sockaddr_in))) {
      sockaddr_in off;
      std::memcpy(&off, CMSG_DATA(c) + sizeof ee, sizeof off);
      if (off.sin_family == AF_INET) e.offender = ntohl(off.sin_addr.s_addr);
    }
    return e;
  }
  return std::nullopt;
}

Datagram recv_datagram(int fd, uint8_t* buf, size_t size) {
  alignas(cmsghdr) uint8_t ctrl[128];
  sockaddr_in from{};
  iovec iov{buf, size};
  msghdr h = message_to(&from, &iov, ctrl, sizeof ctrl);
  Datagram d;
  d.len = recvmsg(fd, &h, MSG_DONTWAIT);
  if (d.len <= 0) return d;
  d.from_ip = ntohl(from.sin_addr.s_addr);
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1))
      d.tos = *CMSG_DATA(c);
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
