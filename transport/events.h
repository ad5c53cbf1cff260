// Typed events between the roles of one QP. qp.cc routes them: a role returns what happened, the
// dispatcher hands it to the role that must react. No role reads or writes another's state.
#pragma once

#include <infiniband/verbs.h>

#include <optional>

#include "transport/env.h"
#include "transport/psn.h"

namespace uroce::transport {

// Completer → requester: every PSN before `next_unacked` is acknowledged (IBTA 9.7.5.1: ACKs
// are cumulative). The requester's window opens; a cursor behind it jumps forward.
struct AckedThrough {
  Psn next_unacked;
};

// Completer → requester: transmit again from `psn` (go-back-N after a PSN sequence error NAK,
// an RNR NAK, a local ACK timeout or an early-retransmit probe), not before `not_before` (the RNR
// timer; 0 = now).
struct RetransmitFrom {
  // Why: the requester's send window shrinks on the loss signals (sequence NAK, implicit NAK,
  // timeout, probe) and not on an RNR NAK, which says the receiver had no WQE, not that a packet
  // was lost.
  enum class Cause : uint8_t {
    kSequenceNak,  // PSN sequence error NAK (IBTA 9.7.5.2.2)
    kImplicitNak,  // a READ/ATOMIC response is missing behind a later response (completer.h)
    kTimeout,      // local ACK timeout (IBTA 9.7.6.1.3)
    kRnrNak,       // RNR NAK (IBTA 9.7.5.2.8)
    kProbe,        // the early-retransmit probe timer (completer.h), before the ACK timeout
  };
  Psn psn;
  Time not_before = 0;
  Cause cause = Cause::kSequenceNak;
};

// Completer → requester, selective repeat only (QpInit::selective_repeat): a SACK. The responder
// has every PSN before `cumulative` and, when `sacked` is set, that PSN too (it arrived ahead of
// `cumulative` and was placed). The requester resends the PSNs below the highest SACKed one that
// no SACK covers, each once per loss episode.
struct Sacked {
  Psn cumulative;
  std::optional<Psn> sacked;
};

// Requester → completer: packets up to (excluding) `sent_end` have been transmitted at least
// once; the retransmission timer must run while any of them is unacknowledged.
struct PacketsSent {
  Psn sent_end;
  // A PSN sent for the first time with AckReq in this pump, to time the round trip to the ACK
  // that covers it (completer.h). Only new PSNs: a resent one could be answered by either copy
  // (Karn's rule).
  bool timed = false;
  Psn timed_psn;
};

// Completer → requester, selective repeat only: the READ responses at PSNs [from, to) of one
// READ are missing while a later one arrived and was placed (completer.h). The requester asks
// for just those: a READ request at `from` for (to - from) packets' bytes, which a uroce
// responder answers from its responder resources like any duplicate READ (9.7.4.1.3.2).
struct ReadHole {
  Psn from, to;
};

// Any role → QP: the QP must enter the error state (the role has already completed the WQE that
// caused it with its error status). IBTA 10.3.1: RC errors move the QP to ERR.
struct QpFatal {};

// What the completer reports after handling a response or a timer.
struct CompleterOutcome {
  std::optional<AckedThrough> acked;
  // A round-trip sample (an AckReq packet's first transmission to the ACK covering it), for
  // congestion control (TIMELY).
  std::optional<Time> rtt;
  std::optional<RetransmitFrom> retransmit;
  std::optional<Sacked> sack;
  std::optional<ReadHole> read_hole;
  std::optional<QpFatal> fatal;
};

// What the requester reports after a pump.
struct RequesterOutcome {
  std::optional<PacketsSent> sent;
  bool blocked_by_port = false;  // tx_alloc() returned nullptr
  bool local_error = false;      // a WQE became kLocalError: the completer must look at the front
  bool local_done = false;   // a local operation (BIND_MW, LOCAL_INV) executed: it may complete now
  bool paced = false;        // the pacer held the next packet back (cc/pacer.h)
  uint64_t frame_bytes = 0;  // Ethernet frame bytes of the packets sent (congestion control)
};

// What the responder reports after a request.
struct ResponderOutcome {
  std::optional<QpFatal> fatal;
  bool first_packet = false;  // the first valid request since RTR (IBV_EVENT_COMM_EST)
};

}  // namespace uroce::transport
