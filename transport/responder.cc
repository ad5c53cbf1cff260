// Responder: request packets → receive completions, ACKs and NAKs. See responder.h.
#include "transport/responder.h"

#include "transport/dma.h"

namespace uroce::transport {
namespace {

using wire::AethType;
using wire::NakCode;

}  // namespace

uint8_t Responder::syndrome(Nak nak, uint8_t min_rnr_timer) {
  switch (nak) {
    case Nak::kPsnSequenceError:
      return wire::aeth_syndrome(AethType::kNak, uint8_t(NakCode::kPsnSequenceError));
    case Nak::kRnr:
      // The RNR NAK carries the responder's min_rnr_timer in Table 45's encoding (9.7.5.2.8).
      return wire::aeth_syndrome(AethType::kRnrNak, min_rnr_timer);
    case Nak::kInvalidRequest:
      return wire::aeth_syndrome(AethType::kNak, uint8_t(NakCode::kInvalidRequest));
    case Nak::kRemoteAccess:
      return wire::aeth_syndrome(AethType::kNak, uint8_t(NakCode::kRemoteAccessError));
    case Nak::kRemoteOperational:
      return wire::aeth_syndrome(AethType::kNak, uint8_t(NakCode::kRemoteOperationalError));
  }
  return wire::aeth_syndrome(AethType::kNak, uint8_t(NakCode::kRemoteOperationalError));
}

void Responder::reset(Psn rq_psn) {
  *this = Responder{};
  epsn_ = rq_psn;
}

void Responder::ack(const QpContext&) {
  // uroce does not do end-to-end credits: the "invalid credit" code tells the requester to
  // ignore them (IBTA 9.7.5.1.2).
  pending_ = Response{wire::aeth_syndrome(AethType::kAck, wire::kAethCreditInvalid), epsn_ - 1};
}

void Responder::nak(Nak nak, Psn psn, const QpContext& ctx) {
  pending_ = Response{syndrome(nak, ctx.attr.min_rnr_timer), psn};
}

ResponderOutcome Responder::on_request(const wire::Packet& pkt, const QpContext& ctx,
                                       std::deque<RecvWqe>& rq) {
  ResponderOutcome out;
  if (!seen_request_) {
    seen_request_ = true;
    out.first_packet = true;
  }
  const Psn psn(pkt.bth.psn);
  const int32_t d = psn - epsn_;
  if (d < 0) {
    // Duplicate (IBTA 9.7.4.1.3.2): already executed, so never delivered again; the requester
    // resent it because our ACK was lost or late, so answer when it asks.
    ++ctx.counters.duplicate_request;
    if (pkt.bth.ack_req) ack(ctx);
    return out;
  }
  if (d > 0) {
    // Out of sequence (9.7.4.1.3.3): a gap. One NAK per gap; the rest of the window is dropped
    // until the expected PSN arrives.
    if (nak_state_ == NakState::kNone) {
      ++ctx.counters.out_of_seq_request;
      nak(Nak::kPsnSequenceError, epsn_, ctx);
      nak_state_ = NakState::kSeqErrSent;
    }
    return out;
  }
  nak_state_ = NakState::kNone;
  if (pkt.info->flags & wire::kSend) {
    execute_send(pkt, ctx, rq, out);
    return out;
  }
  // RDMA WRITE/READ/ATOMIC: not executed by this responder yet. Class B error (9.9.3.1.2): NAK
  // invalid request, the QP goes to ERR.
  nak(Nak::kInvalidRequest, psn, ctx);
  out.fatal = QpFatal{};
  return out;
}

void Responder::execute_send(const wire::Packet& pkt, const QpContext& ctx, std::deque<RecvWqe>& rq,
                             ResponderOutcome& out) {
  const Psn psn(pkt.bth.psn);
  const uint32_t flags = pkt.info->flags;
  const bool first = flags & wire::kFirst, last = flags & wire::kLast;
  const size_t len = pkt.payload.size();

  // Opcode sequence (9.7.4.1.4): FIRST/ONLY open a message, MIDDLE/LAST continue the open one.
  // Length (9.7.4.1.6): FIRST and MIDDLE carry exactly one PMTU, LAST 1..PMTU, ONLY 0..PMTU.
  const bool bad_sequence = first == in_message_;
  const bool bad_length =
      len > ctx.mtu || (!last && len != ctx.mtu) || (last && !first && len == 0);
  if (bad_sequence || bad_length) {
    if (in_message_) complete_recv(ctx, rq, IBV_WC_REM_INV_REQ_ERR, nullptr);
    nak(Nak::kInvalidRequest, psn, ctx);
    out.fatal = QpFatal{};
    return;
  }
  if (first) {
    if (rq.empty()) {
      // Receiver not ready (9.7.5.2.8): the requester waits min_rnr_timer and resends this PSN.
      ++ctx.counters.send_rnr_err;
      nak(Nak::kRnr, psn, ctx);
      nak_state_ = NakState::kRnrSent;
      return;
    }
    in_message_ = true;
    recv_offset_ = 0;
  }
  const RecvWqe& w = rq.front();
  if (recv_offset_ + len > sge_total(w.sge.data(), w.num_sge)) {
    // The message does not fit the receive WQE: a local length error here, NAK invalid request
    // to the requester (IBTA 9.9.3.1.2), both QPs to ERR.
    complete_recv(ctx, rq, IBV_WC_LOC_LEN_ERR, nullptr);
    nak(Nak::kInvalidRequest, psn, ctx);
    out.fatal = QpFatal{};
    return;
  }
  if (len != 0 && scatter(ctx.mem, ctx.init.pd, w.sge.data(), w.num_sge, recv_offset_,
                          pkt.payload.data(), static_cast<uint32_t>(len)) != MemStatus::kOk) {
    // The receive WQE names memory we may not write: local protection error here, remote
    // operational error for the requester (9.9.3.1.3).
    complete_recv(ctx, rq, IBV_WC_LOC_PROT_ERR, nullptr);
    nak(Nak::kRemoteOperational, psn, ctx);
    out.fatal = QpFatal{};
    return;
  }
  recv_offset_ += len;
  ++epsn_;
  if (last) {
    complete_recv(ctx, rq, IBV_WC_SUCCESS, &pkt);
    msn_ = (msn_ + 1) & kPsnMask;
  }
  if (pkt.bth.ack_req) ack(ctx);
}

void Responder::complete_recv(const QpContext& ctx, std::deque<RecvWqe>& rq, ibv_wc_status status,
                              const wire::Packet* last) {
  in_message_ = false;
  if (rq.empty()) return;
  ibv_wc wc{};
  wc.wr_id = rq.front().wr_id;
  wc.status = status;
  wc.opcode = IBV_WC_RECV;
  wc.byte_len = static_cast<uint32_t>(recv_offset_);
  wc.qp_num = ctx.init.qpn;
  wc.src_qp = ctx.attr.dest_qp_num;
  if (last != nullptr && (last->info->flags & wire::kHasImm)) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = last->imm_be;
  }
  rq.pop_front();
  ctx.init.recv_cq->push(wc, last != nullptr && last->bth.se);
}

void Responder::write_response(const QpContext& ctx, TxBuf* buf) {
  wire::Packet p;
  p.bth.opcode = static_cast<uint8_t>(wire::Opcode::kRcAcknowledge);
  p.bth.migreq = true;
  p.bth.pkey = wire::kDefaultPkey;
  p.bth.dest_qp = ctx.attr.dest_qp_num;
  p.bth.psn = pending_->psn.value();
  p.aeth.syndrome = pending_->syndrome;
  p.aeth.msn = msn_;
  buf->len = static_cast<uint32_t>(wire::build_headers(p, buf->data));
  buf->dst_ip = ctx.remote_ip;
  buf->src_port = ctx.src_port;
  buf->ecn = kEcnNotEct;
  pending_.reset();
}

}  // namespace uroce::transport
