// Unreliable Connected sender and receiver. See uc.h.
#include "transport/uc.h"

#include <algorithm>
#include <cstring>

#include "transport/dma.h"
#include "transport/srq.h"
#include "transport/wc.h"

namespace uroce::transport {

using wire::Opcode;

void UcSender::reset(Psn sq_psn) {
  *this = UcSender{};
  next_psn_ = sq_psn;
}

UnreliableOutcome UcSender::pump(const QpContext& ctx, SendQueue& sq, PacketSink& tx,
                                 bool may_start, cc::Pacer& pacer, Time now) {
  UnreliableOutcome out;
  while (!sq.empty()) {
    SendEntry& e = sq.front();
    const bool is_inline = e.wqe.send_flags & IBV_SEND_INLINE;
    if (active_seq_ != sq.begin()) {
      if (!may_start) return out;
      // A new WQE: check every SGE before its first packet, as the RC requester does.
      if (!is_inline &&
          check_sges(ctx.mem, ctx.init.pd, e.wqe.sge.data(), e.wqe.num_sge, 0) != MemStatus::kOk) {
        return fail_front_send(ctx, sq, IBV_WC_LOC_PROT_ERR, out);
      }
      active_seq_ = sq.begin();
      sent_ = 0;
      e.first_psn = next_psn_;
      e.npkts = std::max<uint32_t>(1, (e.length + ctx.mtu - 1) / ctx.mtu);
      e.state = WqeState::kInFlight;
    }
    while (sent_ < e.npkts) {
      const uint64_t offset = uint64_t{sent_} * ctx.mtu;
      const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(ctx.mtu, e.length - offset));
      MemPieces pieces;
      uint32_t npieces = 0;
      if (!is_inline && len != 0 &&
          resolve_read(ctx.mem, ctx.init.pd, e.wqe.sge.data(), e.wqe.num_sge, offset, len, pieces,
                       &npieces) != MemStatus::kOk) {
        // The memory went away mid-message: the peer abandons the partial message when the
        // next one starts (9.8.3.1).
        return fail_front_send(ctx, sq, IBV_WC_LOC_PROT_ERR, out);
      }
      TxBuf* buf = alloc_paced(tx, pacer, now, out);
      if (buf == nullptr) return out;
      const Opcode op = wire_opcode(wr_opcode_info(e.wqe.opcode), wire::Service::kUc, sent_ == 0,
                                    sent_ + 1 == e.npkts);
      const wire::OpcodeInfo& info = wire::opcode_info(op);
      wire::Packet p;
      p.bth.opcode = static_cast<uint8_t>(op);
      p.bth.se = (info.flags & wire::kLast) && (e.wqe.send_flags & IBV_SEND_SOLICITED) &&
                 (info.flags & (wire::kSend | wire::kConsumesRecv));
      p.bth.migreq = true;
      p.bth.pad = wire::pad_for(len);
      p.bth.pkey = wire::kDefaultPkey;
      p.bth.dest_qp = ctx.attr.dest_qp_num;
      p.bth.psn = next_psn_.value();
      if (info.flags & wire::kHasImm) p.imm_be = e.wqe.imm_be;
      if (info.flags & wire::kHasReth) {
        p.reth.va = e.wqe.remote_addr;
        p.reth.rkey = e.wqe.rkey;
        p.reth.dma_len = e.length;
      }
      const size_t hdr = wire::build_headers(p, buf->data);
      uint8_t* payload = buf->data + hdr;
      if (is_inline) {
        std::memcpy(payload, e.wqe.inline_data.data() + offset, len);
      } else if (len != 0) {
        copy_pieces(pieces, npieces, payload);
      }
      std::memset(payload + len, 0, p.bth.pad);
      buf->len = static_cast<uint32_t>(hdr + len + p.bth.pad);
      stamp_route(buf, data_route(ctx));
      const uint32_t ib_len = buf->ib_len();
      commit_paced(tx, buf, pacer, now, out);
      count_sent(ctx.counters, ib_len);
      ++next_psn_;
      ++sent_;
    }
    // Sent is done: nothing will acknowledge it (9.8.3).
    complete_front_send(ctx, sq, IBV_WC_SUCCESS);
    sent_ = 0;
  }
  return out;
}

void UcReceiver::reset(Psn rq_psn) {
  *this = UcReceiver{};
  epsn_ = rq_psn;
}

void UcReceiver::abandon(const QpContext& ctx) {
  if (msg_ != Msg::kNone) ++ctx.counters.uc_dropped_msgs;
  msg_ = Msg::kNone;
}

void UcReceiver::drop(const QpContext& ctx) {
  abandon(ctx);
  ++ctx.counters.dropped_pkts;
}

void UcReceiver::on_packet(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq, Srq* srq) {
  const uint32_t f = pkt.info->flags;
  const Psn psn(pkt.bth.psn);
  if (f & wire::kFirst) {
    // A FIRST/ONLY starts a message whatever its PSN: the responder resynchronises on it, and a
    // message still in progress lost its tail (9.8.3.1).
    abandon(ctx);
  } else if (msg_ == Msg::kNone || psn != epsn_ ||
             ((f & wire::kSend) != 0) != (msg_ == Msg::kSend)) {
    // A MIDDLE/LAST after a gap, or of another kind of message: the message is lost.
    epsn_ = psn + 1;
    drop(ctx);
    return;
  }
  epsn_ = psn + 1;
  // FIRST and MIDDLE packets carry exactly one path MTU, LAST 1..MTU, ONLY 0..MTU (IBTA 9.7.4.1.5,
  // C9-74 ff.); a malformed packet drops its message.
  const size_t len = pkt.payload.size();
  if (((f & wire::kLast) ? len > ctx.mtu : len != ctx.mtu) ||
      ((f & wire::kOnly) == wire::kLast && len == 0)) {
    drop(ctx);
    return;
  }
  count_rcvd(ctx.counters, wire::ib_length(pkt));
  if (f & wire::kSend) {
    on_send(pkt, ctx, rq, srq);
  } else {
    on_write(pkt, ctx, rq, srq);
  }
}

void UcReceiver::on_send(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq, Srq* srq) {
  const uint32_t f = pkt.info->flags;
  if (f & wire::kFirst) {
    if (rq.empty() && srq != nullptr) srq->take(rq);
    if (rq.empty()) {
      // No receive WQE: UC has no RNR NAK, the whole message is dropped (9.8.3).
      ++ctx.counters.out_of_buffer;
      ++ctx.counters.dropped_pkts;
      return;
    }
    msg_ = Msg::kSend;
    offset_ = 0;
  }
  const RecvWqe& w = rq.front();
  const uint32_t len = static_cast<uint32_t>(pkt.payload.size());
  if (offset_ + len > sge_total(w.sge.data(), w.num_sge)) {
    complete(ctx, rq, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0, pkt);
    return;
  }
  if (scatter(ctx.mem, ctx.init.pd, w.sge.data(), w.num_sge, offset_, pkt.payload.data(), len) !=
      MemStatus::kOk) {
    complete(ctx, rq, IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, pkt);
    return;
  }
  offset_ += len;
  if (f & wire::kLast) {
    complete(ctx, rq, IBV_WC_SUCCESS, IBV_WC_RECV, static_cast<uint32_t>(offset_), pkt);
  }
}

void UcReceiver::on_write(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq, Srq* srq) {
  const uint32_t f = pkt.info->flags;
  const uint32_t len = static_cast<uint32_t>(pkt.payload.size());
  if (f & wire::kFirst) {
    // The RETH covers the whole message; a bad one drops it silently (UC has no NAK).
    if (!(ctx.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) ||
        ctx.mem.resolve_remote(pkt.reth.rkey, ctx.init.pd, pkt.reth.va, pkt.reth.dma_len,
                               IBV_ACCESS_REMOTE_WRITE)
                .status != MemStatus::kOk) {
      ++ctx.counters.dropped_pkts;
      return;
    }
    msg_ = Msg::kWrite;
    offset_ = 0;
    write_va_ = pkt.reth.va;
    write_rkey_ = pkt.reth.rkey;
    write_len_ = pkt.reth.dma_len;
  }
  // The message may not run past its RETH length; the last packet must end it exactly.
  if (offset_ + len > write_len_ || ((f & wire::kLast) && offset_ + len != write_len_)) {
    drop(ctx);
    return;
  }
  if (len != 0) {
    const MemRef r = ctx.mem.resolve_remote(write_rkey_, ctx.init.pd, write_va_ + offset_, len,
                                            IBV_ACCESS_REMOTE_WRITE);
    if (r.status != MemStatus::kOk) {  // deregistered meanwhile
      drop(ctx);
      return;
    }
    std::memcpy(r.ptr, pkt.payload.data(), len);
  }
  offset_ += len;
  if (!(f & wire::kLast)) return;
  msg_ = Msg::kNone;
  if (!(f & wire::kConsumesRecv)) return;
  // WRITE with immediate: the immediate completes a receive WQE (9.4.4).
  if (rq.empty() && srq != nullptr) srq->take(rq);
  if (rq.empty()) {
    ++ctx.counters.out_of_buffer;
    return;
  }
  complete(ctx, rq, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, write_len_, pkt);
}

void UcReceiver::complete(const QpContext& ctx, RecvQueue& rq, ibv_wc_status status,
                          ibv_wc_opcode op, uint32_t byte_len, const wire::Packet& last) {
  msg_ = Msg::kNone;
  // A failed message reports no immediate (UC carries no invalidate).
  const ibv_wc wc = make_recv_wc(rq.front().wr_id, status, op, ctx.init.qpn, ctx.attr.dest_qp_num,
                                 byte_len, status == IBV_WC_SUCCESS ? &last : nullptr);
  rq.pop_front();
  ctx.init.recv_cq->push(wc, status == IBV_WC_SUCCESS && last.bth.se);
}

}  // namespace uroce::transport
