// The completer: handles what comes back for our requests (ACK, RNR NAK, NAKs; later READ
// responses and atomic ACKs), completes send WQEs in order, and owns the retransmission timer and
// the retry counters (IBTA 9.7.5.1 ff., 9.7.6.1.3).
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
  };
  static ibv_wc_status to_wc_status(Error e);

  // RTR→RTS: nothing outstanding, counters from the attributes.
  void reset(Psn sq_psn, const ibv_qp_attr& attr);

  // An ACK/NAK (a packet whose opcode carries kResponse) addressed to this QP.
  CompleterOutcome on_response(const wire::Packet& pkt, Time now, const QpContext& ctx,
                               SendQueue& sq);
  // The retransmission timer (deadline() <= now).
  CompleterOutcome on_timer(Time now, const QpContext& ctx, SendQueue& sq);
  // The requester transmitted up to ev.sent_end: arms the timer if it is not running.
  void on_sent(const PacketsSent& ev, Time now, const QpContext& ctx);
  // Completes a kLocalError WQE that reached the front of the queue.
  CompleterOutcome complete_local_error(const QpContext& ctx, SendQueue& sq);

  Time deadline() const { return deadline_; }
  bool outstanding() const { return unacked_ < sent_end_; }
  Psn unacked() const { return unacked_; }

 private:
  // Everything before `next_unacked` is acknowledged: completes the WQEs it covers. Returns true
  // on forward progress (which resets the retry counters, as rxe does).
  bool advance(Psn next_unacked, Time now, const QpContext& ctx, SendQueue& sq);
  // Completes the front WQE with `err` (the QP then goes to ERR).
  CompleterOutcome fail_front(Error err, const QpContext& ctx, SendQueue& sq);
  void arm(Time now, const QpContext& ctx);

  Psn unacked_;             // oldest PSN not yet acknowledged
  Psn sent_end_;            // one past the highest PSN sent (from PacketsSent)
  Time deadline_ = kNever;  // retransmission timer; kNever when stopped
  uint8_t retry_left_ = 0;  // timeouts / sequence NAKs still allowed without progress
  uint8_t rnr_left_ = 0;    // RNR NAKs still allowed without progress (unused when rnr_retry = 7)
};

}  // namespace uroce::transport
