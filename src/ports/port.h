// The port interface: the one seam between a device's engine and a datapath (kernel UDP
// sockets, DPDK, a simulated fabric). In the manner of eRPC's Transport and Seastar's
// net::device, it is narrow: bursts of frames in and out, what the port can do, how to wait for
// it, its timers, its link state and multicast membership. A port does only its I/O. Everything
// every datapath needs — length checks, the ICRC, parsing, drop counters, capture, fault
// injection — is written once above it, in the device's receive pipeline (engine/datapath.h).
//
//   verbs → engine (Device, Dispatch, Datapath, Engine) → Port ← UdpPort, DpdkPort, SimPort
//
// Buffers. Transmit buffers (transport::TxBuf) belong to the port: tx_alloc() hands one out, the
// transport writes an IB packet into it, the pipeline appends the ICRC in place, and tx_burst()
// takes it back (sent or dropped). Each TxBuf has kTxHeadroom bytes in front of its data, so a
// port that frames Ethernet/IP/UDP itself writes its headers there and adds no copy. Received
// frames point into the port's memory and stay valid until the next rx_burst().
//
// Threading. rx_burst() and the receive-side members are called by one thread at a time (the
// engine's receive lock); the transmit side (tx_alloc, tx_prepare, tx_burst, tx_free) and
// join_group/leave_group with the device lock held; poll() on the engine thread with the device
// lock held; caps(), link_up() from anywhere.
#pragma once

#include <cerrno>
#include <cstdint>
#include <span>
#include <string>

#include "ports/port_counters.h"
#include "transport/env.h"

namespace uroce {

// What a port can do. Fixed when the port opens.
struct PortCaps {
  // Largest IP datagram the port carries unfragmented (the interface MTU). Bounds the IB path
  // MTU the device offers (IB MTU + RoCEv2 headers must fit).
  uint32_t ip_mtu = 1500;
  // Received frames carry their real IPv4 Identification and flags (RxFrame::ip_id_known), so
  // the ICRC is checked exactly. A kernel UDP socket never shows the IP header: the pipeline
  // then accepts a packet when some IP ID makes its ICRC valid (wire/icrc.h). An IPv6 port is
  // always exact: IPv6 has no IP ID, and the ICRC covers nothing the socket does not tell.
  bool exact_icrc = false;
  // The port (its NIC) computes IPv4 header checksums on transmit.
  bool ipv4_csum_offload = false;
  // join_group() works (IPv4 multicast for UD QPs).
  bool multicast = false;
  // tx_prepare(…, batch = true) may group packets (UDP GSO): their IP IDs then differ.
  bool tx_batching = false;
  // A poll-mode port (DPDK): frames are seen only by calling rx_burst(), so the engine polls it
  // while traffic flows and backs off when idle (sleeping on receive interrupts where the port
  // arms them, else on a timer). wait_fds() are then receive-interrupt fds, readable only while
  // armed.
  bool poll_mode = false;
  // The port frames Ethernet itself and carries RoCE v1 (GRH, EtherType 0x8915) besides v2.
  bool roce_v1 = false;
  // Payloads of this many bytes and more may lie outside the TxBuf (TxBuf::ext); 0: none.
  // tx_burst() has read such a payload by the time it returns: the port copies each frame as it
  // sends it anyway (sendmmsg into the kernel, memif into its shared ring), so the payload goes
  // from the memory region to the wire in one copy. A frame the port keeps past tx_burst() (ring
  // full, paused, neighbour unresolved) it makes whole first. The size is where the copy saved
  // outweighs what gathering costs the port (docs/performance.md).
  uint32_t tx_gather_min = 0;
};

// What a NIC reports of itself, for a port that drives one (DPDK): its link speed, its own error
// and PAUSE counters, and its flow-control setting — what `ethtool`, `ethtool -S` and `ethtool -a`
// show of a kernel interface. The port refreshes it on its poll(), about once a second; the
// device publishes it (entries "nic_*", docs/troubleshooting.md) so that `uroce doctor` and
// `uroce stats` read it without taking the port from the process that owns it.
struct NicInfo {
  // 802.3x flow control as the driver reports it (rte_eth_fc_conf mode).
  enum FlowCtrl : uint64_t {
    kFcUnknown = 0,
    kFcNone = 1,
    kFcRxPause = 2,
    kFcTxPause = 3,
    kFcFull = 4
  };
  uint64_t link_speed_mbps = 0;  // 0: the driver does not say
  uint64_t link_full_duplex = 0;
  // Frames the NIC received in error (bad FCS, length), dropped for lack of receive descriptors
  // (the engine did not take them fast enough) or of buffers, and frames it failed to send.
  uint64_t rx_errors = 0, rx_missed = 0, rx_nombuf = 0, tx_errors = 0;
  // PAUSE and PFC frames the NIC itself counted, the sum of the driver's extended statistics
  // whose names say pause or XOFF (their number: pause_stats; 0 when the driver has none).
  uint64_t rx_pause = 0, tx_pause = 0, pause_stats = 0;
  uint64_t flow_ctrl = kFcUnknown;

  // Visits every field with its published name.
  template <typename Self, typename F>
  static void for_each(Self& self, F&& f) {
    f("nic_link_speed_mbps", self.link_speed_mbps);
    f("nic_link_full_duplex", self.link_full_duplex);
    f("nic_rx_errors", self.rx_errors);
    f("nic_rx_missed", self.rx_missed);
    f("nic_rx_nombuf", self.rx_nombuf);
    f("nic_tx_errors", self.tx_errors);
    f("nic_rx_pause", self.rx_pause);
    f("nic_tx_pause", self.tx_pause);
    f("nic_pause_stats", self.pause_stats);
    f("nic_flow_ctrl", self.flow_ctrl);
  }
};

// One received RoCE datagram: the UDP payload (IB packet, then the ICRC) and what the port knows
// of the headers it came in.
struct RxFrame {
  const uint8_t* data = nullptr;  // BTH .. ICRC; valid until the next rx_burst()
  uint32_t len = 0;
  bool truncated = false;  // the datagram was longer than the port's buffer (MSG_TRUNC)
  // The datagram's addresses: IPv4-mapped for IPv4 and for RoCE v1's GIDs; plain IPv6 for a port
  // whose device address is IPv6 (the UDP port).
  wire::IpAddr src_ip{};
  wire::IpAddr dst_ip{};  // the device address, or the multicast group it was sent to
  uint16_t src_port = 0;  // UDP
  uint16_t dst_port = 0;  // UDP (4791, or the port's configured receive port)
  uint8_t tos = 0;        // the IPv4 TOS byte or IPv6 Traffic Class: DSCP << 2 | ECN (RFC 3168)
  // The port saw the IPv4 header (PortCaps::exact_icrc): its Identification and DF flag.
  bool ip_id_known = false;
  bool dont_fragment = true;
  uint16_t ip_id = 0;
  // RoCE v1: data is BTH .. ICRC after a GRH whose GIDs gave src_ip / dst_ip (ports
  // and IP ID do not apply); tos holds the GRH traffic class.
  bool roce_v1 = false;
};

// A port that several processes open at once (the UDP port: docs/architecture.md, "One device,
// many processes"): the numbers this process may hand out, so that the device's QPNs and the CM's
// communication IDs stay unique across the processes, and the CM's port claims, so that a bind
// or listen another process holds fails with EADDRINUSE. Thread-safe.
class PortShare {
 public:
  virtual ~PortShare() = default;
  // This process's QPNs are qpn_base() + (n mod qpn_count()), n counting on from *qpn_cursor()
  // (atomically: the counter outlives the process, so a successor in its place continues it).
  virtual uint32_t qpn_base() const = 0;
  virtual uint32_t qpn_count() const = 0;  // a power of two
  virtual uint32_t* qpn_cursor() = 0;
  // Its local CM communication IDs and SIDR request IDs: comm_id_base() + (n mod comm_id_count()).
  virtual uint32_t comm_id_base() const = 0;
  virtual uint32_t comm_id_count() const = 0;
  // rdma_cm ports (port space, port), counted per process: 0, or EADDRINUSE when another process
  // holds it. A listened-to port's connection requests come to this process (set_listening).
  virtual int claim_service(uint16_t port_space, uint16_t port) = 0;
  virtual void release_service(uint16_t port_space, uint16_t port) = 0;
  virtual void set_listening(uint16_t port_space, uint16_t port, bool on) = 0;
};

// What the network told the port about a datagram it sent, beside the frames it receives: today
// an ICMP destination unreachable (RFC 792) that the kernel passed to a UDP socket (IP_RECVERR),
// or its ICMPv6 counterpart (RFC 4443 type 1, IPV6_RECVERR) on an IPv6 device.
// A peer host without anything on UDP 4791 answers each datagram with "port unreachable"
// (RFC 1122 3.2.2.1): no retransmission can reach a RoCE endpoint there, and the layers above
// use it to fail at once what would otherwise wait out its retries (the CM's REQ: seconds).
struct PortEvent {
  enum class Kind : uint8_t {
    kUnreachable,  // ICMP destination unreachable (type 3) for a datagram this port sent
  };
  // ICMPv6 destination unreachables (RFC 4443 type 1) are reported in ICMP's terms (type 3, the
  // code mapped: port unreachable 4 → 3, no route 0 → 0, address unreachable and beyond scope
  // → 1, the policy ones → 13), so that the layers above read one family.
  static constexpr uint32_t kNoQp = ~uint32_t{0};
  static constexpr uint8_t kIcmpDestUnreach = 3;  // RFC 792 type
  static constexpr uint8_t kIcmpPortUnreach = 3;  // RFC 792 code: nothing listens on the port

  Kind kind = Kind::kUnreachable;
  wire::IpAddr dst_ip{};       // where the datagram went (IPv4-mapped for IPv4)
  uint16_t dst_port = 0;       // its UDP destination port (4791)
  wire::IpAddr reporter_ip{};  // who sent the ICMP: the peer host, or a router; :: when unknown
  uint8_t icmp_type = 0, icmp_code = 0;
  // The datagram's BTH DestQP and opcode when the ICMP quoted them (it quotes at least 8 bytes
  // of the UDP payload, RFC 792; Linux quotes far more): which of the peer's QPs it was for
  // (1: a CM MAD). kNoQp when not quoted.
  uint32_t dest_qp = kNoQp;
  uint8_t opcode = 0;

  bool port_unreachable() const {
    return icmp_type == kIcmpDestUnreach && icmp_code == kIcmpPortUnreach;
  }
};

// Where a port reports its PortEvents.
class PortEventSink {
 public:
  virtual void on_port_event(const PortEvent& ev) = 0;

 protected:
  ~PortEventSink() = default;
};

class Port {
 public:
  virtual ~Port() = default;

  virtual const PortCaps& caps() const = 0;
  // The device address: IPv4-mapped for an IPv4 device, a plain IPv6 address for an IPv6 one
  // (the kernel-UDP port only; DPDK and the simulator are IPv4).
  virtual wire::IpAddr ip() const = 0;
  // The UDP port packets are sent to and received on (RoCEv2: 4791, IANA / Annex A17).
  virtual uint16_t udp_port() const { return 4791; }
  // The UDP destination port of every packet sent (4791 too; a test may point it elsewhere).
  virtual uint16_t udp_dst_port() const { return 4791; }
  virtual std::string describe() const = 0;  // for logs: "udp 127.0.0.1:4791 on lo"

  // --- receive ---
  // Receives what is waiting, a bounded batch, without blocking; empty when nothing waits. The
  // frames (and the bytes they point to) stay valid until the next call.
  virtual std::span<const RxFrame> rx_burst() = 0;

  // --- transmit ---
  // A free buffer, or nullptr when the port's transmit ring is full (backpressure: the caller
  // keeps its state and tries again on a later pass).
  virtual transport::TxBuf* tx_alloc() = 0;
  // Returns a buffer from tx_alloc() unsent.
  virtual void tx_free(transport::TxBuf* buf) = 0;
  // Fixes what the ICRC of each buffer covers before the pipeline computes it: the IP ID
  // (TxBuf::ip_id) and the UDP source port it really leaves from (TxBuf::src_port; a port that
  // cannot send from the requested one says so here). With `batch` (and PortCaps::tx_batching),
  // the port may group packets into one send (UDP GSO) and number their IP IDs as the kernel
  // will; without, each packet leaves alone. tx_burst must get the same buffers in the same order.
  virtual void tx_prepare(std::span<transport::TxBuf* const> bufs, bool batch) {
    (void)batch;
    for (transport::TxBuf* b : bufs) b->ip_id = 0;
  }
  // Sends the prepared buffers (ICRC in place at data[len]) in order, taking every one of them
  // back, and counts what it sent (PortCounters::sent_*) and refused (tx_errors). Returns the
  // number sent.
  virtual size_t tx_burst(std::span<transport::TxBuf* const> bufs) = 0;

  // --- waiting and timers ---
  // File descriptors that become readable when rx_burst() has frames (epoll, level-triggered).
  // A poll-mode port lists its receive-interrupt fds here (or none).
  virtual std::span<const int> wait_fds() const { return {}; }
  // Poll mode: enables receive interrupts before the engine sleeps; true when armed (wait_fds()
  // then become readable on arrival). The engine runs one more receive pass after arming, so
  // nothing that arrived just before is missed, and calls disarm_wait() once it is busy again.
  virtual bool arm_wait() { return false; }
  virtual void disarm_wait() {}
  // A descriptor readable when the port has control work (link notifications, the UDP port's
  // ICMP errors), or -1; the engine then calls on_control() on its thread, without any lock.
  virtual int control_fd() const { return -1; }
  // Handles control work. Returns true when link_up() changed.
  virtual bool on_control() { return false; }
  // The port's own timers (ARP retries, PAUSE expiry…): poll() must run by then. kNever when none.
  virtual transport::Time next_deadline() const { return transport::kNever; }
  // Whether poll() has work now that no deadline announced: a control frame received (an ARP
  // request to answer, a neighbour resolved and its held packets to send, a PAUSE), a packet
  // held or left in the backlog by a transmit. Any thread, no lock: a polling application asks
  // after each receive whether it must run a pass for the port.
  virtual bool wants_poll() const { return false; }
  // Housekeeping due by `now` (engine thread, device lock held). Returns true when link_up()
  // changed (for a port without a control fd that learns its link state by polling).
  virtual bool poll(transport::Time now) {
    (void)now;
    return false;
  }

  // --- link and multicast ---
  // The link is up (what ibv_query_port reports as ACTIVE). A port that cannot know says up.
  virtual bool link_up() const { return true; }
  // Receive datagrams sent to the IPv4 group `group` (host order, 224.0.0.0/4) from now on.
  // 0, EINVAL (not a multicast address), EOPNOTSUPP (the port has no multicast), or the
  // port's error. Joining a joined group is a no-op (the caller counts members).
  virtual int join_group(uint32_t group) {
    (void)group;
    return EOPNOTSUPP;
  }
  virtual void leave_group(uint32_t group) { (void)group; }

  // --- events ---
  // Where the port reports what it learns beside frames (PortEvent). Set once, before the engine
  // starts. The port calls the sink on the thread that read the event — the engine's
  // on_control(), or a receive pass (rx_burst) — never with the device lock held, one call at a
  // time. A port that learns nothing of the kind (DPDK, which drops ICMP errors as non-RoCE
  // frames; the simulator) ignores it.
  virtual void set_event_sink(PortEventSink* sink) { (void)sink; }

  // --- the NIC ---
  // What the NIC under the port reports (NicInfo), as of the port's last poll(); false for a
  // port without a NIC of its own (the kernel's UDP socket: the interface is the kernel's, seen
  // in /sys/class/net; the simulator). Any thread.
  virtual bool nic_info(NicInfo* out) const {
    (void)out;
    return false;
  }

  // --- sharing ---
  // The port's share when several processes use it at once; nullptr when this process has it
  // alone (DPDK, the simulator).
  virtual PortShare* share() { return nullptr; }
};

}  // namespace uroce
