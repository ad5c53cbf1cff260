// Unreliable Connected service (IBTA Vol. 1 ch. 9.8.3): SEND and RDMA WRITE (with immediate)
// segmented into FIRST/MIDDLE/LAST/ONLY packets with consecutive PSNs, but no acknowledgements,
// no retransmission, no READ or ATOMIC. The requester completes a WQE once its last packet is
// out. The responder accepts a message only when all its packets arrive in PSN order: any gap
// abandons the message in progress (its receive WQE is kept for the next message) and the
// responder resynchronises on the next FIRST or ONLY packet, whatever its PSN (9.8.3.1).
#pragma once

#include <cstdint>

#include "transport/context.h"
#include "transport/psn.h"
#include "transport/send_queue.h"
#include "transport/unreliable_common.h"
#include "wire/wire.h"

namespace uroce::transport {

class UcSender {
 public:
  // RTR→RTS: the first PSN is sq_psn.
  void reset(Psn sq_psn);
  // Sends packets of the WQEs at the front of `sq` and completes each WQE after its last packet.
  // `may_start` is false in SQD: a WQE already started finishes, new ones wait. Each packet
  // waits for `pacer` (congestion control) as it would for a transmit buffer.
  UnreliableOutcome pump(const QpContext& ctx, SendQueue& sq, PacketSink& tx, bool may_start,
                         cc::Pacer& pacer, Time now);
  // True while a WQE has some but not all of its packets sent.
  bool in_progress(const SendQueue& sq) const {
    return !sq.empty() && active_seq_ == sq.begin() && sent_ > 0;
  }

 private:
  Psn next_psn_;
  SendQueue::Seq active_seq_ = ~SendQueue::Seq{0};  // the front WQE whose packets are counted
  uint32_t sent_ = 0;                               // packets of it sent
};

class UcReceiver {
 public:
  // INIT→RTR: the first expected PSN is rq_psn.
  void reset(Psn rq_psn);
  // A UC packet for this QP (already checked: UC opcode, P_Key, source address, QP state).
  // With an SRQ (`srq` non-null) a SEND takes its receive WQE from it.
  void on_packet(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq, Srq* srq);

  Psn expected_psn() const { return epsn_; }

 private:
  enum class Msg : uint8_t { kNone, kSend, kWrite };
  // Abandons the message in progress (counted when one was), dropping its remaining packets.
  void abandon(const QpContext& ctx);
  void drop(const QpContext& ctx);
  void on_send(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq, Srq* srq);
  void on_write(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq, Srq* srq);
  void complete(const QpContext& ctx, RecvQueue& rq, ibv_wc_status status, ibv_wc_opcode op,
                uint32_t byte_len, const wire::Packet& last);

  Psn epsn_;
  Msg msg_ = Msg::kNone;   // the message in progress; kNone: waiting for a FIRST/ONLY
  uint64_t offset_ = 0;    // bytes of it received
  uint64_t write_va_ = 0;  // WRITE: from the RETH of its FIRST packet, validated
  uint32_t write_rkey_ = 0;
  uint32_t write_len_ = 0;
};

}  // namespace uroce::transport
