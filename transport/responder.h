// The responder: receives request packets, checks their PSN (expected / duplicate / out of
// sequence, IBTA 9.7.4.1.3 ff.), executes SENDs into receive WQEs, and answers with ACKs and
// NAKs (9.7.5). RDMA WRITE/READ/ATOMIC requests are refused with NAK invalid request for now.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

#include "transport/context.h"
#include "transport/events.h"
#include "wire/wire.h"

namespace uroce::transport {

class Responder {
 public:
  // The NAK causes: each maps to one AETH syndrome (IBTA Table 44).
  enum class Nak : uint8_t {
    kPsnSequenceError,   // a gap: request PSN after the expected one
    kRnr,                // no receive WQE for a SEND (RNR NAK with min_rnr_timer)
    kInvalidRequest,     // unsupported opcode, opcode sequence or length error (Class B, 9.9.3)
    kRemoteAccess,       // rkey/bounds/access failure (RDMA, later)
    kRemoteOperational,  // the local write of a SEND failed (bad lkey in the receive WQE)
  };
  static uint8_t syndrome(Nak nak, uint8_t min_rnr_timer);

  // Whether a NAK is outstanding for the current gap: IBTA 9.7.5.2.2: send one sequence
  // NAK per gap; after an RNR NAK the packets that follow are out of sequence and are dropped
  // silently until the requester resends the refused PSN.
  enum class NakState : uint8_t { kNone, kSeqErrSent, kRnrSent };

  // INIT→RTR: the first expected PSN is rq_psn.
  void reset(Psn rq_psn);

  // A request (opcode with kRequest) addressed to this QP in RTR/RTS/SQD.
  ResponderOutcome on_request(const wire::Packet& pkt, const QpContext& ctx,
                              std::deque<RecvWqe>& rq);

  // The ACK/NAK waiting to be sent (the latest supersedes older ACKs: they are cumulative).
  bool has_response() const { return pending_.has_value(); }
  // Writes it into `buf` and forgets it.
  void write_response(const QpContext& ctx, TxBuf* buf);

  Psn expected_psn() const { return epsn_; }
  NakState nak_state() const { return nak_state_; }

 private:
  struct Response {
    uint8_t syndrome = 0;
    Psn psn;
  };
  void ack(const QpContext& ctx);  // cumulative ACK of epsn_ - 1
  void nak(Nak nak, Psn psn, const QpContext& ctx);
  void execute_send(const wire::Packet& pkt, const QpContext& ctx, std::deque<RecvWqe>& rq,
                    ResponderOutcome& out);
  // Completes the receive WQE at the front of `rq` and pops it.
  void complete_recv(const QpContext& ctx, std::deque<RecvWqe>& rq, ibv_wc_status status,
                     const wire::Packet* last);

  Psn epsn_;          // next expected request PSN
  uint32_t msn_ = 0;  // messages completed, mod 2^24 (AETH MSN, IBTA 9.7.5.1.3)
  NakState nak_state_ = NakState::kNone;
  bool in_message_ = false;    // between a FIRST and its LAST: the front RQ WQE is in use
  uint64_t recv_offset_ = 0;   // bytes of the current message written so far
  bool seen_request_ = false;  // for IBV_EVENT_COMM_EST
  std::optional<Response> pending_;
};

}  // namespace uroce::transport
