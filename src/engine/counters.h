// Per-device counters. Names follow rxe's hw_counters where one exists (rcvd_pkts, sent_pkts,
// rcvd_icrc_err…) so tools and tests can compare the two.
//
// Writers: the engine thread and application threads, always with the device lock held, so each
// counter has one writer at a time. Readers (the `uroce` command, tests, ibv_query_*) may read
// at any time without the lock: every counter is an atomic updated with a relaxed load + store,
// which is race-free for one writer and costs no locked instruction on the packet path.
#pragma once

#include <atomic>
#include <cstdint>

namespace uroce {

class Counter {
 public:
  void add(uint64_t n = 1) {
    v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

struct DeviceCounters {
  // Datagrams that reached the port (before any check) and their UDP payload bytes.
  Counter rcvd_pkts, rcvd_bytes;
  // Datagrams handed to the kernel and their UDP payload bytes (ICRC included).
  Counter sent_pkts, sent_bytes;

  // Receive drops, one counter per cause, in the order the checks run.
  Counter fault_drops;           // dropped by fault injection (UROCE_FAULTS loss=, burst=)
  Counter rx_truncated;          // larger than any packet uroce accepts (MSG_TRUNC)
  Counter rx_too_short;          // shorter than BTH + ICRC
  Counter rcvd_icrc_err;         // no IP Identification makes the ICRC valid (rxe: rcvd_icrc_err)
  Counter rx_parse_too_short;    // wire::ParseError::kTooShort
  Counter rx_parse_bad_opcode;   // wire::ParseError::kBadOpcode
  Counter rx_parse_bad_version;  // wire::ParseError::kBadVersion
  Counter rx_parse_bad_pad;      // wire::ParseError::kBadPad
  Counter rx_parse_bad_length;   // wire::ParseError::kBadLength
  Counter rx_parse_other;        // any ParseError not listed above
  Counter rx_unknown_qp;         // BTH DestQP names no QP of this device

  // Accepted packets that were marked ECN CE (congestion experienced).
  Counter rcvd_ecn_ce;
  // Accepted packets whose ICRC was valid only for a non-zero IP Identification: the peer is not
  // uroce's socket datapath (rxe, an RNIC). Informational.
  Counter rx_foreign_ip_id;

  // Transmit: datagrams the kernel refused (route missing, message too long for the path MTU…).
  // The transport's retransmission recovers them like losses on the wire.
  Counter tx_errors;
  // Send sockets opened for distinct UDP source ports, and packets that had to leave from 4791
  // because no socket could be had for the requested source port (see udp_port.h).
  Counter tx_src_port_sockets;
  Counter tx_src_port_fallback;

  // Fault injection (UROCE_FAULTS, engine/faults.h). Receive: fault_drops above counts every
  // injected drop (loss and burst); the rest count datagrams, before the ICRC check. Transmit:
  // after the ICRC is computed, so the peer's rcvd_icrc_err counts what tx corruption did.
  Counter fault_rx_burst_drops;  // of fault_drops, dropped inside a burst
  Counter fault_rx_corrupted;    // bits flipped (the ICRC check then drops it)
  Counter fault_rx_duplicated;   // extra copies delivered
  Counter fault_rx_reordered;    // held back behind later datagrams
  Counter fault_rx_delayed;      // passed through the delay line
  Counter fault_tx_drops;        // never sent (loss and burst)
  Counter fault_tx_burst_drops;  // of fault_tx_drops, dropped inside a burst
  Counter fault_tx_corrupted;
  Counter fault_tx_duplicated;
  Counter fault_tx_reordered;
  Counter fault_tx_delayed;

  // Engine thread wake-ups (epoll returns); a measure of how often an idle device runs.
  Counter engine_wakeups;

  // Port state transitions seen on the netdev (IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE).
  Counter port_down_events, port_up_events;

  // Visits every counter with its name, for listings.
  template <typename F>
  void for_each(F&& f) const {
    f("rcvd_pkts", rcvd_pkts.get());
    f("rcvd_bytes", rcvd_bytes.get());
    f("sent_pkts", sent_pkts.get());
    f("sent_bytes", sent_bytes.get());
    f("fault_drops", fault_drops.get());
    f("rx_truncated", rx_truncated.get());
    f("rx_too_short", rx_too_short.get());
    f("rcvd_icrc_err", rcvd_icrc_err.get());
    f("rx_parse_too_short", rx_parse_too_short.get());
    f("rx_parse_bad_opcode", rx_parse_bad_opcode.get());
    f("rx_parse_bad_version", rx_parse_bad_version.get());
    f("rx_parse_bad_pad", rx_parse_bad_pad.get());
    f("rx_parse_bad_length", rx_parse_bad_length.get());
    f("rx_parse_other", rx_parse_other.get());
    f("rx_unknown_qp", rx_unknown_qp.get());
    f("rcvd_ecn_ce", rcvd_ecn_ce.get());
    f("rx_foreign_ip_id", rx_foreign_ip_id.get());
    f("tx_errors", tx_errors.get());
    f("tx_src_port_sockets", tx_src_port_sockets.get());
    f("tx_src_port_fallback", tx_src_port_fallback.get());
    f("fault_rx_burst_drops", fault_rx_burst_drops.get());
    f("fault_rx_corrupted", fault_rx_corrupted.get());
    f("fault_rx_duplicated", fault_rx_duplicated.get());
    f("fault_rx_reordered", fault_rx_reordered.get());
    f("fault_rx_delayed", fault_rx_delayed.get());
    f("fault_tx_drops", fault_tx_drops.get());
    f("fault_tx_burst_drops", fault_tx_burst_drops.get());
    f("fault_tx_corrupted", fault_tx_corrupted.get());
    f("fault_tx_duplicated", fault_tx_duplicated.get());
    f("fault_tx_reordered", fault_tx_reordered.get());
    f("fault_tx_delayed", fault_tx_delayed.get());
    f("engine_wakeups", engine_wakeups.get());
    f("port_down_events", port_down_events.get());
    f("port_up_events", port_up_events.get());
  }
};

}  // namespace uroce
