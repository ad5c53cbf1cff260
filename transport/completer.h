// The completer: handles what comes back for our requests (ACK, RNR NAK, NAKs, READ responses
// and ATOMIC ACKs), completes send WQEs in order, and owns the retransmission timer and the retry
// counters (IBTA 9.7.5.1 ff., 9.7.6.1.3).
//
// READ and ATOMIC WQEs complete only when their data has arrived: a READ response or ATOMIC ACK
// implicitly acknowledges every request before it (9.7.5.1.1), but no ACK can complete a READ or
// ATOMIC whose response is missing. An ACK or NAK beyond such a WQE proves its responses were
// lost (the responder answers in order): the completer then asks the requester to resend from
// where the data stopped ("implicit NAK"), a READ from the first missing response packet.
#pragma once

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

  Time deadline() const { return deadline_; }
  bool outstanding() const { return unacked_ < sent_end_; }
  Psn unacked() const { return unacked_; }

 private:
  CompleterOutcome on_ack(const wire::Packet& pkt, Time now, const QpContext& ctx, SendQueue& sq);
  CompleterOutcome on_read_response(const wire::Packet& pkt, Time now, const QpContext& ctx,
                                    SendQueue& sq);
  CompleterOutcome on_atomic_ack(const wire::Packet& pkt, Time now, const QpContext& ctx,
                                 SendQueue& sq);
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

  Psn unacked_;             // oldest PSN not yet acknowledged
  Psn sent_end_;            // one past the highest PSN sent (from PacketsSent)
  Time deadline_ = kNever;  // retransmission timer; kNever when stopped
  uint8_t retry_left_ = 0;  // timeouts / sequence NAKs still allowed without progress
  uint8_t rnr_left_ = 0;    // RNR NAKs still allowed without progress (unused when rnr_retry = 7)
  bool resend_asked_ = false;  // implicit NAK sent for resend_from_; cleared by progress past it
  Psn resend_from_;            // or by the timer
};

}  // namespace uroce::transport
