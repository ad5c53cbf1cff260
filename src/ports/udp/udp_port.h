// The kernel-UDP port: RoCEv2 over an ordinary UDP socket bound to the device address and port
// 4791 (IANA, Annex A17). It frames nothing itself (the kernel writes IP and UDP headers); it adds
// the ICRC on send, checks it on receive, applies fault injection, parses, and hands packets to
// the engine in batches (recvmmsg / sendmmsg).
//
// Wire choices (see docs/architecture.md):
// - IP_PMTUDISC_DO sets DF. For an unconnected socket Linux then writes IP ID 0
//   (ip_select_ident_segs), and the ICRC we append is computed for ID 0, DF, TOS masked.
// - ECN: IP_RECVTOS reports each received packet's TOS byte; each sent packet carries its ECN
//   codepoint (TxBuf::ecn) in an IP_TOS control message, DSCP 0.
// - ICRC on receive: the socket never shows the IP header, and peers put arbitrary IDs there (rxe
//   counts up), so a packet is accepted when *some* ID makes its ICRC valid
//   (wire::icrc_matches_some_ip_id, DF assumed set as every RoCEv2 sender sets it). This catches
//   every corruption of the bytes we can see except with probability 2^-16.
// - UDP source port: a socket bound to 4791 can only send from 4791, yet the transport chooses a
//   source port per QP for ECMP entropy (TxBuf::src_port). The port keeps a small pool of
//   send-only sockets, one per requested source port, bound to (device address, that port) and
//   created on first use. A send socket drops everything it would receive (a BPF filter that
//   accepts nothing) because RoCEv2 traffic always arrives on 4791. When a source port cannot be
//   had (in use by another program, or the pool's limit reached) packets with it leave from the
//   4791 socket instead, counted in tx_src_port_fallback; the ICRC always covers the port the
//   packet really leaves from, so the peer accepts it either way.
// - Batching (UdpPortOptions::gso, UROCE_GSO): runs of queued packets for one destination from
//   one socket, with one ECN codepoint and one datagram size (the last may be shorter), leave in
//   one send with a UDP_SEGMENT control message: the kernel builds one large datagram and cuts it
//   into the packets (UDP GSO, Linux >= 4.18) in software or on the NIC. Linux numbers the IP
//   IDs of the segments on from the first one's (inet_gso_segment), which is 0 here, so the
//   ICRC of the j-th packet of a run is computed for IP ID j. A socket on which the kernel
//   refuses GSO (EIO before Linux 6.11: the route's device has no checksum offload, e.g. a tap
//   device without offloads; EINVAL: e.g. SO_NO_CHECK) sends one datagram per packet from then
//   on (tx_gso_fallback). On receive,
//   UDP_GRO lets the kernel hand several datagrams of one flow over as one buffer with their
//   segment size (UDP_GRO control message); rx_burst() cuts it back into datagrams before any
//   check, so fault injection, the counters and the ICRC check see one datagram per packet.
// - Sends block when the kernel's socket buffer is full (rare: it is freed as soon as the packet
//   is on the wire or in the peer's queue), so the TX ring never overflows inside tx_flush().
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
// Threading: rx_burst() is called by one thread (the engine), without the device lock; everything
// on the transmit side (tx_alloc, tx_commit, tx_flush) with the device lock held. join_group and
// leave_group run with the device lock held and synchronise with rx_burst() through mcast_mu_.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/config.h"
#include "engine/counters.h"
#include "engine/faults.h"
#include "engine/pcap.h"
#include "transport/env.h"
#include "wire/wire.h"

namespace uroce {

// A received packet that passed the ICRC check and parsed. `pkt.payload` points into the port's
// receive buffers: valid until the next rx_burst().
struct RxPacket {
  wire::Packet pkt;
  transport::RxInfo info;
  uint16_t ip_id = 0;  // the IP Identification that made the ICRC valid
};

struct UdpPortOptions {
  uint32_t ipv4 = 0;                         // device address, host byte order
  uint16_t port = wire::kRoceV2UdpPort;      // local port to receive on (RoCEv2: 4791)
  uint16_t dst_port = wire::kRoceV2UdpPort;  // destination port of every sent packet
  FaultConfig faults;
  size_t max_src_port_sockets = 64;  // send sockets beyond the 4791 one; 0 = always from `port`
  std::string pcap_path;             // capture every packet sent and received here ("" = none)
  // UROCE_GSO: batch sends with UDP GSO and receives with UDP GRO (see above). false sends and
  // receives one datagram per system-call entry, as before.
  bool gso = false;
};

class UdpPort : public transport::PacketSink {
 public:
  static constexpr size_t kTxRing = 256;  // TxBufs a device can have queued
  static constexpr size_t kRxBatch = 32;  // datagrams per recvmmsg
  static constexpr size_t kTxBatch = 64;  // messages per sendmmsg (a GSO message is several)
  // Largest datagram accepted: the largest IB packet plus its ICRC. Anything longer is no
  // packet of ours (counted as rx_truncated).
  static constexpr size_t kRxBufBytes = transport::kMaxIbPacket + wire::kIcrcBytes;
  // With GRO a receive buffer must hold a coalesced datagram (at most 65507 bytes of UDP
  // payload); fewer of them keep the receive memory at 1 MiB.
  static constexpr size_t kGroRxBatch = 16;
  static constexpr size_t kGroBufBytes = 65536;
  // UDP GSO limits (udp_send_skb): segments per send (UDP_MAX_SEGMENTS, 64 before Linux 6.9,
  // 128 since) and the payload of the unsegmented datagram (65535 - IPv4 and UDP headers).
  static constexpr size_t kGsoMaxSegments = 64;
  static constexpr size_t kGsoMaxBytes = 65507;

  // Binds the receive socket. nullptr and a message on failure (address not local, port in use).
  static std::unique_ptr<UdpPort> open(const UdpPortOptions& opt, DeviceCounters& counters,
                                       std::string* err);
  ~UdpPort() override;
  UdpPort(const UdpPort&) = delete;
  UdpPort& operator=(const UdpPort&) = delete;

  int rx_fd() const { return fd_; }  // readable when datagrams wait (for epoll)
  uint32_t ipv4() const { return opt_.ipv4; }
  // An epoll fd, readable while a joined group's socket has datagrams waiting (for epoll).
  int mcast_fd() const { return mcast_epfd_; }

  // Receives datagrams sent to the IPv4 multicast group `group` (host byte order, 224.0.0.0/4)
  // from now on, until leave_group. 0 or an errno (EINVAL: not a multicast address; what
  // socket/bind/IP_ADD_MEMBERSHIP report). Joining a joined group is a no-op: the caller counts
  // its members. Received group datagrams carry RxInfo::dst_ip == group.
  int join_group(uint32_t group);
  void leave_group(uint32_t group);  // no-op when not joined

  // Receives up to kRxBatch (with GRO: kGroRxBatch coalesced) datagrams without blocking, drops
  // (and counts) what fault injection, the ICRC check and the parser refuse, and returns the rest.
  // Empty when nothing waits.
  std::span<const RxPacket> rx_burst();

  // transport::PacketSink. tx_alloc returns nullptr when kTxRing buffers are queued.
  transport::TxBuf* tx_alloc() override;
  // Queues `buf` (choosing its send socket now). A buffer with len < BTH or > kMaxIbPacket is
  // refused and counted in tx_errors.
  void tx_commit(transport::TxBuf* buf) override;
  // Appends the ICRC to each queued packet and sends them, in commit order. Returns the number the
  // kernel accepted; refused ones are counted in tx_errors and dropped.
  size_t tx_flush();
  size_t tx_queued() const { return queue_.size(); }
  // Returns an allocated-but-uncommitted buffer to the ring.
  void tx_abort(transport::TxBuf* buf);

  // The UDP source port a packet asking for `requested` leaves from (opening its socket if
  // needed): `requested`, or the receive port when no socket can be had for it.
  uint16_t src_port_for(uint16_t requested);

  // Fault injection (UROCE_FAULTS): when the injectors hold datagrams back (delay, reordering),
  // the engine must run rx_burst() / tx_flush() again by this time even if nothing else happens.
  // kNever when nothing is held. rx_fault_deadline() needs the engine's receive lock,
  // tx_fault_deadline() the device lock, fault_deadline() (both directions) both.
  transport::Time rx_fault_deadline() const;
  transport::Time tx_fault_deadline() const;
  transport::Time fault_deadline() const;

 private:
  UdpPort(const UdpPortOptions& opt, DeviceCounters& counters);
  int send_fd_for(uint16_t requested, uint16_t* actual_port);
  // The checks every received datagram goes through (ICRC, parse), appending to rx_out_.
  void accept(const uint8_t* buf, size_t len, bool truncated, const transport::RxInfo& info);
  // One received datagram (a GRO buffer is cut into these first): counted, then through fault
  // injection (when on) or straight to accept().
  void deliver(const uint8_t* buf, size_t len, bool truncated, const transport::RxInfo& info,
               int fd, transport::Time now);
  // One recvmmsg on `fd` into receive slots [slot, rx_slots_), each datagram addressed to
  // `dst_ip`; returns the number of slots used.
  size_t receive(int fd, uint32_t dst_ip, size_t slot, transport::Time now);
  // Turns UDP_GRO on for a receive socket when gso is on; a kernel without it just never
  // coalesces.
  void enable_gro(int fd);
  // The framing (and so ICRC) of queued buffer `idx` leaving with IP ID `ip_id`.
  wire::Ipv4UdpFraming tx_framing(uint16_t idx, uint16_t ip_id) const;
  // Sends queue_[first, first + count) one datagram each (after a refused GSO send), counting
  // and capturing each; returns the number the kernel accepted.
  size_t send_singly(int fd, size_t first, size_t count);
  // tx_flush() when transmit faults are on: datagrams go through tx_faults_ one by one.
  size_t tx_flush_faulty();
  void send_frames(std::vector<FaultFrame>& frames);  // one sendmsg each, errors counted

  UdpPortOptions opt_;
  DeviceCounters& counters_;
  int fd_ = -1;
  // Fault injection, null when the direction has no faults configured (the datapath is then
  // exactly the fault-free one). rx_frames_ holds the datagrams of the last rx_burst() when the
  // receive injector is on: rx_out_ points into them until the next rx_burst().
  std::unique_ptr<FaultInjector> rx_faults_, tx_faults_;
  std::unique_ptr<PcapWriter> pcap_;  // UROCE_PCAP; null when not capturing
  std::vector<FaultFrame> rx_frames_, tx_frames_;

  // Receive side: buffers, headers and results for one recvmmsg batch. With GRO on, kGroRxBatch
  // slots of kGroBufBytes, else kRxBatch of kRxBufBytes.
  size_t rx_slots_, rx_slot_bytes_;
  std::unique_ptr<uint8_t[]> rx_bufs_;  // rx_slots_ * rx_slot_bytes_
  std::vector<RxPacket> rx_out_;

  // Transmit side. Buffers are indexes into tx_bufs_; each is either free or queued (or held by
  // the caller between tx_alloc and tx_commit).
  std::unique_ptr<transport::TxBuf[]> tx_bufs_;
  std::unique_ptr<uint8_t[][wire::kIcrcBytes]> tx_icrc_;
  struct Route {
    int fd = -1;        // socket the packet leaves from, chosen at tx_commit
    uint16_t port = 0;  // its bound (source) port, which the ICRC covers
  };
  std::unique_ptr<Route[]> tx_route_;
  std::vector<uint16_t> free_;   // stack
  std::vector<uint16_t> queue_;  // commit order

  // Source port → send socket; -1 records a port that could not be bound (use fd_).
  std::unordered_map<uint16_t, int> src_socks_;
  size_t src_sock_count_ = 0;
  // Send sockets on which the kernel refused UDP GSO: one datagram per packet from them.
  std::vector<int> no_gso_fds_;

  // Multicast: group (host order) → its receive socket. mcast_mu_ guards groups_ against
  // rx_burst(); has_groups_ lets rx_burst() skip the lock when no group is joined.
  int mcast_epfd_ = -1;
  std::mutex mcast_mu_;
  std::map<uint32_t, int> groups_;
  std::atomic<bool> has_groups_{false};
};

}  // namespace uroce
