// The kernel-UDP port's send path (udp_port.h): the TX buffer ring, the socket each source port
// sends from (the device's own, per-source-port sockets, a send-only fallback), TOS and GSO as
// control messages, sendmmsg batches with their gather iovecs, and what a send does with an
// earlier datagram's pending error. Apart from the set-up and the receive path so that what
// happens to a leaving packet reads in one file.
#include <arpa/inet.h>
#include <linux/filter.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "ports/udp/share.h"
#include "ports/udp/udp_port.h"
#include "ports/udp/udp_port_internal.h"
#include "util/log.h"
#include "wire/icrc.h"
#include "wire/wire.h"

namespace uroce {

using udp_port_detail::bound_socket;
using udp_port_detail::SockAddr;

namespace {

// Errors a send or receive can return in place of its work when an earlier datagram's error is
// pending on the socket (IP_RECVERR: ip_icmp_error / ip_local_error set sk_err, which the next
// call returns once — sock_error()): ICMP destination unreachable by code (icmp_err_convert),
// time exceeded and parameter problem, and a path MTU too small for a DF datagram. ICMPv6's
// (icmpv6_err_convert) are the same but for "administratively prohibited", EACCES, which an IPv6
// socket's send returns for nothing else (IPv4 gives it for broadcast without SO_BROADCAST).
bool deferred_error(int e, bool v6) {
  if (v6 && e == EACCES) return true;
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

transport::TxBuf* UdpPort::tx_alloc() {
  if (free_.empty()) return nullptr;
  uint16_t i = free_.back();
  free_.pop_back();
  transport::TxBuf* b = &tx_bufs_[i];
  b->dst_ip = {};
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
      fd = bound_socket(opt_.addr(), opt_.scope_id, requested);
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
    int fd = bound_socket(opt_.addr(), opt_.scope_id, 0);  // the kernel picks a free port
    sockaddr_in6 a{};                                      // either family
    socklen_t len = sizeof a;
    wire::IpAddr ip;
    uint16_t port = 0;
    if (fd < 0) return fd_;
    if (!make_send_only(fd) || getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
        !SockAddr::read(&a, len, &ip, &port)) {
      close(fd);
      return fd_;
    }
    fallback_fd_ = fd;
    fallback_port_ = port;
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

// Per-packet TOS (IPv4: IP_TOS; IPv6: IPV6_TCLASS, the same byte) and, for a GSO send, the
// segment size. Writes the control messages into `ctrl` (zeroed whole: the kernel reads
// CMSG_SPACE bytes, padding included) and sets h's control fields; none when not needed.
void set_tx_cmsgs(msghdr& h, uint8_t* ctrl, size_t ctrl_bytes, int tos, uint16_t gso_size,
                  bool v6) {
  h.msg_control = nullptr;
  h.msg_controllen = 0;
  if (tos == 0 && gso_size == 0) return;
  std::memset(ctrl, 0, ctrl_bytes);
  h.msg_control = ctrl;
  h.msg_controllen = ctrl_bytes;
  size_t used = 0;
  cmsghdr* c = CMSG_FIRSTHDR(&h);
  if (tos != 0) {
    c->cmsg_level = v6 ? IPPROTO_IPV6 : IPPROTO_IP;
    c->cmsg_type = v6 ? IPV6_TCLASS : IP_TOS;
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
  SockAddr to[kTxBatch];
  const bool v6 = opt_.is_ipv6();
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
      // The device's family (Datapath::tx_commit drops the other).
      to[n] = SockAddr::make(first.dst_ip, opt_.dst_port, opt_.scope_id);
      msghdr& h = msgs[n].msg_hdr;
      h = {};
      h.msg_name = to[n].get();
      h.msg_namelen = to[n].len();
      meta[n] = {end, count};
      set_tx_cmsgs(h, ctrl[n], sizeof ctrl[n], tos_of(first),
                   count > 1 ? static_cast<uint16_t>(first.ib_len() + wire::kIcrcBytes) : 0, v6);
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
        if (!resent && deferred_error(e, v6)) {
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
    // Alone, the packet leaves with IP ID 0: its ICRC changes with that. (IPv6 has no IP ID:
    // the ICRC computed stands.)
    b.ip_id = 0;
    if (!opt_.is_ipv6()) {
      wire::Ipv4UdpFraming f;
      f.src_ip = opt_.ipv4;
      f.dst_ip = b.dst_ip.v4();
      f.ip_id = 0;
      f.dont_fragment = true;
      f.src_port = b.src_port;
      f.dst_port = opt_.dst_port;
      wire::store_le32(b.data + b.len, wire::icrc(f, {b.data, b.len}, {b.ext, b.ext_len}));
    }
    SockAddr to = SockAddr::make(b.dst_ip, opt_.dst_port, opt_.scope_id);
    iovec iov[3];
    msghdr h{};
    h.msg_name = to.get();
    h.msg_namelen = to.len();
    h.msg_iov = iov;
    h.msg_iovlen = packet_iovecs(b, iov);
    alignas(cmsghdr) uint8_t ctrl[kTxCtrlBytes];
    set_tx_cmsgs(h, ctrl, sizeof ctrl, tos_of(b), 0, opt_.is_ipv6());
    ssize_t r;
    bool resent = false;
    for (;;) {
      r = sendmsg(fd, &h, 0);
      if (r >= 0 || errno == EINTR) {
        if (r >= 0) break;
        continue;
      }
      if (resent || !deferred_error(errno, opt_.is_ipv6())) break;
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
