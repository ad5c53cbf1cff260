// The kernel-UDP port (a Port, ports/port.h): RoCEv2 over an ordinary UDP socket bound to the
// device address and port 4791 (IANA, Annex A17). It frames nothing itself (the kernel writes IP
// and UDP headers) and does only socket I/O, in batches (recvmmsg / sendmmsg); the ICRC, parsing,
// counters, capture and fault injection are the device's receive pipeline (engine/datapath.h).
// It also knows the interface the address lives on: its MTU (PortCaps::ip_mtu) and its link
// state, watched over rtnetlink (LinkWatch, the port's control fd).
//
// Wire choices (see docs/architecture.md):
// - IP_PMTUDISC_DO sets DF. For an unconnected socket Linux then writes IP ID 0
//   (ip_select_ident_segs), and the ICRC we append is computed for ID 0, DF, TOS masked.
// - ECN and DSCP: IP_RECVTOS reports each received packet's TOS byte; each sent packet carries
//   its TOS (TxBuf::dscp << 2 | TxBuf::ecn) in an IP_TOS control message.
// - ICRC on receive: the socket never shows the IP header (PortCaps::exact_icrc is false), so the
//   pipeline accepts a packet when *some* IP ID makes its ICRC valid (docs/wire-format.md).
// - UDP source port: a socket bound to 4791 can only send from 4791, yet the transport chooses a
//   source port per QP for ECMP entropy (TxBuf::src_port). The port keeps a small pool of
//   send-only sockets, one per requested source port, bound to (device address, that port) and
//   created on first use. A send socket drops everything it would receive (a BPF filter that
//   accepts nothing) because RoCEv2 traffic always arrives on 4791. When a source port cannot be
//   had (in use by another program, or the pool's limit reached) packets with it leave from the
//   4791 socket instead (a shared device: from a socket of the process's own, below), counted
//   in tx_src_port_fallback; tx_prepare() reports the port it really
//   leaves from, which the ICRC then covers, so the peer accepts it either way.
// - Batching (UdpPortOptions::gso, UROCE_GSO): runs of queued packets for one destination from
//   one socket, with one ECN codepoint and one datagram size (the last may be shorter), leave in
//   one send with a UDP_SEGMENT control message: the kernel builds one large datagram and cuts it
//   into the packets (UDP GSO, Linux >= 4.18) in software or on the NIC. Linux numbers the IP
//   IDs of the segments on from the first one's (inet_gso_segment), which is 0 here, so
//   tx_prepare() gives the j-th packet of a run IP ID j (its ICRC covers it), and tx_burst() finds
//   the runs again from those IDs. A socket on which the kernel
//   refuses GSO (EIO before Linux 6.11: the route's device has no checksum offload, e.g. a tap
//   device without offloads; EINVAL: e.g. SO_NO_CHECK) sends one datagram per packet from then
//   on (tx_gso_fallback); the refused run is resent one datagram each, its ICRCs recomputed for
//   IP ID 0 (a capture keeps the IDs the pipeline saw). On receive,
//   UDP_GRO lets the kernel hand several datagrams of one flow over as one buffer with their
//   segment size (UDP_GRO control message); rx_burst() cuts it back into datagrams, so fault
//   injection, the counters and the ICRC check see one datagram per packet.
// - Sends block when the kernel's socket buffer is full (rare: it is freed as soon as the packet
//   is on the wire or in the peer's queue), so the TX ring never overflows inside tx_flush().
// - Payloads by reference (PortCaps::tx_gather_min): a packet whose payload stayed in its memory
//   region (TxBuf::ext) is three iovecs — headers, payload, ICRC — which sendmmsg copies into the
//   kernel before it returns, so the payload is copied once, not twice.
//
// - Multicast (UD QPs attached to a group, ibv_attach_mcast): the 4791 socket is bound to the
//   unicast address, and Linux delivers a datagram to a socket only when the bound address equals
//   the destination, so each joined group gets a receive socket of its own bound to
//   (group, 4791) with SO_REUSEADDR (several devices of one host may join the same group), a
//   member of the group on the device's interface (IP_ADD_MEMBERSHIP). Every send socket sets
//   IP_MULTICAST_IF to the device address, so packets for a group leave the device's interface,
//   and keeps IP_MULTICAST_LOOP on, so members on this host (other devices, other processes)
//   receive them too, as a switch would deliver them to other ports. The group sockets sit in an
//   epoll set of their own, mcast_fd(), which the engine waits on beside rx_fd().
//
// - ICMP errors (IP_RECVERR on every socket that sends): a peer host where nothing listens on
//   UDP 4791 answers each datagram with ICMP port unreachable, which the kernel queues on the
//   socket that sent it (its error queue, read with MSG_ERRQUEUE) and also leaves as the
//   socket's pending error. The port reads the queues — the sockets sit in the control fd's
//   epoll set (control_fd(), on_control()), which the engine always watches — counts
//   destination-unreachable errors (rx_icmp_unreachable) and reports each as a PortEvent. The
//   pending error is returned once by the socket's next recvmmsg or sendmmsg in place of its
//   work: a receive then reads the error queue and receives again, a send is sent again; neither
//   is a socket failure nor a lost batch. On a shared device, an error for a datagram sent from
//   the group's 4791 socket goes to a member the kernel picks by hash (no steering program runs
//   for errors), so a packet whose source port cannot be had leaves from a socket of this
//   process's own (an ephemeral port) instead of 4791, and its errors come back here.
//
// Threading: as ports/port.h says; join_group and leave_group synchronise with rx_burst() through
// mcast_mu_.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ports/port.h"

namespace uroce {

class LinkWatch;
class UdpShare;

struct UdpPortOptions {
  // The device address: ipv4 (host byte order) for an IPv4 device; ipv6 (plain, not IPv4-mapped)
  // and for a link-local one its interface index (scope_id) for an IPv6 device, ipv4 then 0.
  uint32_t ipv4 = 0;
  wire::IpAddr ipv6{};
  uint32_t scope_id = 0;
  bool is_ipv6() const { return ipv6 != wire::IpAddr{}; }
  wire::IpAddr addr() const { return is_ipv6() ? ipv6 : wire::IpAddr(ipv4); }
  uint16_t port = 4791;      // local port to receive on (RoCEv2: 4791)
  uint16_t dst_port = 4791;  // destination port of every sent packet
  // The interface the address lives on ("" = unknown: MTU 1500, link always up).
  std::string netdev;
  size_t max_src_port_sockets = 64;  // send sockets beyond the 4791 one; 0 = always from `port`
  // UROCE_GSO: batch sends with UDP GSO and receives with UDP GRO (see above). false sends and
  // receives one datagram per system-call entry.
  bool gso = false;
  // The receive socket buffer asked for (bytes; see UdpPort::open). A test asks for little.
  int rcvbuf_bytes = 32 << 20;
  // Share the address with the other processes that open it (UdpShare, docs/architecture.md "One
  // device, many processes"); false binds the port for this process alone, as before.
  bool share = false;
};

class UdpPort : public Port {
 public:
  static constexpr size_t kTxRing = 256;  // TxBufs a device can have queued
  static constexpr size_t kRxBatch = 32;  // datagrams per recvmmsg
  static constexpr size_t kTxBatch = 64;  // messages per sendmmsg (a GSO message is several)
  // Receive buffer per datagram: the largest IB packet plus its ICRC. A longer datagram is cut
  // (MSG_TRUNC: RxFrame::truncated, counted by the pipeline as rx_truncated).
  static constexpr size_t kRxBufBytes = transport::kMaxIbPacket + transport::kTxTailroom;
  // With GRO a receive buffer must hold a coalesced datagram (at most 65507 bytes of UDP
  // payload); fewer of them keep the receive memory at 1 MiB.
  static constexpr size_t kGroRxBatch = 16;
  static constexpr size_t kGroBufBytes = 65536;
  // UDP GSO limits (udp_send_skb): segments per send (UDP_MAX_SEGMENTS, 64 before Linux 6.9,
  // 128 since) and the payload of the unsegmented datagram (65535 - IPv4 and UDP headers).
  static constexpr size_t kGsoMaxSegments = 64;
  static constexpr size_t kGsoMaxBytes = 65507;

  // Binds the receive socket and reads the interface's MTU and link state. nullptr and a message
  // on failure (address not local, port in use).
  static std::unique_ptr<UdpPort> open(const UdpPortOptions& opt, PortCounters& counters,
                                       std::string* err);
  ~UdpPort() override;
  UdpPort(const UdpPort&) = delete;
  UdpPort& operator=(const UdpPort&) = delete;

  // Port.
  const PortCaps& caps() const override { return caps_; }
  wire::IpAddr ip() const override { return opt_.addr(); }
  uint16_t udp_port() const override { return opt_.port; }
  uint16_t udp_dst_port() const override { return opt_.dst_port; }
  std::string describe() const override;
  std::span<const RxFrame> rx_burst() override;
  transport::TxBuf* tx_alloc() override;
  void tx_free(transport::TxBuf* buf) override;
  void tx_prepare(std::span<transport::TxBuf* const> bufs, bool batch) override;
  size_t tx_burst(std::span<transport::TxBuf* const> bufs) override;
  std::span<const int> wait_fds() const override { return {wait_fds_.data(), n_wait_fds_}; }
  int control_fd() const override;
  bool on_control() override;
  bool link_up() const override;
  int join_group(uint32_t group) override;
  void leave_group(uint32_t group) override;
  PortShare* share() override;
  void set_event_sink(PortEventSink* sink) override { sink_ = sink; }

  int rx_fd() const { return fd_; }  // the 4791 socket (readable when datagrams wait)
  // The UDP source port a packet asking for `requested` leaves from (opening its socket if
  // needed): `requested`, or the receive port when no socket can be had for it.
  uint16_t src_port_for(uint16_t requested);

 private:
  UdpPort(const UdpPortOptions& opt, PortCounters& counters);
  int send_fd_for(uint16_t requested, uint16_t* actual_port);
  // One recvmmsg on `fd` into receive slots [slot, rx_slots_), each datagram addressed to
  // `dst_ip`; returns the number of slots used. Appends the datagrams to rx_out_ (a GRO buffer
  // cut into its datagrams).
  size_t receive(int fd, const wire::IpAddr& dst_ip, size_t slot);
  // Appends a frame to rx_out_ — unless it came to a shared device's socket for another member:
  // that one is counted and passed on to its owner (UdpShare::relay); kept when it cannot be.
  void deliver(const RxFrame& f, bool shared_socket);
  // A shared device: reads what other members relayed to us into receive slots [slot,
  // rx_slots_), as receive() does; returns the number of slots used.
  size_t receive_relayed(size_t slot);
  // Turns UDP_GRO on for a receive socket when gso is on; a kernel without it just never
  // coalesces.
  void enable_gro(int fd);
  size_t index_of(const transport::TxBuf* b) const {
    return static_cast<size_t>(b - tx_bufs_.get());
  }
  // Sends bufs one datagram each after a refused GSO send, with IP ID 0 and the ICRC recomputed
  // for it; returns the number the kernel accepted.
  size_t send_singly(int fd, std::span<transport::TxBuf* const> bufs);
  // ICMP errors (above). Adds a sending socket to the control fd's epoll set.
  void watch_errors(int fd);
  // Reads `fd`'s error queue (a bounded number of entries; the rest keeps the control fd
  // readable): counts and reports each destination unreachable.
  void read_errors(int fd);
  // Reads the error queues of every socket the control fd's epoll set says has errors, and with
  // `with_link` (the engine thread: on_control) the link watch's notifications; true when the
  // link state changed.
  bool service_control(bool with_link);
  // A socket of this process's own for packets whose source port cannot be had on a shared
  // device (above): its fd, its port in *actual. fd_ when even that cannot be had.
  int own_fallback(uint16_t* actual);

  UdpPortOptions opt_;
  PortCounters& counters_;
  PortCaps caps_;
  int fd_ = -1;  // the 4791 socket (the share's when shared: it closes it)
  std::unique_ptr<UdpShare> share_;
  std::unique_ptr<LinkWatch> link_;  // null: link state unknown (reported up)

  // Receive side: buffers for one recvmmsg batch (with GRO on, kGroRxBatch slots of
  // kGroBufBytes, else kRxBatch of kRxBufBytes) and the frames of the last rx_burst().
  size_t rx_slots_, rx_slot_bytes_;
  std::unique_ptr<uint8_t[]> rx_bufs_;
  std::vector<RxFrame> rx_out_;
  // recvmmsg's arguments for every slot, made once: an empty receive is what a busy-polling
  // application spins on, and filling 32 headers per call was an eighth of that loop. After a
  // call the fields the kernel wrote are put back (reset_rx_slot), so they are ready again.
  struct RxSlot {
    iovec iov;
    sockaddr_in6 from;  // a sockaddr_in on an IPv4 device (udp_port_detail::SockAddr)
    // IP_TOS or IPV6_TCLASS, UDP_GRO, SO_RXQ_OVFL, spare
    alignas(cmsghdr) uint8_t ctrl[CMSG_SPACE(sizeof(int)) * 4];
  };
  std::unique_ptr<RxSlot[]> rx_slot_;
  std::unique_ptr<mmsghdr[]> rx_msgs_;
  void reset_rx_slot(size_t i);
  uint32_t rx_overflow_seen_ = 0;  // the main socket's SO_RXQ_OVFL count as last reported

  // Transmit side: a ring of kTxRing buffers, each free or held by the caller. tx_route_[i] is
  // the socket buffer i leaves from (fixed by tx_prepare).
  std::unique_ptr<transport::TxBuf[]> tx_bufs_;
  std::unique_ptr<int[]> tx_route_;
  std::vector<uint16_t> free_;  // stack

  // Source port → send socket; -1 records a port that could not be bound (use fd_, or on a shared
  // device own_fallback()).
  std::unordered_map<uint16_t, int> src_socks_;
  size_t src_sock_count_ = 0;
  // Send sockets on which the kernel refused UDP GSO: one datagram per packet from them.
  std::vector<int> no_gso_fds_;
  // A shared device's fallback send socket (own_fallback) and its port; -1 before first use.
  int fallback_fd_ = -1;
  uint16_t fallback_port_ = 0;

  // The control fd: an epoll set of the link watch's socket (readable on notifications) and of
  // every socket that sends (registered for errors only: EPOLLERR while its error queue holds
  // any). errq_mu_ serialises the readers of error queues (on_control on the engine thread, a
  // receive pass after a send met a pending error: errq_pending_). The sink is called under it.
  int ctl_epfd_ = -1;
  std::mutex errq_mu_;
  std::atomic<bool> errq_pending_{false};
  PortEventSink* sink_ = nullptr;

  // Multicast: group (host order) → its receive socket. mcast_mu_ guards groups_ against
  // rx_burst(); has_groups_ lets rx_burst() skip the lock when no group is joined. The group
  // sockets sit in an epoll set of their own (mcast_epfd_), readable while any has datagrams.
  int mcast_epfd_ = -1;
  std::mutex mcast_mu_;
  std::map<uint32_t, int> groups_;
  std::atomic<bool> has_groups_{false};
  std::array<int, 3> wait_fds_{-1, -1, -1};  // fd_, mcast_epfd_, the share's relay socket
  size_t n_wait_fds_ = 2;

  // A shared device's relay socket: recvmmsg's arguments (payloads go to the receive slots), the
  // relay count last read, and empty passes since (RelayRx in udp_port_internal.h).
  struct RelayRx;
  std::unique_ptr<RelayRx> relay_;
};

}  // namespace uroce
