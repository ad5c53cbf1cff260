// Counters a port keeps about its own I/O: what it handed to the wire, what the wire or the
// kernel refused, and port-specific events. One list for every port kind (a counter a port kind
// never touches stays 0, and listings show only non-zero counters), so the names a device
// publishes do not depend on its datapath. Writers: the port, under the serialisation the port
// contract gives (transmit side under the device lock, receive side under the engine's receive
// lock); readers: anyone (util/counter.h).
#pragma once

#include "util/counter.h"

namespace uroce {

struct PortCounters {
  // Datagrams (frames) handed to the wire and their RoCE bytes: UDP payload, i.e. IB packet and
  // ICRC, whatever headers the port adds. Counted after a successful send.
  Counter sent_pkts, sent_bytes;
  // Transmit: packets the kernel or the NIC refused (route missing, message too long for the path
  // MTU, no transmit descriptor…). The transport's retransmission recovers them like losses.
  Counter tx_errors;
  // Receive: frames the port could not attribute to a sender (e.g. a datagram without an IPv4
  // source address). Dropped before the device's receive pipeline sees them.
  Counter rx_port_errors;
  // Payloads by reference (PortCaps::tx_gather_min): packets handed to the port with their
  // payload still in the memory region (no copy by uroce), and those of them the port had to
  // copy after all (a DPDK frame kept past tx_burst — ring full, paused, next hop unresolved —
  // or no segment mbufs left).
  Counter tx_gathered, tx_gather_copied;

  // UDP port (src/ports/udp): send sockets opened for distinct UDP source ports, and packets
  // that had to leave from 4791 (a shared device: from a port of the process's own, udp_port.h)
  // because no socket could be had for the requested source port.
  Counter tx_src_port_sockets;
  Counter tx_src_port_fallback;
  // UDP port: send sockets on which the kernel refused UDP GSO (UROCE_GSO; e.g. the route's
  // device has no checksum offload): they send one datagram per packet from then on.
  Counter tx_gso_fallback;
  // UDP port: datagrams the kernel dropped because the receive socket's buffer was full
  // (SO_RXQ_OVFL): packets lost before uroce could see them, which the transport then recovers
  // as losses. Many QPs with full send windows into one receiver can do it.
  Counter rx_socket_overflow;
  // UDP port: ICMP destination-unreachable errors the kernel passed back for datagrams sent
  // (IP_RECVERR), any code; "port unreachable" — no RoCE endpoint at that address, UDP 4791 —
  // is the usual one (PortEvent; the CM fails a connection attempt to it at once).
  Counter rx_icmp_unreachable;
  // UDP port, a device shared by several processes (docs/architecture.md, "One device, many
  // processes"): datagrams whose BTH DestQP names another process's slot, which the group's
  // steering brought here (a change of members under way, a slot no process holds, or a
  // misplaced position). Also counted in rx_unknown_qp, which cannot tell them from packets for
  // a QP this process destroyed.
  Counter rx_share_other_slot;
  // The relay (same section): datagrams for another member passed on to it, datagrams that could
  // not be (its relay socket full: dropped as unknown QPs here, recovered as losses), and
  // datagrams other members passed on to this process.
  Counter rx_share_relayed_out, rx_share_relay_failed, rx_share_relayed_in;

  // Ports that frame Ethernet themselves (dpdk_port/). Receive, frames not handed up: not for
  // this device (another MAC or IPv4 address), not RoCE (another EtherType, IP protocol or UDP
  // port, after ARP, ICMP and PAUSE were taken out), a bad IPv4 header (version, length,
  // checksum, a fragment).
  Counter rx_not_for_us, rx_non_roce, rx_bad_ipv4;
  // Frames that arrived in more than one buffer and were copied whole before the checks.
  Counter rx_linearized;
  // RoCE v1 frames (EtherType 0x8915) handed up.
  Counter rx_roce_v1;
  // ARP (RFC 826): requests and replies received, requests sent (resolution and its retries),
  // replies sent (for the device address), neighbours that never answered, and packets dropped
  // because their next hop did not resolve (the transport then retries as after a loss).
  Counter arp_rx, arp_tx_requests, arp_tx_replies, arp_failures, tx_no_neighbour;
  // ICMP echo requests to the device address answered (ping).
  Counter icmp_echo_replies;
  // PAUSE (IEEE 802.3 annex 31B) and priority PAUSE (802.1Qbb PFC) frames received; per
  // priority: the frames that paused it and the pause time they asked for, in µs (the mlx5
  // names, rx_prioN_pause / rx_prioN_pause_duration). Packets held while their priority was
  // paused, and dropped because too many were held.
  Counter rx_pause_frames;
  Counter rx_prio_pause[8], rx_prio_pause_duration[8];
  Counter tx_pause_held, tx_pause_drops;

  // Visits every counter with its name; Self is PortCounters or const PortCounters.
  template <typename Self, typename F>
  static void visit(Self& s, F&& f) {
    f("sent_pkts", s.sent_pkts);
    f("sent_bytes", s.sent_bytes);
    f("tx_errors", s.tx_errors);
    f("rx_port_errors", s.rx_port_errors);
    f("tx_gathered", s.tx_gathered);
    f("tx_gather_copied", s.tx_gather_copied);
    f("tx_src_port_sockets", s.tx_src_port_sockets);
    f("tx_src_port_fallback", s.tx_src_port_fallback);
    f("tx_gso_fallback", s.tx_gso_fallback);
    f("rx_socket_overflow", s.rx_socket_overflow);
    f("rx_icmp_unreachable", s.rx_icmp_unreachable);
    f("rx_share_other_slot", s.rx_share_other_slot);
    f("rx_share_relayed_out", s.rx_share_relayed_out);
    f("rx_share_relay_failed", s.rx_share_relay_failed);
    f("rx_share_relayed_in", s.rx_share_relayed_in);
    f("rx_not_for_us", s.rx_not_for_us);
    f("rx_non_roce", s.rx_non_roce);
    f("rx_bad_ipv4", s.rx_bad_ipv4);
    f("rx_linearized", s.rx_linearized);
    f("rx_roce_v1", s.rx_roce_v1);
    f("arp_rx", s.arp_rx);
    f("arp_tx_requests", s.arp_tx_requests);
    f("arp_tx_replies", s.arp_tx_replies);
    f("arp_failures", s.arp_failures);
    f("tx_no_neighbour", s.tx_no_neighbour);
    f("icmp_echo_replies", s.icmp_echo_replies);
    f("rx_pause_frames", s.rx_pause_frames);
    static constexpr const char* kPause[8] = {"rx_prio0_pause", "rx_prio1_pause", "rx_prio2_pause",
                                              "rx_prio3_pause", "rx_prio4_pause", "rx_prio5_pause",
                                              "rx_prio6_pause", "rx_prio7_pause"};
    static constexpr const char* kDur[8] = {"rx_prio0_pause_duration", "rx_prio1_pause_duration",
                                            "rx_prio2_pause_duration", "rx_prio3_pause_duration",
                                            "rx_prio4_pause_duration", "rx_prio5_pause_duration",
                                            "rx_prio6_pause_duration", "rx_prio7_pause_duration"};
    for (int p = 0; p < 8; ++p) f(kPause[p], s.rx_prio_pause[p]);
    for (int p = 0; p < 8; ++p) f(kDur[p], s.rx_prio_pause_duration[p]);
    f("tx_pause_held", s.tx_pause_held);
    f("tx_pause_drops", s.tx_pause_drops);
  }
};

}  // namespace uroce
