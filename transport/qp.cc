// The QP dispatcher: state machine application, work posting, packet routing, and the typed
// events between requester, responder and completer. See qp.h and qp_impl.h.
#include "transport/qp.h"

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "transport/dma.h"
#include "transport/qp_impl.h"
#include "transport/qp_state.h"
#include "transport/srq.h"
#include "transport/unreliable_qp.h"
#include "transport/wc.h"

namespace uroce::transport {

void copy_used(SendWqe& dst, const SendWqe& src) {
  static_assert(std::is_trivially_copyable_v<SendWqe> && std::is_standard_layout_v<SendWqe>);
  static_assert(offsetof(SendWqe, sge) < offsetof(SendWqe, inline_len) &&
                offsetof(SendWqe, inline_len) < offsetof(SendWqe, inline_data));
  // Every field before the SGE array (trivially copyable: checked above).
  std::memcpy(static_cast<void*>(&dst), &src, offsetof(SendWqe, sge));
  const size_t n = std::min<size_t>(src.num_sge, kMaxSge);
  std::memcpy(dst.sge.data(), src.sge.data(), n * sizeof(Sge));
  dst.inline_len = src.inline_len;
  std::memcpy(dst.inline_data.data(), src.inline_data.data(),
              std::min<size_t>(src.inline_len, kMaxInlineData));
}

void copy_used(RecvWqe& dst, const RecvWqe& src) {
  static_assert(std::is_trivially_copyable_v<RecvWqe>);
  dst.wr_id = src.wr_id;
  dst.num_sge = src.num_sge;
  const size_t n = std::min<size_t>(src.num_sge, kMaxSge);
  std::memcpy(dst.sge.data(), src.sge.data(), n * sizeof(Sge));
}

namespace {

// Largest message (IBTA: 2^31 bytes), as the device reports in max_msg_sz.
constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 31;

}  // namespace

Qp::Qp(const QpInit& init, PacketSink& tx, MemoryAccess& mem)
    : impl_(std::make_unique<Impl>(init, tx, mem)) {
  impl_->ctx.src_port = src_port_for_qpn(init.qpn);
  impl_->sync_pacer();  // a rate control may limit from the start (a max rate below the line)
}
Qp::~Qp() = default;

uint32_t Qp::qpn() const {
  return impl_->init.qpn;
}
ibv_qp_type Qp::type() const {
  return impl_->init.type;
}
ibv_qp_state Qp::state() const {
  return impl_->state;
}
const QpCounters& Qp::counters() const {
  return impl_->counters;
}
Qp::Peer Qp::peer() const {
  if (impl_->init.type == IBV_QPT_UD) return {};
  return {impl_->attr.dest_qp_num, impl_->ctx.remote_ip};
}
uint64_t Qp::cc_rate_bps() const {
  return impl_->rate->rate_bps();
}
bool Qp::cc_limiting() const {
  return impl_->rate->limiting();
}
double Qp::cc_alpha(Time now) const {
  return impl_->rate->alpha(now);
}

void Qp::Impl::apply_attrs(const ibv_qp_attr& a, int mask) {
  // The attributes taken as they are, then those the QP's context or its pacer follow.
  if (mask & IBV_QP_PKEY_INDEX) attr.pkey_index = a.pkey_index;
  if (mask & IBV_QP_PORT) attr.port_num = a.port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) attr.qp_access_flags = a.qp_access_flags;
  if (mask & IBV_QP_QKEY) attr.qkey = a.qkey;
  if (mask & IBV_QP_DEST_QPN) attr.dest_qp_num = a.dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) attr.rq_psn = a.rq_psn & kPsnMask;
  if (mask & IBV_QP_SQ_PSN) attr.sq_psn = a.sq_psn & kPsnMask;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) attr.max_rd_atomic = a.max_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) attr.min_rnr_timer = a.min_rnr_timer;
  if (mask & IBV_QP_TIMEOUT) attr.timeout = a.timeout;
  if (mask & IBV_QP_RETRY_CNT) attr.retry_cnt = a.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) attr.rnr_retry = a.rnr_retry;
  if (mask & IBV_QP_PATH_MIG_STATE) attr.path_mig_state = a.path_mig_state;
  if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) attr.en_sqd_async_notify = a.en_sqd_async_notify;
  if (mask & IBV_QP_AV) {
    attr.ah_attr = a.ah_attr;
    ctx.remote_ip = wire::IpAddr::from_bytes(a.ah_attr.grh.dgid.raw);  // IPv4: check_modify
    ctx.dscp = dscp_of_traffic_class(a.ah_attr.grh.traffic_class);
    ctx.roce_v1 = a.ah_attr.grh.sgid_index == kRoceV1GidIndex;
    sync_pacer();  // ah_attr.static_rate
  }
  if (mask & IBV_QP_PATH_MTU) {
    attr.path_mtu = a.path_mtu;
    ctx.mtu = mtu_bytes(a.path_mtu);
  }
  if (mask & IBV_QP_RATE_LIMIT) {
    attr.rate_limit = a.rate_limit;
    sync_pacer();
  }
}

void Qp::Impl::flush() {
  // IBTA 10.3.1 (Error state): every outstanding WQE completes with "flushed in error",
  // signaled or not, send queue first, each queue in order.
  for (SendQueue::Seq s = sq.begin(); s != sq.end(); ++s) {
    const SendWqe& w = sq.at(s).wqe;
    init.send_cq->push(flush_wc(w.wr_id, wc_opcode_for(w.opcode), init.qpn));
  }
  sq.clear();
  rq.flush(init.recv_cq);
  drop_parked();
}

void Qp::Impl::enter_error(bool transport_error) {
  state = IBV_QPS_ERR;
  flush();
  if (transport_error) raise(IBV_EVENT_QP_FATAL);
  if (init.srq != nullptr) raise(IBV_EVENT_QP_LAST_WQE_REACHED);  // not XRC's: no SRQ of its own
  // The responder keeps a pending NAK: it is still sent (pump() in ERR sends responses only), so
  // the peer learns why. Requester and completer stop: the queue they work on is gone.
}

void Qp::Impl::check_cqs() {
  if (!send_guard.lost() && !recv_guard.lost()) return;
  send_guard.clear();
  recv_guard.clear();
  // The WQE that could not complete and those after it are in an unknown state (C9-218): they
  // are flushed, into whichever of the QP's CQs can still take them.
  if (state != IBV_QPS_ERR && state != IBV_QPS_RESET) enter_error(/*transport_error=*/true);
}

namespace {
// Runs Qp::Impl::check_cqs when a public call on the QP returns, whichever way it returns.
struct CheckCqsOnReturn {
  Qp::Impl& q;
  ~CheckCqsOnReturn() { q.check_cqs(); }
};
}  // namespace

void Qp::Impl::handle(const CompleterOutcome& o, Time now) {
  if (o.rtt) {
    rate->on_rtt_sample(now, *o.rtt);
    sync_pacer();
    requester.on_rtt_sample(*o.rtt);
  }
  if (o.acked) requester.on_acked(*o.acked, sq);
  if (o.fatal) {
    enter_error();
    return;
  }
  if (o.retransmit) requester.on_retransmit(*o.retransmit, sq, ctx.sr());
  if (o.sack) requester.on_sack(*o.sack, now);
  if (o.read_hole) requester.on_read_hole(*o.read_hole);
  // A WQE the requester could not execute completes once everything before it has.
  if (!sq.empty() && sq.front().state == WqeState::kLocalError) {
    handle(completer.complete_local_error(ctx, sq), now);
  }
}

void Qp::Impl::handle(const RequesterOutcome& o, Time now) {
  if (o.frame_bytes != 0 && rate->wants_bytes()) {
    rate->on_bytes_sent(now, o.frame_bytes);  // DCQCN's byte counter
    sync_pacer();
  }
  if (o.sent) completer.on_sent(*o.sent, now, ctx);
  if (o.local_done) completer.complete_local_done(ctx, sq);
  if (o.local_error && !sq.empty() && sq.front().state == WqeState::kLocalError) {
    handle(completer.complete_local_error(ctx, sq), now);
  }
}

void Qp::Impl::on_cnp(const RxInfo& rx, Time now) {
  // A CNP names this QP as the sender of marked packets (Annex A17.9.3). For a connected QP only
  // the peer can say so; from anyone else it is a bogus packet. A UD QP sends to anyone, so any
  // host may report congestion on the way to it (as on a NIC).
  if (init.type != IBV_QPT_UD && rx.src_ip != ctx.remote_ip) {
    ++counters.dropped_pkts;
    return;
  }
  // Every service is rate-controlled per QP (a UD QP's rate covers all its destinations, as a
  // ConnectX reaction point's does).
  // Multipath: a uroce NP sends its CNP from the marked packet's source port, the congested
  // path; that path moves (PathSet::marked).
  if (init.type == IBV_QPT_RC && ctx.peer_sr && requester.path_marked(rx.src_port))
    ++counters.mp_ecn_rotations;
  if (sending_state() && rate->on_cnp(now)) {
    ++counters.rp_cnp_handled;
    sync_pacer();
  } else {
    ++counters.rp_cnp_ignored;
  }
}

void Qp::Impl::on_marked(const wire::Packet& pkt, const RxInfo& rx, Time now) {
  ++counters.np_ecn_marked_roce_packets;
  // NP: a CNP to the QP that sent the marked packet, at most one per min_time_between_cnps.
  // A UD QP hears from many senders: the first marked one in an interval gets the CNP.
  if (!init.cc.np.enabled || cnp_pending ||
      !np.on_marked(now, Time{init.cc.np.min_time_between_cnps} * cc::kUsNs))
    return;
  cnp_pending = true;
  if (init.type == IBV_QPT_UD)
    cnp_to = {rx.src_ip, pkt.deth.src_qp, rx.roce_v1, ctx.src_port};
  else
    cnp_to = {ctx.remote_ip, attr.dest_qp_num, ctx.roce_v1,
              ctx.peer_sr && rx.src_port != 0 ? rx.src_port : ctx.src_port};
}

void Qp::Impl::write_cnp(TxBuf* buf) {
  buf->len = static_cast<uint32_t>(wire::build_headers(wire::cnp_packet(cnp_to.qpn), buf->data));
  stamp_route(buf, Route{.dst_ip = cnp_to.ip,
                         .src_port = cnp_to.src_port,
                         .ecn = kEcnNotEct,  // a CNP is not ECN-capable: marking it says nothing
                         .dscp = init.cc.np.cnp_dscp,
                         .pcp = init.cc.np.cnp_802p_prio,
                         .roce_v1 = cnp_to.roce_v1});  // Annex A17.9.3 defines a v1 CNP too
}

bool Qp::Impl::send_pending_cnp() {
  if (!cnp_pending) return true;
  TxBuf* buf = tx.tx_alloc();
  if (buf == nullptr) return false;
  write_cnp(buf);
  const uint32_t ib_len = buf->ib_len();
  tx.tx_commit(buf);
  cnp_pending = false;
  ++counters.np_cnp_sent;
  count_sent(counters, ib_len);
  return true;
}

bool Qp::Impl::paced_work() const {
  if (!pacer.limiting()) return false;
  if (!reliable()) return unreliable_has_work(*this);
  const Time at = pacer.release_time();
  return responder.next_response_is_data() ||
         (sending_state() &&
          (requester.state(at, ctx, sq, state == IBV_QPS_RTS) == Requester::State::kSending ||
           (ctx.sr() && requester.selective_resend_pending())));
}

int Qp::modify(const ibv_qp_attr& a, int mask, Time now) {
  Impl& q = *impl_;
  CheckCqsOnReturn check{q};
  mask = xrc_effective_mask(q.init.type, mask);  // what the QP's half of XRC takes
  // An IPv6 device address (local_ip unset in tests that build a QP alone: IPv4's rules).
  const bool ipv6 = q.init.local_ip != wire::IpAddr{} && !q.init.local_ip.is_v4();
  const ModifyCheck c = check_modify(q.init.type, q.state, a, mask, ipv6);
  if (c.err != 0) return c.err;
  const ibv_qp_state cur = q.state;
  q.apply_attrs(a, mask);
  if (!q.reliable()) unreliable_on_modify(q, cur, c.next);
  switch (c.next) {
    case IBV_QPS_RESET:
      // Back to the state of a new QP: queues emptied without completions (IBTA 10.3.1). The
      // send queue starts over at sequence 0, where a new requester's cursor is: cleared in
      // place it would keep counting from the WQEs of before, and the requester would look for
      // its first WQE at a sequence the queue no longer holds.
      q.sq = SendQueue{};
      q.rq.reset();
      q.drop_parked();
      q.attr = ibv_qp_attr{};
      q.requester = Requester{};
      q.responder = Responder{};
      q.completer = Completer{};
      q.rate = cc::make_rate_control(q.init.cc, q.init.line_rate_bps);
      q.pacer = cc::Pacer(q.init.cc.pacer_burst);
      q.sync_pacer();
      q.np = cc::CnpLimiter{};
      q.cnp_pending = false;
      q.cnp_to = {};
      q.ctx.peer_sr = false;  // a new connection negotiates again
      q.ctx.peer_rides = false;
      if (q.init.type == IBV_QPT_XRC_RECV) {
        q.xrc_srq = nullptr;
        q.recv_guard.retarget(nullptr);
      }
      q.state = IBV_QPS_RESET;
      break;
    case IBV_QPS_INIT:
      q.rq.open();  // receives may be posted from INIT on (ibv_post_recv(3))
      q.state = IBV_QPS_INIT;
      break;
    case IBV_QPS_RTR:
      if (cur == IBV_QPS_INIT) q.responder.reset(Psn(q.attr.rq_psn));
      q.state = IBV_QPS_RTR;
      break;
    case IBV_QPS_RTS:
      if (cur == IBV_QPS_RTR) {
        q.requester.reset(Psn(q.attr.sq_psn));
        q.completer.reset(Psn(q.attr.sq_psn), q.attr);
      }
      q.state = IBV_QPS_RTS;
      pump(now);  // SQD → RTS resumes WQEs queued meanwhile
      break;
    case IBV_QPS_SQD:
      if (cur != IBV_QPS_SQD) q.sq_drained_reported = false;
      q.state = IBV_QPS_SQD;
      pump(now);
      break;
    case IBV_QPS_ERR:
      if (cur != IBV_QPS_ERR) q.enter_error(/*transport_error=*/false);
      break;
    default:
      q.state = c.next;
      break;
  }
  return 0;
}

void Qp::query(ibv_qp_attr& a, ibv_qp_init_attr& init) const {
  const Impl& q = *impl_;
  a = q.attr;
  a.qp_state = a.cur_qp_state = q.state;
  a.cap.max_send_wr = q.init.max_send_wr;
  a.cap.max_recv_wr = q.init.max_recv_wr;
  a.cap.max_send_sge = q.init.max_send_sge;
  a.cap.max_recv_sge = q.init.max_recv_sge;
  a.cap.max_inline_data = q.init.max_inline_data;
  a.sq_draining = q.state == IBV_QPS_SQD && !q.sq_drained_reported;
  init = ibv_qp_init_attr{};
  init.qp_type = q.init.type;
  init.sq_sig_all = q.init.sq_sig_all;
  init.cap = a.cap;
}

int Qp::post_send(const SendWqe& wqe, Time now) {
  Impl& q = *impl_;
  CheckCqsOnReturn check{q};
  // UD and UC carry a subset of the operations (unreliable_qp.h), XRC all of RC's but ATOMIC
  // WRITE; an XRC receive QP has no send queue (ibv_create_qp_ex(3)).
  if (q.init.type == IBV_QPT_XRC_RECV) return EINVAL;
  if (q.init.type == IBV_QPT_XRC_SEND && !wr_opcode_info(wqe.opcode).allowed_on(q.init.type))
    return EINVAL;
  if (!q.reliable() && !unreliable_wqe_ok(q.init.type, wqe)) return EINVAL;
  if (q.state == IBV_QPS_RESET || q.state == IBV_QPS_INIT || q.state == IBV_QPS_RTR) return EINVAL;
  const bool local_op = is_local_op(wqe.opcode);
  if (!wr_opcode_info(wqe.opcode).supported && !local_op) return EINVAL;
  const bool is_inline = wqe.send_flags & IBV_SEND_INLINE;
  // BIND_MW and LOCAL_INV carry no data (ibv_post_send(3)).
  if (local_op && (is_inline || wqe.num_sge != 0)) return EINVAL;
  // Inline data is something to send: READ and ATOMIC SGEs are written, not read
  // (ibv_post_send(3)). An ATOMIC's result is one 8-byte SGE.
  if (is_read_or_atomic(wqe.opcode) && is_inline) return EINVAL;
  if (is_atomic(wqe.opcode) && (wqe.num_sge != 1 || wqe.sge[0].length != 8)) return EINVAL;
  // An ATOMIC WRITE carries exactly the 8 bytes it places (IBTA 1.5; rxe sends dma length 8).
  // ibv_wr_atomic_write hands them over by pointer and the verbs layer keeps them inline whatever
  // max_inline_data is (rdma-core's rxe copies them into the WQE likewise); ibv_post_send's
  // IBV_SEND_INLINE is held to max_inline_data by the verbs layer.
  const bool atomic_write = wqe.opcode == IBV_WR_ATOMIC_WRITE;
  uint64_t length;
  if (is_inline) {
    const uint32_t inline_cap = atomic_write ? 8 : q.init.max_inline_data;
    if (wqe.inline_len > std::min(inline_cap, kMaxInlineData)) return EINVAL;
    length = wqe.inline_len;
  } else {
    if (wqe.num_sge > std::min(q.init.max_send_sge, kMaxSge)) return EINVAL;
    length = sge_total(wqe.sge.data(), wqe.num_sge);
  }
  if (length > kMaxMessageBytes) return EINVAL;
  if (atomic_write && length != 8) return EINVAL;
  // A READ takes one PSN per response packet at once; more than a quarter of the PSN space
  // would break the wrap-safe comparisons (IBTA 9.7.4.1.3: at most half may be outstanding).
  if (wqe.opcode == IBV_WR_RDMA_READ && (length + q.ctx.mtu - 1) / q.ctx.mtu > (1u << 22)) {
    return EINVAL;
  }
  if (q.state == IBV_QPS_ERR || q.state == IBV_QPS_SQE) {
    // Posting to a QP in ERR (or a UD/UC QP in SQE) is allowed and completes at once, flushed
    // (IBTA 10.8.3.1).
    q.init.send_cq->push(flush_wc(wqe.wr_id, wc_opcode_for(wqe.opcode), q.init.qpn));
    return 0;
  }
  if (q.sq.size() >= q.init.max_send_wr) return ENOMEM;
  SendEntry& e = q.sq.push_slot();
  copy_used(e.wqe, wqe);
  e.reset_state();
  e.signaled = q.init.sq_sig_all || (wqe.send_flags & IBV_SEND_SIGNALED);
  e.length = static_cast<uint32_t>(length);
  pump(now);
  return 0;
}

int Qp::post_recv(const RecvWqe& wqe) {
  // Any thread, without the device lock: only the immutable QpInit and the receive queue's
  // posting side are touched (recv_queue.h says how the QP's state reaches it).
  Impl& q = *impl_;
  if (q.init.srq != nullptr) return EINVAL;  // receives go to the SRQ (ibv_post_recv(3))
  // XRC QPs have no receive queue: an XRC send QP receives nothing, an XRC receive QP takes its
  // WQEs from the XRC SRQs of its domain.
  if (q.init.type == IBV_QPT_XRC_SEND || q.init.type == IBV_QPT_XRC_RECV) return EINVAL;
  if (wqe.num_sge > std::min(q.init.max_recv_sge, kMaxSge)) return EINVAL;
  return q.rq.post(wqe);
}

void Qp::receive(const wire::Packet& pkt, const RxInfo& rx, Time now) {
  if (receive_deferring_pump(pkt, rx, now)) pump(now);
}

bool Qp::receive_deferring_pump(const wire::Packet& pkt, const RxInfo& rx, Time now) {
  Impl& q = *impl_;
  CheckCqsOnReturn check{q};
  if (pkt.info != nullptr && (pkt.info->flags & wire::kCnpFlag)) {
    q.on_cnp(rx, now);
    return false;
  }
  if (!q.reliable()) {
    unreliable_receive(q, pkt, rx, now);  // UD/UC responders send nothing back but CNPs
    return q.cnp_pending;
  }
  // Cheapest checks first; each refusal is a counted drop (IBTA 9.6: silently dropped packets).
  const bool accepting = q.state == IBV_QPS_RTR || q.sending_state();
  if (pkt.info == nullptr || !accepting || wire::service_of(pkt.bth.opcode) != q.ctx.service ||
      (pkt.bth.pkey & 0x7fff) != (wire::kDefaultPkey & 0x7fff) || rx.src_ip != q.ctx.remote_ip) {
    ++q.counters.dropped_pkts;
    return false;
  }
  const uint32_t flags = pkt.info->flags;
  // XRC's halves: the send QP is only a requester (it takes responses), the receive QP only a
  // responder (it takes requests).
  if ((q.init.type == IBV_QPT_XRC_SEND && (flags & wire::kRequest)) ||
      (q.init.type == IBV_QPT_XRC_RECV && !(flags & wire::kRequest))) {
    ++q.counters.dropped_pkts;
    return false;
  }
  count_rcvd(q.counters, wire::ib_length(pkt));
  // Selective repeat is used once the peer shows it speaks it (docs/selective-repeat.md).
  if (pkt.bth.ext & wire::kBthExtSr) q.ctx.peer_sr = true;
  // So are ACK riders (ack_rider.h).
  if (pkt.bth.ext & wire::kBthExtRides) q.ctx.peer_rides = true;
  if (rx.ecn == kEcnCe) q.on_marked(pkt, rx, now);
  // An ACK riding on a request is the ACK packet its sender queued before the request: taken
  // first, as that packet would have been, whatever then becomes of the request (parked, a
  // duplicate, refused). It passed the same checks (QP, state, source, P_Key) as its carrier.
  if (pkt.has_rider) q.take_rider(pkt, now);
  if (flags & wire::kRequest) {
    // RNR grace: behind a message that waits for a receive WQE, every request waits too (they
    // are in PSN order); the first that would find none starts the wait.
    if (!q.parked.empty() || q.must_wait(pkt)) {
      q.park(pkt, rx, now);
      return false;  // nothing to send: the ACK comes when they are replayed
    }
    q.request(pkt);
  } else if ((flags & wire::kResponse) && q.sending_state()) {
    q.handle(q.completer.on_response(pkt, now, q.ctx, q.sq), now);
  } else {
    ++q.counters.dropped_pkts;  // a response while in RTR (we sent nothing yet)
  }
  return true;
}

void Qp::pump(Time now) {
  Impl& q = *impl_;
  CheckCqsOnReturn check{q};
  if (q.state == IBV_QPS_RESET || q.state == IBV_QPS_INIT) return;
  // Requests waiting for a receive WQE go first: a receive may have been posted, or their
  // grace ended; what they answer (ACKs, READ responses) then leaves below.
  if (!q.parked.empty()) q.release_parked(now);
  // A CNP first: congestion news is worth more the sooner it arrives.
  if (!q.send_pending_cnp()) return;
  if (!q.reliable()) {
    unreliable_pump(q, now);
    return;
  }
  // Responses next, in request order (ACKs, READ response streams, ATOMIC ACKs). READ response
  // packets are data and leave at the QP's rate; an ACK behind them waits with them.
  uint64_t response_bytes = 0;
  bool port_full = false;
  while (q.responder.has_response()) {
    const bool data = q.responder.next_response_is_data();
    if (data && !q.pacer.may_send(now)) break;
    TxBuf* buf = q.tx.tx_alloc();
    if (buf == nullptr) {
      port_full = true;
      break;
    }
    const bool fatal = q.responder.write_response(q.ctx, q.tx.tx_gather_min(), buf);
    if (data) {
      const uint64_t frame = cc::frame_bytes(buf->ib_len());
      q.pacer.on_sent(now, frame);
      response_bytes += frame;
    }
    const uint32_t ib_len = buf->ib_len();
    q.tx.tx_commit(buf);
    count_sent(q.counters, ib_len);
    if (fatal && q.state != IBV_QPS_ERR) q.enter_error();
  }
  if (response_bytes != 0 && q.rate->wants_bytes()) {
    q.rate->on_bytes_sent(now, response_bytes);
    q.sync_pacer();
  }
  if (port_full) return;
  if (!q.sending_state()) return;
  if (!q.requester.idle(q.sq))
    q.handle(q.requester.pump(now, q.ctx, q.sq, q.tx, q.state == IBV_QPS_RTS, q.pacer), now);
  if (q.state == IBV_QPS_SQD && !q.sq_drained_reported && !q.completer.outstanding() &&
      (q.sq.empty() || q.sq.front().state == WqeState::kQueued)) {
    // IBTA 10.3.1 (SQ Drain): every WQE in progress has completed.
    q.sq_drained_reported = true;
    if (q.attr.en_sqd_async_notify) q.raise(IBV_EVENT_SQ_DRAINED);
  }
}

bool Qp::wants_pump() const {
  const Impl& q = *impl_;
  if (q.state == IBV_QPS_RESET || q.state == IBV_QPS_INIT) return false;
  if (q.cnp_pending) return true;
  // Requests wait for a receive WQE, and one has been posted.
  if (!q.parked.empty() && q.rq.size() != 0) return true;
  // A packet held by the pacer is not something to send now (as below).
  if (!q.reliable()) return !q.pacer.limiting() && unreliable_has_work(q);
  // A packet held by the pacer is not something to send now: next_deadline() says when.
  if (q.responder.has_response() && !(q.responder.next_response_is_data() && q.pacer.limiting()))
    return true;
  // Time 0: a running RNR wait reads as "not now"; next_deadline() reports when it ends.
  return q.sending_state() && !q.pacer.limiting() &&
         (q.requester.state(0, q.ctx, q.sq, q.state == IBV_QPS_RTS) == Requester::State::kSending ||
          (q.ctx.sr() && q.requester.selective_resend_pending()));
}

Time Qp::next_deadline() const {
  const Impl& q = *impl_;
  // The pacer's release time counts only while a paced packet waits for it.
  const Time pace = std::min(q.paced_work() ? q.pacer.release_time() : kNever, q.parked_deadline());
  if (!q.sending_state()) return pace;
  return std::min({q.completer.deadline(), q.requester.wake_time(), q.rate->next_deadline(), pace});
}

bool Qp::waits_for_recv() const {
  return impl_->waiting.load(std::memory_order_acquire);
}

// RNR grace. IBTA 9.7.5.2.8 has the responder answer a message that finds no receive WQE with an
// RNR NAK at once; the requester then waits the responder's min_rnr_timer and resends, up to
// rnr_retry times (7 = for ever, 0 = fail at the first NAK, as fio's rdma engine connects). An
// RNIC places messages while the application runs; uroce shares the cores with it, so an
// application that reposts promptly can still be off its core for milliseconds while its
// engine takes messages in — and a requester with rnr_retry 0 then fails on a scheduling
// hiccup, not on an application that did not post. So the message waits, like a frame in a
// NIC's receive buffer, for at most min(rnr_grace_ns, min_rnr_timer): never longer than the
// requester would wait after an RNR NAK before resending. A receive posted meanwhile lets it
// in at once (Device::post_recv wakes the engine); at the end of the grace it meets the
// responder as it is, and gets the RNR NAK if there is still no WQE. The requests behind it wait
// with it, in order, and are replayed after it, so the responder sees the same sequence it would
// have seen had they arrived late. QPs on an SRQ do not wait (the SRQ has no QP to wake).
Time Qp::Impl::rnr_grace() const {
  return std::min<Time>(init.rnr_grace_ns, rnr_timer_ns(attr.min_rnr_timer));
}

bool Qp::Impl::must_wait(const wire::Packet& pkt) {
  return init.rnr_grace_ns != 0 && init.srq == nullptr && init.type != IBV_QPT_XRC_RECV &&
         takes_recv_wqe(pkt) && Psn(pkt.bth.psn) == responder.expected_psn() && rq.empty();
}

void Qp::Impl::take_rider(const wire::Packet& pkt, Time now) {
  ++counters.ack_riders_rcvd;
  if (!sending_state()) {
    ++counters.dropped_pkts;  // as the ACK itself would have been: nothing sent yet
    return;
  }
  wire::Packet ack;
  ack.bth = pkt.bth;
  ack.bth.opcode = uint8_t(wire::Opcode::kRcAcknowledge);
  ack.bth.se = false;
  ack.bth.pad = 0;
  ack.bth.ack_req = false;
  ack.bth.ext = static_cast<uint8_t>(pkt.bth.ext & ~(wire::kBthExtAck | wire::kBthExtPlace));
  ack.bth.psn = pkt.rider_psn;
  ack.info = &wire::opcode_info(wire::Opcode::kRcAcknowledge);
  ack.aeth = pkt.rider_aeth;
  handle(completer.on_response(ack, now, ctx, sq), now);
}

void Qp::Impl::park(const wire::Packet& pkt, const RxInfo& rx, Time now) {
  if (parked.size() >= kMaxParkedPackets || parked_bytes + pkt.payload.size() > kMaxParkedBytes) {
    ++counters.rnr_wait_drops;
    return;
  }
  if (parked.empty()) {
    ++counters.rnr_waits;
    waiting.store(true, std::memory_order_release);
  }
  Parked& p = parked.emplace_back();
  p.payload.assign(pkt.payload.begin(), pkt.payload.end());
  p.pkt = pkt;
  p.pkt.payload = {};
  p.rx = rx;
  p.at = now;
  parked_bytes += p.payload.size();
}

void Qp::Impl::release_parked(Time now) {
  bool moved = false;  // the front changed: a message that waits now is a new one
  while (!parked.empty()) {
    if (state != IBV_QPS_RTR && !sending_state()) {
      drop_parked();  // ERR, or reset meanwhile: what arrives now is dropped too
      return;
    }
    Parked& p = parked.front();
    p.pkt.payload = p.payload;
    // A message that starts here and still finds no WQE waits on, until its own grace ends.
    if (now < p.at + rnr_grace() && must_wait(p.pkt)) {
      if (moved) ++counters.rnr_waits;
      break;
    }
    Parked cur = std::move(p);
    parked.pop_front();
    moved = true;
    parked_bytes -= cur.payload.size();
    cur.pkt.payload = cur.payload;
    request(cur.pkt);
  }
  if (parked.empty()) waiting.store(false, std::memory_order_release);
}

void Qp::Impl::drop_parked() {
  counters.dropped_pkts += parked.size();
  parked.clear();
  parked_bytes = 0;
  waiting.store(false, std::memory_order_release);
}

void Qp::Impl::xrc_route(const wire::Packet& pkt) {
  Srq* s = xrc_srq != nullptr && pkt.xrc_srqn == xrc_srqn ? xrc_srq
           : init.xrc_srqs != nullptr                     ? init.xrc_srqs->find(pkt.xrc_srqn)
                                                          : nullptr;
  // The SRQ must be an XRC SRQ of this QP's domain (IBTA 9.4, XRC; 11.2.x: the XRC SRQ and the
  // XRC target QP share a domain), and the packets of one message name one SRQ: the message
  // scatters into the WQE it took from that SRQ, under that SRQ's PD.
  const bool in_message = responder.in_message();
  const bool ok = s != nullptr && s->xrcd() == init.xrcd && (!in_message || s == xrc_srq);
  ctx.xrc_refused = !ok;
  if (!ok || in_message) return;
  xrc_srq = s;
  xrc_srqn = pkt.xrc_srqn;
  ctx.pd = s->pd();
  recv_guard.retarget(s->cq());
}

void Qp::xrc_srq_gone(const Srq* srq) {
  Impl& q = *impl_;
  if (q.xrc_srq != srq) return;
  q.xrc_srq = nullptr;
  q.recv_guard.retarget(nullptr);
  // A WQE taken for a message in progress goes with its SRQ, uncompleted; the gate stays as
  // the state set it (an XRC receive QP is never posted to).
  const RecvQueue::Gate gate = q.rq.gate();
  q.rq.reset();
  if (gate == RecvQueue::Gate::kOpen) q.rq.open();
}

void Qp::Impl::request(const wire::Packet& pkt) {
  const bool expected = Psn(pkt.bth.psn) == responder.expected_psn();
  Srq* srq = init.srq;
  if (init.type == IBV_QPT_XRC_RECV) {
    xrc_route(pkt);
    srq = ctx.xrc_refused ? nullptr : xrc_srq;
  }
  // With an SRQ, the message takes its receive WQE from it when it starts at the expected
  // PSN; duplicates and out-of-sequence packets take none.
  if (srq != nullptr && rq.empty() && takes_recv_wqe(pkt) && expected) srq->take(rq);
  const ResponderOutcome o = responder.on_request(pkt, ctx, rq);
  // IBTA 11.6.3: the first packet received in RTR establishes communication.
  if (o.first_packet && state == IBV_QPS_RTR) raise(IBV_EVENT_COMM_EST);
  if (o.fatal) enter_error();
}

void Qp::on_timer(Time now) {
  Impl& q = *impl_;
  CheckCqsOnReturn check{q};
  if (q.sending_state() && q.completer.deadline() <= now) {
    q.handle(q.completer.on_timer(now, q.ctx, q.sq), now);
  }
  if (q.sending_state() && q.rate->next_deadline() <= now) {
    q.rate->on_timer(now);  // DCQCN's rate-increase timer, a merged CNP's cut
    q.sync_pacer();
  }
  pump(now);
}

}  // namespace uroce::transport
