// The kernel-UDP port (udp_port.h): its sockets' making and options, opening the port (its own
// socket, or one in a shared device's group: share.h), the control fd — the link state and the
// sockets' error queues, where ICMP errors become port events — and the multicast groups' sockets.
// The receive path is udp_port_rx.cc, the send path udp_port_tx.cc; udp_port_internal.h is what
// the three share.
#include "ports/udp/udp_port.h"

#include <arpa/inet.h>
#include <linux/errqueue.h>
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
#include "ports/udp/udp_port_internal.h"
#include "util/log.h"

namespace uroce {
namespace udp_port_detail {

SockAddr SockAddr::make(const wire::IpAddr& ip, uint16_t port, uint32_t scope_id) {
  SockAddr a;
  if (ip.is_v4()) {
    a.u.v4.sin_family = AF_INET;
    a.u.v4.sin_addr.s_addr = htonl(ip.v4());
    a.u.v4.sin_port = htons(port);
  } else {
    a.u.v6.sin6_family = AF_INET6;
    std::memcpy(a.u.v6.sin6_addr.s6_addr, ip.data(), 16);
    a.u.v6.sin6_port = htons(port);
    a.u.v6.sin6_scope_id = scope_id;
  }
  return a;
}

bool SockAddr::read(const void* p, socklen_t len, wire::IpAddr* ip, uint16_t* port) {
  sa_family_t family;
  if (len < sizeof family) return false;
  std::memcpy(&family, p, sizeof family);
  if (family == AF_INET && len >= sizeof(sockaddr_in)) {
    sockaddr_in a;
    std::memcpy(&a, p, sizeof a);
    *ip = wire::IpAddr(ntohl(a.sin_addr.s_addr));
    *port = ntohs(a.sin_port);
    return true;
  }
  if (family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    sockaddr_in6 a;
    std::memcpy(&a, p, sizeof a);
    *ip = wire::IpAddr::from_bytes(a.sin6_addr.s6_addr);
    *port = ntohs(a.sin6_port);
    return true;
  }
  return false;
}

int bound_socket(const wire::IpAddr& ip, uint32_t scope_id, uint16_t port, bool reuseport) {
  const bool v6 = !ip.is_v4();
  int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int on = 1;
  auto fail = [fd] {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  };
  if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) return fail();
  SockAddr a = SockAddr::make(ip, port, scope_id);
  if (v6) {
    // IPv6 routers never fragment; IPV6_PMTUDISC_DO keeps the host from doing it too (EMSGSIZE
    // above the path MTU, as DF does for IPv4). No multicast on an IPv6 device
    // (UdpPort::join_group).
    int pmtu = IPV6_PMTUDISC_DO;
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) != 0 ||
        setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof pmtu) != 0 ||
        setsockopt(fd, IPPROTO_IPV6, IPV6_RECVERR, &on, sizeof on) != 0 ||
        // RoCE over IPv6 from rxe, RNICs and uroce's DPDK port carries UDP checksum 0 (the
        // ICRC protects it; Linux rxe's own socket accepts it so): without this the kernel
        // drops every such datagram (RFC 8200 8.1; RFC 6936's zero-checksum exception).
        setsockopt(fd, IPPROTO_UDP, UDP_NO_CHECK6_RX, &on, sizeof on) != 0 ||
        bind(fd, a.get(), a.len()) != 0)
      return fail();
    return fd;
  }
  int pmtu = IP_PMTUDISC_DO;
  // Packets for a multicast group leave the device's interface, not the default route's.
  in_addr mif{};
  mif.s_addr = htonl(ip.v4());
  if (setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &mif, sizeof mif) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_RECVERR, &on, sizeof on) != 0 ||
      bind(fd, a.get(), a.len()) != 0)
    return fail();
  return fd;
}

}  // namespace udp_port_detail

using udp_port_detail::bound_socket;
using udp_port_detail::SockAddr;

namespace {

// "10.0.0.1:4791", "[fd00::1]:4791".
std::string endpoint(const wire::IpAddr& ip, uint16_t port) {
  return ip.is_v4() ? fmt::format("{}:{}", ip.to_string(), port)
                    : fmt::format("[{}]:{}", ip.to_string(), port);
}

// ICMPv6 destination unreachable (RFC 4443 3.1) codes as ICMP's (RFC 792, 1812), which
// PortEvent speaks: the layers above read one family.
uint8_t icmp_code_of_icmp6(uint8_t code6) {
  switch (code6) {
    case 0:  // no route to destination
      return 0;
    case 4:  // port unreachable
      return PortEvent::kIcmpPortUnreach;
    case 1:  // administratively prohibited
    case 5:  // source address failed ingress/egress policy
    case 6:  // reject route to destination
      return 13;
    default:  // 2 beyond scope of source address, 3 address unreachable
      return 1;
  }
}
constexpr uint8_t kIcmp6DestUnreach = 1;  // RFC 4443 type

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

// Error-queue entries read per socket and call: the rest keeps the control fd readable for the
// engine's next look, so a flood of ICMP errors cannot hold a receive pass.
constexpr int kMaxErrorsPerRead = 64;

}  // namespace

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
  // A socket never shows the IP header: over IPv4 the IP ID the ICRC covers is guessed; IPv6
  // has none, and the rest the ICRC covers (addresses, ports) the socket tells.
  caps_.exact_icrc = opt.is_ipv6();
  caps_.ipv4_csum_offload = true;    // the kernel writes IP headers
  caps_.multicast = !opt.is_ipv6();  // IPv4 groups only (join_group)
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
        opt.addr(), opt.scope_id, opt.port,
        [ip = opt.addr(), scope = opt.scope_id, port = opt.port] {
          return bound_socket(ip, scope, port, /*reuseport=*/true);
        },
        err);
    p->fd_ = p->share_ ? p->share_->fd() : -1;
  } else {
    p->fd_ = bound_socket(opt.addr(), opt.scope_id, opt.port);
  }
  if (p->fd_ < 0) {
    int e = errno;
    if (err && opt.share && !err->empty() && e != EADDRINUSE && e != EADDRNOTAVAIL) {
      *err = "cannot bind UDP " + endpoint(opt.addr(), opt.port) + ": " + *err;
      return nullptr;
    }
    if (err) {
      *err = "cannot bind UDP " + endpoint(opt.addr(), opt.port) + ": " + std::strerror(e);
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
  // Each datagram's TOS byte (IPv4) or Traffic Class (IPv6): its ECN and DSCP.
  if (opt.is_ipv6() ? setsockopt(p->fd_, IPPROTO_IPV6, IPV6_RECVTCLASS, &on, sizeof on) != 0
                    : setsockopt(p->fd_, IPPROTO_IP, IP_RECVTOS, &on, sizeof on) != 0) {
    if (err)
      *err = std::string(opt.is_ipv6() ? "setsockopt(IPV6_RECVTCLASS): "
                                       : "setsockopt(IP_RECVTOS): ") +
             std::strerror(errno);
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
                 endpoint(opt.addr(), opt.port), opt.netdev, why);
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
  std::string d = "udp " + endpoint(opt_.addr(), opt_.port);
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
    sockaddr_in6 dst{};  // either family (SockAddr::read)
    alignas(cmsghdr) uint8_t ctrl[CMSG_SPACE(sizeof(sock_extended_err) + sizeof(sockaddr_in6)) +
                                  CMSG_SPACE(sizeof(int))];
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
    // ICMP types (time exceeded, ICMPv6 packet too big) tell the layers above nothing they can
    // act on.
    const bool icmp4 =
        ee.ee_origin == SO_EE_ORIGIN_ICMP && ee.ee_type == PortEvent::kIcmpDestUnreach;
    const bool icmp6 = ee.ee_origin == SO_EE_ORIGIN_ICMP6 && ee.ee_type == kIcmp6DestUnreach;
    if (!icmp4 && !icmp6) continue;
    counters_.rx_icmp_unreachable.add();
    PortEvent ev;
    ev.kind = PortEvent::Kind::kUnreachable;
    if (!SockAddr::read(&dst, h.msg_namelen, &ev.dst_ip, &ev.dst_port)) ev.dst_ip = {};
    ev.icmp_type = PortEvent::kIcmpDestUnreach;
    ev.icmp_code = icmp6 ? icmp_code_of_icmp6(ee.ee_code) : ee.ee_code;
    ev.reporter_ip = ctl.error_offender;
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

int UdpPort::join_group(uint32_t group) {
  // Groups are IPv4 (ibv_attach_mcast's GID is IPv4-mapped, RoCEv2 Annex A17.4.5.2); an IPv6
  // device's sockets are IPV6_V6ONLY, so it cannot take part in them. IPv6 multicast (ff00::/8
  // GIDs) is not done.
  if (opt_.is_ipv6()) return EOPNOTSUPP;
  if ((group >> 28) != 0xe) return EINVAL;  // 224.0.0.0/4 (RFC 5771)
  std::lock_guard<std::mutex> g(mcast_mu_);
  if (groups_.count(group)) return 0;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  int on = 1;
  SockAddr a = SockAddr::make(wire::IpAddr(group), opt_.port);
  ip_mreq mreq{};
  mreq.imr_multiaddr.s_addr = htonl(group);
  mreq.imr_interface.s_addr = htonl(opt_.ipv4);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof on) != 0 ||
      bind(fd, a.get(), a.len()) != 0 ||
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

}  // namespace uroce
