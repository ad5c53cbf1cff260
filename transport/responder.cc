// Responder: request packets → receive completions, memory writes and reads, atomics, ACKs, NAKs
// and READ/ATOMIC responses. See responder.h.
#include "transport/responder.h"

#include <algorithm>
#include <cstring>

#include "transport/dma.h"
#include "transport/wc.h"

namespace uroce::transport {
namespace {

using wire::AethType;
using wire::NakCode;
using wire::Opcode;

uint8_t ack_syndrome() {
  // uroce does not do end-to-end credits: the "invalid credit" code tells the requester to
  // ignore them (IBTA 9.7.5.1.2).
  return wire::aeth_syndrome(AethType::kAck, wire::kAethCreditInvalid);
}

// Packets of a READ response of `len` bytes: one per PMTU, at least one (9.7.4.1.1).
uint32_t read_pkts(uint32_t len, uint32_t mtu) {
  return std::max<uint32_t>(1, static_cast<uint32_t>((uint64_t{len} + mtu - 1) / mtu));
}

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

void Responder::queue_ack(uint8_t syndrome, Psn psn, uint32_t msn) {
  // While the port pushes back, ACKs and NAKs wait here. ACKs are cumulative: an ACK waiting
  // behind everything else is superseded by a newer ACK or NAK, which says at least as much. A
  // waiting NAK is never superseded — the requester must learn of the gap, the missing receive
  // or the refusal it reports (IBTA 9.7.5.2) — and an ACK that says no more than it (a duplicate
  // re-ACKed: everything before the NAK's PSN, which the NAK implies) is not queued behind it.
  // One queued before a READ stream stays, in order.
  if (!responses_.empty() && responses_.back().kind == Response::Kind::kAck) {
    Response& b = responses_.back();
    const bool waiting_ack = wire::aeth_type(b.syndrome) == AethType::kAck;
    const bool is_ack = wire::aeth_type(syndrome) == AethType::kAck;
    if (waiting_ack) {
      b.syndrome = syndrome;
      b.psn = psn;
      b.msn = msn;
      return;
    }
    if (is_ack && psn < b.psn) return;
  }
  Response r;
  r.kind = Response::Kind::kAck;
  r.syndrome = syndrome;
  r.psn = psn;
  r.msn = msn;
  responses_.push_back(r);
}

void Responder::ack(const QpContext&) {
  queue_ack(ack_syndrome(), epsn_ - 1);
}

void Responder::nak(Nak nak, Psn psn, const QpContext& ctx) {
  queue_ack(syndrome(nak, ctx.attr.min_rnr_timer), psn);
}

void Responder::fail(Nak n, Psn psn, const QpContext& ctx, RecvQueue& rq, ResponderOutcome& out,
                     ibv_wc_status recv_status) {
  // (An XRC message whose SRQ went away has no WQE left to complete: Qp::xrc_srq_gone.)
  if (msg_ == Msg::kSend && !rq.empty())
    complete_recv(ctx, rq, recv_status, IBV_WC_RECV, msg_offset_, nullptr);
  msg_ = Msg::kNone;
  nak(n, psn, ctx);
  out.fatal = QpFatal{};
}

ResponderOutcome Responder::on_request(const wire::Packet& pkt, const QpContext& ctx,
                                       RecvQueue& rq) {
  ResponderOutcome out;
  if (!seen_request_) {
    seen_request_ = true;
    out.first_packet = true;
  }
  const uint32_t flags = pkt.info->flags;
  const Psn psn(pkt.bth.psn);
  const int32_t d = psn - epsn_;
  if (d < 0) {
    // Duplicate (IBTA 9.7.4.1.3.2): already executed, so never delivered again; the requester
    // resent it because our response was lost or late. READ and ATOMIC are answered from the
    // responder resources; the rest is ACKed when asked, and also on the first duplicate since
    // the expected PSN last moved. A responder may ACK without AckReq (ACKs are cumulative);
    // answering the start of a retransmission at once means the requester learns where we are
    // even if the AckReq-marked end of it is lost. rdma_rxe 6.1 was seen to stall for ever
    // without that ACK (docs/interop.md, "One hang under receive loss").
    ++ctx.counters.duplicate_request;
    if (flags & wire::kRead) {
      duplicate_read(pkt, ctx);
    } else if (flags & wire::kAtomic) {
      duplicate_single(pkt, ctx, Resource::Kind::kAtomic);
    } else if (flags & wire::kAtomicWrite) {
      duplicate_single(pkt, ctx, Resource::Kind::kAtomicWrite);
    } else if (pkt.bth.ack_req || !dup_acked_) {
      ack(ctx);
      dup_acked_ = true;
    }
    return out;
  }
  if (d > 0) {
    // Out of sequence (9.7.4.1.3.3): a gap. One NAK per gap; the rest of the window is dropped
    // until the expected PSN arrives.
    ++ctx.counters.out_of_sequence;
    // Selective repeat places what it can ahead; after an RNR NAK the IBTA rule below holds for
    // it too (the requester waits, then resends from the refused PSN).
    if (ctx.sr() && nak_state_ != NakState::kRnrSent) {
      sr_ahead(pkt, d, ctx);
      return out;
    }
    if (nak_state_ == NakState::kNone) {
      ++ctx.counters.out_of_seq_request;
      nak(Nak::kPsnSequenceError, epsn_, ctx);
      nak_state_ = NakState::kSeqErrSent;
    }
    return out;
  }
  nak_state_ = NakState::kNone;
  dup_acked_ = false;
  if (ctx.xrc_refused) {
    // XRC: the XRCETH names no XRC SRQ of the QP's domain (or another SRQ mid-message): an
    // invalid request (Class B, IBTA 9.9.3.1.2), as for an opcode the QP cannot take.
    ++ctx.counters.xrc_srq_invalid;
    fail(Nak::kInvalidRequest, psn, ctx, rq, out);
    return out;
  }
  if (flags & wire::kSend) {
    execute_send(pkt, ctx, rq, out);
  } else if (flags & wire::kWrite) {
    execute_write(pkt, ctx, rq, out);
  } else if (flags & wire::kRead) {
    execute_read(pkt, ctx, rq, out);
  } else if (flags & wire::kAtomic) {
    execute_atomic(pkt, ctx, rq, out);
  } else if (flags & wire::kAtomicWrite) {
    execute_atomic_write(pkt, ctx, rq, out);
  } else {
    fail(Nak::kInvalidRequest, psn, ctx, rq, out);  // no such request opcode on RC
  }
  if (sr_ != nullptr && sr_->count != 0 && !out.fatal) sr_catch_up(ctx, rq, out);
  return out;
}

void Responder::sack(std::optional<Psn> sacked, const QpContext& ctx) {
  ++ctx.counters.sr_sack_sent;
  queue_ack(syndrome(Nak::kPsnSequenceError, 0), epsn_,
            sacked ? sacked->value() : (epsn_ - 1).value());
}

void Responder::sr_ahead(const wire::Packet& pkt, int32_t d, const QpContext& ctx) {
  const Psn psn(pkt.bth.psn);
  const size_t len = pkt.payload.size();
  // Only an RC RDMA WRITE ONLY (no immediate) is self-contained: its RETH names where its bytes
  // go, it consumes no receive WQE and completes nothing here. Everything else must wait for
  // the requests before it (a SEND's offset in its receive WQE, a READ or ATOMIC's ordering).
  if (uint32_t(d) < kSrWindowPkts && pkt.bth.opcode == uint8_t(Opcode::kRcWriteOnly) &&
      (pkt.bth.ext & wire::kBthExtPlace) && !ctx.xrc_refused) {
    if (sr_ == nullptr) sr_ = std::make_unique<SrState>();
    if (sr_->has(psn)) {
      ++ctx.counters.duplicate_request;  // its SACK was lost or late: say it again
      sack(psn, ctx);
      return;
    }
    // The checks execute_write makes of a WRITE ONLY. One that fails is not placed; it is
    // refused in order when the requester resends it, after everything before it.
    MemRef m{MemStatus::kOk, nullptr};
    const bool ok_len = len <= ctx.mtu && len == pkt.reth.dma_len;
    if (ok_len && len != 0 && (ctx.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE)) {
      m = ctx.mem.resolve_remote(pkt.reth.rkey, ctx.pd, pkt.reth.va, len, IBV_ACCESS_REMOTE_WRITE);
    }
    if (ok_len && (ctx.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) &&
        m.status == MemStatus::kOk) {
      if (len != 0) place(m.ptr, pkt.payload.data(), len, psn);
      const uint32_t i = psn.value() % kSrWindowPkts;
      sr_->bits[i / 64] |= uint64_t{1} << (i % 64);
      sr_->slots[i] = SrSlot{psn, m.ptr, static_cast<uint32_t>(len)};
      ++sr_->count;
      ++ctx.counters.sr_ooo_accepted;
      sack(psn, ctx);
      return;
    }
  }
  // Dropped; the first packet of a gap still tells the requester where the hole starts.
  if (nak_state_ == NakState::kNone) {
    ++ctx.counters.out_of_seq_request;
    sack(std::nullopt, ctx);
    nak_state_ = NakState::kSeqErrSent;
  }
}

void Responder::sr_catch_up(const QpContext& ctx, RecvQueue& rq, ResponderOutcome& out) {
  bool moved = false;
  while (sr_->count != 0 && sr_->has(epsn_)) {
    if (msg_ != Msg::kNone) {
      // A WRITE ONLY where the open message needs its next packet: the requester broke the
      // opcode sequence (9.7.4.1.4).
      fail(Nak::kInvalidRequest, epsn_, ctx, rq, out);
      return;
    }
    const uint32_t i = epsn_.value() % kSrWindowPkts;
    sr_->bits[i / 64] &= ~(uint64_t{1} << (i % 64));
    --sr_->count;
    ++epsn_;
    msn_ = (msn_ + 1) & kPsnMask;  // each one was a whole message
    moved = true;
  }
  if (moved) {
    nak_state_ = NakState::kNone;
    ack(ctx);
  }
}

void Responder::place(uint8_t* dst, const uint8_t* src, size_t len, Psn psn) {
  if (sr_ == nullptr || sr_->count == 0) {
    std::memcpy(dst, src, len);
    return;
  }
  // The ranges of [dst, dst + len) that packets after `psn`, placed ahead, already wrote.
  std::array<std::pair<size_t, size_t>, kSrWindowPkts> cut;
  size_t n = 0;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(dst), hi = lo + len;
  for (uint32_t w = 0; w < sr_->bits.size(); ++w) {
    for (uint64_t b = sr_->bits[w]; b != 0; b &= b - 1) {
      const SrSlot& sl = sr_->slots[w * 64 + uint32_t(__builtin_ctzll(b))];
      if (!(sl.psn > psn) || sl.len == 0) continue;
      const uintptr_t a = std::max(lo, reinterpret_cast<uintptr_t>(sl.ptr));
      const uintptr_t z = std::min(hi, reinterpret_cast<uintptr_t>(sl.ptr) + sl.len);
      if (a < z) cut[n++] = {a - lo, z - lo};
    }
  }
  if (n == 0) {
    std::memcpy(dst, src, len);
    return;
  }
  std::sort(cut.begin(), cut.begin() + static_cast<ptrdiff_t>(n));
  size_t at = 0;
  for (size_t k = 0; k < n; ++k) {
    if (cut[k].first > at) std::memcpy(dst + at, src + at, cut[k].first - at);
    at = std::max(at, cut[k].second);
  }
  if (at < len) std::memcpy(dst + at, src + at, len - at);
}

void Responder::execute_send(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq,
                             ResponderOutcome& out) {
  const Psn psn(pkt.bth.psn);
  const uint32_t flags = pkt.info->flags;
  const bool first = flags & wire::kFirst, last = flags & wire::kLast;
  const size_t len = pkt.payload.size();

  // Opcode sequence (9.7.4.1.4): FIRST/ONLY open a message, MIDDLE/LAST continue the open one.
  // Length (9.7.4.1.6): FIRST and MIDDLE carry exactly one PMTU, LAST 1..PMTU, ONLY 0..PMTU.
  const bool bad_sequence = first ? msg_ != Msg::kNone : msg_ != Msg::kSend;
  const bool bad_length =
      len > ctx.mtu || (!last && len != ctx.mtu) || (last && !first && len == 0);
  if (bad_sequence || bad_length) {
    fail(Nak::kInvalidRequest, psn, ctx, rq, out);
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
    msg_ = Msg::kSend;
    msg_offset_ = 0;
  }
  const RecvWqe& w = rq.front();
  if (msg_offset_ + len > sge_total(w.sge.data(), w.num_sge)) {
    // The message does not fit the receive WQE: a local length error here, NAK invalid request
    // to the requester (IBTA 9.9.3.1.2), both QPs to ERR.
    fail(Nak::kInvalidRequest, psn, ctx, rq, out, IBV_WC_LOC_LEN_ERR);
    return;
  }
  if (len != 0 && scatter(ctx.mem, ctx.pd, w.sge.data(), w.num_sge, msg_offset_, pkt.payload.data(),
                          static_cast<uint32_t>(len)) != MemStatus::kOk) {
    // The receive WQE names memory we may not write: local protection error here, remote
    // operational error for the requester (9.9.3.1.3).
    fail(Nak::kRemoteOperational, psn, ctx, rq, out, IBV_WC_LOC_PROT_ERR);
    return;
  }
  if (flags & wire::kHasIeth) {
    // SEND with invalidate (IBTA 9.4.1.1, 10.6.7.2): the message has been placed; the R_Key in
    // the IETH is invalidated before the receive completes. Only a valid type 2 window of this
    // QP's PD may be invalidated remotely; any other key (unknown, already invalid, another PD,
    // a memory region, a type 1 window) makes the request invalid, like the other responder
    // checks of Class B (9.9.3.1.2): NAK invalid request, the receive WQE completes with
    // REM_INV_REQ_ERR (rxe's status for it) and both QPs enter ERR.
    if (ctx.mem.invalidate(pkt.ieth_rkey, ctx.pd) != MemStatus::kOk) {
      msg_offset_ += len;
      fail(Nak::kInvalidRequest, psn, ctx, rq, out, IBV_WC_REM_INV_REQ_ERR);
      return;
    }
  }
  msg_offset_ += len;
  ++epsn_;
  if (last) {
    complete_recv(ctx, rq, IBV_WC_SUCCESS, IBV_WC_RECV, static_cast<uint32_t>(msg_offset_), &pkt);
    msn_ = (msn_ + 1) & kPsnMask;
  }
  if (pkt.bth.ack_req) ack(ctx);
}

void Responder::execute_write(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq,
                              ResponderOutcome& out) {
  const Psn psn(pkt.bth.psn);
  const uint32_t flags = pkt.info->flags;
  const bool first = flags & wire::kFirst, last = flags & wire::kLast;
  const bool with_imm = flags & wire::kConsumesRecv;
  const size_t len = pkt.payload.size();

  const bool bad_sequence = first ? msg_ != Msg::kNone : msg_ != Msg::kWrite;
  const bool bad_length =
      len > ctx.mtu || (!last && len != ctx.mtu) || (last && !first && len == 0);
  if (bad_sequence || bad_length) {
    fail(Nak::kInvalidRequest, psn, ctx, rq, out);
    return;
  }
  if (first) {
    // Every check comes before the first byte is written (IBTA 9.7.4.1 responder checks): the QP
    // must allow remote writes, and the R_Key must name a region of our PD that covers
    // [VA, VA + DMA length) and allows remote write. A zero-length WRITE names no memory.
    if (!(ctx.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE)) {
      fail(Nak::kRemoteAccess, psn, ctx, rq, out);
      return;
    }
    if (pkt.reth.dma_len != 0 && ctx.mem.resolve_remote(pkt.reth.rkey, ctx.pd, pkt.reth.va,
                                                        pkt.reth.dma_len, IBV_ACCESS_REMOTE_WRITE)
                                         .status != MemStatus::kOk) {
      fail(Nak::kRemoteAccess, psn, ctx, rq, out);
      return;
    }
    write_va_ = pkt.reth.va;
    write_rkey_ = pkt.reth.rkey;
    write_len_ = pkt.reth.dma_len;
    msg_offset_ = 0;
  }
  // The payloads must add up to the RETH's DMA length exactly (9.7.4.1.6).
  const uint64_t end = msg_offset_ + len;
  if (end > write_len_ || (last && end != write_len_)) {
    fail(Nak::kInvalidRequest, psn, ctx, rq, out);
    return;
  }
  if (last && with_imm && rq.empty()) {
    // WRITE with immediate consumes a receive WQE (9.4.4): none, RNR NAK. The message state is
    // kept, so the resent LAST packet continues it.
    ++ctx.counters.send_rnr_err;
    nak(Nak::kRnr, psn, ctx);
    nak_state_ = NakState::kRnrSent;
    msg_ = first ? Msg::kNone : Msg::kWrite;
    return;
  }
  if (len != 0) {
    // Resolved again per packet: the region may have been deregistered since FIRST.
    const MemRef m = ctx.mem.resolve_remote(write_rkey_, ctx.pd, write_va_ + msg_offset_, len,
                                            IBV_ACCESS_REMOTE_WRITE);
    if (m.status != MemStatus::kOk) {
      fail(Nak::kRemoteAccess, psn, ctx, rq, out);
      return;
    }
    place(m.ptr, pkt.payload.data(), len, psn);
  }
  msg_offset_ = end;
  ++epsn_;
  msg_ = last ? Msg::kNone : Msg::kWrite;
  if (last) {
    if (with_imm) {
      // byte_len is the length of the WRITE (ibv_poll_cq(3)); nothing goes to the WQE's SGEs.
      complete_recv(ctx, rq, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, write_len_, &pkt);
    }
    msn_ = (msn_ + 1) & kPsnMask;
  }
  if (pkt.bth.ack_req) ack(ctx);
}

void Responder::pop_response() {
  const Response& r = responses_.front();
  if (r.kind != Response::Kind::kAck && !r.replay) --rd_atomic_queued_;
  responses_.pop_front();
}

void Responder::remember(const Resource& r, const QpContext& ctx) {
  const size_t cap = std::max<size_t>(1, ctx.attr.max_dest_rd_atomic);
  if (res_head_ != 0 && resources_.size() != cap) {
    // max_dest_rd_atomic changed (SQD → SQD) since the ring filled: back to oldest-first order.
    std::rotate(resources_.begin(), resources_.begin() + static_cast<ptrdiff_t>(res_head_),
                resources_.end());
    res_head_ = 0;
  }
  if (resources_.size() > cap) {
    resources_.erase(resources_.begin(),
                     resources_.begin() + static_cast<ptrdiff_t>(resources_.size() - cap));
  }
  if (resources_.size() < cap) {
    // Grown by doubling, never beyond the bound: memory follows what the peer actually uses.
    if (resources_.size() == resources_.capacity()) {
      resources_.reserve(std::min(cap, std::max<size_t>(4, 2 * resources_.size())));
    }
    resources_.push_back(r);
    return;
  }
  resources_[res_head_] = r;
  res_head_ = (res_head_ + 1) % cap;
}

bool Responder::admit_resource_request(Psn psn, int qp_access, const QpContext& ctx, RecvQueue& rq,
                                       ResponderOutcome& out) {
  if (msg_ != Msg::kNone) {
    fail(Nak::kInvalidRequest, psn, ctx, rq, out);
    return false;
  }
  if (!(ctx.attr.qp_access_flags & qp_access)) {
    fail(Nak::kRemoteAccess, psn, ctx, rq, out);
    return false;
  }
  // More READ/ATOMICs outstanding than the responder resources the requester was given
  // (max_dest_rd_atomic, the requester's max_rd_atomic must not exceed it): invalid request.
  if (rd_atomic_queued_ >= ctx.attr.max_dest_rd_atomic) {
    fail(Nak::kInvalidRequest, psn, ctx, rq, out);
    return false;
  }
  return true;
}

void Responder::execute_read(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq,
                             ResponderOutcome& out) {
  const Psn psn(pkt.bth.psn);
  if (!admit_resource_request(psn, IBV_ACCESS_REMOTE_READ, ctx, rq, out)) return;
  const wire::Reth& reth = pkt.reth;
  if (reth.dma_len != 0 &&
      ctx.mem.resolve_remote(reth.rkey, ctx.pd, reth.va, reth.dma_len, IBV_ACCESS_REMOTE_READ)
              .status != MemStatus::kOk) {
    fail(Nak::kRemoteAccess, psn, ctx, rq, out);
    return;
  }
  const uint32_t n = read_pkts(reth.dma_len, ctx.mtu);
  Resource res;
  res.first_psn = psn;
  res.last_psn = psn + (n - 1);
  res.va = reth.va;
  res.rkey = reth.rkey;
  res.dma_len = reth.dma_len;
  res.pd = ctx.pd;
  remember(res, ctx);
  epsn_ += n;
  msn_ = (msn_ + 1) & kPsnMask;
  Response r;
  r.kind = Response::Kind::kRead;
  r.psn = psn;
  r.last_psn = res.last_psn;
  r.va = reth.va;
  r.rkey = reth.rkey;
  r.left = reth.dma_len;
  r.pd = ctx.pd;
  r.msn = msn_;
  responses_.push_back(r);
  ++rd_atomic_queued_;
}

void Responder::duplicate_read(const wire::Packet& pkt, const QpContext& ctx) {
  const Psn psn(pkt.bth.psn);
  const size_t n = resources_.size();
  for (size_t i = 0; i < n; ++i) {  // newest first
    const Resource& res = resources_[(res_head_ + n - 1 - i) % n];
    if (res.kind != Resource::Kind::kRead || psn < res.first_psn || psn > res.last_psn) continue;
    // Executed again from `psn` (9.7.4.1.3.2): the request must name the rest of the original
    // READ, which was validated when it executed; response k still carries bytes k * PMTU on.
    // Under selective repeat a uroce requester may ask for only part of the rest — the hole
    // before responses it placed ahead (completer.h): whole packets, ending with a LAST there.
    const uint64_t off = uint64_t{psn_span(res.first_psn, psn)} * ctx.mtu;
    const bool rest = off <= res.dma_len && pkt.reth.dma_len == res.dma_len - off;
    const bool hole = ctx.sr() && off < res.dma_len && pkt.reth.dma_len != 0 &&
                      pkt.reth.dma_len < res.dma_len - off && pkt.reth.dma_len % ctx.mtu == 0;
    const bool consistent =
        (rest || hole) && pkt.reth.rkey == res.rkey && pkt.reth.va == res.va + off;
    if (!consistent || responses_.size() >= kMaxQueuedResponses) break;
    Response r;
    r.kind = Response::Kind::kRead;
    r.replay = true;
    r.psn = psn;
    r.last_psn = rest ? res.last_psn : psn + (pkt.reth.dma_len / ctx.mtu - 1);
    r.va = pkt.reth.va;
    r.rkey = res.rkey;
    r.left = pkt.reth.dma_len;
    r.pd = res.pd;
    r.msn = msn_;
    responses_.push_back(r);
    return;
  }
  // Older than the resources kept, inconsistent, or too many queued: silently dropped (Class D,
  // 9.9.3.1.4); the requester's timer tries again.
  ++ctx.counters.dropped_pkts;
}

void Responder::execute_atomic(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq,
                               ResponderOutcome& out) {
  const Psn psn(pkt.bth.psn);
  if (!admit_resource_request(psn, IBV_ACCESS_REMOTE_ATOMIC, ctx, rq, out)) return;
  // An ATOMIC's operand is 8 bytes, naturally aligned (IBTA 9.4.5); a misaligned VA is an
  // invalid request, as rxe and NICs answer it.
  const wire::AtomicEth& a = pkt.atomic;
  if (a.va & 7) {
    fail(Nak::kInvalidRequest, psn, ctx, rq, out);
    return;
  }
  const MemRef m = ctx.mem.resolve_remote(a.rkey, ctx.pd, a.va, 8, IBV_ACCESS_REMOTE_ATOMIC);
  if (m.status != MemStatus::kOk) {
    fail(Nak::kRemoteAccess, psn, ctx, rq, out);
    return;
  }
  // Through MemoryAccess, so it is atomic against every other ATOMIC on the device.
  const uint64_t orig = wire::rc_operation(pkt.bth.opcode) == Opcode::kRcCompareSwap
                            ? ctx.mem.atomic_cmp_swap(m.ptr, a.compare, a.swap_add)
                            : ctx.mem.atomic_fetch_add(m.ptr, a.swap_add);
  answer_single({.kind = Resource::Kind::kAtomic,
                 .first_psn = psn,
                 .last_psn = psn,
                 .va = a.va,
                 .rkey = a.rkey,
                 .orig = orig},
                ctx);
}

Responder::Response Responder::single_response(const Resource& res, bool replay) const {
  Response r;
  r.kind =
      res.kind == Resource::Kind::kAtomic ? Response::Kind::kAtomic : Response::Kind::kAtomicWrite;
  r.replay = replay;
  r.psn = res.first_psn;
  r.orig = res.orig;
  r.msn = msn_;
  return r;
}

void Responder::answer_single(const Resource& res, const QpContext& ctx) {
  remember(res, ctx);
  ++epsn_;
  msn_ = (msn_ + 1) & kPsnMask;
  responses_.push_back(single_response(res, /*replay=*/false));
  ++rd_atomic_queued_;
}

void Responder::duplicate_single(const wire::Packet& pkt, const QpContext& ctx,
                                 Resource::Kind kind) {
  const Psn psn(pkt.bth.psn);
  const size_t n = resources_.size();
  for (size_t i = 0; i < n; ++i) {  // newest first
    const Resource& res = resources_[(res_head_ + n - 1 - i) % n];
    if (res.kind != kind || res.first_psn != psn) continue;
    if (responses_.size() >= kMaxQueuedResponses) break;
    // Answered again from what was saved, never executed again (9.7.4.1.3.2): an ATOMIC would
    // add twice; an ATOMIC WRITE could undo a later write to the word (rxe's duplicate_request
    // replays its resource likewise).
    responses_.push_back(single_response(res, /*replay=*/true));
    return;
  }
  // Older than the resources kept: silently dropped (Class D, 9.9.3.1.4), as rxe does.
  ++ctx.counters.dropped_pkts;
}

void Responder::execute_atomic_write(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq,
                                     ResponderOutcome& out) {
  const Psn psn(pkt.bth.psn);
  // rxe lets an ATOMIC WRITE in where the QP allows remote write (check_op_valid; a QP without
  // it is refused as a WRITE is here, with a remote access error), and it takes a responder
  // resource (check_resource counts it with READs and ATOMICs).
  if (!admit_resource_request(psn, IBV_ACCESS_REMOTE_WRITE, ctx, rq, out)) return;
  // Exactly 8 bytes, named by the RETH and carried as the payload (rxe: check_rkey's length
  // checks, ERR_LENGTH → NAK invalid request).
  const wire::Reth& reth = pkt.reth;
  if (reth.dma_len != 8 || pkt.payload.size() != 8) {
    fail(Nak::kInvalidRequest, psn, ctx, rq, out);
    return;
  }
  // The key first, then the alignment, in rxe's order: a bad R_Key is a remote access error
  // whatever the address (check_rkey), a good one over a misaligned target an invalid request
  // (atomic_write_reply's ERR_MISALIGNED_ATOMIC).
  const MemRef m = ctx.mem.resolve_remote(reth.rkey, ctx.pd, reth.va, 8, IBV_ACCESS_REMOTE_WRITE);
  if (m.status != MemStatus::kOk) {
    fail(Nak::kRemoteAccess, psn, ctx, rq, out);
    return;
  }
  if ((reth.va & 7) || (reinterpret_cast<uintptr_t>(m.ptr) & 7)) {
    fail(Nak::kInvalidRequest, psn, ctx, rq, out);
    return;
  }
  // The bytes go as they came, in wire order: it is a write of data, not a number.
  uint64_t value;
  std::memcpy(&value, pkt.payload.data(), sizeof value);
  ctx.mem.atomic_store(m.ptr, value);
  answer_single({.kind = Resource::Kind::kAtomicWrite,
                 .first_psn = psn,
                 .last_psn = psn,
                 .va = reth.va,
                 .rkey = reth.rkey},
                ctx);
}

void Responder::complete_recv(const QpContext& ctx, RecvQueue& rq, ibv_wc_status status,
                              ibv_wc_opcode opcode, uint32_t byte_len, const wire::Packet* last) {
  msg_ = Msg::kNone;
  if (rq.empty()) return;
  const ibv_wc wc = make_recv_wc(rq.front().wr_id, status, opcode, ctx.init.qpn,
                                 ctx.attr.dest_qp_num, byte_len, last);
  rq.pop_front();
  // Solicited: the message's last packet had SE set (IBTA 9.2.3, 11.4.2.2).
  ctx.init.recv_cq->push(wc, last != nullptr && last->bth.se);
}

bool Responder::write_response(const QpContext& ctx, uint32_t gather_min, TxBuf* buf) {
  Response& r = responses_.front();
  wire::Packet p;
  p.bth.migreq = true;
  p.bth.pkey = wire::kDefaultPkey;
  p.bth.dest_qp = ctx.attr.dest_qp_num;
  p.bth.psn = r.psn.value();
  p.bth.ext = ctx.bth_ext();
  p.aeth.msn = r.msn;
  stamp_route(buf, data_route(ctx));  // ECN-capable like the QP's data (context.h)
  bool fatal = false;
  // RC and XRC number their responses alike in the low five bits (IBTA Table 38).
  const auto of_service = [&ctx](Opcode rc) {
    return static_cast<uint8_t>(uint8_t(rc) | uint8_t(ctx.service) << 5);
  };
  switch (r.kind) {
    case Response::Kind::kAck:
      p.bth.opcode = of_service(Opcode::kRcAcknowledge);
      p.aeth.syndrome = r.syndrome;
      buf->len = static_cast<uint32_t>(wire::build_headers(p, buf->data));
      pop_response();
      break;
    case Response::Kind::kAtomicWrite:
      // rxe answers an ATOMIC WRITE with an RDMA READ RESPONSE ONLY of no data and an ACK AETH
      // (send_read_response_ack), and its completer completes the WQE on it (rxe_comp.c).
      p.bth.opcode = of_service(Opcode::kRcReadResponseOnly);
      p.aeth.syndrome = ack_syndrome();
      buf->len = static_cast<uint32_t>(wire::build_headers(p, buf->data));
      pop_response();
      break;
    case Response::Kind::kAtomic:
      p.bth.opcode = of_service(Opcode::kRcAtomicAcknowledge);
      p.aeth.syndrome = ack_syndrome();
      p.atomic_ack = r.orig;
      buf->len = static_cast<uint32_t>(wire::build_headers(p, buf->data));
      pop_response();
      break;
    case Response::Kind::kRead: {
      const uint32_t len = std::min(ctx.mtu, r.left);
      const bool first = !r.started, last = r.psn == r.last_psn;
      const Opcode op = first && last ? Opcode::kRcReadResponseOnly
                        : first       ? Opcode::kRcReadResponseFirst
                        : last        ? Opcode::kRcReadResponseLast
                                      : Opcode::kRcReadResponseMiddle;
      MemRef m{MemStatus::kOk, nullptr};
      if (len != 0) {
        // Resolved when the data leaves (as a NIC's DMA reads it then): the region may have been
        // deregistered since the request was checked.
        m = ctx.mem.resolve_remote(r.rkey, r.pd, r.va, len, IBV_ACCESS_REMOTE_READ);
      }
      if (m.status != MemStatus::kOk) {
        p.bth.opcode = of_service(Opcode::kRcAcknowledge);
        p.aeth.syndrome = syndrome(Nak::kRemoteAccess, 0);
        buf->len = static_cast<uint32_t>(wire::build_headers(p, buf->data));
        responses_.clear();
        rd_atomic_queued_ = 0;
        fatal = true;
        break;
      }
      p.bth.opcode = of_service(op);
      p.aeth.syndrome = ack_syndrome();
      p.bth.pad = wire::pad_for(len);
      const size_t hdr = wire::build_headers(p, buf->data);
      if (!leave_in_place(buf, hdr, m.ptr, len, p.bth.pad, gather_min)) {
        if (len != 0) std::memcpy(buf->data + hdr, m.ptr, len);
        std::memset(buf->data + hdr + len, 0, p.bth.pad);
        buf->len = static_cast<uint32_t>(hdr + len + p.bth.pad);
      }
      buf->ecn = kEcnEct0;  // data, like requests (Annex A17.9)
      r.started = true;
      r.va += len;
      r.left -= len;
      ++r.psn;
      if (last) pop_response();
      break;
    }
  }
  return fatal;
}

}  // namespace uroce::transport
