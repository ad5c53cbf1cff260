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

#include "ports/port_counters.h"
#include "util/counter.h"

namespace uroce {

struct DeviceCounters {
  // Datagrams that reached the port (before any check) and their UDP payload bytes.
  Counter rcvd_pkts, rcvd_bytes;
  // What the port handed to the wire, refused, and port-specific events (ports/port_counters.h):
  // sent_pkts, sent_bytes, tx_errors, … keep their names in every listing.
  PortCounters port;

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
  // Accepted packets whose ICRC was valid only for a non-zero IP Identification: a peer that
  // numbers its packets (rxe, an RNIC), or a uroce peer sending with UDP GSO, whose segments the
  // kernel numbers 0, 1, 2, ... (docs/wire-format.md). Informational.
  Counter rx_foreign_ip_id;
  // Of rcvd_icrc_err: datagrams whose ICRC was valid only under an IP ID their source never uses
  // (a source that has only sent small IDs, as uroce's socket port does): corrupted ones that the
  // plain check, blind to the ID on a socket, would have let through (engine/ip_id_guard.h).
  Counter rx_icrc_suspect;

  // Fault injection (UROCE_FAULTS, engine/faults.h). Receive: fault_drops above counts every
  // injected drop (loss and burst); the rest count datagrams, before the ICRC check. Transmit:
  // after the ICRC is computed, so the peer's rcvd_icrc_err counts what tx corruption did.
  Counter fault_rx_burst_drops;   // of fault_drops, dropped inside a burst
  Counter fault_rx_corrupted;     // bits flipped (the ICRC check then drops it)
  Counter fault_rx_duplicated;    // extra copies delivered
  Counter fault_rx_reordered;     // held back behind later datagrams
  Counter fault_rx_delayed;       // passed through the delay line
  Counter fault_rx_queue_marked;  // marked CE by the switch queue (rx.queue), RED
  Counter fault_rx_queue_drops;   // dropped by the switch queue: its buffer was full (not in
                                  // fault_drops: a congestion drop, not an injected loss)
  // The backlog each datagram the switch queue takes in finds, by RED's thresholds: how much of
  // the time (as arrivals see it) the queue sits below Kmin, on the marking ramp, above Kmax.
  Counter fault_rx_queue_below_kmin;
  Counter fault_rx_queue_in_ramp;
  Counter fault_rx_queue_above_kmax;
  Counter fault_rx_ce_set;       // set CE by rx.ce (whatever the datagram's ECN field was)
  Counter fault_tx_drops;        // never sent (loss and burst)
  Counter fault_tx_burst_drops;  // of fault_tx_drops, dropped inside a burst
  Counter fault_tx_corrupted;
  Counter fault_tx_duplicated;
  Counter fault_tx_reordered;
  Counter fault_tx_delayed;

  // Engine thread passes (an epoll return, or a poll-mode spin, that led to a receive and progress
  // pass); a measure of how often an idle device runs.
  Counter engine_wakeups;
  // Receive-and-progress passes that application threads ran while polling a CQ
  // (Engine::poll_from_app) and that received something: progress the engine did not have to do.
  Counter app_progress_passes;
  // Times the engine found that an application thread which polls had left arrivals waiting
  // until the handoff lapsed (it spins elsewhere between polls, as ib_write_lat spins on memory)
  // and began receiving on arrival beside it (Engine::run).
  Counter engine_rx_takeovers;
  // Times an application thread that had been polling a CQ made no call for the handoff time
  // (Engine::kDefaultHandoffNs) without saying it stopped (arming a CQ), so the engine thread took
  // the receive side back (Engine::run). Either the application went off to do something else,
  // or it was descheduled: on a machine with fewer cores than busy threads (its own engine
  // thread among them) a streaming application can lapse a hundred times a second, and each
  // lapse moves its work to the engine thread for a while.
  Counter engine_handoff_lapses;

  // ACK riders (transport/ack_rider.h): RC ACKs that left riding on a request of their QP (each
  // a datagram not sent), and requests that arrived carrying one.
  Counter tx_ack_riders, rx_ack_riders;

  // Port state transitions seen on the netdev (IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE).
  Counter port_down_events, port_up_events;

  // Accesses to on-demand (ODP) regions refused because their pages were not mapped with the
  // access needed when the transport reached them: each became a remote access error NAK, or a
  // local protection error completion (transport::TableMemory, "On-demand regions").
  Counter odp_faults;

  // Visits every counter with its name and value, for listings.
  template <typename F>
  void for_each(F&& f) const {
    visit(*this, [&f](const char* name, const Counter& c) { f(name, c.get()); });
  }

  // Visits every counter itself with its name (e.g. to bind() it into shared memory).
  template <typename F>
  void for_each_ref(F&& f) {
    visit(*this, f);
  }

 private:
  // One list for both visitors; Self is DeviceCounters or const DeviceCounters.
  template <typename Self, typename F>
  static void visit(Self& s, F&& f) {
    f("rcvd_pkts", s.rcvd_pkts);
    f("rcvd_bytes", s.rcvd_bytes);
    PortCounters::visit(s.port, f);
    f("fault_drops", s.fault_drops);
    f("rx_truncated", s.rx_truncated);
    f("rx_too_short", s.rx_too_short);
    f("rcvd_icrc_err", s.rcvd_icrc_err);
    f("rx_parse_too_short", s.rx_parse_too_short);
    f("rx_parse_bad_opcode", s.rx_parse_bad_opcode);
    f("rx_parse_bad_version", s.rx_parse_bad_version);
    f("rx_parse_bad_pad", s.rx_parse_bad_pad);
    f("rx_parse_bad_length", s.rx_parse_bad_length);
    f("rx_parse_other", s.rx_parse_other);
    f("rx_unknown_qp", s.rx_unknown_qp);
    f("rcvd_ecn_ce", s.rcvd_ecn_ce);
    f("rx_foreign_ip_id", s.rx_foreign_ip_id);
    f("rx_icrc_suspect", s.rx_icrc_suspect);
    f("fault_rx_burst_drops", s.fault_rx_burst_drops);
    f("fault_rx_corrupted", s.fault_rx_corrupted);
    f("fault_rx_duplicated", s.fault_rx_duplicated);
    f("fault_rx_reordered", s.fault_rx_reordered);
    f("fault_rx_delayed", s.fault_rx_delayed);
    f("fault_rx_queue_marked", s.fault_rx_queue_marked);
    f("fault_rx_queue_drops", s.fault_rx_queue_drops);
    f("fault_rx_queue_below_kmin", s.fault_rx_queue_below_kmin);
    f("fault_rx_queue_in_ramp", s.fault_rx_queue_in_ramp);
    f("fault_rx_queue_above_kmax", s.fault_rx_queue_above_kmax);
    f("fault_rx_ce_set", s.fault_rx_ce_set);
    f("fault_tx_drops", s.fault_tx_drops);
    f("fault_tx_burst_drops", s.fault_tx_burst_drops);
    f("fault_tx_corrupted", s.fault_tx_corrupted);
    f("fault_tx_duplicated", s.fault_tx_duplicated);
    f("fault_tx_reordered", s.fault_tx_reordered);
    f("fault_tx_delayed", s.fault_tx_delayed);
    f("engine_wakeups", s.engine_wakeups);
    f("app_progress_passes", s.app_progress_passes);
    f("engine_rx_takeovers", s.engine_rx_takeovers);
    f("engine_handoff_lapses", s.engine_handoff_lapses);
    f("tx_ack_riders", s.tx_ack_riders);
    f("rx_ack_riders", s.rx_ack_riders);
    f("port_down_events", s.port_down_events);
    f("port_up_events", s.port_up_events);
    f("odp_faults", s.odp_faults);
  }
};

}  // namespace uroce
