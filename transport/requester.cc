// Requester: WQE → request packets. See requester.h.
#include "transport/requester.h"

#include <algorithm>
#include <cstring>

#include "transport/dma.h"

namespace uroce::transport {

using wire::Opcode;

void SendWindowCtl::on_acked(uint32_t pkts) {
  if (limit_ < ssthresh_) {
    // Slow start (after a timeout): +1 per PSN acknowledged doubles the window per round trip.
    limit_ = std::min(ssthresh_, limit_ + pkts);
    return;
  }
  // Congestion avoidance: +1 per limit_ PSNs acknowledged (one per round trip when the window
  // is full). The credit is capped so one huge cumulative ACK cannot open the window at once.
  credit_ = std::min(credit_ + pkts, kSendWindowPkts * 2);
  while (credit_ >= limit_ && limit_ < kSendWindowPkts) {
    credit_ -= limit_;
    ++limit_;
  }
  if (limit_ == kSendWindowPkts) credit_ = 0;
}

bool SendWindowCtl::on_loss(Loss why) {
  const uint32_t before = limit_;
  const uint32_t half = std::max(kMinSendWindowPkts, limit_ / 2);
  ssthresh_ = half;
  limit_ = why == Loss::kTimeout ? kMinSendWindowPkts : half;
  credit_ = 0;
  return limit_ < before;
}

void Requester::reset(Psn sq_psn) {
  *this = Requester{};
  cursor_psn_ = next_new_psn_ = sent_end_ = unacked_ = sq_psn;
  sr_high_ = sr_next_ = sr_episode_end_ = sr_resend_mark_ = sq_psn;
}

void Requester::clear_sacked(Psn from, Psn to) {
  if (!sr_marks_) return;  // every ACK without selective repeat, or without a SACK in flight
  if (psn_span(from, to) >= kSrSackBits || to >= sr_high_) {
    // Nothing SACKed is left beyond `to`: every mark goes.
    sr_sacked_.fill(0);
    sr_marks_ = false;
    return;
  }
  for (Psn p = from; p < to; ++p) {
    const uint32_t i = p.value() % kSrSackBits;
    sr_sacked_[i / 64] &= ~(uint64_t{1} << (i % 64));
  }
}

void Requester::on_sack(const Sacked& ev, Time now) {
  bool fresh = false;  // a PSN not SACKed before
  if (ev.sacked && *ev.sacked >= unacked_ && psn_span(unacked_, *ev.sacked) < kSrSackBits &&
      *ev.sacked < sent_end_) {
    fresh = !sacked(*ev.sacked);
    const uint32_t i = ev.sacked->value() % kSrSackBits;
    sr_sacked_[i / 64] |= uint64_t{1} << (i % 64);
    sr_marks_ = true;
    if (*ev.sacked >= sr_high_) {
      // PSNs skipped between the old sr_high_ and this one are holes revealed now (the reorder
      // window runs from here).
      const bool reveals = *ev.sacked > sr_high_;
      sr_high_ = *ev.sacked + 1;
      if (!reveals) {
      } else if (reveal_count_ == kReveals) {
        reveals_[(reveal_head_ + kReveals - 1) % kReveals] = Reveal{sr_high_, now};
      } else {
        reveals_[(reveal_head_ + reveal_count_) % kReveals] = Reveal{sr_high_, now};
        ++reveal_count_;
      }
    }
    if (paths_.on()) paths_.delivered(*ev.sacked);
  }
  if (paths_.on()) {
    // Multipath: which holes are lost is PathSet's per-path rule, not the PSN order (a SACK of a
    // later PSN says nothing of a packet on another path); spray_resend() looks at them all.
    sr_rescan_ = true;
    if (!sr_episode_) {
      sr_episode_ = true;
      sr_episode_end_ = sent_end_;
      ack_req_next_ = true;
    }
    return;
  }
  // A hole resent and lost again: the responder still lacks a hole already resent, and a SACK
  // names a packet sent after that resend: one first sent after it (at or after the mark), or a
  // later hole of the same pass (holes go in PSN order). RACK's reasoning (RFC 8985): a later
  // transmission arrived, an earlier one did not. The holes from there go again, once per resend
  // pass, instead of waiting for the timer. Not while a rewind is under way: its cursor is
  // resending them. A late original taken for a resend costs one duplicate packet.
  const bool later = ev.sacked && (*ev.sacked >= sr_resend_mark_ ||
                                   (fresh && *ev.sacked > ev.cumulative && *ev.sacked < sr_next_));
  if (later && sr_resent_ && ev.cumulative < sr_next_ && ev.cumulative >= unacked_ &&
      cursor_psn_ >= sent_end_) {
    sr_next_ = ev.cumulative;
    sr_resent_ = false;
  }
  // A SACK shows a hole at ev.cumulative (the responder's expected PSN): an episode begins. It
  // does not cut the window. The window shrinks on a loss under go-back-N because every packet in
  // flight behind the loss is resent (SendWindowCtl); with selective repeat a loss costs only
  // itself, and IRN (Mittal et al., SIGCOMM'18, §3.1-3.2) keeps a fixed cap near the BDP on what
  // is in flight (kSendWindowPkts here) and leaves congestion to the rate control (DCQCN), not
  // to losses. Measured (bench/sr_loss.sh, 64 KiB ib_write_bw, injected loss, idle): at 1 %
  // 1046 MB/s halving per episode, 1067-1113 cutting an eighth, 2028-2100 not cutting (lossless
  // 2398); at 5 % 349 against 877. A timeout still collapses it (on_retransmit): a path silent
  // for the whole ACK timeout is trouble no rate control has seen.
  if (!sr_episode_) {
    sr_episode_ = true;
    sr_episode_end_ = sent_end_;
    ack_req_next_ = true;  // the first resend asks, so its ACK says where the responder stands
  }
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
  if (ev.next_unacked > unacked_) {
    window_.on_acked(psn_span(unacked_, ev.next_unacked));
    if (paths_.on()) {
      // Everything acknowledged arrived: each one's path has delivered up to it. (Bounded: an
      // ACK may cover a long READ, whose PSNs PathSet records alike.)
      const uint32_t n = std::min<uint32_t>(psn_span(unacked_, ev.next_unacked), 1024);
      for (uint32_t k = 0; k < n; ++k) paths_.delivered(ev.next_unacked - (n - k));
      if (sr_marks_) sr_rescan_ = true;
    }
    clear_sacked(unacked_, ev.next_unacked);
    unacked_ = ev.next_unacked;
    sr_probed_ = false;
    nak_since_progress_ = false;
    // Selective repeat's marks never fall behind unacked_: a PSN compares correctly only within
    // half the PSN space of another, and these would otherwise stay put for ever on a QP
    // without it (or without losses), until they read as ahead again.
    if (sr_high_ < unacked_) sr_high_ = unacked_;
    if (sr_next_ < unacked_) sr_next_ = unacked_;
    if (sr_resend_mark_ < unacked_) sr_resend_mark_ = unacked_;
    if (sr_episode_ && unacked_ >= sr_episode_end_) sr_episode_ = false;
  }
  // A retransmission may still be walking over PSNs the responder has meanwhile acknowledged
  // (it had them before the rewind); skip them.
  if (cursor_psn_ < unacked_ || cursor_seq_ < sq.begin()) seek(std::max(cursor_psn_, unacked_), sq);
}

SendQueue::Seq Requester::find(const SendQueue& sq, Psn psn) const {
  for (SendQueue::Seq s = sq.begin(); s != sq.end(); ++s) {
    const SendEntry& e = sq.at(s);
    if (e.state != WqeState::kInFlight) break;
    if (psn >= e.first_psn && psn < e.end_psn()) return s;
  }
  return sq.end();
}

void Requester::on_retransmit(const RetransmitFrom& ev, const SendQueue& sq, bool sr) {
  using Cause = RetransmitFrom::Cause;
  // The one-packet probe only once per stall: if its answer is lost too, or the responder has no
  // answer for it (it NAKs a gap of requests it cannot place ahead only once, like go-back-N),
  // the next timeout rewinds.
  if (sr && (ev.cause == Cause::kTimeout || ev.cause == Cause::kProbe) && unacked_ < sent_end_ &&
      !sr_probed_) {
    Psn last = sent_end_ - 1;
    while (last > unacked_ && sacked(last)) last = last - 1;
    const SendQueue::Seq s = find(sq, last);
    // Only a packet of a SEND or WRITE: a READ or ATOMIC is resent by the rewind below, which
    // the completer's READ bookkeeping expects. And only one the responder can answer: a split
    // WRITE packet it places ahead of any gap, or — while it has NAKed no gap since the last
    // progress — any packet (if everything before arrived it is the expected one; if not, it
    // opens a gap, and its NAK rewinds). After such a NAK the responder drops what it cannot
    // place without a word (one NAK per gap, IBTA 9.7.5.2.2): when the rewind's first packet
    // was lost too, a probe it cannot place would only be dropped, and the stall would last to
    // the next timeout (seen in the simulator at 1 % loss: unsplit WRITEs of a fresh
    // connection stalled 15 ms). Then the probe is the rewind itself.
    const bool answerable =
        s != sq.end() && (!nak_since_progress_ || (sq.at(s).sr_split && !inv_pending_));
    if (last > unacked_ && s != sq.end() && !is_read_or_atomic(sq.at(s).wqe.opcode) && answerable) {
      sr_probe_ = last;
      sr_probed_ = true;
      sr_next_ = unacked_;  // the holes may go again: their resends may be what was lost
      if (paths_.on()) {
        paths_.expire_all();  // a stall: nothing sent so far is still merely late
        sr_rescan_ = true;
      }
      ack_req_next_ = true;
      // A lost tail under selective repeat costs only itself, as a hole does (on_sack): only a
      // timeout shrinks the window.
      if (ev.cause == Cause::kTimeout && window_.on_loss(SendWindowCtl::Loss::kTimeout))
        ++cuts_unreported_;
      return;
    }
  }
  Psn from = std::max(ev.psn, unacked_);
  if (from > sent_end_) from = sent_end_;  // never "resend" what was never sent
  seek(from, sq);
  // The rewound cursor resends every PSN from `from` on that no SACK covers (pump()); the
  // selective step must not send them a second time behind it. Below `from` there is nothing for
  // it either: a timeout or probe rewinds to unacked_, and an RNR or implicit NAK acknowledges
  // what precedes the PSN it names.
  sr_next_ = std::max(sr_next_, sent_end_);
  not_before_ = ev.not_before;
  since_ack_req_ = 0;
  ack_req_next_ = true;
  if (ev.cause == Cause::kSequenceNak) nak_since_progress_ = true;
  // Loss signals shrink the window before the resend starts, so the resend itself is already
  // limited. An RNR NAK lost nothing: the window stays.
  if (ev.cause == Cause::kSequenceNak || ev.cause == Cause::kImplicitNak) {
    if (window_.on_loss(SendWindowCtl::Loss::kSequenceNak)) ++cuts_unreported_;
  } else if (ev.cause == Cause::kTimeout) {
    if (window_.on_loss(SendWindowCtl::Loss::kTimeout)) ++cuts_unreported_;
  } else if (ev.cause == Cause::kProbe) {
    // A probe timeout is a loss signal of the same weight as a sequence NAK: halve, not
    // collapse. It says the tail of the window (or its NAK) went missing while the path kept
    // working up to the last ACK a few round trips ago, which is a sequence NAK's evidence, not
    // a timeout's (a path silent for the whole ACK timeout). A spurious probe (ACKs merely
    // delayed past the PTO) then costs half the window, not the slow start from the floor.
    if (window_.on_loss(SendWindowCtl::Loss::kSequenceNak)) ++cuts_unreported_;
  }
}

uint32_t Requester::limit(const QpContext& ctx) const {
  const uint64_t cap = ctx.init.cc.max_inflight;
  if (cap == 0) return window_.limit();
  // In packets of the path MTU, rounded up, at least one.
  const uint64_t pkts = std::max<uint64_t>(1, (cap + ctx.mtu - 1) / ctx.mtu);
  return uint32_t(std::min<uint64_t>(window_.limit(), pkts));
}

uint32_t Requester::rd_atomic_in_flight(const SendQueue& sq) const {
  uint32_t n = 0;
  for (SendQueue::Seq s = sq.begin(); s < cursor_seq_ && s < sq.end(); ++s) {
    const SendEntry& e = sq.at(s);
    if (e.state == WqeState::kInFlight && uses_resp_resource(e.wqe.opcode)) ++n;
  }
  return n;
}

Requester::State Requester::state(Time now, const QpContext& ctx, const SendQueue& sq,
                                  bool may_start) const {
  if (not_before_ != 0 && now < not_before_) return State::kRnrWait;
  if (cursor_seq_ >= sq.end()) return State::kIdle;
  const SendEntry& e = sq.at(cursor_seq_);
  if (e.state == WqeState::kLocalError) return State::kBlocked;
  if (e.state == WqeState::kQueued && !may_start) return State::kBlocked;
  if (e.state == WqeState::kQueued) {
    const bool rd_atomic = uses_resp_resource(e.wqe.opcode);
    const bool fenced = e.wqe.send_flags & IBV_SEND_FENCE;
    if (rd_atomic || fenced) {
      // IBTA 10.8.3.3 / ibv_post_send(3): a fenced WQE waits for every earlier READ/ATOMIC;
      // at most max_rd_atomic READ/ATOMICs (and ATOMIC WRITEs: wr_opcode.h) are outstanding (a
      // limit of 0 would never send one: it is taken as 1, and the responder's max_dest_rd_atomic
      // still applies).
      const uint32_t n = rd_atomic_in_flight(sq);
      const uint32_t limit = std::max<uint32_t>(1, ctx.attr.max_rd_atomic);
      if ((fenced && n > 0) || (rd_atomic && n >= limit)) return State::kRdAtomicWait;
    }
  }
  // A READ counts every PSN of its response stream (pump() moves the cursor past them at once),
  // so a READ longer than the window may overshoot it; nothing new starts until it is back under.
  if (psn_span(unacked_, cursor_psn_) >= limit(ctx)) return State::kWindowFull;
  // Multipath: a new packet that keeps slot 0 (a SEND, a READ or ATOMIC request, a WRITE with
  // immediate) would overtake sprayed WRITE packets still on slower paths, and the responder
  // takes such a packet only in PSN order: it would drop it and NAK the gap, and the requester
  // would rewind over packets that were merely late. So it waits until every sprayed packet
  // before it is acknowledged — about a round trip, paid only where spraying turns to something
  // else (a WRITE stream's closing SEND, say). Placing SENDs ahead (a per-packet offset into the
  // receive WQE, as IRN and UET carry) would remove the wait.
  if (paths_.on() && cursor_psn_ >= sent_end_ && unacked_ < spray_end_ && !sprays(ctx, e))
    return State::kSprayWait;
  return State::kSending;
}

RequesterOutcome Requester::pump(Time now, const QpContext& ctx, SendQueue& sq, PacketSink& tx,
                                 bool may_start, cc::Pacer& pacer) {
  RequesterOutcome out;
  ctx.counters.send_window_cuts += cuts_unreported_;
  cuts_unreported_ = 0;
  if (not_before_ != 0 && now >= not_before_) not_before_ = 0;
  if (sr_waiting_ && now >= sr_wait_until_) sr_waiting_ = false;  // the reorder window is over
  bool sent = false, timed = false;
  Psn timed_psn;
  if (ctx.init.paths > 1 && !paths_.on() && ctx.sr() && ctx.service == wire::Service::kRc) {
    // Selective repeat is agreed (the peer's first response said so): spraying may start.
    paths_.reset(ctx.init.qpn, ctx.src_port, ctx.init.paths);
    spray_end_ = sent_end_;
  }
  if (ctx.sr() && not_before_ == 0 && selective_resend_pending()) {
    if (rd_hole_) {
      send_read_hole(now, ctx, sq, tx, pacer, out);
      if (rd_hole_) return out;  // the port or the pacer said no: the hole goes first, later
    }
    if (paths_.on()) {
      if (holes_pending() || sr_probe_) spray_resend(now, ctx, sq, tx, pacer, out);
    } else if (holes_pending() || sr_probe_) {
      selective_resend(now, ctx, sq, tx, pacer, out);
    }
    // Holes first: new packets wait while one is still to go (the port or the pacer said no).
    if (selective_resend_pending() || out.local_error) return out;
  }
  while (state(now, ctx, sq, may_start) == State::kSending) {
    SendEntry& e = sq.at(cursor_seq_);
    const bool rd_atomic = is_read_or_atomic(e.wqe.opcode);
    if (e.state == WqeState::kQueued && is_local_op(e.wqe.opcode)) {
      if (!execute_local(ctx, e)) {
        out.local_error = true;
        break;
      }
      out.local_done = true;
      ++cursor_seq_;
      continue;
    }
    if (e.state == WqeState::kQueued) {
      // First packet of a WQE: check every SGE now so a bad lkey fails before anything is on the
      // wire (the WQE completes with IBV_WC_LOC_PROT_ERR, as on hardware). READ and ATOMIC
      // responses are written into the SGEs, which must allow local write.
      const int access = rd_atomic ? IBV_ACCESS_LOCAL_WRITE : 0;
      if (!(e.wqe.send_flags & IBV_SEND_INLINE) &&
          check_sges(ctx.mem, ctx.init.pd, e.wqe.sge.data(), e.wqe.num_sge, access) !=
              MemStatus::kOk) {
        e.state = WqeState::kLocalError;
        e.error = IBV_WC_LOC_PROT_ERR;
        out.local_error = true;
        break;
      }
      e.first_psn = next_new_psn_;
      e.npkts = std::max<uint32_t>(1, (e.length + ctx.mtu - 1) / ctx.mtu);
      e.state = WqeState::kInFlight;
      e.sr_split = ctx.sr() && ctx.service == wire::Service::kRc &&
                   e.wqe.opcode == IBV_WR_RDMA_WRITE && e.npkts > 1;
      next_new_psn_ += e.npkts;
      if (e.wqe.opcode == IBV_WR_SEND_WITH_INV) {
        inv_pending_ = true;
        inv_end_ = e.end_psn();
      }
    }
    // Selective repeat: a resend skips what a SACK says the responder has (never a READ or an
    // ATOMIC: the responder places only WRITE packets ahead) — but not its first packet, the one
    // that asks for an ACK: when everything a rewind would resend is SACKed, what the responder
    // lacks is an ACK of what it has (its cumulative ACK came while a READ/ATOMIC response was
    // missing, say), and only a request can draw one.
    if (cursor_psn_ < sent_end_ && !rd_atomic && !ack_req_next_ && sacked(cursor_psn_)) {
      ++cursor_psn_;
      if (cursor_psn_ == e.end_psn()) ++cursor_seq_;
      continue;
    }
    bool ack_req = false;
    const Tx r = transmit(now, ctx, e, cursor_psn_, tx, pacer, out, ack_req);
    if (r != Tx::kSent) break;
    if (cursor_psn_ < sent_end_) {
      ++ctx.counters.retransmitted_pkts;
    } else if (ack_req) {
      timed = true;  // first transmission: its ACK times the round trip (Karn's rule)
      timed_psn = cursor_psn_;
    }
    // A READ request covers every PSN of its response stream; an ATOMIC has one PSN.
    cursor_psn_ = rd_atomic ? e.end_psn() : cursor_psn_ + 1;
    if (cursor_psn_ > sent_end_) sent_end_ = cursor_psn_;
    sent = true;
    if (cursor_psn_ == e.end_psn()) ++cursor_seq_;
  }
  if (sent) out.sent = PacketsSent{sent_end_, timed, timed_psn};
  return out;
}

inline Requester::Tx Requester::transmit(Time now, const QpContext& ctx, SendEntry& e, Psn psn,
                                         PacketSink& tx, cc::Pacer& pacer, RequesterOutcome& out,
                                         bool& ack_req) {
  // Resolve the payload before taking a transmit buffer (which cannot be given back): memory
  // that went away while the WQE was in flight (MR deregistered) fails it here.
  const Segment seg = segment(ctx, e, psn);
  MemPieces pieces;
  uint32_t npieces = 0;
  if (!(e.wqe.send_flags & IBV_SEND_INLINE) && seg.len != 0 &&
      resolve_read(ctx.mem, ctx.init.pd, e.wqe.sge.data(), e.wqe.num_sge, seg.offset, seg.len,
                   pieces, &npieces) != MemStatus::kOk) {
    e.state = WqeState::kLocalError;
    e.error = IBV_WC_LOC_PROT_ERR;
    out.local_error = true;
    return Tx::kLocalError;
  }
  // Congestion control: the packet leaves at the QP's rate (one branch while unlimited).
  if (!pacer.may_send(now)) {
    out.paced = true;
    return Tx::kPaced;
  }
  TxBuf* buf = tx.tx_alloc();
  if (buf == nullptr) {
    out.blocked_by_port = true;
    return Tx::kPortFull;
  }
  ack_req = write_packet(ctx, e, psn, seg, pieces, npieces, tx.tx_gather_min(), buf);
  const uint32_t ib_len = buf->ib_len();
  const uint64_t frame = cc::frame_bytes(ib_len);
  tx.tx_commit(buf);
  pacer.on_sent(now, frame);
  out.frame_bytes += frame;
  count_sent(ctx.counters, ib_len);
  return Tx::kSent;
}

Time Requester::revealed_at(Psn p) {
  // Entries at or below p are of holes the scan has passed: dropped.
  while (reveal_count_ != 0 && reveals_[reveal_head_].high <= p) {
    reveal_head_ = (reveal_head_ + 1) % kReveals;
    --reveal_count_;
  }
  return reveal_count_ != 0 ? reveals_[reveal_head_].at : 0;
}

void Requester::selective_resend(Time now, const QpContext& ctx, SendQueue& sq, PacketSink& tx,
                                 cc::Pacer& pacer, RequesterOutcome& out) {
  if (sr_next_ < unacked_) sr_next_ = unacked_;
  if (sr_waiting_ && now >= sr_wait_until_) sr_waiting_ = false;
  SendQueue::Seq s = sq.begin();
  while (holes_pending()) {
    const Psn p = sr_next_;
    if (sacked(p)) {
      ++sr_next_;
      continue;
    }
    // The reorder window: a hole shown by a SACK less than reorder_window() ago may only have
    // been overtaken (RACK, RFC 8985 6.2); it waits, and so does every hole after it (shown no
    // earlier). A resend pass after a loss of a resend (on_sack) finds the holes long shown.
    const Time due = revealed_at(p) + reorder_window();
    if (reorder_window() != 0 && now < due) {
      sr_waiting_ = true;
      sr_wait_until_ = due;
      break;
    }
    // The WQE holding p: in flight, PSN order, so the scan resumes where the last one ended.
    while (s < sq.end() && (sq.at(s).state != WqeState::kInFlight || sq.at(s).end_psn() <= p)) {
      if (sq.at(s).state != WqeState::kInFlight) {
        s = sq.end();
        break;
      }
      ++s;
    }
    if (s >= sq.end() || p < sq.at(s).first_psn) {
      ++sr_next_;  // no packet of ours holds it (a local operation's place): nothing to resend
      continue;
    }
    SendEntry& e = sq.at(s);
    bool ack_req = false;
    if (transmit(now, ctx, e, p, tx, pacer, out, ack_req) != Tx::kSent) return;
    ++ctx.counters.retransmitted_pkts;
    ++ctx.counters.sr_selective_resends;
    sr_resent_ = true;
    sr_resend_mark_ = sent_end_;
    // A READ resent from p asks for the rest of its responses: its whole range is covered.
    sr_next_ = is_read_or_atomic(e.wqe.opcode) ? e.end_psn() : p + 1;
    out.sent = PacketsSent{sent_end_, false, Psn{}};
  }
  if (sr_probe_) {
    const Psn p = *sr_probe_;
    const SendQueue::Seq ps = find(sq, p);
    if (p < unacked_ || ps == sq.end() || sacked(p)) {
      sr_probe_.reset();  // acknowledged or SACKed meanwhile
      return;
    }
    ack_req_next_ = true;
    bool ack_req = false;
    if (transmit(now, ctx, sq.at(ps), p, tx, pacer, out, ack_req) != Tx::kSent) return;
    sr_probe_.reset();
    ++ctx.counters.retransmitted_pkts;
    ++ctx.counters.sr_selective_resends;
    out.sent = PacketsSent{sent_end_, false, Psn{}};
  }
}

void Requester::send_read_hole(Time now, const QpContext& ctx, SendQueue& sq, PacketSink& tx,
                               cc::Pacer& pacer, RequesterOutcome& out) {
  const ReadHole h = *rd_hole_;
  const SendQueue::Seq s = find(sq, h.from);
  // Acknowledged meanwhile, or not a READ (the completer asks only for READs): nothing to ask.
  if (h.from < unacked_ || s == sq.end() || sq.at(s).wqe.opcode != IBV_WR_RDMA_READ ||
      h.to <= h.from) {
    rd_hole_.reset();
    return;
  }
  rd_hole_end_ = std::min(h.to, sq.at(s).end_psn());
  bool ack_req = false;
  const Tx r = transmit(now, ctx, sq.at(s), h.from, tx, pacer, out, ack_req);
  rd_hole_end_.reset();
  if (r != Tx::kSent) {
    if (r == Tx::kLocalError) rd_hole_.reset();
    return;
  }
  rd_hole_.reset();
  ++ctx.counters.retransmitted_pkts;
  ++ctx.counters.sr_selective_resends;
  out.sent = PacketsSent{sent_end_, false, Psn{}};
}

void Requester::spray_resend(Time now, const QpContext& ctx, SendQueue& sq, PacketSink& tx,
                             cc::Pacer& pacer, RequesterOutcome& out) {
  // Every hole below the highest SACKed PSN, in PSN order; PathSet says which are lost (a packet
  // sent after it on its path has arrived) and which may still be on their way. A resend gets a
  // new transmission number, so it is not taken for lost again until its own path shows it.
  const Psn end = std::min(sr_high_, cursor_psn_);
  SendQueue::Seq s = sq.begin();
  for (Psn p = unacked_; p < end; ++p) {
    if (sacked(p) || !paths_.lost(p)) continue;
    while (s < sq.end() && sq.at(s).state == WqeState::kInFlight && sq.at(s).end_psn() <= p) ++s;
    if (s >= sq.end() || sq.at(s).state != WqeState::kInFlight || p < sq.at(s).first_psn)
      continue;  // no packet of ours holds it (a local operation's place)
    SendEntry& e = sq.at(s);
    // The route that lost it is replaced (once per route), so what follows on that slot hashes
    // elsewhere: a lossy or overloaded path is used less.
    if (paths_.rotate(p)) ++ctx.counters.mp_path_rotations;
    bool ack_req = false;
    if (transmit(now, ctx, e, p, tx, pacer, out, ack_req) != Tx::kSent) return;  // rescan later
    ++ctx.counters.retransmitted_pkts;
    ++ctx.counters.sr_selective_resends;
    out.sent = PacketsSent{sent_end_, false, Psn{}};
    // A READ resent from p asks for the rest of its responses: its whole range is covered.
    if (is_read_or_atomic(e.wqe.opcode)) p = e.end_psn() - 1;
  }
  sr_rescan_ = false;
  if (sr_probe_) selective_resend(now, ctx, sq, tx, pacer, out);  // the probe: as without paths
}

bool Requester::execute_local(const QpContext& ctx, SendEntry& e) {
  // Binding and invalidation act when the cursor reaches the WQE, never again on a resend
  // (the entry leaves kQueued). Failures complete the WQE in error and the QP enters ERR, with
  // the statuses rxe uses: MW_BIND_ERR for a bind (IBTA 11.6.2 "memory window bind error"),
  // LOC_QP_OP_ERR for a LOCAL_INV of a key that cannot be invalidated.
  MemStatus st;
  if (e.wqe.opcode == IBV_WR_BIND_MW) {
    st = ctx.mem.bind_mw(e.wqe.bind, ctx.init.pd);
    e.error = IBV_WC_MW_BIND_ERR;
  } else {
    st = ctx.mem.invalidate(e.wqe.imm_be, ctx.init.pd);
    e.error = IBV_WC_LOC_QP_OP_ERR;
  }
  if (st != MemStatus::kOk) {
    e.state = WqeState::kLocalError;
    return false;
  }
  e.error = IBV_WC_SUCCESS;
  e.first_psn = next_new_psn_;
  e.npkts = 0;
  e.state = WqeState::kInFlight;
  return true;
}

Requester::Segment Requester::segment(const QpContext& ctx, const SendEntry& e, Psn psn) const {
  Segment seg;
  seg.index = psn_span(e.first_psn, psn);
  seg.offset = uint64_t{seg.index} * ctx.mtu;
  if (is_read_or_atomic(e.wqe.opcode)) return seg;  // no payload
  seg.len = static_cast<uint32_t>(std::min<uint64_t>(ctx.mtu, e.length - seg.offset));
  return seg;
}

bool Requester::write_packet(const QpContext& ctx, const SendEntry& e, Psn psn, const Segment& seg,
                             const MemPieces& pieces, uint32_t npieces, uint32_t gather_min,
                             TxBuf* buf) {
  const bool first = seg.index == 0, last = seg.index + 1 == e.npkts;
  const uint32_t len = seg.len;
  const WrOpcodeInfo& w = wr_opcode_info(e.wqe.opcode);
  const bool rd_atomic = w.flags & kWrRespResource;
  // A READ resent from mid-stream is not its first packet, but READ and the ATOMICs name their
  // one request opcode in every position.
  // Selective repeat: every packet of a multi-packet RDMA WRITE goes as an RDMA WRITE ONLY with a
  // RETH for its own bytes, so the responder can place it wherever it arrives in the PSN order
  // (docs/selective-repeat.md). A WRITE with immediate keeps FIRST/MIDDLE/LAST: its LAST consumes
  // a receive WQE and reports the whole length, so it is taken in order only.
  const bool sr_split = e.sr_split;
  const Opcode op = sr_split ? Opcode::kRcWriteOnly : wire_opcode(w, ctx.service, first, last);
  // May the responder place it ahead of a gap? Every RC RDMA WRITE ONLY may, unless a SEND with
  // invalidate before it is not yet acknowledged: in PSN order that invalidation comes first,
  // and a WRITE placed ahead would land with an R_Key it is about to invalidate.
  if (inv_pending_ && unacked_ >= inv_end_) inv_pending_ = false;
  const bool place = ctx.sr() && op == Opcode::kRcWriteOnly && !inv_pending_;
  const wire::OpcodeInfo& info = wire::opcode_info(op);

  ++since_ack_req_;
  // READ/ATOMIC (and ATOMIC WRITE) requests are always answered; AckReq on them costs nothing and
  // keeps the interval count simple. In a window smaller than two intervals, asking at half of it
  // keeps ACKs coming while the window is open, so it slides rather than stopping and waiting each
  // round trip, and a lost window-end AckReq still leaves the half-window one.
  const uint32_t limit = this->limit(ctx);
  const uint32_t interval = std::min(kAckReqIntervalPkts, std::max<uint32_t>(1, limit / 2));
  // The first packet of a go-back-N resend asks too. The responder dropped everything behind
  // the gap without a word and NAKs a gap only once (IBTA 9.7.5.2.2); if this packet arrives
  // after the rest of a small window (reordered), its ACK still tells where the responder
  // stands, the window slides by one, and the next packet reveals the new gap with a NAK rather
  // than leaving both sides silent until the ACK timer.
  //
  // The packet that fills the window asks as well, so that what is in flight gets acknowledged
  // before the requester has to stop — but only half an interval or more after the last ask.
  // Without that floor a window-limited stream asks on nearly every packet and the responder
  // ACKs each one: an ACK opens a slot or two, the packet that fills them asks, its ACK opens
  // one more, and so on (80 % of a 64 KiB ib_write_bw's packets asked over memif, and the
  // responder sent 0.8 ACKs per packet). The periodic asks keep the window moving either way.
  const bool fills_window = psn_span(unacked_, psn + 1) >= limit;
  const bool ack_req = last || rd_atomic || ack_req_next_ || since_ack_req_ >= interval ||
                       (fills_window && since_ack_req_ >= std::max<uint32_t>(1, interval / 2));
  ack_req_next_ = false;
  if (ack_req) since_ack_req_ = 0;

  wire::Packet p;
  p.bth.opcode = static_cast<uint8_t>(op);
  // SE only means something on the last packet of what completes a receive (IBTA 9.2.3).
  p.bth.se = last && (e.wqe.send_flags & IBV_SEND_SOLICITED) &&
             (info.flags & (wire::kSend | wire::kConsumesRecv));
  p.bth.migreq = true;  // no APM: always "migrated" (IBTA 9.2.3)
  p.bth.pad = wire::pad_for(len);
  p.bth.pkey = wire::kDefaultPkey;
  p.bth.dest_qp = ctx.attr.dest_qp_num;
  p.bth.ack_req = ack_req;
  p.bth.ext = uint8_t(ctx.bth_ext() | (place ? wire::kBthExtPlace : 0));
  p.bth.psn = psn.value();
  if (info.flags & wire::kHasImm) p.imm_be = e.wqe.imm_be;
  if (info.flags & wire::kHasXrceth) p.xrc_srqn = e.wqe.xrc_srqn;
  if (info.flags & wire::kHasIeth) p.ieth_rkey = e.wqe.imm_be;  // host order (qp.h)
  if (info.flags & wire::kHasReth) {
    // WRITE FIRST/ONLY: the whole message. READ: what is still missing from seg.offset on
    // (the whole READ unless the completer asked to resume mid-stream).
    p.reth.va = e.wqe.remote_addr + seg.offset;
    p.reth.rkey = e.wqe.rkey;
    p.reth.dma_len = sr_split ? len : static_cast<uint32_t>(e.length - seg.offset);
    // A READ hole (selective repeat): only the responses up to the next one placed.
    if (rd_atomic && rd_hole_end_)
      p.reth.dma_len = static_cast<uint32_t>(
          std::min<uint64_t>(p.reth.dma_len, uint64_t{psn_span(psn, *rd_hole_end_)} * ctx.mtu));
  }
  if (info.flags & wire::kHasAtomicEth) {
    p.atomic.va = e.wqe.remote_addr;
    p.atomic.rkey = e.wqe.rkey;
    // ibv_send_wr: compare_add is the addend of FETCH_AND_ADD, the comparand of CMP_AND_SWP.
    if (e.wqe.opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
      p.atomic.compare = e.wqe.compare_add;
      p.atomic.swap_add = e.wqe.swap;
    } else {
      p.atomic.swap_add = e.wqe.compare_add;
    }
  }

  const size_t hdr = wire::build_headers(p, buf->data);
  uint8_t* payload = buf->data + hdr;
  // Inline data has no pieces (npieces 0): it is always copied.
  if (npieces != 1 || !leave_in_place(buf, hdr, pieces[0].ptr, len, p.bth.pad, gather_min)) {
    if (e.wqe.send_flags & IBV_SEND_INLINE) {
      std::memcpy(payload, e.wqe.inline_data.data() + seg.offset, len);
    } else if (len != 0) {
      copy_pieces(pieces, npieces, payload);
    }
    std::memset(payload + len, 0, p.bth.pad);
    buf->len = static_cast<uint32_t>(hdr + len + p.bth.pad);
  }
  stamp_route(buf, data_route(ctx));
  if (paths_.on()) {
    // Multipath: a packet the responder may place ahead goes on the next path in turn; the rest
    // keep slot 0. A READ request stands for its responses' PSNs.
    buf->src_port = paths_.send(psn, place, rd_atomic ? psn_span(psn, e.end_psn()) : 1);
    if (place) {
      ++ctx.counters.mp_sprayed_pkts;
      if (psn >= spray_end_) spray_end_ = psn + 1;
    }
  }
  return ack_req;
}

}  // namespace uroce::transport
