#include "ports/udp/udp_port.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "wire/icrc.h"

namespace uroce {
namespace {

std::string endpoint(uint32_t ip, uint16_t port) {
  return format_ipv4(ip) + ":" + std::to_string(port);
}

sockaddr_in make_addr(uint32_t ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(ip);
  a.sin_port = htons(port);
  return a;
}

// A UDP socket with DF set (IP_PMTUDISC_DO: never fragment, EMSGSIZE instead), bound to ip:port.
// -1 and errno on failure.
int bound_socket(uint32_t ip, uint16_t port) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int pmtu = IP_PMTUDISC_DO;
  sockaddr_in a = make_addr(ip, port);
  // Packets for a multicast group leave the device's interface, not the default route's.
  in_addr mif{};
  mif.s_addr = htonl(ip);
  if (setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu) != 0 ||
      setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &mif, sizeof mif) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// CLOCK_MONOTONIC in ns, the engine's clock (engine/engine.h monotonic_now), read only when fault
// injection is on.
transport::Time fault_clock() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<transport::Time>(ts.tv_sec) * 1000000000ull +
         static_cast<transport::Time>(ts.tv_nsec);
}

// The transmit injector draws from its own stream, so adding transmit faults does not change
// which received datagrams the receive side drops for a seed.
constexpr uint64_t kTxSeedSalt = 0x7478'6661'756c'7473ull;  // "txfaults"

void count_parse_error(DeviceCounters& c, wire::ParseError e) {
  switch (e) {
    case wire::ParseError::kTooShort:
      c.rx_parse_too_short.add();
      break;
    case wire::ParseError::kBadOpcode:
      c.rx_parse_bad_opcode.add();
      break;
    case wire::ParseError::kBadVersion:
      c.rx_parse_bad_version.add();
      break;
    case wire::ParseError::kBadPad:
      c.rx_parse_bad_pad.add();
      break;
    case wire::ParseError::kBadLength:
      c.rx_parse_bad_length.add();
      break;
    case wire::ParseError::kOk:
      break;
    default:
      c.rx_parse_other.add();
      break;  // a cause added to wire.h after this list
  }
}

}  // namespace

UdpPort::UdpPort(const UdpPortOptions& opt, DeviceCounters& counters)
    : opt_(opt),
      counters_(counters),
      rx_slots_(opt.gso ? kGroRxBatch : kRxBatch),
      rx_slot_bytes_(opt.gso ? kGroBufBytes : kRxBufBytes),
      rx_bufs_(new uint8_t[rx_slots_ * rx_slot_bytes_]),
      tx_bufs_(new transport::TxBuf[kTxRing]),
      tx_icrc_(new uint8_t[kTxRing][wire::kIcrcBytes]),
      tx_route_(new Route[kTxRing]) {
  rx_out_.reserve(kRxBatch);
  free_.reserve(kTxRing);
  queue_.reserve(kTxRing);
  for (size_t i = kTxRing; i-- > 0;) free_.push_back(static_cast<uint16_t>(i));
  FaultSpec rx = opt.faults.rx_spec();
  if (rx.enabled())
    rx_faults_ = std::make_unique<FaultInjector>(
        rx, opt.faults.seed,
        FaultCounterRefs{&counters.fault_drops, &counters.fault_rx_burst_drops,
                         &counters.fault_rx_corrupted, &counters.fault_rx_duplicated,
                         &counters.fault_rx_reordered, &counters.fault_rx_delayed});
  if (opt.faults.tx.enabled())
    tx_faults_ = std::make_unique<FaultInjector>(
        opt.faults.tx, opt.faults.seed ^ kTxSeedSalt,
        FaultCounterRefs{&counters.fault_tx_drops, &counters.fault_tx_burst_drops,
                         &counters.fault_tx_corrupted, &counters.fault_tx_duplicated,
                         &counters.fault_tx_reordered, &counters.fault_tx_delayed});
}

UdpPort::~UdpPort() {
  // What transmit fault injection still holds (delay, reordering) was sent as far as the
  // transport knows: an ACK held back when a program exits must still reach the peer, as it
  // would from a NIC, or the peer's last SEND ends in a retry error.
  if (tx_faults_) {
    tx_frames_.clear();
    tx_faults_->release_due(transport::kNever, tx_frames_);
    send_frames(tx_frames_);
  }
  for (auto& [port, fd] : src_socks_)
    if (fd >= 0) close(fd);
  for (auto& [group, fd] : groups_) close(fd);
  if (mcast_epfd_ >= 0) close(mcast_epfd_);
  if (fd_ >= 0) close(fd_);
}

std::unique_ptr<UdpPort> UdpPort::open(const UdpPortOptions& opt, DeviceCounters& counters,
                                       std::string* err) {
  std::unique_ptr<UdpPort> p(new UdpPort(opt, counters));
  p->fd_ = bound_socket(opt.ipv4, opt.port);
  if (p->fd_ < 0) {
    int e = errno;
    if (err) {
      *err = "cannot bind UDP " + endpoint(opt.ipv4, opt.port) + ": " + std::strerror(e);
      if (e == EADDRINUSE)
        *err += " (another uroce process, or rxe, already uses this address)";
      else if (e == EADDRNOTAVAIL)
        *err += " (the address is not configured on this host)";
    }
    return nullptr;
  }
  p->mcast_epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (p->mcast_epfd_ < 0) {
    if (err) *err = std::string("epoll_create1: ") + std::strerror(errno);
    return nullptr;
  }
  int on = 1;
  if (setsockopt(p->fd_, IPPROTO_IP, IP_RECVTOS, &on, sizeof on) != 0) {
    if (err) *err = std::string("setsockopt(IP_RECVTOS): ") + std::strerror(errno);
    return nullptr;
  }
  // Bigger socket buffers absorb bursts while the engine is busy; the kernel caps them at
  // net.core.[rw]mem_max, which is fine.
  int bytes = 4 << 20;
  setsockopt(p->fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  setsockopt(p->fd_, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  p->enable_gro(p->fd_);
  if (!opt.pcap_path.empty()) {
    p->pcap_ = PcapWriter::open(opt.pcap_path, err);
    if (!p->pcap_) return nullptr;
  }
  return p;
}

void UdpPort::enable_gro(int fd) {
  if (!opt_.gso) return;
  int on = 1;
  setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on);
}

transport::Time UdpPort::tx_fault_deadline() const {
  return tx_faults_ ? tx_faults_->next_deadline() : transport::kNever;
}

transport::Time UdpPort::rx_fault_deadline() const {
  return rx_faults_ ? rx_faults_->next_deadline() : transport::kNever;
}

transport::Time UdpPort::fault_deadline() const {
  return std::min(rx_fault_deadline(), tx_fault_deadline());
}

std::span<const RxPacket> UdpPort::rx_burst() {
  rx_out_.clear();
  rx_frames_.clear();  // the last batch's packets pointed into these
  transport::Time now = rx_faults_ ? fault_clock() : 0;
  size_t used = receive(fd_, opt_.ipv4, 0, now);
  if (has_groups_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(mcast_mu_);
    for (auto& [group, fd] : groups_) {
      if (used == rx_slots_) break;  // the rest waits for the next pass (epoll stays readable)
      used += receive(fd, group, used, now);
    }
  }
  if (rx_faults_) {
    rx_faults_->release_due(now, rx_frames_);
    // The socket a held datagram came from names its destination: the device address, or the
    // group of a group socket (a group left meanwhile: the ICRC check then drops it, counted).
    std::unique_lock<std::mutex> g(mcast_mu_, std::defer_lock);
    // rx_frames_ is complete now: rx_out_ may point into it.
    for (const FaultFrame& fr : rx_frames_) {
      transport::RxInfo info;
      info.src_ip = fr.addr;
      info.src_port = fr.port;
      info.dst_ip = opt_.ipv4;
      if (fr.fd >= 0 && fr.fd != fd_) {
        if (!g.owns_lock()) g.lock();
        info.dst_ip = 0;
        for (auto& [group, fd] : groups_)
          if (fd == fr.fd) info.dst_ip = group;
      }
      info.ecn = fr.ecn;
      accept(fr.bytes.data(), fr.bytes.size(), fr.truncated, info);
    }
  }
  return rx_out_;
}

size_t UdpPort::receive(int fd, uint32_t dst_ip, size_t slot, transport::Time now) {
  const size_t max = rx_slots_ - slot;
  mmsghdr msgs[kRxBatch];
  iovec iov[kRxBatch];
  sockaddr_in from[kRxBatch];
  // Room for IP_TOS (one int at most), UDP_GRO (an int) and whatever else the kernel may add.
  alignas(cmsghdr) uint8_t ctrl[kRxBatch][CMSG_SPACE(sizeof(int)) * 3];
  for (size_t i = 0; i < max; ++i) {
    iov[i] = {rx_bufs_.get() + (slot + i) * rx_slot_bytes_, rx_slot_bytes_};
    msgs[i].msg_hdr = {};
    msgs[i].msg_hdr.msg_name = &from[i];
    msgs[i].msg_hdr.msg_namelen = sizeof from[i];
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_control = ctrl[i];
    msgs[i].msg_hdr.msg_controllen = sizeof ctrl[i];
    msgs[i].msg_len = 0;
  }
  int n;
  do {
    n = recvmmsg(fd, msgs, static_cast<unsigned>(max), MSG_DONTWAIT, nullptr);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return 0;

  for (int i = 0; i < n; ++i) {
    const msghdr& h = msgs[i].msg_hdr;
    const uint8_t* buf = static_cast<const uint8_t*>(iov[i].iov_base);
    size_t len = msgs[i].msg_len;
    if (h.msg_namelen < sizeof(sockaddr_in)) {
      counters_.rcvd_pkts.add();
      counters_.rcvd_bytes.add(len);
      counters_.rx_too_short.add();
      continue;
    }
    transport::RxInfo info;
    info.src_ip = ntohl(from[i].sin_addr.s_addr);
    info.src_port = ntohs(from[i].sin_port);
    // Each socket is bound to one address (the device's, or a group), so only datagrams for it
    // arrive there.
    info.dst_ip = dst_ip;
    size_t seg = 0;  // GRO segment size; 0: one datagram
    for (const cmsghdr* c = CMSG_FIRSTHDR(&h); c;
         c = CMSG_NXTHDR(const_cast<msghdr*>(&h), const_cast<cmsghdr*>(c))) {
      // IP_TOS arrives as one byte; accept an int too, as some kernels' IP_TOS cmsgs are.
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1))
        info.ecn = static_cast<uint8_t>(*CMSG_DATA(c) & 3);
      if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
          c->cmsg_len >= CMSG_LEN(sizeof(int))) {
        int v;
        std::memcpy(&v, CMSG_DATA(c), sizeof v);
        if (v > 0) seg = static_cast<size_t>(v);
      }
    }
    bool truncated = (h.msg_flags & MSG_TRUNC) != 0;
    // A GRO buffer holds datagrams of `seg` bytes, the last possibly shorter, all from one
    // sender with one TOS (udp_gro_receive merges only such). A truncated one is one drop:
    // where its datagrams end is unknown past the buffer (cannot happen with a full-size slot).
    if (seg == 0 || seg >= len || truncated) {
      deliver(buf, len, truncated, info, fd, now);
      continue;
    }
    for (size_t off = 0; off < len; off += seg)
      deliver(buf + off, std::min(seg, len - off), false, info, fd, now);
  }
  return static_cast<size_t>(n);
}

void UdpPort::deliver(const uint8_t* buf, size_t len, bool truncated, const transport::RxInfo& info,
                      int fd, transport::Time now) {
  counters_.rcvd_pkts.add();
  counters_.rcvd_bytes.add(len);
  if (!rx_faults_) {
    accept(buf, len, truncated, info);
    return;
  }
  // Fault injection before any check, so that a seed drops the same arrivals whatever they
  // contain, and corruption is caught by the ICRC check like corruption on the wire.
  FaultFrame fr;
  fr.bytes.assign(buf, buf + len);
  fr.addr = info.src_ip;
  fr.port = info.src_port;
  fr.ecn = info.ecn;
  fr.fd = fd;  // rx: the socket it arrived on, which names its destination (rx_burst)
  fr.truncated = truncated;
  rx_faults_->offer(std::move(fr), now, rx_frames_);
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

void UdpPort::accept(const uint8_t* buf, size_t len, bool truncated,
                     const transport::RxInfo& info) {
  // Longer than any packet: no packet of ours (with GRO the buffers are larger than this, so
  // the kernel does not flag it).
  if (truncated || len > kRxBufBytes) {
    counters_.rx_truncated.add();
    return;
  }
  if (len < wire::kBthBytes + wire::kIcrcBytes) {
    counters_.rx_too_short.add();
    return;
  }
  size_t ib_len = len - wire::kIcrcBytes;
  wire::Ipv4UdpFraming f;
  f.src_ip = info.src_ip;
  f.dst_ip = info.dst_ip;
  f.dont_fragment = true;
  f.src_port = info.src_port;
  f.dst_port = opt_.port;
  uint16_t ip_id = 0;
  const bool icrc_ok =
      wire::icrc_matches_some_ip_id(f, {buf, ib_len}, wire::load_le32(buf + ib_len), &ip_id);
  if (pcap_) {
    // Captured with the IP ID that makes the ICRC valid, so the record is the packet as sent;
    // a packet no ID validates is written with ID 0, and its ICRC shows as bad.
    f.ip_id = ip_id;
    pcap_->write(f, info.ecn, {buf, ib_len}, buf + ib_len);
  }
  if (!icrc_ok) {
    counters_.rcvd_icrc_err.add();
    return;
  }
  RxPacket& out = rx_out_.emplace_back();
  wire::ParseError pe = wire::parse({buf, ib_len}, out.pkt);
  if (pe != wire::ParseError::kOk) {
    count_parse_error(counters_, pe);
    rx_out_.pop_back();
    return;
  }
  out.info = info;
  out.ip_id = ip_id;
  if (ip_id != 0) counters_.rx_foreign_ip_id.add();
  if (info.ecn == transport::kEcnCe) counters_.rcvd_ecn_ce.add();
}

transport::TxBuf* UdpPort::tx_alloc() {
  if (free_.empty()) return nullptr;
  uint16_t i = free_.back();
  free_.pop_back();
  transport::TxBuf* b = &tx_bufs_[i];
  b->dst_ip = 0;
  b->src_port = 0;
  b->ecn = transport::kEcnNotEct;
  b->len = 0;
  return b;
}

void UdpPort::tx_commit(transport::TxBuf* buf) {
  // A buffer not from this ring, or a length no packet has, is a transport bug: refuse it rather
  // than send garbage or write outside the ring.
  if (buf < tx_bufs_.get() || buf >= tx_bufs_.get() + kTxRing) {
    counters_.tx_errors.add();
    return;
  }
  auto i = static_cast<uint16_t>(buf - tx_bufs_.get());
  if (buf->len < wire::kBthBytes || buf->len > transport::kMaxIbPacket) {
    counters_.tx_errors.add();
    free_.push_back(i);
    return;
  }
  tx_route_[i].fd = send_fd_for(buf->src_port, &tx_route_[i].port);
  queue_.push_back(i);
}

void UdpPort::tx_abort(transport::TxBuf* buf) {
  free_.push_back(static_cast<uint16_t>(buf - tx_bufs_.get()));
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
        // Accept nothing: this socket only sends (classic BPF "ret #0" drops every packet).
        sock_filter drop_all{BPF_RET | BPF_K, 0, 0, 0};
        sock_fprog prog{1, &drop_all};
        int small = 1;  // the kernel rounds up to its minimum
        if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) {
          close(fd);
          fd = -1;
        } else {
          setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
          ++src_sock_count_;
          counters_.tx_src_port_sockets.add();
        }
      }
    }
    it = src_socks_.emplace(requested, fd).first;
  }
  if (it->second < 0) {
    counters_.tx_src_port_fallback.add();
    return fd_;
  }
  *actual = requested;
  return it->second;
}

uint16_t UdpPort::src_port_for(uint16_t requested) {
  uint16_t actual;
  send_fd_for(requested, &actual);
  return actual;
}

wire::Ipv4UdpFraming UdpPort::tx_framing(uint16_t idx, uint16_t ip_id) const {
  wire::Ipv4UdpFraming f;
  f.src_ip = opt_.ipv4;
  f.dst_ip = tx_bufs_[idx].dst_ip;
  f.ip_id = ip_id;
  f.dont_fragment = true;
  f.src_port = tx_route_[idx].port;
  f.dst_port = opt_.dst_port;
  return f;
}

namespace {

// Per-packet TOS: DSCP 0 and the packet's ECN codepoint (RFC 3168), and for a GSO send the
// segment size. Writes the control messages into `ctrl` (zeroed whole: the kernel reads
// CMSG_SPACE bytes, padding included) and sets h's control fields; none when not needed.
void set_tx_cmsgs(msghdr& h, uint8_t* ctrl, size_t ctrl_bytes, uint8_t ecn, uint16_t gso_size) {
  h.msg_control = nullptr;
  h.msg_controllen = 0;
  if (ecn == transport::kEcnNotEct && gso_size == 0) return;
  std::memset(ctrl, 0, ctrl_bytes);
  h.msg_control = ctrl;
  h.msg_controllen = ctrl_bytes;
  size_t used = 0;
  cmsghdr* c = CMSG_FIRSTHDR(&h);
  if (ecn != transport::kEcnNotEct) {
    c->cmsg_level = IPPROTO_IP;
    c->cmsg_type = IP_TOS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    int tos = ecn & 3;
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

}  // namespace

size_t UdpPort::tx_flush() {
  if (tx_faults_) return tx_flush_faulty();
  size_t sent = 0;
  size_t i = 0;
  // One message per datagram, or per GSO run: queue_[first, first + count).
  struct Msg {
    size_t first, count;
  };
  mmsghdr msgs[kTxBatch];
  Msg meta[kTxBatch];
  iovec iov[kTxRing][2];  // per queue position
  sockaddr_in to[kTxBatch];
  alignas(cmsghdr) uint8_t ctrl[kTxBatch][kTxCtrlBytes];
  while (i < queue_.size()) {
    const int fd = tx_route_[queue_[i]].fd;
    const bool gso =
        opt_.gso && std::find(no_gso_fds_.begin(), no_gso_fds_.end(), fd) == no_gso_fds_.end();
    // Messages from a run of consecutive packets that leave from the same socket; commit order
    // is kept.
    size_t n = 0;
    size_t end = i;  // queue position after the last packet taken
    while (end < queue_.size() && n < kTxBatch && tx_route_[queue_[end]].fd == fd) {
      const transport::TxBuf& first = tx_bufs_[queue_[end]];
      const size_t seg = first.len + wire::kIcrcBytes;
      size_t count = 1, bytes = seg;
      // Lengthen the run while the kernel would cut it back into exactly these datagrams: one
      // destination and TOS, equal sizes with only the last shorter, within the GSO limits.
      // Each segment is no larger than a packet the kernel takes alone, so the path MTU holds.
      while (gso && end + count < queue_.size() && count < kGsoMaxSegments) {
        uint16_t nx = queue_[end + count];
        const transport::TxBuf& b = tx_bufs_[nx];
        size_t len = b.len + wire::kIcrcBytes;
        if (tx_route_[nx].fd != fd || b.dst_ip != first.dst_ip || b.ecn != first.ecn || len > seg ||
            bytes + len > kGsoMaxBytes)
          break;
        ++count;
        bytes += len;
        if (len < seg) break;  // a shorter one ends the run
      }
      for (size_t k = 0; k < count; ++k) {
        uint16_t idx = queue_[end + k];
        transport::TxBuf& b = tx_bufs_[idx];
        // Segment k of a GSO send leaves with IP ID k (see udp_port.h).
        auto f = tx_framing(idx, static_cast<uint16_t>(count > 1 ? k : 0));
        wire::store_le32(tx_icrc_[idx], wire::icrc(f, {b.data, b.len}));
        iov[end + k][0] = {b.data, b.len};
        iov[end + k][1] = {tx_icrc_[idx], wire::kIcrcBytes};
      }
      to[n] = make_addr(first.dst_ip, opt_.dst_port);
      msghdr& h = msgs[n].msg_hdr;
      h = {};
      h.msg_name = &to[n];
      h.msg_namelen = sizeof to[n];
      h.msg_iov = iov[end];  // iov[end..end+count) are contiguous: 2 * count entries
      h.msg_iovlen = 2 * count;
      set_tx_cmsgs(h, ctrl[n], sizeof ctrl[n], first.ecn,
                   count > 1 ? static_cast<uint16_t>(seg) : 0);
      meta[n] = {end, count};
      ++n;
      end += count;
    }
    // Captured as sent: each packet with the IP ID its ICRC was computed for.
    auto capture = [this](const Msg& m) {
      if (!pcap_) return;
      for (size_t k = 0; k < m.count; ++k) {
        uint16_t idx = queue_[m.first + k];
        const transport::TxBuf& b = tx_bufs_[idx];
        pcap_->write(tx_framing(idx, static_cast<uint16_t>(m.count > 1 ? k : 0)), b.ecn,
                     {b.data, b.len}, tx_icrc_[idx]);
      }
    };
    // sendmmsg stops at the first refused message: count and skip it, send the rest.
    size_t done = 0;
    while (done < n) {
      int r = sendmmsg(fd, msgs + done, static_cast<unsigned>(n - done), 0);
      if (r < 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        const Msg& m = meta[done];
        ++done;
        if (m.count > 1 && (e == EIO || e == EINVAL)) {
          // GSO refused (udp_send_skb: EIO without checksum offload on the route's device,
          // EINVAL for what the kernel cannot segment). Resend one by one; when that works the
          // socket cannot do GSO, so it stops trying. When it does not, the packets themselves
          // were refused (e.g. larger than the path MTU) and GSO stays on.
          size_t ok = send_singly(fd, m.first, m.count);
          sent += ok;
          if (ok > 0 &&
              std::find(no_gso_fds_.begin(), no_gso_fds_.end(), fd) == no_gso_fds_.end()) {
            no_gso_fds_.push_back(fd);
            counters_.tx_gso_fallback.add();
          }
          continue;
        }
        capture(m);
        counters_.tx_errors.add(m.count);
        continue;
      }
      for (int k = 0; k < r; ++k) {
        const Msg& m = meta[done + k];
        capture(m);
        counters_.sent_pkts.add(m.count);
        counters_.sent_bytes.add(msgs[done + k].msg_len);
        sent += m.count;
      }
      done += static_cast<size_t>(r);
    }
    for (size_t k = i; k < end; ++k) free_.push_back(queue_[k]);
    i = end;
  }
  queue_.clear();
  return sent;
}

size_t UdpPort::send_singly(int fd, size_t first, size_t count) {
  size_t ok = 0;
  for (size_t k = 0; k < count; ++k) {
    uint16_t idx = queue_[first + k];
    transport::TxBuf& b = tx_bufs_[idx];
    // Alone, the packet leaves with IP ID 0: its ICRC changes with that.
    auto f = tx_framing(idx, 0);
    wire::store_le32(tx_icrc_[idx], wire::icrc(f, {b.data, b.len}));
    if (pcap_) pcap_->write(f, b.ecn, {b.data, b.len}, tx_icrc_[idx]);
    sockaddr_in to = make_addr(b.dst_ip, opt_.dst_port);
    iovec iov[2] = {{b.data, b.len}, {tx_icrc_[idx], wire::kIcrcBytes}};
    msghdr h{};
    h.msg_name = &to;
    h.msg_namelen = sizeof to;
    h.msg_iov = iov;
    h.msg_iovlen = 2;
    alignas(cmsghdr) uint8_t ctrl[kTxCtrlBytes];
    set_tx_cmsgs(h, ctrl, sizeof ctrl, b.ecn, 0);
    ssize_t r;
    do {
      r = sendmsg(fd, &h, 0);
    } while (r < 0 && errno == EINTR);
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

// The transmit side under fault injection: each queued packet gets its ICRC, then goes through
// the injector as one datagram (so corruption is caught by the peer's ICRC check), and whatever
// comes out is sent one datagram at a time. Returns the number of packets taken from the queue,
// as if the lossy path were part of the wire: callers that loop while tx_flush() makes progress
// must not stop because the injector dropped or held what they sent.
size_t UdpPort::tx_flush_faulty() {
  transport::Time now = fault_clock();
  tx_frames_.clear();
  tx_faults_->release_due(now, tx_frames_);
  size_t taken = queue_.size();
  for (uint16_t idx : queue_) {
    transport::TxBuf& b = tx_bufs_[idx];
    wire::Ipv4UdpFraming f;
    f.src_ip = opt_.ipv4;
    f.dst_ip = b.dst_ip;
    f.ip_id = 0;  // as in tx_flush()
    f.dont_fragment = true;
    f.src_port = tx_route_[idx].port;
    f.dst_port = opt_.dst_port;
    FaultFrame fr;
    fr.bytes.resize(b.len + wire::kIcrcBytes);
    std::memcpy(fr.bytes.data(), b.data, b.len);
    wire::store_le32(fr.bytes.data() + b.len, wire::icrc(f, {b.data, b.len}));
    // Captured as uroce sent it, before the injected faults (which stand for the wire).
    if (pcap_) pcap_->write(f, b.ecn, {b.data, b.len}, fr.bytes.data() + b.len);
    fr.addr = b.dst_ip;
    fr.port = tx_route_[idx].port;
    fr.ecn = b.ecn;
    fr.fd = tx_route_[idx].fd;
    free_.push_back(idx);
    tx_faults_->offer(std::move(fr), now, tx_frames_);
  }
  queue_.clear();
  send_frames(tx_frames_);
  return taken;
}

void UdpPort::send_frames(std::vector<FaultFrame>& frames) {
  for (FaultFrame& fr : frames) {
    sockaddr_in to = make_addr(fr.addr, opt_.dst_port);
    iovec iov{fr.bytes.data(), fr.bytes.size()};
    msghdr h{};
    h.msg_name = &to;
    h.msg_namelen = sizeof to;
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    alignas(cmsghdr) uint8_t ctrl[CMSG_SPACE(sizeof(int))];
    if (fr.ecn != transport::kEcnNotEct) {
      std::memset(ctrl, 0, sizeof ctrl);
      h.msg_control = ctrl;
      h.msg_controllen = sizeof ctrl;
      cmsghdr* c = CMSG_FIRSTHDR(&h);
      c->cmsg_level = IPPROTO_IP;
      c->cmsg_type = IP_TOS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      int tos = fr.ecn & 3;
      std::memcpy(CMSG_DATA(c), &tos, sizeof tos);
    }
    ssize_t r;
    do {
      r = sendmsg(fr.fd, &h, 0);
    } while (r < 0 && errno == EINTR);
    if (r < 0) {
      counters_.tx_errors.add();
      continue;
    }
    counters_.sent_pkts.add();
    counters_.sent_bytes.add(static_cast<uint64_t>(r));
  }
}

}  // namespace uroce
