#include "ports/udp/udp_port.h"

#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <linux/filter.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <net/if.h>
#include <sys/ioctl.h>

#include "ports/link_watch.h"
#include "ports/udp/cmsg.h"
#include "ports/udp/share.h"
#include "util/log.h"
#include "wire/icrc.h"
#include "wire/wire.h"

namespace uroce {
namespace {

std::string format_ip(uint32_t ip) {
  in_addr a{htonl(ip)};
  char buf[INET_ADDRSTRLEN];
  return inet_ntop(AF_INET, &a, buf, sizeof buf) ? buf : "?";
}

std::string endpoint(uint32_t ip, uint16_t port) {
  return format_ip(ip) + ":" + std::to_string(port);
}

// The interface's MTU (SIOCGIFMTU), or 1500 when the interface is unknown.
uint32_t netdev_mtu(const std::string& netdev) {
  if (netdev.empty() || netdev.size() >= IFNAMSIZ) return 1500;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 1500;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, netdev.c_str(), netdev.size());
  uint32_t mtu = 1500;
  if (ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0) mtu = static_cast<uint32_t>(ifr.ifr_mtu);
  close(fd);
  return mtu;
}

sockaddr_in make_addr(uint32_t ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip);
  a.sin_port = htons(port);
  return a;
}

// A UDP socket with DF set (IP_PMTUDISC_DO: never fragment, EMSGSIZE instead), bound to ip:port
// (in the port's SO_REUSEPORT group with `reuseport`), with IP_RECVERR on: ICMP errors for what
// it sends are queued for the port to read (udp_port.h). -1 and errno on failure.
int bound_socket(uint32_t ip, uint16_t port, bool reuseport = false) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int on = 1;
  if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  int pmtu = IP_PMTUDISC_DO;
  sockaddr_in a = make_addr(ip, port);
  // Packets for a multicast group leave the device's interface, not the default route's.
  in_addr mif{};
  mif.s_addr = htonl(ip);
  if (setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &mif, sizeof mif) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_RECVERR, &on, sizeof on) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// How often an empty receive pass reads the relay socket although no member's count moved: a
// wake-up by that socket can come before its relayer's count does (UdpShare::relay counts after
// the send), and a waiter woken for it would otherwise spin until it did.
constexpr uint32_t kRelayPollEvery = 64;

// Error-queue entries read per socket and call: the rest keeps the control fd readable for the
// engine's next look, so a flood of ICMP errors cannot hold a receive pass.
constexpr int kMaxErrorsPerRead = 64;

// Errors a send or receive can return in place of its work when an earlier datagram's error is
// pending on the socket (IP_RECVERR: ip_icmp_error / ip_local_error set sk_err, which the next
// call returns once — sock_error()): ICMP destination unreachable by code (icmp_err_convert),
// time exceeded and parameter problem, and a path MTU too small for a DF datagram.
bool deferred_error(int e) {
  switch (e) {
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EHOSTDOWN:
    case ENONET:
    case ENOPROTOOPT:
    case EPROTO:
    case EMSGSIZE:
      return true;
    default:
      return false;
  }
}

// Accept nothing on a send-only socket (classic BPF "ret #0" drops every packet); a receive
// buffer as small as the kernel allows. false when the filter cannot be attached.
bool make_send_only(int fd) {
  sock_filter drop_all{BPF_RET | BPF_K, 0, 0, 0};
  sock_fprog prog{1, &drop_all};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) return false;
  int small = 1;  // the kernel rounds up to its minimum
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  return true;
}

}  // namespace

struct UdpPort::RelayRx {
  UdpShare::RelayHeader hdr[UdpPort::kRxBatch];
  sockaddr_in from[UdpPort::kRxBatch];
  iovec iov[UdpPort::kRxBatch][2];
  mmsghdr msgs[UdpPort::kRxBatch];
  uint32_t seen = 0;
  uint32_t idle_passes = 0;
};

UdpPort::UdpPort(const UdpPortOptions& opt, PortCounters& counters)
    : opt_(opt),
      counters_(counters),
      rx_slots_(opt.gso ? kGroRxBatch : kRxBatch),
      rx_slot_bytes_(opt.gso ? kGroBufBytes : kRxBufBytes),
      rx_bufs_(new uint8_t[rx_slots_ * rx_slot_bytes_]),
      tx_bufs_(new transport::TxBuf[kTxRing]),
      tx_route_(new int[kTxRing]) {
  rx_out_.reserve(opt.gso ? kGroRxBatch * kGsoMaxSegments : kRxBatch);
  rx_slot_.reset(new RxSlot[rx_slots_]);
  rx_msgs_.reset(new mmsghdr[rx_slots_]);
  for (size_t i = 0; i < rx_slots_; ++i) {
    rx_slot_[i].iov = {rx_bufs_.get() + i * rx_slot_bytes_, rx_slot_bytes_};
    reset_rx_slot(i);
  }
  free_.reserve(kTxRing);
  for (size_t i = kTxRing; i-- > 0;) free_.push_back(static_cast<uint16_t>(i));
  caps_.ip_mtu = netdev_mtu(opt.netdev);
  caps_.exact_icrc = false;        // a socket never shows the IP header
  caps_.ipv4_csum_offload = true;  // the kernel writes IP headers
  caps_.multicast = true;
  caps_.tx_batching = opt.gso;
  // sendmmsg copies every datagram out of its iovecs before it returns: a payload can be sent
  // from the memory region it lies in, in one copy (the kernel's) instead of two. Two more
  // iovecs cost the kernel little: even 1 KiB payloads break even (docs/performance.md).
  caps_.tx_gather_min = 512;
}

UdpPort::~UdpPort() {
  for (auto& [port, fd] : src_socks_)
    if (fd >= 0) close(fd);
  for (auto& [group, fd] : groups_) close(fd);
  if (fallback_fd_ >= 0) close(fallback_fd_);
  if (mcast_epfd_ >= 0) close(mcast_epfd_);
  if (ctl_epfd_ >= 0) close(ctl_epfd_);
  if (share_)
    share_.reset();  // leaves the group: closes fd_
  else if (fd_ >= 0)
    close(fd_);
}

PortShare* UdpPort::share() {
  return share_.get();
}

std::unique_ptr<UdpPort> UdpPort::open(const UdpPortOptions& opt, PortCounters& counters,
                                       std::string* err) {
  std::unique_ptr<UdpPort> p(new UdpPort(opt, counters));
  if (opt.share) {
    // The share binds the socket (it must join the group under the registry's lock); its options
    // are set below, as for a socket of our own.
    p->share_ = UdpShare::join(
        opt.ipv4, opt.port,
        [ip = opt.ipv4, port = opt.port] { return bound_socket(ip, port, /*reuseport=*/true); },
        err);
    p->fd_ = p->share_ ? p->share_->fd() : -1;
  } else {
    p->fd_ = bound_socket(opt.ipv4, opt.port);
  }
  if (p->fd_ < 0) {
    int e = errno;
    if (err && opt.share && !err->empty() && e != EADDRINUSE && e != EADDRNOTAVAIL) {
      *err = "cannot bind UDP " + endpoint(opt.ipv4, opt.port) + ": " + *err;
      return nullptr;
    }
    if (err) {
      *err = "cannot bind UDP " + endpoint(opt.ipv4, opt.port) + ": " + std::strerror(e);
      if (e == EADDRINUSE)
        *err += opt.share ? " (a program that does not share it — rxe, another user's uroce "
                            "process — already uses this address)"
                          : " (another uroce process, or rxe, already uses this address)";
      else if (e == EADDRNOTAVAIL)
        *err += " (the address is not configured on this host)";
    }
    return nullptr;
  }
  p->mcast_epfd_ = epoll_create1(EPOLL_CLOEXEC);
  p->ctl_epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (p->mcast_epfd_ < 0 || p->ctl_epfd_ < 0) {
    if (err) *err = std::string("epoll_create1: ") + std::strerror(errno);
    return nullptr;
  }
  p->wait_fds_ = {p->fd_, p->mcast_epfd_, -1};
  if (p->share_ && p->share_->relay_fd() >= 0) {
    p->relay_ = std::make_unique<RelayRx>();
    p->relay_->seen = p->share_->relay_seq();
    p->wait_fds_[2] = p->share_->relay_fd();
    p->n_wait_fds_ = 3;
  }
  int on = 1;
  if (setsockopt(p->fd_, IPPROTO_IP, IP_RECVTOS, &on, sizeof on) != 0) {
    if (err) *err = std::string("setsockopt(IP_RECVTOS): ") + std::strerror(errno);
    return nullptr;
  }
  // Bigger socket buffers absorb bursts while the engine is busy. The receive buffer is what many
  // QPs' send windows fill at once (8 QPs of 256 packets of 4 KiB are 8 MiB): with the privilege
  // for it (CAP_NET_ADMIN) it goes past net.core.rmem_max; otherwise the kernel caps it there.
  // What still overflows is counted (SO_RXQ_OVFL, rx_socket_overflow).
  int bytes = 4 << 20;
  const int rcv = opt.rcvbuf_bytes;
  if (setsockopt(p->fd_, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) != 0)
    setsockopt(p->fd_, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  setsockopt(p->fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  setsockopt(p->fd_, SOL_SOCKET, SO_RXQ_OVFL, &on, sizeof on);
  p->enable_gro(p->fd_);
  if (!opt.netdev.empty()) {
    std::string why;
    p->link_ = LinkWatch::open(opt.netdev, &why);
    if (!p->link_)
      log().warn("{}: cannot watch the link state of {} ({}); the port reports ACTIVE",
                 endpoint(opt.ipv4, opt.port), opt.netdev, why);
  }
  if (p->link_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = p->link_->fd();
    if (epoll_ctl(p->ctl_epfd_, EPOLL_CTL_ADD, ev.data.fd, &ev) != 0) {
      if (err) *err = std::string("epoll_ctl: ") + std::strerror(errno);
      return nullptr;
    }
  }
  p->watch_errors(p->fd_);
  return p;
}

std::string UdpPort::describe() const {
  std::string d = "udp " + endpoint(opt_.ipv4, opt_.port);
  if (!opt_.netdev.empty()) d += " on " + opt_.netdev;
  return d;
}

int UdpPort::control_fd() const {
  return ctl_epfd_;
}

bool UdpPort::on_control() {
  return service_control(/*with_link=*/true);
}

void UdpPort::watch_errors(int fd) {
  // No event asked for: epoll always reports EPOLLERR, which a socket shows while its error
  // queue holds anything (sock_poll). A send-only socket never becomes readable otherwise.
  epoll_event ev{};
  ev.events = 0;
  ev.data.fd = fd;
  if (epoll_ctl(ctl_epfd_, EPOLL_CTL_ADD, fd, &ev) != 0)
    log().warn("{}: epoll_ctl: {}; ICMP errors for this socket are not read", describe(),
               std::strerror(errno));
}

bool UdpPort::service_control(bool with_link) {
  epoll_event evs[16];
  int n;
  do {
    n = epoll_wait(ctl_epfd_, evs, 16, 0);
  } while (n < 0 && errno == EINTR);
  bool changed = false;
  for (int i = 0; i < n; ++i) {
    if (link_ && evs[i].data.fd == link_->fd()) {
      if (with_link) changed = link_->drain() || changed;  // else the engine's next look
    } else {
      read_errors(evs[i].data.fd);
    }
  }
  return changed;
}

void UdpPort::read_errors(int fd) {
  std::lock_guard<std::mutex> g(errq_mu_);
  for (int i = 0; i < kMaxErrorsPerRead; ++i) {
    // The queued skb is the datagram's UDP payload as the ICMP quoted it: the BTH first.
    uint8_t quoted[16];
    sockaddr_in dst{};
    alignas(cmsghdr) uint8_t
        ctrl[CMSG_SPACE(sizeof(sock_extended_err) + sizeof(sockaddr_in)) + CMSG_SPACE(sizeof(int))];
    iovec iov{quoted, sizeof quoted};
    msghdr h{};
    h.msg_name = &dst;  // the datagram's destination (ip_recv_error)
    h.msg_namelen = sizeof dst;
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = ctrl;
    h.msg_controllen = sizeof ctrl;
    const ssize_t r = recvmsg(fd, &h, MSG_ERRQUEUE | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      return;  // EAGAIN: the queue is empty (and the socket's pending error cleared with it)
    }
    const RxControl ctl = parse_rx_control(h);
    if (!ctl.error) continue;
    const sock_extended_err& ee = *ctl.error;
    // Local errors (EMSGSIZE for a DF datagram above the path MTU: the send said so) and other
    // ICMP types (time exceeded) tell the layers above nothing they can act on.
    if (ee.ee_origin != SO_EE_ORIGIN_ICMP || ee.ee_type != PortEvent::kIcmpDestUnreach) continue;
    counters_.rx_icmp_unreachable.add();
    PortEvent ev;
    ev.kind = PortEvent::Kind::kUnreachable;
    ev.dst_ip = ntohl(dst.sin_addr.s_addr);
    ev.dst_port = ntohs(dst.sin_port);
    ev.icmp_type = ee.ee_type;
    ev.icmp_code = ee.ee_code;
    ev.reporter_ip = ctl.error_offender_ip;
    if (r >= 8) {  // BTH: opcode at byte 0, DestQP at bytes 5..7 (IBTA 9.2)
      ev.opcode = quoted[0];
      ev.dest_qp = uint32_t{quoted[5]} << 16 | uint32_t{quoted[6]} << 8 | quoted[7];
    }
    if (sink_) sink_->on_port_event(ev);
  }
}

bool UdpPort::link_up() const {
  return !link_ || link_->up();
}

void UdpPort::enable_gro(int fd) {
  if (!opt_.gso) return;
  int on = 1;
  setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on);
}

std::span<const RxFrame> UdpPort::rx_burst() {
  rx_out_.clear();
  // A send met an earlier datagram's pending error (tx_burst): read what the queues say now,
  // rather than leave a thread that sleeps on the wait fds woken by EPOLLERR until the engine's
  // next look at the control fd.
  if (errq_pending_.load(std::memory_order_relaxed) && errq_pending_.exchange(false))
    service_control(/*with_link=*/false);
  size_t used = receive(fd_, opt_.ipv4, 0);
  if (relay_ && used < rx_slots_) used += receive_relayed(used);
  if (has_groups_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(mcast_mu_);
    for (auto& [group, fd] : groups_) {
      if (used == rx_slots_) break;  // the rest waits for the next pass (epoll stays readable)
      used += receive(fd, group, used);
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
      const UdpShare::RelayHeader h{UdpShare::kRelayMagic, f.src_ip, f.src_port, f.tos, 0};
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
    if (len < sizeof hdr || hdr.magic != UdpShare::kRelayMagic ||
        h.msg_namelen < sizeof(sockaddr_in) ||
        !share_->from_member(ntohl(r.from[i].sin_addr.s_addr), ntohs(r.from[i].sin_port))) {
      counters_.rx_port_errors.add();
      continue;
    }
    RxFrame f;
    f.src_ip = hdr.src_ip;
    f.src_port = hdr.src_port;
    f.dst_ip = opt_.ipv4;
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

size_t UdpPort::receive(int fd, uint32_t dst_ip, size_t slot) {
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
    const sockaddr_in& from = rx_slot_[slot + static_cast<size_t>(i)].from;
    const uint8_t* buf = static_cast<const uint8_t*>(h.msg_iov->iov_base);
    size_t len = msgs[i].msg_len;
    if (h.msg_namelen < sizeof(sockaddr_in)) {
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
    RxFrame f;
    f.src_ip = ntohl(from.sin_addr.s_addr);
    f.src_port = ntohs(from.sin_port);
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

int UdpPort::join_group(uint32_t group) {
  if ((group >> 28) != 0xe) return EINVAL;  // 224.0.0.0/4 (RFC 5771)
  std::lock_guard<std::mutex> g(mcast_mu_);
  if (groups_.count(group)) return 0;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  int on = 1;
  sockaddr_in a = make_addr(group, opt_.port);
  ip_mreq mreq{};
  mreq.imr_multiaddr.s_addr = htonl(group);
  mreq.imr_interface.s_addr = htonl(opt_.ipv4);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof on) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mreq, sizeof mreq) != 0 ||
      epoll_ctl(mcast_epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    int e = errno;
    close(fd);
    return e;
  }
  int bytes = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  enable_gro(fd);
  groups_.emplace(group, fd);
  has_groups_.store(true, std::memory_order_release);
  return 0;
}

void UdpPort::leave_group(uint32_t group) {
  std::lock_guard<std::mutex> g(mcast_mu_);
  auto it = groups_.find(group);
  if (it == groups_.end()) return;
  // Closing the socket drops its membership and removes it from the epoll set.
  close(it->second);
  groups_.erase(it);
  has_groups_.store(!groups_.empty(), std::memory_order_release);
}

transport::TxBuf* UdpPort::tx_alloc() {
  if (free_.empty()) return nullptr;
  uint16_t i = free_.back();
  free_.pop_back();
  transport::TxBuf* b = &tx_bufs_[i];
  b->dst_ip = 0;
  b->src_port = 0;
  b->ecn = transport::kEcnNotEct;
  b->dscp = transport::kDscpPortDefault;
  b->pcp = transport::kPcpPortDefault;
  b->len = 0;
  b->ip_id = 0;
  return b;
}

void UdpPort::tx_free(transport::TxBuf* buf) {
  free_.push_back(static_cast<uint16_t>(index_of(buf)));
}

int UdpPort::send_fd_for(uint16_t requested, uint16_t* actual) {
  *actual = opt_.port;
  if (requested == 0 || requested == opt_.port) return fd_;
  auto it = src_socks_.find(requested);
  if (it == src_socks_.end()) {
    int fd = -1;
    if (src_sock_count_ < opt_.max_src_port_sockets) {
      fd = bound_socket(opt_.ipv4, requested);
      if (fd >= 0) {
        // This socket only sends.
        if (!make_send_only(fd)) {
          close(fd);
          fd = -1;
        } else {
          ++src_sock_count_;
          counters_.tx_src_port_sockets.add();
          watch_errors(fd);
        }
      }
    }
    it = src_socks_.emplace(requested, fd).first;
  }
  if (it->second < 0) {
    counters_.tx_src_port_fallback.add();
    return share_ ? own_fallback(actual) : fd_;
  }
  *actual = requested;
  return it->second;
}

int UdpPort::own_fallback(uint16_t* actual) {
  *actual = opt_.port;
  if (fallback_fd_ < 0) {
    int fd = bound_socket(opt_.ipv4, 0);  // the kernel picks a free port
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (fd < 0) return fd_;
    if (!make_send_only(fd) || getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      close(fd);
      return fd_;
    }
    fallback_fd_ = fd;
    fallback_port_ = ntohs(a.sin_port);
    watch_errors(fd);
  }
  *actual = fallback_port_;
  return fallback_fd_;
}

uint16_t UdpPort::src_port_for(uint16_t requested) {
  uint16_t actual;
  send_fd_for(requested, &actual);
  return actual;
}

namespace {

// The BTH DestQP of a packet (IBTA 9.2: bytes 5..7).
uint32_t dest_qp(const transport::TxBuf& b) {
  return uint32_t{b.data[5]} << 16 | uint32_t{b.data[6]} << 8 | b.data[7];
}
constexpr uint32_t kGsiQpn = 1;

}  // namespace

void UdpPort::tx_prepare(std::span<transport::TxBuf* const> bufs, bool batch) {
  for (transport::TxBuf* b : bufs) {
    tx_route_[index_of(b)] = send_fd_for(b->src_port, &b->src_port);
    b->ip_id = 0;
  }
  if (!batch || !opt_.gso) return;
  // Runs for UDP GSO: consecutive packets from one socket to one destination QP with one TOS and
  // equal sizes, only the last shorter, within the GSO limits. The receiving host steers a GSO
  // send by its first datagram (a shared device's program, docs/architecture.md), so a run never
  // mixes destination QPs, nor holds CM MADs (QP1: each steered by its own IDs). The kernel cuts
  // such a send back into exactly these datagrams, numbering their IP IDs from 0; each segment is
  // no larger than a packet the kernel takes alone, so the path MTU holds.
  size_t i = 0;
  while (i < bufs.size()) {
    const transport::TxBuf& first = *bufs[i];
    const int fd = tx_route_[index_of(&first)];
    const size_t seg = first.ib_len() + wire::kIcrcBytes;
    size_t count = 1, bytes = seg;
    if (std::find(no_gso_fds_.begin(), no_gso_fds_.end(), fd) == no_gso_fds_.end()) {
      while (i + count < bufs.size() && count < kGsoMaxSegments) {
        transport::TxBuf& b = *bufs[i + count];
        size_t len = b.ib_len() + wire::kIcrcBytes;
        if (tx_route_[index_of(&b)] != fd || b.dst_ip != first.dst_ip || b.ecn != first.ecn ||
            b.dscp != first.dscp || len > seg || bytes + len > kGsoMaxBytes ||
            dest_qp(b) != dest_qp(first) || dest_qp(first) == kGsiQpn)
          break;
        b.ip_id = static_cast<uint16_t>(count);
        ++count;
        bytes += len;
        if (len < seg) break;  // a shorter one ends the run
      }
    }
    i += count;
  }
}

namespace {

// The TOS byte of a packet: its DSCP (RFC 2474) and ECN codepoint (RFC 3168).
int tos_of(const transport::TxBuf& b) {
  const uint8_t dscp = b.dscp == transport::kDscpPortDefault ? 0 : b.dscp;
  return (dscp & 0x3f) << 2 | (b.ecn & 3);
}

// Per-packet TOS and, for a GSO send, the segment size. Writes the control messages into `ctrl`
// (zeroed whole: the kernel reads CMSG_SPACE bytes, padding included) and sets h's control
// fields; none when not needed.
void set_tx_cmsgs(msghdr& h, uint8_t* ctrl, size_t ctrl_bytes, int tos, uint16_t gso_size) {
  h.msg_control = nullptr;
  h.msg_controllen = 0;
  if (tos == 0 && gso_size == 0) return;
  std::memset(ctrl, 0, ctrl_bytes);
  h.msg_control = ctrl;
  h.msg_controllen = ctrl_bytes;
  size_t used = 0;
  cmsghdr* c = CMSG_FIRSTHDR(&h);
  if (tos != 0) {
    c->cmsg_level = IPPROTO_IP;
    c->cmsg_type = IP_TOS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &tos, sizeof tos);
    used += CMSG_SPACE(sizeof(int));
    c = CMSG_NXTHDR(&h, c);
  }
  if (gso_size != 0) {
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    std::memcpy(CMSG_DATA(c), &gso_size, sizeof gso_size);
    used += CMSG_SPACE(sizeof(uint16_t));
  }
  h.msg_controllen = used;
}

constexpr size_t kTxCtrlBytes = CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(uint16_t));

// A packet's bytes and ICRC as iovecs at `iov`: one when they are contiguous; three when its
// payload lies in the memory region (TxBuf::ext) — headers, payload, then the ICRC, which the
// pipeline put right after the headers. Returns how many.
size_t packet_iovecs(transport::TxBuf& b, iovec* iov) {
  if (b.ext_len == 0) {
    iov[0] = {b.data, b.len + wire::kIcrcBytes};
    return 1;
  }
  iov[0] = {b.data, b.len};
  iov[1] = {const_cast<uint8_t*>(b.ext), b.ext_len};
  iov[2] = {b.data + b.len, wire::kIcrcBytes};
  return 3;
}

}  // namespace

size_t UdpPort::tx_burst(std::span<transport::TxBuf* const> bufs) {
  size_t sent = 0;
  size_t i = 0;
  // One message per datagram, or per GSO run (tx_prepare numbered a run's IP IDs 0, 1, 2 …):
  // bufs[first, first + count).
  struct Msg {
    size_t first, count;
  };
  mmsghdr msgs[kTxBatch];
  Msg meta[kTxBatch];
  iovec iov[3 * kTxRing];  // per packet of the messages being sent (packet_iovecs)
  sockaddr_in to[kTxBatch];
  alignas(cmsghdr) uint8_t ctrl[kTxBatch][kTxCtrlBytes];
  while (i < bufs.size()) {
    const int fd = tx_route_[index_of(bufs[i])];
    // Messages from a run of consecutive packets that leave from the same socket, in order.
    size_t n = 0;
    size_t end = i;  // position after the last packet taken
    while (end < bufs.size() && n < kTxBatch && tx_route_[index_of(bufs[end])] == fd) {
      const transport::TxBuf& first = *bufs[end];
      size_t count = 1;
      while (end + count < bufs.size() && bufs[end + count]->ip_id == count &&
             tx_route_[index_of(bufs[end + count])] == fd)
        ++count;
      to[n] = make_addr(first.dst_ip, opt_.dst_port);
      msghdr& h = msgs[n].msg_hdr;
      h = {};
      h.msg_name = &to[n];
      h.msg_namelen = sizeof to[n];
      meta[n] = {end, count};
      set_tx_cmsgs(h, ctrl[n], sizeof ctrl[n], tos_of(first),
                   count > 1 ? static_cast<uint16_t>(first.ib_len() + wire::kIcrcBytes) : 0);
      ++n;
      end += count;
    }
    // Each packet's iovecs (packet_iovecs); a GSO message takes the consecutive entries of its
    // run, which the kernel concatenates before segmenting.
    size_t v = 0;
    for (size_t m = 0; m < n; ++m) {
      msgs[m].msg_hdr.msg_iov = &iov[v];
      for (size_t k = meta[m].first; k < meta[m].first + meta[m].count; ++k)
        v += packet_iovecs(*bufs[k], &iov[v]);
      msgs[m].msg_hdr.msg_iovlen = static_cast<size_t>(&iov[v] - msgs[m].msg_hdr.msg_iov);
    }
    // sendmmsg stops at the first refused message: count and skip it, send the rest — unless
    // the refusal was an earlier datagram's pending error (an ICMP error: udp_port.h), which the
    // kernel returns once: that message is sent again, and the error queue read.
    size_t done = 0;
    bool resent = false;
    while (done < n) {
      int r = sendmmsg(fd, msgs + done, static_cast<unsigned>(n - done), 0);
      if (r < 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        if (!resent && deferred_error(e)) {
          resent = true;
          errq_pending_.store(true, std::memory_order_relaxed);
          continue;
        }
        resent = false;
        const Msg& m = meta[done];
        ++done;
        if (m.count > 1 && (e == EIO || e == EINVAL)) {
          // GSO refused (udp_send_skb: EIO without checksum offload on the route's device,
          // EINVAL for what the kernel cannot segment). Resend one by one; when that works the
          // socket cannot do GSO, so it stops trying. When it does not, the packets themselves
          // were refused (e.g. larger than the path MTU) and GSO stays on.
          size_t ok = send_singly(fd, bufs.subspan(m.first, m.count));
          sent += ok;
          if (ok > 0 &&
              std::find(no_gso_fds_.begin(), no_gso_fds_.end(), fd) == no_gso_fds_.end()) {
            no_gso_fds_.push_back(fd);
            counters_.tx_gso_fallback.add();
          }
          continue;
        }
        counters_.tx_errors.add(m.count);
        continue;
      }
      resent = false;
      for (int k = 0; k < r; ++k) {
        const Msg& m = meta[done + k];
        counters_.sent_pkts.add(m.count);
        counters_.sent_bytes.add(msgs[done + k].msg_len);
        sent += m.count;
      }
      done += static_cast<size_t>(r);
    }
    i = end;
  }
  for (transport::TxBuf* b : bufs) tx_free(b);
  return sent;
}

size_t UdpPort::send_singly(int fd, std::span<transport::TxBuf* const> bufs) {
  size_t ok = 0;
  for (transport::TxBuf* bp : bufs) {
    transport::TxBuf& b = *bp;
    // Alone, the packet leaves with IP ID 0: its ICRC changes with that.
    wire::Ipv4UdpFraming f;
    f.src_ip = opt_.ipv4;
    f.dst_ip = b.dst_ip;
    f.ip_id = 0;
    f.dont_fragment = true;
    f.src_port = b.src_port;
    f.dst_port = opt_.dst_port;
    b.ip_id = 0;
    wire::store_le32(b.data + b.len, wire::icrc(f, {b.data, b.len}, {b.ext, b.ext_len}));
    sockaddr_in to = make_addr(b.dst_ip, opt_.dst_port);
    iovec iov[3];
    msghdr h{};
    h.msg_name = &to;
    h.msg_namelen = sizeof to;
    h.msg_iov = iov;
    h.msg_iovlen = packet_iovecs(b, iov);
    alignas(cmsghdr) uint8_t ctrl[kTxCtrlBytes];
    set_tx_cmsgs(h, ctrl, sizeof ctrl, tos_of(b), 0);
    ssize_t r;
    bool resent = false;
    for (;;) {
      r = sendmsg(fd, &h, 0);
      if (r >= 0 || errno == EINTR) {
        if (r >= 0) break;
        continue;
      }
      if (resent || !deferred_error(errno)) break;
      resent = true;  // an earlier datagram's pending error (as in tx_burst)
      errq_pending_.store(true, std::memory_order_relaxed);
    }
    if (r < 0) {
      counters_.tx_errors.add();
      continue;
    }
    counters_.sent_pkts.add();
    counters_.sent_bytes.add(static_cast<uint64_t>(r));
    ++ok;
  }
  return ok;
}

}  // namespace uroce
