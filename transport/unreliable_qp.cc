// UD/UC dispatch: see unreliable_qp.h.
#include "transport/unreliable_qp.h"

#include "transport/qp_impl.h"
#include "transport/wc.h"

namespace uroce::transport {
namespace {

bool accepting(ibv_qp_state s) {
  // Receiving works from RTR on, and a send queue error leaves the receive side running
  // (IBTA 10.3.1, SQE).
  return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE;
}

// IBTA 10.3.1 (Send Queue Error): the failed WQE has completed with its error; the QP enters SQE
// and every other send WQE completes flushed. Receives continue.
void enter_sqe(Qp::Impl& q) {
  q.state = IBV_QPS_SQE;
  for (SendQueue::Seq s = q.sq.begin(); s != q.sq.end(); ++s) {
    const SendWqe& w = q.sq.at(s).wqe;
    q.init.send_cq->push(flush_wc(w.wr_id, wc_opcode_for(w.opcode), q.init.qpn));
  }
  q.sq.clear();
}

}  // namespace

bool unreliable_wqe_ok(ibv_qp_type type, const SendWqe& wqe) {
  const bool carried = wr_opcode_info(wqe.opcode).allowed_on(type);
  // A UD WQE needs an AH: no address ("::", the WQE's default), or 0.0.0.0, is none.
  if (type == IBV_QPT_UD)
    return carried && wqe.ud_dst_ip != wire::IpAddr{} && wqe.ud_dst_ip != wire::IpAddr(0u);
  return type == IBV_QPT_UC && carried;
}

void unreliable_on_modify(Qp::Impl& q, ibv_qp_state cur, ibv_qp_state next) {
  UnreliableRoles& u = q.unreliable;
  if (next == IBV_QPS_RESET) {
    u = UnreliableRoles{};
  } else if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
    u.uc_rx.reset(Psn(q.attr.rq_psn));
    u.seen_packet = false;
  } else if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
    u.ud_tx.reset(Psn(q.attr.sq_psn));
    u.uc_tx.reset(Psn(q.attr.sq_psn));
  }
}

void unreliable_receive(Qp::Impl& q, const wire::Packet& pkt, const RxInfo& rx, Time now) {
  const wire::Service want = q.init.type == IBV_QPT_UD ? wire::Service::kUd : wire::Service::kUc;
  // Cheapest checks first; each refusal is a counted drop (IBTA 9.6).
  if (pkt.info == nullptr || !accepting(q.state) || wire::service_of(pkt.bth.opcode) != want ||
      (pkt.bth.pkey & 0x7fff) != (wire::kDefaultPkey & 0x7fff) ||
      (q.init.type == IBV_QPT_UC && rx.src_ip != q.ctx.remote_ip)) {
    ++q.counters.dropped_pkts;
    return;
  }
  // The NP answers a mark on any datagram that reached the QP, whatever the receive side then
  // does with it (a Q_Key violation, no receive WQE): the path to it is congested either way.
  if (rx.ecn == kEcnCe) q.on_marked(pkt, rx, now);
  if (q.init.type == IBV_QPT_UD) {
    ud_receive(pkt, rx, q.ctx, q.rq, q.init.srq);
    return;
  }
  // IBTA 11.6.3: the first packet received in RTR establishes communication.
  if (!q.unreliable.seen_packet && q.state == IBV_QPS_RTR) q.raise(IBV_EVENT_COMM_EST);
  q.unreliable.seen_packet = true;
  q.unreliable.uc_rx.on_packet(pkt, q.ctx, q.rq, q.init.srq);
}

void unreliable_pump(Qp::Impl& q, Time now) {
  if (!q.sending_state()) return;
  UnreliableRoles& u = q.unreliable;
  const bool may_start = q.state == IBV_QPS_RTS;
  UnreliableOutcome o;
  if (q.init.type == IBV_QPT_UD) {
    if (may_start) o = u.ud_tx.pump(q.ctx, q.sq, q.tx, q.pacer, now);
  } else {
    o = u.uc_tx.pump(q.ctx, q.sq, q.tx, may_start, q.pacer, now);
  }
  if (o.frame_bytes != 0 && q.rate->wants_bytes()) {
    q.rate->on_bytes_sent(now, o.frame_bytes);  // DCQCN's byte counter
    q.sync_pacer();
  }
  if (o.send_error) {
    enter_sqe(q);
    return;
  }
  // IBTA 10.3.1 (SQ Drain): drained once no WQE is part way out (UD WQEs are one packet).
  if (q.state == IBV_QPS_SQD && !q.sq_drained_reported &&
      (q.init.type == IBV_QPT_UD || !u.uc_tx.in_progress(q.sq))) {
    q.sq_drained_reported = true;
    if (q.attr.en_sqd_async_notify) q.raise(IBV_EVENT_SQ_DRAINED);
  }
}

bool unreliable_has_work(const Qp::Impl& q) {
  if (!q.sending_state() || q.sq.empty()) return false;
  return q.state == IBV_QPS_RTS ||
         (q.init.type == IBV_QPT_UC && q.unreliable.uc_tx.in_progress(q.sq));
}

}  // namespace uroce::transport
