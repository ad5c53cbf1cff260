// Requester: WQE → request packets. See requester.h.
#include "transport/requester.h"

#include <algorithm>
#include <cstring>

#include "transport/dma.h"

namespace uroce::transport {
namespace {

using wire::Opcode;

constexpr WrOpcodeInfo kUnsupported{};

}  // namespace

const WrOpcodeInfo& wr_opcode_info(ibv_wr_opcode op) {
  // RC rows (IBTA Table 38). A SEND's immediate travels in its LAST/ONLY packet only (9.4.3).
  static constexpr WrOpcodeInfo kSend{true, Opcode::kRcSendFirst, Opcode::kRcSendMiddle,
                                      Opcode::kRcSendLast, Opcode::kRcSendOnly};
  static constexpr WrOpcodeInfo kSendImm{true, Opcode::kRcSendFirst, Opcode::kRcSendMiddle,
                                         Opcode::kRcSendLastImm, Opcode::kRcSendOnlyImm};
  switch (op) {
    case IBV_WR_SEND:
      return kSend;
    case IBV_WR_SEND_WITH_IMM:
      return kSendImm;
    default:
      return kUnsupported;
  }
}

void Requester::reset(Psn sq_psn) {
  *this = Requester{};
  cursor_psn_ = next_new_psn_ = sent_end_ = unacked_ = sq_psn;
}

void Requester::seek(Psn psn, const SendQueue& sq) {
  cursor_psn_ = psn;
  for (SendQueue::Seq s = sq.begin(); s != sq.end(); ++s) {
    const SendEntry& e = sq.at(s);
    if (e.state != WqeState::kInFlight || psn < e.end_psn()) {
      cursor_seq_ = s;
      return;
    }
  }
  cursor_seq_ = sq.end();
}

void Requester::on_acked(const AckedThrough& ev, const SendQueue& sq) {
  if (ev.next_unacked > unacked_) unacked_ = ev.next_unacked;
  // A retransmission may still be walking over PSNs the responder has meanwhile acknowledged
  // (it had them before the rewind); skip them.
  if (cursor_psn_ < unacked_ || cursor_seq_ < sq.begin()) seek(std::max(cursor_psn_, unacked_), sq);
}

void Requester::on_retransmit(const RetransmitFrom& ev, const SendQueue& sq) {
  Psn from = std::max(ev.psn, unacked_);
  if (from > sent_end_) from = sent_end_;  // never "resend" what was never sent
  seek(from, sq);
  not_before_ = ev.not_before;
  since_ack_req_ = 0;
}

Requester::State Requester::state(Time now, const SendQueue& sq, bool may_start) const {
  if (not_before_ != 0 && now < not_before_) return State::kRnrWait;
  if (cursor_seq_ >= sq.end()) return State::kIdle;
  const SendEntry& e = sq.at(cursor_seq_);
  if (e.state == WqeState::kLocalError) return State::kBlocked;
  if (e.state == WqeState::kQueued && !may_start) return State::kBlocked;
  if (psn_span(unacked_, cursor_psn_) >= kSendWindowPkts) return State::kWindowFull;
  return State::kSending;
}

RequesterOutcome Requester::pump(Time now, const QpContext& ctx, SendQueue& sq, PacketSink& tx,
                                 bool may_start) {
  RequesterOutcome out;
  if (not_before_ != 0 && now >= not_before_) not_before_ = 0;
  bool sent = false;
  while (state(now, sq, may_start) == State::kSending) {
    SendEntry& e = sq.at(cursor_seq_);
    if (e.state == WqeState::kQueued) {
      // First packet of a WQE: check every SGE now so a bad lkey fails before anything is on the
      // wire (the WQE completes with IBV_WC_LOC_PROT_ERR, as on hardware).
      if (!(e.wqe.send_flags & IBV_SEND_INLINE) &&
          check_sges(ctx.mem, ctx.init.pd, e.wqe.sge.data(), e.wqe.num_sge, 0) != MemStatus::kOk) {
        e.state = WqeState::kLocalError;
        e.error = IBV_WC_LOC_PROT_ERR;
        out.local_error = true;
        break;
      }
      e.first_psn = next_new_psn_;
      e.npkts = std::max<uint32_t>(1, (e.length + ctx.mtu - 1) / ctx.mtu);
      e.state = WqeState::kInFlight;
      next_new_psn_ += e.npkts;
    }
    // Resolve the payload before taking a transmit buffer (which cannot be given back): memory
    // that went away while the WQE was in flight (MR deregistered) fails it here.
    const Segment seg = segment(ctx, e);
    MemPieces pieces;
    uint32_t npieces = 0;
    if (!(e.wqe.send_flags & IBV_SEND_INLINE) &&
        resolve_read(ctx.mem, ctx.init.pd, e.wqe.sge.data(), e.wqe.num_sge, seg.offset, seg.len,
                     pieces, &npieces) != MemStatus::kOk) {
      e.state = WqeState::kLocalError;
      e.error = IBV_WC_LOC_PROT_ERR;
      out.local_error = true;
      break;
    }
    TxBuf* buf = tx.tx_alloc();
    if (buf == nullptr) {
      out.blocked_by_port = true;
      break;
    }
    write_packet(ctx, e, seg, pieces, npieces, buf);
    tx.tx_commit(buf);
    ++ctx.counters.sent_pkts;
    if (cursor_psn_ < sent_end_) ++ctx.counters.retransmitted_pkts;
    ++cursor_psn_;
    if (cursor_psn_ > sent_end_) sent_end_ = cursor_psn_;
    sent = true;
    if (cursor_psn_ == e.end_psn()) ++cursor_seq_;
  }
  if (sent) out.sent = PacketsSent{sent_end_};
  return out;
}

Requester::Segment Requester::segment(const QpContext& ctx, const SendEntry& e) const {
  Segment seg;
  seg.index = psn_span(e.first_psn, cursor_psn_);
  seg.offset = uint64_t{seg.index} * ctx.mtu;
  seg.len = static_cast<uint32_t>(std::min<uint64_t>(ctx.mtu, e.length - seg.offset));
  return seg;
}

void Requester::write_packet(const QpContext& ctx, const SendEntry& e, const Segment& seg,
                             const MemPieces& pieces, uint32_t npieces, TxBuf* buf) {
  const bool first = seg.index == 0, last = seg.index + 1 == e.npkts;
  const uint32_t len = seg.len;
  const WrOpcodeInfo& w = wr_opcode_info(e.wqe.opcode);
  const Opcode op = first && last ? w.only : first ? w.first : last ? w.last : w.middle;
  const wire::OpcodeInfo& info = wire::opcode_info(op);

  ++since_ack_req_;
  const bool ack_req = last || since_ack_req_ >= kAckReqIntervalPkts ||
                       psn_span(unacked_, cursor_psn_ + 1) >= kSendWindowPkts;
  if (ack_req) since_ack_req_ = 0;

  wire::Packet p;
  p.bth.opcode = static_cast<uint8_t>(op);
  p.bth.se = last && (e.wqe.send_flags & IBV_SEND_SOLICITED);
  p.bth.migreq = true;  // no APM: always "migrated" (IBTA 9.2.3)
  p.bth.pad = wire::pad_for(len);
  p.bth.pkey = wire::kDefaultPkey;
  p.bth.dest_qp = ctx.attr.dest_qp_num;
  p.bth.ack_req = ack_req;
  p.bth.psn = cursor_psn_.value();
  if (info.flags & wire::kHasImm) p.imm_be = e.wqe.imm_be;

  const size_t hdr = wire::build_headers(p, buf->data);
  uint8_t* payload = buf->data + hdr;
  if (e.wqe.send_flags & IBV_SEND_INLINE) {
    std::memcpy(payload, e.wqe.inline_data.data() + seg.offset, len);
  } else {
    copy_pieces(pieces, npieces, payload);
  }
  std::memset(payload + len, 0, p.bth.pad);
  buf->len = static_cast<uint32_t>(hdr + len + p.bth.pad);
  buf->dst_ip = ctx.remote_ip;
  buf->src_port = ctx.src_port;
  buf->ecn = kEcnEct0;  // data packets are ECN-capable (Annex A17.9: DCQCN needs marks)
}

}  // namespace uroce::transport
