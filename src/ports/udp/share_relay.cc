// A shared device's relay (share.h): the member a datagram belongs to (owner), passing it on
// to that member's relay socket with the sender and TOS in a RelayHeader, the count that wakes
// the owner, and pass_on, which reads a socket leaving the group (or a round's temporary one)
// dry and passes on what it held. Apart from the registry and the rounds: the one path on which
// datagrams move between processes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "ports/udp/cmsg.h"
#include "ports/udp/share.h"
#include "ports/udp/share_registry.h"

namespace uroce {

using share_detail::at;
using share_detail::kFree;
using share_detail::kLive;
using share_detail::load;

int UdpShare::owner(const share::Destination& d) const {
  int owner = -1;
  if (d.kind == share::Destination::kSlot) {
    owner = static_cast<int>(d.value);
  } else if (d.kind == share::Destination::kService) {
    for (const auto& c : reg_->claims)
      if (load(c.used) && load(c.listening) &&
          (uint32_t{load(c.port_space)} << 16 | load(c.port)) == d.value) {
        owner = load(c.slot);
        break;
      }
  }
  if (owner < 0 || static_cast<uint32_t>(owner) >= share::kSlots ||
      static_cast<uint32_t>(owner) == slot_ || load(reg_->slots[owner].state) != kLive)
    return -1;
  return owner;
}

bool UdpShare::relay(uint32_t slot, const RelayHeader& h, const uint8_t* data, size_t len) {
  const uint32_t port = slot < share::kSlots ? load(reg_->slots[slot].relay_port) : 0;
  if (port == 0 || relay_fd_ < 0) return false;
  const share_detail::ShareAddr to(ip_, static_cast<uint16_t>(port), scope_id_);
  iovec iov[2] = {{const_cast<RelayHeader*>(&h), sizeof h}, {const_cast<uint8_t*>(data), len}};
  msghdr m{};
  m.msg_name = const_cast<sockaddr*>(to.get());
  m.msg_namelen = to.len;
  m.msg_iov = iov;
  m.msg_iovlen = 2;
  if (sendmsg(relay_fd_, &m, MSG_DONTWAIT) != static_cast<ssize_t>(sizeof h + len)) return false;
  // After the send: an owner that sees the count move reads its relay socket (relay_pending).
  at(reg_->slots[slot].relay_seq).fetch_add(1, std::memory_order_release);
  return true;
}

uint32_t UdpShare::relay_seq() const {
  return at(reg_->slots[slot_].relay_seq).load(std::memory_order_acquire);
}

bool UdpShare::from_member(const wire::IpAddr& ip, uint16_t port) const {
  if (ip != ip_ || port == 0) return false;
  for (const auto& sl : reg_->slots)
    if (load(sl.relay_port) == port && load(sl.state) != kFree) return true;
  return false;
}

void UdpShare::pass_on(int fd, std::optional<uint32_t> probe_round) {
  if (fd < 0) return;
  static thread_local std::vector<uint8_t> buf(65536);
  bool pending_error_seen = false;
  for (;;) {
    sockaddr_storage from{};
    iovec iov{buf.data(), buf.size()};
    alignas(cmsghdr) uint8_t ctrl[CMSG_SPACE(sizeof(int)) * 4];
    msghdr m{};
    m.msg_name = &from;
    m.msg_namelen = sizeof from;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctrl;
    m.msg_controllen = sizeof ctrl;
    const ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      // An ICMP error for a datagram this socket sent (IP_RECVERR, udp_port.h) is also its
      // pending error, which one receive returns in place of a datagram: the datagrams are still
      // there. The port reads the error queue itself.
      if (errno != EAGAIN && errno != EWOULDBLOCK && !pending_error_seen) {
        pending_error_seen = true;
        continue;
      }
      return;
    }
    const RxControl ctl = parse_rx_control(m);
    const uint8_t tos = ctl.tos;
    size_t seg = ctl.gro_segment;  // UDP GRO: datagrams of `seg` bytes, the last possibly shorter
    if (m.msg_flags & MSG_TRUNC) continue;
    const size_t len = static_cast<size_t>(n);
    if (seg == 0 || seg >= len) seg = len;
    RelayHeader h{kRelayMagic, 0, tos, 0, {}};
    if (!share_detail::read_share_addr(from, &h.src_ip, &h.src_port)) continue;
    for (size_t off = 0; off < len; off += seg) {
      const uint8_t* d = buf.data() + off;
      const size_t l = std::min(seg, len - off);
      if (auto p = share::parse_probe(d, l)) {
        if (probe_round && p->round == *probe_round) on_probe(*p);
      } else if (const int owner = owner_of(d, l); owner >= 0) {
        relay(static_cast<uint32_t>(owner), h, d, l);
      }
    }
  }
}

}  // namespace uroce
