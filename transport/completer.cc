// Completer: responses → completions, retries and timers. See completer.h.
#include "transport/completer.h"

#include <algorithm>

#include "transport/dma.h"
#include "transport/qp_state.h"
#include "transport/wc.h"

namespace uroce::transport {
namespace {

using wire::AethType;
using wire::NakCode;

// rnr_retry 7 means "retry forever" (IBTA 9.7.5.2.8, ibv_modify_qp(3)).
constexpr uint8_t kRnrRetryInfinite = 7;

// The floor of the probe timeout. The engine's timers are fine-grained (timerfd, kMinTimerNs
// 10 us in src/engine/engine.cc) and loopback round trips are tens to hundreds of microseconds,
// so neither limits the floor: the peer's scheduling does. Its ACK comes from a user-space
// engine thread that shares cores with the application and on a loaded host waits whole
// scheduler slices (CFS: a few ms) before it runs; a probe fired meanwhile resends the window
// for nothing and halves it. Measured on the project's 2-core build host at load 4-5
// (tests/engine faults_test, ping-pong over a 100 us +-50 us delay line, ~0.4 ms round trips):
// floors of 1 ms and 2 ms fired 1-6 spurious probes per 200 round trips, 5 ms none in three
// runs. 5 ms still ends a tail-loss stall 13 times sooner than perftest's default ACK timeout
// (timeout 14 = 67 ms). With an ACK timeout under 10 ms (timeout <= 11) there is no room for a
// probe below it and the ACK timer alone acts.
constexpr Time kPtoFloorNs = 5'000'000;
// Probes without progress double the PTO up to 2^6 times (and never beyond half the ACK
// timeout), so a dead or overloaded peer gets a few window resends, not a stream of them.
constexpr uint8_t kMaxProbeBackoff = 6;

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

Time Completer::pto(const QpContext& ctx) const {
  if (!ctx.init.early_retransmit || srtt_ == 0) return kNever;
  const uint64_t ack_timeout = ack_timeout_ns(ctx.attr.timeout);
  if (ack_timeout == kNever) return kNever;  // timeout 0: the user asked for no retransmit timer
  // A probe must come well before the ACK timer or it is only a duplicate of it.
  const Time cap = ack_timeout / 2;
  if (cap < kPtoFloorNs) return kNever;
  // RFC 8985 7.2: PTO = 2 * SRTT; the margin of 4 * RTTVAR (RFC 6298's) absorbs the jitter of a
  // user-space peer's ACK turnaround.
  const Time base = std::max(kPtoFloorNs, 2 * srtt_ + 4 * rttvar_);
  return std::min(cap, base << probe_backoff_);
}

void Completer::arm_probe(Time now, const QpContext& ctx) {
  const Time p = pto(ctx);
  probe_at_ = p == kNever ? kNever : now + p;
}

void Completer::rtt_sample(Time r) {
  r = std::max<Time>(r, 1);  // srtt_ 0 means "no sample"
  new_rtt_ = r;              // for congestion control, in the outcome of on_response
  if (srtt_ == 0) {
    srtt_ = r;  // RFC 6298 2.2
    rttvar_ = r / 2;
    return;
  }
  const Time diff = srtt_ > r ? srtt_ - r : r - srtt_;
  rttvar_ = (3 * rttvar_ + diff) / 4;  // RFC 6298 2.3: beta 1/4, alpha 1/8
  srtt_ = std::max<Time>(1, (7 * srtt_ + r) / 8);
}

void Completer::on_sent(const PacketsSent& ev, Time now, const QpContext& ctx) {
  if (ev.sent_end > sent_end_) sent_end_ = ev.sent_end;
  if (deadline_ == kNever && outstanding()) arm(now, ctx);
  // Round trips are timed for the probe and for TIMELY, which lives on them.
  const bool timely = ctx.init.cc.algorithm == cc::Algorithm::kTimely;
  if (!ctx.init.early_retransmit && !timely) return;
  // One sample at a time, as RFC 6298 does with one timed segment per round trip.
  if (ev.timed && !rtt_timing_) {
    rtt_timing_ = true;
    rtt_psn_ = ev.timed_psn;
    rtt_start_ = now;
  }
  if (ctx.init.early_retransmit && probe_at_ == kNever && outstanding()) arm_probe(now, ctx);
}

bool Completer::advance(Psn next_unacked, Time now, const QpContext& ctx, SendQueue& sq) {
  if (next_unacked <= unacked_) return false;
  if (rd_marks_) {
    // Placed READ responses now behind unacked_ leave the bitmap (it covers what is ahead).
    if (psn_span(unacked_, next_unacked) >= kRdBits) {
      rd_placed_.fill(0);
      rd_marks_ = false;
      rd_count_ = 0;
    } else {
      for (Psn p = unacked_; p < next_unacked; ++p) set_placed(p, false);
    }
  }
  unacked_ = next_unacked;
  if (resend_asked_ && unacked_ > resend_from_) resend_asked_ = false;
  if (hole_asked_ && unacked_ > hole_from_) hole_asked_ = false;
  if (hole_open_ && unacked_ >= hole_to_) hole_open_ = false;
  if (rtt_timing_ && unacked_ > rtt_psn_) {
    rtt_timing_ = false;
    rtt_sample(now - rtt_start_);
  }
  while (!sq.empty() && sq.front().state == WqeState::kInFlight &&
         sq.front().end_psn() <= unacked_) {
    const SendEntry& e = sq.front();
    if (e.signaled) ctx.init.send_cq->push(make_send_wc(e, IBV_WC_SUCCESS, ctx.init.qpn));
    sq.pop_front();
  }
  // Forward progress restores the retry budgets and restarts the timer for what is left.
  retry_left_ = ctx.attr.retry_cnt;
  rnr_left_ = ctx.attr.rnr_retry;
  probe_backoff_ = 0;
  if (outstanding()) {
    arm(now, ctx);
    arm_probe(now, ctx);
  } else {
    deadline_ = probe_at_ = kNever;
  }
  return true;
}

CompleterOutcome Completer::fail_front(Error err, const QpContext& ctx, SendQueue& sq) {
  CompleterOutcome out;
  if (!sq.empty()) {
    ctx.init.send_cq->push(make_send_wc(sq.front(), to_wc_status(err), ctx.init.qpn));
    sq.pop_front();
    ++ctx.counters.send_err;
  }
  deadline_ = probe_at_ = kNever;
  out.fatal = QpFatal{};
  return out;
}

CompleterOutcome Completer::complete_local_error(const QpContext& ctx, SendQueue& sq) {
  CompleterOutcome out;
  if (sq.empty() || sq.front().state != WqeState::kLocalError) return out;
  ctx.init.send_cq->push(make_send_wc(sq.front(), sq.front().error, ctx.init.qpn));
  sq.pop_front();
  ++ctx.counters.send_err;
  deadline_ = probe_at_ = kNever;
  out.fatal = QpFatal{};
  return out;
}

void Completer::complete_local_done(const QpContext& ctx, SendQueue& sq) {
  while (!sq.empty() && sq.front().state == WqeState::kInFlight && sq.front().npkts == 0 &&
         sq.front().end_psn() <= unacked_) {
    const SendEntry& e = sq.front();
    if (e.signaled) ctx.init.send_cq->push(make_send_wc(e, IBV_WC_SUCCESS, ctx.init.qpn));
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
  ++ctx.counters.implied_nak_seq_err;
  // Like a sequence NAK without its retry cost: the loss is bounded by the guard above, and a
  // resend that is lost again falls to the timer, which does spend retries.
  ++ctx.counters.completer_retry_err;
  out.retransmit = RetransmitFrom{from, 0, RetransmitFrom::Cause::kImplicitNak};
  arm(now, ctx);
  rtt_timing_ = false;  // Karn: the timed PSN may go again
  arm_probe(now, ctx);  // the probe watches the resend
}

CompleterOutcome Completer::on_response(const wire::Packet& pkt, Time now, const QpContext& ctx,
                                        SendQueue& sq) {
  const uint32_t flags = pkt.info->flags;
  CompleterOutcome out;
  if (wire::is_acknowledge(pkt.bth.opcode)) {
    out = on_ack(pkt, now, ctx, sq);
  } else if (flags & wire::kRead) {
    out = on_read_response(pkt, now, ctx, sq);
  } else if (flags & wire::kAtomic) {
    out = on_atomic_ack(pkt, now, ctx, sq);
  } else {
    ++ctx.counters.dropped_pkts;
  }
  out.rtt = new_rtt_;
  new_rtt_.reset();
  return out;
}

CompleterOutcome Completer::on_read_response(const wire::Packet& pkt, Time now,
                                             const QpContext& ctx, SendQueue& sq) {
  CompleterOutcome out;
  const Psn psn(pkt.bth.psn);
  if (psn < unacked_) return out;  // a duplicate of data already placed
  SendEntry* w = psn < sent_end_ ? find(sq, psn) : nullptr;
  if (w != nullptr && w->wqe.opcode == IBV_WR_ATOMIC_WRITE) {
    // IBTA 1.5 ATOMIC WRITE is answered by a READ RESPONSE ONLY of no data whose AETH is an ACK
    // (rxe's send_read_response_ack); rxe's completer then completes it like a WRITE
    // (rxe_comp.c check_ack: COMPST_WRITE_SEND). So it is an ACK of its PSN here, and nothing
    // else shaped like a response to it is taken.
    if (!(pkt.info->flags & wire::kFirst) || !(pkt.info->flags & wire::kLast) ||
        !pkt.payload.empty() || wire::aeth_type(pkt.aeth.syndrome) != AethType::kAck) {
      ++ctx.counters.dropped_pkts;
      return out;
    }
    return on_ack(pkt, now, ctx, sq);
  }
  if (w == nullptr || w->wqe.opcode != IBV_WR_RDMA_READ) {
    ++ctx.counters.dropped_pkts;  // ghost: no READ of ours holds this PSN
    return out;
  }
  const Psn limit = ack_limit(sq);
  if (psn != limit) {
    // Responses arrive in PSN order; a later one means those from `limit` on were lost. With
    // selective repeat the later one is placed now and only the hole is asked for.
    if (ctx.sr() && psn > limit && psn_span(unacked_, psn) < kRdBits) {
      place_ahead(pkt, *w, limit, now, ctx, sq, out);
      return out;
    }
    implicit_nak(limit, now, ctx, out);
    return out;
  }
  // Response packet k of a READ carries bytes [k * PMTU, ...) of the message, whichever request
  // (the first or a resumed one) it answers; LAST/ONLY only at the READ's last PSN (9.7.5.1.5) —
  // or, under selective repeat, at the end of a hole asked for alone (ReadHole).
  const uint64_t off = uint64_t{psn_span(w->first_psn, psn)} * ctx.mtu;
  const uint32_t want = static_cast<uint32_t>(std::min<uint64_t>(ctx.mtu, w->length - off));
  const bool is_last = pkt.info->flags & wire::kLast;
  const bool shape_ok =
      is_last == (psn == w->last_psn()) || (is_last && hole_open_ && psn + 1 == hole_to_);
  if (pkt.payload.size() != want || !shape_ok) {
    ++ctx.counters.dropped_pkts;  // malformed: the timer resends what it should have carried
    return out;
  }
  out = place_response(w->first_psn, psn, off, pkt.payload.data(), want, now, ctx, sq);
  if (rd_marks_ && !out.fatal) {
    // Step over the responses placed ahead that now follow in order; a hole after them is
    // asked for at once.
    Psn next = unacked_;
    while (placed(next)) ++next;
    if (advance(next, now, ctx, sq)) out.acked = AckedThrough{unacked_};
    // Responses placed ahead remain: if one is in the READ now awaited, what lies before it
    // is a hole (the responder sends in order), asked for at once.
    const Psn lim = ack_limit(sq);
    const SendEntry* r = rd_marks_ && lim < sent_end_ ? find(sq, lim) : nullptr;
    if (r != nullptr && r->wqe.opcode == IBV_WR_RDMA_READ) {
      for (Psn p = lim + 1; p < r->end_psn() && psn_span(unacked_, p) < kRdBits; ++p) {
        if (placed(p)) {
          ask_hole(lim, now, ctx, sq, out);
          break;
        }
      }
    }
  }
  return out;
}

void Completer::set_placed(Psn p, bool on) {
  const uint32_t i = p.value() % kRdBits;
  const uint64_t bit = uint64_t{1} << (i % 64);
  if (bool(rd_placed_[i / 64] & bit) == on) return;
  rd_placed_[i / 64] ^= bit;
  rd_count_ = on ? rd_count_ + 1 : rd_count_ - 1;
  rd_marks_ = rd_count_ != 0;
}

void Completer::place_ahead(const wire::Packet& pkt, SendEntry& w, Psn limit, Time now,
                            const QpContext& ctx, SendQueue& sq, CompleterOutcome& out) {
  const Psn psn(pkt.bth.psn);
  if (!placed(psn)) {
    const uint64_t off = uint64_t{psn_span(w.first_psn, psn)} * ctx.mtu;
    const uint32_t want = static_cast<uint32_t>(std::min<uint64_t>(ctx.mtu, w.length - off));
    const bool last = psn == w.last_psn();
    if (pkt.payload.size() != want || last != bool(pkt.info->flags & wire::kLast)) {
      ++ctx.counters.dropped_pkts;
      return;
    }
    // A bad SGE is not failed here, ahead of WQEs that may still complete: the packet is left
    // unplaced and fails the WQE when it is taken in order.
    if (scatter(ctx.mem, ctx.init.pd, w.wqe.sge.data(), w.wqe.num_sge, off, pkt.payload.data(),
                want) != MemStatus::kOk)
      return;
    set_placed(psn, true);
    ++ctx.counters.sr_read_placed;
  }
  // Like a READ response (9.7.5.1.1), an early one says every request before its READ arrived;
  // the responses from `limit` up to it (or to its READ's first PSN) are what is missing.
  ask_hole(limit, now, ctx, sq, out);
}

void Completer::ask_hole(Psn from, Time now, const QpContext& ctx, SendQueue& sq,
                         CompleterOutcome& out) {
  const SendEntry* w = find(sq, from);
  if (w == nullptr || w->wqe.opcode != IBV_WR_RDMA_READ) {
    implicit_nak(from, now, ctx, out);
    return;
  }
  // Asked already: once per hole, and not again while the responses to it are coming.
  if ((hole_asked_ && hole_from_ == from) || (hole_open_ && from >= hole_from_ && from < hole_to_))
    return;
  Psn to = from + 1;
  while (to < w->end_psn() && !placed(to)) ++to;
  hole_asked_ = hole_open_ = true;
  hole_from_ = from;
  hole_to_ = to;
  ++ctx.counters.implied_nak_seq_err;
  out.read_hole = ReadHole{from, to};
  rtt_timing_ = false;  // Karn: the timed PSN may be answered by the resend
  arm_probe(now, ctx);  // the probe watches the resend; a lost one falls to it or the timer
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
  // The original remote value, in host order, goes to the 8-byte SGE (ibv_post_send(3)).
  const uint64_t orig = pkt.atomic_ack;
  return place_response(w->first_psn, psn, 0, reinterpret_cast<const uint8_t*>(&orig), sizeof orig,
                        now, ctx, sq);
}

CompleterOutcome Completer::place_response(Psn first_psn, Psn psn, uint64_t off,
                                           const uint8_t* data, uint32_t len, Time now,
                                           const QpContext& ctx, SendQueue& sq) {
  CompleterOutcome out;
  // A response implicitly acknowledges every request before its READ/ATOMIC (9.7.5.1.1).
  bool progress = advance(first_psn, now, ctx, sq);
  SendEntry* w = find(sq, psn);  // advance() may have popped entries before it
  if (len != 0 && scatter(ctx.mem, ctx.init.pd, w->wqe.sge.data(), w->wqe.num_sge, off, data,
                          len) != MemStatus::kOk) {
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
      // The responder is past a READ/ATOMIC whose data we lack: its responses were lost. Under
      // selective repeat a READ's are asked for alone: the requests after it arrived (the ACK
      // says so) and need no resend.
      if (advance(limit, now, ctx, sq)) out.acked = AckedThrough{unacked_};
      if (ctx.sr()) {
        ask_hole(limit, now, ctx, sq, out);
      } else {
        implicit_nak(limit, now, ctx, out);
      }
      return out;
    }
    if (advance(psn + 1, now, ctx, sq)) out.acked = AckedThrough{unacked_};
    return out;
  }

  // Selective repeat: a sequence NAK that SACKs a PSN (its MSN field after its PSN). One that
  // SACKs nothing says the responder dropped a request it could not place ahead (a SEND, a READ
  // or ATOMIC, a WRITE with immediate): everything after the hole that no SACK covers must be
  // resent, which is go-back-N's rewind (below); the requester skips the SACKed PSNs.
  if (ctx.sr() && type == AethType::kNak &&
      wire::aeth_value(syn) == uint8_t(NakCode::kPsnSequenceError) && Psn(pkt.aeth.msn) > psn) {
    return on_sack(pkt, now, ctx, sq);
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
        ++ctx.counters.retry_rnr_exceeded_err;
        return fail_front(Error::kRnrRetryExceeded, ctx, sq);
      }
      --rnr_left_;
    }
    // Wait the responder's RNR timer, then resend from the refused PSN; the ACK timer restarts
    // when the retransmission goes out (on_sent).
    out.retransmit = RetransmitFrom{psn, now + rnr_timer_ns(wire::aeth_value(syn)),
                                    RetransmitFrom::Cause::kRnrNak};
    deadline_ = probe_at_ = kNever;
    rtt_timing_ = false;
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
      rtt_timing_ = false;
      arm_probe(now, ctx);
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

CompleterOutcome Completer::on_sack(const wire::Packet& pkt, Time now, const QpContext& ctx,
                                    SendQueue& sq) {
  // Selective repeat (docs/selective-repeat.md): the sequence NAK names the responder's expected
  // PSN, the first one it lacks, and its AETH MSN field the PSN of the packet that drew it, which
  // the responder placed (unless it is not after the NAK's PSN: then nothing is SACKed). It
  // acknowledges what precedes the hole, as any NAK does. It spends no retry and moves no timer
  // but by that progress: one comes per packet placed behind a hole, so they say the path works,
  // not that the hole was filled. A resend that is lost again falls to the probe or ACK timer.
  CompleterOutcome out;
  const Psn psn(pkt.bth.psn);
  if (psn >= sent_end_) {
    ++ctx.counters.dropped_pkts;  // ghost
    return out;
  }
  ++ctx.counters.sr_sack_rcvd;
  Sacked s{psn, std::nullopt};
  const Psn q(pkt.aeth.msn);
  if (q < sent_end_) s.sacked = q;
  if (psn > unacked_) {
    const Psn limit = ack_limit(sq);
    if (advance(std::min(psn, limit), now, ctx, sq)) out.acked = AckedThrough{unacked_};
    // The responder is past a READ/ATOMIC whose responses we lack: they were lost. A READ's
    // are asked for alone (ReadHole), an ATOMIC's by the implicit NAK.
    if (psn > limit) ask_hole(limit, now, ctx, sq, out);
  }
  out.sack = s;
  return out;
}

CompleterOutcome Completer::on_timer(Time now, const QpContext& ctx, SendQueue& sq) {
  CompleterOutcome out;
  if (deadline_ > now) return probe_at_ <= now ? on_probe(now, ctx) : out;
  if (!outstanding()) {
    deadline_ = probe_at_ = kNever;
    return out;
  }
  // Local ACK timeout (IBTA 9.7.6.1.3): resend everything from the oldest unacknowledged PSN
  // (inside a READ: from its first missing response packet).
  ++ctx.counters.local_ack_timeout_err;
  resend_asked_ = hole_asked_ = hole_open_ = false;
  if (retry_left_ == 0) {
    ++ctx.counters.retry_exceeded_err;
    return fail_front(Error::kRetryExceeded, ctx, sq);
  }
  --retry_left_;
  ++ctx.counters.completer_retry_err;
  out.retransmit = RetransmitFrom{unacked_, 0, RetransmitFrom::Cause::kTimeout};
  arm(now, ctx);
  rtt_timing_ = false;
  arm_probe(now, ctx);
  return out;
}

CompleterOutcome Completer::on_probe(Time now, const QpContext& ctx) {
  CompleterOutcome out;
  if (!outstanding()) {
    probe_at_ = kNever;
    return out;
  }
  // No ACK progress for a PTO: go back to the oldest unacknowledged PSN (the requester sets
  // AckReq on it), as the ACK timer would, but leave that timer and the retry budget alone.
  ++ctx.counters.early_retransmits;
  // Like the timer: a later implicit NAK or hole for the same READ may ask again.
  resend_asked_ = hole_asked_ = hole_open_ = false;
  rtt_timing_ = false;
  if (probe_backoff_ < kMaxProbeBackoff) ++probe_backoff_;
  arm_probe(now, ctx);
  out.retransmit = RetransmitFrom{unacked_, 0, RetransmitFrom::Cause::kProbe};
  return out;
}

}  // namespace uroce::transport
