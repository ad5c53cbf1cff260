// The kernel-UDP port's receive path (udp_port.h): a burst from the device's socket, the relay
// socket (what another process sharing the device passes on) and the multicast groups' sockets;
// each datagram's control messages (cmsg.h), a GRO buffer cut back into datagrams, and, on a
// shared socket, what belongs to another member passed on. Apart from the set-up and the send
// path so that what happens to an arriving datagram reads in one file.
#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <mutex>

#include "ports/udp/cmsg.h"
#include "ports/udp/share.h"
#include "ports/udp/udp_port.h"
#include "ports/udp/udp_port_internal.h"
#include "util/log.h"

namespace uroce {
namespace {

// How often an empty receive pass reads the relay socket although no member's count moved: a
// wake-up by that socket can come before its relayer's count does (UdpShare::relay counts after
// the send), and a waiter woken for it would otherwise spin until it did.
constexpr uint32_t kRelayPollEvery = 64;

}  // namespace

std::span<const RxFrame> UdpPort::rx_burst() {
  rx_out_.clear();
  // A send met an earlier datagram's pending error (tx_burst): read what the queues say now,
  // rather than leave a thread that sleeps on the wait fds woken by EPOLLERR until the engine's
  // next look at the control fd.
  if (errq_pending_.load(std::memory_order_relaxed) && errq_pending_.exchange(false))
    service_control(/*with_link=*/false);
  size_t used = receive(fd_, opt_.addr(), 0);
  if (relay_ && used < rx_slots_) used += receive_relayed(used);
  if (has_groups_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(mcast_mu_);
    for (auto& [group, fd] : groups_) {
      if (used == rx_slots_) break;  // the rest waits for the next pass (epoll stays readable)
      used += receive(fd, wire::IpAddr(group), used);
    }
  }
  return rx_out_;
}

void UdpPort::deliver(const RxFrame& f, bool shared_socket) {
  if (shared_socket && !f.truncated) {
    // Where the steering program would have sent it (share::destination_of), decided once.
    const share::Destination d = share::destination_of(f.data, f.len);
    const int owner = share_->owner(d);
    // For another process's QP or connection (a packet for a QP this process destroyed is not):
    // the steering sent it astray while the group changed, or its owner is gone.
    if (owner >= 0 || (d.kind == share::Destination::kSlot && d.value != share_->slot())) {
      counters_.rx_share_other_slot.add();
      if (log().should_log(spdlog::level::debug))
        log().debug("udp port: slot {} got a datagram for slot {} (owner {}) from port {}",
                    share_->slot(), d.value, owner, f.src_port);
    }
    if (owner >= 0 && relay_) {
      const UdpShare::RelayHeader h{UdpShare::kRelayMagic, f.src_port, f.tos, 0, f.src_ip};
      if (share_->relay(static_cast<uint32_t>(owner), h, f.data, f.len)) {
        if (counters_.rx_share_relayed_out.get() == 0)
          log().info(
              "{}: slot {} passes on datagrams the steering brought here for slot {} (the "
              "processes sharing the device changed; rx_share_relayed_out counts them)",
              describe(), share_->slot(), owner);
        counters_.rx_share_relayed_out.add();
        return;
      }
      counters_.rx_share_relay_failed.add();  // kept: dropped as an unknown QP, as before
    }
  }
  rx_out_.push_back(f);
}

size_t UdpPort::receive_relayed(size_t slot) {
  // A load instead of a system call on every pass, busy polls included: the socket is read when
  // a member's count moved, and now and then regardless (kRelayPollEvery).
  const uint32_t seq = share_->relay_seq();
  if (seq == relay_->seen && ++relay_->idle_passes % kRelayPollEvery != 0) return 0;
  relay_->seen = seq;
  const size_t max = std::min(rx_slots_ - slot, kRxBatch);
  RelayRx& r = *relay_;
  for (size_t i = 0; i < max; ++i) {
    r.iov[i][0] = {&r.hdr[i], sizeof r.hdr[i]};
    r.iov[i][1] = rx_slot_[slot + i].iov;
    msghdr& h = r.msgs[i].msg_hdr;
    h = {};
    h.msg_name = &r.from[i];
    h.msg_namelen = sizeof r.from[i];
    h.msg_iov = r.iov[i];
    h.msg_iovlen = 2;
  }
  int n;
  do {
    n = recvmmsg(share_->relay_fd(), r.msgs, static_cast<unsigned>(max), MSG_DONTWAIT, nullptr);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return 0;
  for (int i = 0; i < n; ++i) {
    const msghdr& h = r.msgs[i].msg_hdr;
    const UdpShare::RelayHeader& hdr = r.hdr[i];
    const size_t len = r.msgs[i].msg_len;
    // Only a member's relay socket can send from the addresses checked here; anything else that
    // found the port is not a packet.
    wire::IpAddr from_ip;
    uint16_t from_port = 0;
    if (len < sizeof hdr || hdr.magic != UdpShare::kRelayMagic ||
        !udp_port_detail::SockAddr::read(&r.from[i], h.msg_namelen, &from_ip, &from_port) ||
        !share_->from_member(from_ip, from_port)) {
      counters_.rx_port_errors.add();
      continue;
    }
    RxFrame f;
    f.src_ip = hdr.src_ip;
    f.src_port = hdr.src_port;
    f.dst_ip = opt_.addr();
    f.dst_port = opt_.port;
    f.tos = hdr.tos;
    f.data = static_cast<const uint8_t*>(rx_slot_[slot + static_cast<size_t>(i)].iov.iov_base);
    f.len = static_cast<uint32_t>(len - sizeof hdr);
    f.truncated = (h.msg_flags & MSG_TRUNC) != 0;
    counters_.rx_share_relayed_in.add();
    rx_out_.push_back(f);
  }
  return static_cast<size_t>(n);
}

void UdpPort::reset_rx_slot(size_t i) {
  msghdr& h = rx_msgs_[i].msg_hdr;
  h = {};
  h.msg_name = &rx_slot_[i].from;
  h.msg_namelen = sizeof rx_slot_[i].from;
  h.msg_iov = &rx_slot_[i].iov;
  h.msg_iovlen = 1;
  h.msg_control = rx_slot_[i].ctrl;
  h.msg_controllen = sizeof rx_slot_[i].ctrl;
  rx_msgs_[i].msg_len = 0;
}

size_t UdpPort::receive(int fd, const wire::IpAddr& dst_ip, size_t slot) {
  const size_t max = rx_slots_ - slot;
  mmsghdr* msgs = rx_msgs_.get() + slot;
  int n;
  do {
    n = recvmmsg(fd, msgs, static_cast<unsigned>(max), MSG_DONTWAIT, nullptr);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
    // An ICMP error for a datagram this socket sent is also its pending error, which the receive
    // returns once in place of datagrams (udp_port.h): not a socket failure. Read what it says,
    // then receive what waits.
    read_errors(fd);
    do {
      n = recvmmsg(fd, msgs, static_cast<unsigned>(max), MSG_DONTWAIT, nullptr);
    } while (n < 0 && errno == EINTR);
  }
  if (n <= 0) return 0;
  // The frames point into the slots' buffers, which stay put; their headers are ready for the
  // next call once read (below).
  struct Reset {
    UdpPort* port;
    size_t first, count;
    ~Reset() {
      for (size_t i = 0; i < count; ++i) port->reset_rx_slot(first + i);
    }
  } reset{this, slot, static_cast<size_t>(n)};

  const bool shared = share_ && fd == fd_;
  for (int i = 0; i < n; ++i) {
    const msghdr& h = msgs[i].msg_hdr;
    const uint8_t* buf = static_cast<const uint8_t*>(h.msg_iov->iov_base);
    size_t len = msgs[i].msg_len;
    RxFrame f;
    if (!udp_port_detail::SockAddr::read(&rx_slot_[slot + static_cast<size_t>(i)].from,
                                         h.msg_namelen, &f.src_ip, &f.src_port)) {
      counters_.rx_port_errors.add();
      continue;
    }
    if (shared && len == share::kProbeBytes) {
      // A probe round measuring where our socket sits in the group (share.h): not a packet.
      if (auto probe = share::parse_probe(buf, len)) {
        share_->on_probe(*probe);
        continue;
      }
    }
    // Each socket is bound to one address (the device's, or a group), so only datagrams for it
    // arrive there.
    f.dst_ip = dst_ip;
    f.dst_port = opt_.port;
    const RxControl ctl = parse_rx_control(h);
    f.tos = ctl.tos;
    if (ctl.overflow_drops && *ctl.overflow_drops != rx_overflow_seen_) {
      // The socket's running count of drops (wrapping at 2^32): count what is new.
      counters_.rx_socket_overflow.add(*ctl.overflow_drops - rx_overflow_seen_);
      rx_overflow_seen_ = *ctl.overflow_drops;
    }
    const size_t seg = ctl.gro_segment;  // 0: one datagram
    f.truncated = (h.msg_flags & MSG_TRUNC) != 0;
    // A GRO buffer holds datagrams of `seg` bytes, the last possibly shorter, all from one
    // sender with one TOS (udp_gro_receive merges only such). A truncated one is one drop:
    // where its datagrams end is unknown past the buffer (cannot happen with a full-size slot).
    if (seg == 0 || seg >= len || f.truncated) {
      f.data = buf;
      f.len = static_cast<uint32_t>(len);
      deliver(f, shared);
      continue;
    }
    for (size_t off = 0; off < len; off += seg) {
      f.data = buf + off;
      f.len = static_cast<uint32_t>(std::min(seg, len - off));
      deliver(f, shared);
    }
  }
  return static_cast<size_t>(n);
}

}  // namespace uroce
