// The completer: handles what comes back for our requests (ACK, RNR NAK, NAKs, READ responses
// and ATOMIC ACKs), completes send WQEs in order, and owns the retransmission timer, the retry
// counters (IBTA 9.7.5.1 ff., 9.7.6.1.3) and the early-retransmit probe timer (below).
//
// READ and ATOMIC WQEs complete only when their data has arrived: a READ response or ATOMIC ACK
// implicitly acknowledges every request before it (9.7.5.1.1), but no ACK can complete a READ or
// ATOMIC whose response is missing. An ACK or NAK beyond such a WQE proves its responses were
// lost (the responder answers in order): the completer then asks the requester to resend from
// where the data stopped ("implicit NAK"), a READ from the first missing response packet.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "transport/context.h"
#include "transport/events.h"
#include "transport/send_queue.h"
#include "wire/wire.h"

namespace uroce::transport {

class Completer {
 public:
  // Why the completer failed a WQE: each names one ibv_wc_status.
  enum class Error : uint8_t {
    kRetryExceeded,     // local ACK timeouts / sequence NAKs beyond retry_cnt (RETRY_EXC_ERR)
    kRnrRetryExceeded,  // RNR NAKs beyond rnr_retry (RNR_RETRY_EXC_ERR)
    kRemoteInvalidRequest,
    kRemoteAccess,
    kRemoteOperational,
    kRemoteInvalidRdRequest,
    kLocalProtection,  // a READ response / ATOMIC ACK could not be written to the SGEs
  };
  static ibv_wc_status to_wc_status(Error e);

  // RTR→RTS: nothing outstanding, counters from the attributes.
  void reset(Psn sq_psn, const ibv_qp_attr& attr);

  // A response (ACK/NAK, READ response, ATOMIC ACK) addressed to this QP.
  CompleterOutcome on_response(const wire::Packet& pkt, Time now, const QpContext& ctx,
                               SendQueue& sq);
  // The retransmission timer (deadline() <= now).
  CompleterOutcome on_timer(Time now, const QpContext& ctx, SendQueue& sq);
  // The requester transmitted up to ev.sent_end: arms the timer if it is not running.
  void on_sent(const PacketsSent& ev, Time now, const QpContext& ctx);
  // Completes a kLocalError WQE that reached the front of the queue.
  CompleterOutcome complete_local_error(const QpContext& ctx, SendQueue& sq);
  // Completes executed local operations (BIND_MW, LOCAL_INV: no PSN) at the front once
  // everything before them is acknowledged; ACKs complete those behind outstanding requests.
  void complete_local_done(const QpContext& ctx, SendQueue& sq);

  // The earlier of the ACK timer and the probe timer; on_timer() handles whichever is due.
  Time deadline() const { return std::min(deadline_, probe_at_); }
  // The probe timeout with its current backoff, or kNever when probes are off or not possible.
  Time pto(const QpContext& ctx) const;
  bool outstanding() const { return unacked_ < sent_end_; }
  Psn unacked() const { return unacked_; }

 private:
  CompleterOutcome on_ack(const wire::Packet& pkt, Time now, const QpContext& ctx, SendQueue& sq);
  // Selective repeat: a PSN sequence error NAK is a SACK (events.h Sacked).
  CompleterOutcome on_sack(const wire::Packet& pkt, Time now, const QpContext& ctx, SendQueue& sq);
  CompleterOutcome on_read_response(const wire::Packet& pkt, Time now, const QpContext& ctx,
                                    SendQueue& sq);
  CompleterOutcome on_atomic_ack(const wire::Packet& pkt, Time now, const QpContext& ctx,
                                 SendQueue& sq);
  // The awaited READ response or atomic ACK at `psn`, of the WQE that starts at `first_psn`: it
  // acknowledges every request before that WQE, places `len` bytes of `data` at `off` in the
  // WQE's SGEs (a bad SGE fails the WQE), then acknowledges through `psn`.
  CompleterOutcome place_response(Psn first_psn, Psn psn, uint64_t off, const uint8_t* data,
                                  uint32_t len, Time now, const QpContext& ctx, SendQueue& sq);
  // Everything before `next_unacked` is acknowledged: completes the WQEs it covers. Returns true
  // on forward progress (which resets the retry counters, as rxe does).
  bool advance(Psn next_unacked, Time now, const QpContext& ctx, SendQueue& sq);
  // The first PSN an ACK cannot acknowledge: where the data of the oldest incomplete READ/ATOMIC
  // is still awaited (sent_end_ when there is none).
  Psn ack_limit(const SendQueue& sq) const;
  // The in-flight WQE holding `psn`, or nullptr.
  SendEntry* find(SendQueue& sq, Psn psn) const;
  // The responses of the READ/ATOMIC at `from` were lost: ask for a resend from there, once per
  // loss (until progress or a timeout), so a burst of later responses does not repeat it.
  void implicit_nak(Psn from, Time now, const QpContext& ctx, CompleterOutcome& out);
  // Completes the front WQE with `err` (the QP then goes to ERR).
  CompleterOutcome fail_front(Error err, const QpContext& ctx, SendQueue& sq);
  void arm(Time now, const QpContext& ctx);
  // The probe timer: (re)starts it at now + pto(), or stops it when there is no PTO.
  void arm_probe(Time now, const QpContext& ctx);
  CompleterOutcome on_probe(Time now, const QpContext& ctx);
  void rtt_sample(Time r);
  // Selective repeat: READ response packets that arrived ahead of a missing one are placed at
  // their offset at once (IRN's and MRC's placement; response k of a READ carries bytes
  // k * PMTU on, whichever request it answers) and marked here, a bit per PSN in [unacked_,
  // unacked_ + kRdBits), indexed by PSN modulo its size. The requester is asked for the missing
  // ones only (ReadHole), once per hole; reaching a placed PSN in order steps over it.
  static constexpr uint32_t kRdBits = 1024;
  bool placed(Psn p) const {
    if (!rd_marks_ || p < unacked_ || psn_span(unacked_, p) >= kRdBits) return false;
    const uint32_t i = p.value() % kRdBits;
    return (rd_placed_[i / 64] >> (i % 64)) & 1;
  }
  void set_placed(Psn p, bool on);
  // Places an early READ response (selective repeat) and asks for the hole before it.
  void place_ahead(const wire::Packet& pkt, SendEntry& w, Psn limit, Time now, const QpContext& ctx,
                   SendQueue& sq, CompleterOutcome& out);
  // The responses from `from` (the first PSN still awaited) are missing: for a READ, asks for
  // them up to the next placed PSN within it (ReadHole), once per hole; otherwise (an ATOMIC)
  // the implicit NAK.
  void ask_hole(Psn from, Time now, const QpContext& ctx, SendQueue& sq, CompleterOutcome& out);

  Psn unacked_;             // oldest PSN not yet acknowledged
  Psn sent_end_;            // one past the highest PSN sent (from PacketsSent)
  Time deadline_ = kNever;  // retransmission timer; kNever when stopped
  uint8_t retry_left_ = 0;  // timeouts / sequence NAKs still allowed without progress
  uint8_t rnr_left_ = 0;    // RNR NAKs still allowed without progress (unused when rnr_retry = 7)
  bool resend_asked_ = false;  // implicit NAK sent for resend_from_; cleared by progress past it
  Psn resend_from_;            // or by the timer

  // Early retransmission (QpInit::early_retransmit), after TCP's tail loss probe (RFC 8985
  // 7.2-7.3) and the "adaptive retransmission" of RDMA NICs. A loss at the tail of what is in
  // flight, a lost gap NAK or a lost first resent packet leave the responder silent (it NAKs a
  // gap once and discards what follows, IBTA 9.7.5.2.2); without a probe only the local ACK
  // timer (67 ms at perftest's default) ends the stall. The probe timer runs whenever PSNs are
  // outstanding, restarts on ACK progress and on every NAK-driven resend, and on expiry asks the
  // requester to go back to the oldest unacknowledged PSN, the one resend the responder can use.
  // It neither restarts the ACK timer nor spends retry_cnt: the IBTA timeout and retry budget
  // run from the last progress exactly as without probes, so a dead peer still ends in
  // RETRY_EXC_ERR after timeout * (retry_cnt + 1). No probe before the first round-trip sample:
  // without one there is no basis for a timeout shorter than the ACK timer.
  Time srtt_ = 0, rttvar_ = 0;  // RFC 6298 2.2-2.3, nanoseconds; srtt_ 0 = no sample yet
  bool rtt_timing_ = false;     // a sample is under way: rtt_psn_ sent at rtt_start_
  Psn rtt_psn_;
  Time rtt_start_ = 0;
  std::optional<Time> new_rtt_;  // a sample taken while handling the current response
  Time probe_at_ = kNever;       // probe timer; kNever when stopped
  uint8_t probe_backoff_ = 0;    // probes since the last progress: the PTO doubles per probe

  std::array<uint64_t, kRdBits / 64> rd_placed_{};
  bool rd_marks_ = false;  // some bit of rd_placed_ is set (rd_count_ of them)
  uint32_t rd_count_ = 0;
  // A ReadHole went for [hole_from_, hole_to_): hole_asked_ until progress past hole_from_ or the
  // timer (so it is asked once), hole_open_ until progress reaches hole_to_ (the responses to it
  // end with a LAST there).
  bool hole_asked_ = false, hole_open_ = false;
  Psn hole_from_, hole_to_;
};

}  // namespace uroce::transport
