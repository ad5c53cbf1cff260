// Completer: responses → completions, retries and timers. See completer.h.
#include "transport/completer.h"

#include <algorithm>

#include "transport/dma.h"
#include "transport/qp_state.h"

namespace uroce::transport {
namespace {

using wire::AethType;
using wire::NakCode;

// rnr_retry 7 means "retry forever" (IBTA 9.7.5.2.8, ibv_modify_qp(3)).
constexpr uint8_t kRnrRetryInfinite = 7;

ibv_wc send_wc(const QpContext& ctx, const SendEntry& e, ibv_wc_status status) {
  ibv_wc wc{};
  wc.wr_id = e.wqe.wr_id;
  wc.status = status;
  wc.opcode = wc_opcode_for(e.wqe.opcode);
  wc.byte_len = e.length;
  wc.qp_num = ctx.init.qpn;
  return wc;
}

}  // namespace

ibv_wc_status Completer::to_wc_status(Error e) {
  switch (e) {
    case Error::kRetryExceeded:
      return IBV_WC_RETRY_EXC_ERR;
    case Error::kRnrRetryExceeded:
      return IBV_WC_RNR_RETRY_EXC_ERR;
    case Error::kRemoteInvalidRequest:
      return IBV_WC_REM_INV_REQ_ERR;
    case Error::kRemoteAccess:
      return IBV_WC_REM_ACCESS_ERR;
    case Error::kRemoteOperational:
      return IBV_WC_REM_OP_ERR;
    case Error::kRemoteInvalidRdRequest:
      return IBV_WC_REM_INV_RD_REQ_ERR;
    case Error::kLocalProtection:
      return IBV_WC_LOC_PROT_ERR;
  }
  return IBV_WC_GENERAL_ERR;
}

void Completer::reset(Psn sq_psn, const ibv_qp_attr& attr) {
  *this = Completer{};
  unacked_ = sent_end_ = sq_psn;
  retry_left_ = attr.retry_cnt;
  rnr_left_ = attr.rnr_retry;
}

void Completer::arm(Time now, const QpContext& ctx) {
  const uint64_t t = ack_timeout_ns(ctx.attr.timeout);
  deadline_ = t == kNever ? kNever : now + t;
}

void Completer::on_sent(const PacketsSent& ev, Time now, const QpContext& ctx) {
  if (ev.sent_end > sent_end_) sent_end_ = ev.sent_end;
  if (deadline_ == kNever && outstanding()) arm(now, ctx);
}

bool Completer::advance(Psn next_unacked, Time now, const QpContext& ctx, SendQueue& sq) {
  if (next_unacked <= unacked_) return false;
  unacked_ = next_unacked;
  if (resend_asked_ && unacked_ > resend_from_) resend_asked_ = false;
  while (!sq.empty() && sq.front().state == WqeState::kInFlight &&
         sq.front().end_psn() <= unacked_) {
    const SendEntry& e = sq.front();
    if (e.signaled) ctx.init.send_cq->push(send_wc(ctx, e, IBV_WC_SUCCESS));
    sq.pop_front();
  }
  // Forward progress restores the retry budgets and restarts the timer for what is left.
  retry_left_ = ctx.attr.retry_cnt;
  rnr_left_ = ctx.attr.rnr_retry;
  if (outstanding()) {
    arm(now, ctx);
  } else {
    deadline_ = kNever;
  }
  return true;
}

CompleterOutcome Completer::fail_front(Error err, const QpContext& ctx, SendQueue& sq) {
  CompleterOutcome out;
  if (!sq.empty()) {
    ctx.init.send_cq->push(send_wc(ctx, sq.front(), to_wc_status(err)));
    sq.pop_front();
    ++ctx.counters.send_err;
  }
  deadline_ = kNever;
  out.fatal = QpFatal{};
  return out;
}

CompleterOutcome Completer::complete_local_error(const QpContext& ctx, SendQueue& sq) {
  CompleterOutcome out;
  if (sq.empty() || sq.front().state != WqeState::kLocalError) return out;
  ctx.init.send_cq->push(send_wc(ctx, sq.front(), sq.front().error));
  sq.pop_front();
  ++ctx.counters.send_err;
  deadline_ = kNever;
  out.fatal = QpFatal{};
  return out;
}

void Completer::complete_local_done(const QpContext& ctx, SendQueue& sq) {
  while (!sq.empty() && sq.front().state == WqeState::kInFlight && sq.front().npkts == 0 &&
         sq.front().end_psn() <= unacked_) {
    const SendEntry& e = sq.front();
    if (e.signaled) ctx.init.send_cq->push(send_wc(ctx, e, IBV_WC_SUCCESS));
    sq.pop_front();
  }
}

Psn Completer::ack_limit(const SendQueue& sq) const {
  for (SendQueue::Seq s = sq.begin(); s != sq.end(); ++s) {
    const SendEntry& e = sq.at(s);
    if (e.state != WqeState::kInFlight) break;
    if (is_read_or_atomic(e.wqe.opcode)) return std::max(unacked_, e.first_psn);
  }
  return sent_end_;
}

SendEntry* Completer::find(SendQueue& sq, Psn psn) const {
  for (SendQueue::Seq s = sq.begin(); s != sq.end(); ++s) {
    SendEntry& e = sq.at(s);
    if (e.state != WqeState::kInFlight) break;
    if (psn >= e.first_psn && psn < e.end_psn()) return &e;
  }
  return nullptr;
}

void Completer::implicit_nak(Psn from, Time now, const QpContext& ctx, CompleterOutcome& out) {
  if (resend_asked_ && resend_from_ == from) return;
  resend_asked_ = true;
  resend_from_ = from;
  // Like a sequence NAK without its retry cost: the loss is bounded by the guard above, and a
  // resend that is lost again falls to the timer, which does spend retries.
  ++ctx.counters.completer_retry_err;
  out.retransmit = RetransmitFrom{from, 0, RetransmitFrom::Cause::kImplicitNak};
  arm(now, ctx);
}

CompleterOutcome Completer::on_response(const wire::Packet& pkt, Time now, const QpContext& ctx,
                                        SendQueue& sq) {
  const uint32_t flags = pkt.info->flags;
  if (pkt.bth.opcode == static_cast<uint8_t>(wire::Opcode::kRcAcknowledge)) {
    return on_ack(pkt, now, ctx, sq);
  }
  if (flags & wire::kRead) return on_read_response(pkt, now, ctx, sq);
  if (flags & wire::kAtomic) return on_atomic_ack(pkt, now, ctx, sq);
  ++ctx.counters.dropped_pkts;
  return {};
}

CompleterOutcome Completer::on_read_response(const wire::Packet& pkt, Time now,
                                             const QpContext& ctx, SendQueue& sq) {
  CompleterOutcome out;
  const Psn psn(pkt.bth.psn);
  if (psn < unacked_) return out;  // a duplicate of data already placed
  SendEntry* w = psn < sent_end_ ? find(sq, psn) : nullptr;
  if (w == nullptr || w->wqe.opcode != IBV_WR_RDMA_READ) {
    ++ctx.counters.dropped_pkts;  // ghost: no READ of ours holds this PSN
    return out;
  }
  const Psn limit = ack_limit(sq);
  if (psn != limit) {
    // Responses arrive in PSN order; a later one means those from `limit` on were lost.
    implicit_nak(limit, now, ctx, out);
    return out;
  }
  // Response packet k of a READ carries bytes [k * PMTU, ...) of the message, whichever request
  // (the first or a resumed one) it answers; LAST/ONLY only at the READ's last PSN (9.7.5.1.5).
  const uint64_t off = uint64_t{psn_span(w->first_psn, psn)} * ctx.mtu;
  const uint32_t want = static_cast<uint32_t>(std::min<uint64_t>(ctx.mtu, w->length - off));
  const bool last = psn == w->last_psn();
  if (pkt.payload.size() != want || last != bool(pkt.info->flags & wire::kLast)) {
    ++ctx.counters.dropped_pkts;  // malformed: the timer resends what it should have carried
    return out;
  }
  // A READ response implicitly acknowledges every request before the READ (9.7.5.1.1).
  bool progress = advance(w->first_psn, now, ctx, sq);
  w = find(sq, psn);  // advance() may have popped entries before it
  if (want != 0 && scatter(ctx.mem, ctx.init.pd, w->wqe.sge.data(), w->wqe.num_sge, off,
                           pkt.payload.data(), want) != MemStatus::kOk) {
    if (progress) out.acked = AckedThrough{unacked_};
    CompleterOutcome f = fail_front(Error::kLocalProtection, ctx, sq);
    f.acked = out.acked;
    return f;
  }
  progress |= advance(psn + 1, now, ctx, sq);
  if (progress) out.acked = AckedThrough{unacked_};
  return out;
}

CompleterOutcome Completer::on_atomic_ack(const wire::Packet& pkt, Time now, const QpContext& ctx,
                                          SendQueue& sq) {
  CompleterOutcome out;
  const Psn psn(pkt.bth.psn);
  if (psn < unacked_) return out;  // duplicate: the original value is already placed
  SendEntry* w = psn < sent_end_ ? find(sq, psn) : nullptr;
  if (w == nullptr || !is_atomic(w->wqe.opcode)) {
    ++ctx.counters.dropped_pkts;
    return out;
  }
  const Psn limit = ack_limit(sq);
  if (psn != limit) {
    implicit_nak(limit, now, ctx, out);
    return out;
  }
  bool progress = advance(w->first_psn, now, ctx, sq);
  w = find(sq, psn);
  // The original remote value, in host order, goes to the 8-byte SGE (ibv_post_send(3)).
  const uint64_t orig = pkt.atomic_ack;
  if (scatter(ctx.mem, ctx.init.pd, w->wqe.sge.data(), w->wqe.num_sge, 0,
              reinterpret_cast<const uint8_t*>(&orig), sizeof orig) != MemStatus::kOk) {
    if (progress) out.acked = AckedThrough{unacked_};
    CompleterOutcome f = fail_front(Error::kLocalProtection, ctx, sq);
    f.acked = out.acked;
    return f;
  }
  progress |= advance(psn + 1, now, ctx, sq);
  if (progress) out.acked = AckedThrough{unacked_};
  return out;
}

CompleterOutcome Completer::on_ack(const wire::Packet& pkt, Time now, const QpContext& ctx,
                                   SendQueue& sq) {
  CompleterOutcome out;
  const Psn psn(pkt.bth.psn);
  const uint8_t syn = pkt.aeth.syndrome;
  const AethType type = wire::aeth_type(syn);

  if (type == AethType::kAck) {
    // An ACK for PSN p acknowledges everything up to p. Older ACKs (p < unacked - 1) are stale
    // duplicates; one for a PSN never sent is a ghost (IBTA 9.7.5.1.2): both are ignored.
    if (psn >= sent_end_) {
      ++ctx.counters.dropped_pkts;
      return out;
    }
    const Psn limit = ack_limit(sq);
    if (psn >= limit) {
      // The responder is past a READ/ATOMIC whose data we lack: its responses were lost.
      if (advance(limit, now, ctx, sq)) out.acked = AckedThrough{unacked_};
      implicit_nak(limit, now, ctx, out);
      return out;
    }
    if (advance(psn + 1, now, ctx, sq)) out.acked = AckedThrough{unacked_};
    return out;
  }

  // A NAK names the PSN it refuses and implicitly acknowledges everything before it.
  if (psn < unacked_ || psn >= sent_end_) {
    if (psn >= sent_end_) ++ctx.counters.dropped_pkts;
    return out;  // stale: the condition it reports was already dealt with
  }
  const Psn limit = ack_limit(sq);
  const bool progress = advance(std::min(psn, limit), now, ctx, sq);
  if (progress) out.acked = AckedThrough{unacked_};
  if (psn > limit && type != AethType::kNak) {
    // An RNR NAK for a request after a READ/ATOMIC whose responses were lost: fetch them first.
    implicit_nak(limit, now, ctx, out);
    return out;
  }
  if (psn > limit && wire::aeth_value(syn) == uint8_t(NakCode::kPsnSequenceError)) {
    implicit_nak(limit, now, ctx, out);
    return out;
  }

  if (type == AethType::kRnrNak) {
    ++ctx.counters.rcvd_rnr_err;
    if (ctx.attr.rnr_retry != kRnrRetryInfinite) {
      if (rnr_left_ == 0) {
        ++ctx.counters.rnr_retry_exceeded_err;
        return fail_front(Error::kRnrRetryExceeded, ctx, sq);
      }
      --rnr_left_;
    }
    // Wait the responder's RNR timer, then resend from the refused PSN; the ACK timer restarts
    // when the retransmission goes out (on_sent).
    out.retransmit = RetransmitFrom{psn, now + rnr_timer_ns(wire::aeth_value(syn)),
                                    RetransmitFrom::Cause::kRnrNak};
    deadline_ = kNever;
    return out;
  }
  if (type != AethType::kNak) {
    ++ctx.counters.dropped_pkts;  // reserved AETH type
    return out;
  }
  switch (static_cast<NakCode>(wire::aeth_value(syn))) {
    case NakCode::kPsnSequenceError:
      // Go back N (IBTA 9.7.5.2.2). A NAK that brought no progress spends a retry, so two peers
      // that keep losing the same packet still give up after retry_cnt attempts.
      ++ctx.counters.rcvd_seq_err;
      if (!progress) {
        if (retry_left_ == 0) {
          ++ctx.counters.retry_exceeded_err;
          return fail_front(Error::kRetryExceeded, ctx, sq);
        }
        --retry_left_;
      }
      ++ctx.counters.completer_retry_err;
      out.retransmit = RetransmitFrom{psn, 0, RetransmitFrom::Cause::kSequenceNak};
      arm(now, ctx);
      return out;
    case NakCode::kInvalidRequest:
      return fail_front(Error::kRemoteInvalidRequest, ctx, sq);
    case NakCode::kRemoteAccessError:
      return fail_front(Error::kRemoteAccess, ctx, sq);
    case NakCode::kRemoteOperationalError:
      return fail_front(Error::kRemoteOperational, ctx, sq);
    case NakCode::kInvalidRdRequest:
      return fail_front(Error::kRemoteInvalidRdRequest, ctx, sq);
  }
  ++ctx.counters.dropped_pkts;  // reserved NAK code
  return out;
}

CompleterOutcome Completer::on_timer(Time now, const QpContext& ctx, SendQueue& sq) {
  CompleterOutcome out;
  if (deadline_ > now) return out;
  if (!outstanding()) {
    deadline_ = kNever;
    return out;
  }
  // Local ACK timeout (IBTA 9.7.6.1.3): resend everything from the oldest unacknowledged PSN
  // (inside a READ: from its first missing response packet).
  ++ctx.counters.local_ack_timeout_err;
  resend_asked_ = false;
  if (retry_left_ == 0) {
    ++ctx.counters.retry_exceeded_err;
    return fail_front(Error::kRetryExceeded, ctx, sq);
  }
  --retry_left_;
  ++ctx.counters.completer_retry_err;
  out.retransmit = RetransmitFrom{unacked_, 0, RetransmitFrom::Cause::kTimeout};
  arm(now, ctx);
  return out;
}

}  // namespace uroce::transport
