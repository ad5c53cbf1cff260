// rdma_cm's handling of the CM agents' events (rdma_cm.h): each names an id (a listener's
// cookie, or the agent's connection or SIDR ID), becomes a step of that id's state machine
// (id_state.h: id_event_of) and, where the step says so, an rdma_cm event on the id's channel,
// with the parameters librdmacm's application reads from it. A REP is where rdma_cm acts for the
// application, as the kernel's CM does: it moves the id's QP to RTR and RTS and sends the RTU.
#include <algorithm>

#include "cm/rdma_cm.h"
#include "objects.h"
#include "util/log.h"

namespace uroce::cm {

namespace {

// The connection parameters of an event from the peer's REQ or REP, seen from this side as the
// kernel's CM reports them: what this side may read from the peer is the peer's responder
// resources, so they are its initiator depth, and the other way round.
template <class ReqOrRep>
void set_conn_param(EventObj* e, const ReqOrRep& m) {
  rdma_conn_param& cp = e->ev.param.conn;
  cp.responder_resources = m.initiator_depth;
  cp.initiator_depth = m.responder_resources;
  cp.flow_control = m.end_to_end_flow_control;
  cp.rnr_retry_count = m.rnr_retry_count;
  cp.srq = m.srq;
  cp.qp_num = m.local_qpn;
}

// The new id of a REQ or SIDR REQ for listener `l` on device `p`, in the listener's channel
// (a synchronous listener's get synchronous channels of their own, as librdmacm migrates them).
IdObj* child_of(IdObj* l, CmPort& p, const IpAddr& peer, const IpCmHeader& h) {
  auto* c = new IdObj();
  c->accepted = true;
  c->id.context = l->id.context;
  c->id.ps = l->id.ps;
  c->id.qp_type = l->id.qp_type;
  c->id.verbs = p.ctx;
  c->id.pd = p.pd;
  c->id.port_num = 1;
  if (l->chan->sync) {
    c->chan = new ChannelObj();
    c->chan->sync = true;
    c->chan->ch.fd = c->chan->q.fd();
    c->own_chan = true;
  } else {
    c->chan = l->chan;
  }
  c->id.channel = &c->chan->ch;
  c->port = &p;
  // The new id's addresses are of the request's IP version, whatever the listener's family (a
  // dual-stack [::] listener's IPv4 connections are AF_INET: the kernel's cma_save_ip_info).
  c->family = h.ip_version == 6 ? AF_INET6 : AF_INET;
  c->scope_id = p.scope_id;
  c->local_ip = p.ip;
  c->local_port = l->local_port;
  c->remote_ip = peer;
  c->remote_port = h.src_port;
  // The PSN this side receives first is fixed with the id, not at rdma_accept: an application
  // that manages its own QP moves it to RTR with rdma_init_qp_attr before it accepts, and the
  // REP must announce that PSN (the kernel's CM uses the id's seq_num for both).
  c->local_psn = rng()() & 0xffffff;
  c->tos = l->tos;
  c->ack_timeout = l->ack_timeout;
  set_sa(c->id.route.addr.src_storage, c->family, c->local_ip, c->local_port, c->scope_id);
  set_sa(c->id.route.addr.dst_storage, c->family, c->remote_ip, c->remote_port, c->scope_id);
  c->id.route.addr.addr.ibaddr.sgid = p.gid;
  c->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
  fill_route(c);
  ids().insert(c);
  return c;
}

// REQ or SIDR REQ for a listener: a new id, its CONNECT_REQUEST on the listener's channel (also
// when the new id has a channel of its own). A request that is not an IP CM request we can serve
// (A11 header missing or IPv6), or whose listener is gone, is refused as the kernel's rdma_cm
// refuses it, as the consumer.
void on_request(CmPort& p, const Event& ev) {
  auto* l = reinterpret_cast<IdObj*>(ev.listen_cookie);
  const bool sidr = ev.type == Event::Type::kSidrReq;
  const auto& pd = sidr ? ev.sidr_req.private_data : ev.req.private_data;
  auto h = parse_ip_private_data(pd);
  // A header of another IP version than the device's is malformed, and one the listener does
  // not take (an IPv6 request for a 0.0.0.0 listener, an IPv4 one for an AFONLY [::]) finds no
  // listener (cma_match_private_data): the kernel's CM then fails the request in its handler, and
  // the IB CM answers with REJ reason 28 (consumer defined) / SIDR status 2 (rejected) — as for
  // a missing header below.
  if (h && (h->ip_version == 6) != p.is_v6()) h.reset();
  if (h && ids().count(l) && af_only(l) && (l->family == AF_INET6) != (h->ip_version == 6))
    h.reset();
  if (!ids().count(l) || l->state != IdState::kListen || !h) {
    if (sidr) {
      SidrRep r;
      r.status = SidrStatus::kRejected;
      r.service_id = ev.sidr_req.service_id;
      p.agent->sidr_reply(ev.id, r, svc().now());
    } else {
      p.agent->reject(ev.id, static_cast<uint16_t>(RejReason::kConsumerReject), {}, svc().now());
    }
    return;
  }
  IdObj* c = child_of(l, p, ev.peer_ip, *h);
  const IdEvent what = id_event_of(ev);
  IdStep s = step_of(c, what);  // a new id is IDLE: always taken
  enter(c, what, s);
  EventObj* e = new_event(c, *s.report, 0);
  e->ev.listen_id = &l->id;
  if (sidr) {
    c->sidr_id = ev.id;
    remember_sidr(c);
    set_ud_pd(e, pd, kIpCmHeaderBytes);
    e->ev.param.ud.ah_attr = ah_to(c);
  } else {
    const Req& r = ev.req;
    c->comm_id = ev.id;
    remember_conn(c);
    c->remote_qpn = r.local_qpn;
    c->remote_psn = r.starting_psn;
    // From the passive side's point of view (as the kernel's CM reports them): what the active
    // side can read from us is our responder resources.
    c->responder_resources = std::min<uint8_t>(r.initiator_depth, kMaxRdAtom);
    c->initiator_depth = std::min<uint8_t>(r.responder_resources, kMaxRdAtom);
    c->retry_count = r.retry_count;
    c->rnr_retry_count = r.rnr_retry_count;
    c->flow_control = r.end_to_end_flow_control;
    c->path_mtu = std::min<uint8_t>(r.path_mtu ? r.path_mtu : uint8_t{IBV_MTU_1024}, p.mtu_enum);
    if (r.primary.local_ack_timeout) c->ack_timeout = r.primary.local_ack_timeout;
    set_conn_pd(e, pd, kIpCmHeaderBytes);
    set_conn_param(e, r);
    e->ev.param.conn.retry_count = r.retry_count;
  }
  post_event(c, e, l->chan);
}

// The status of an UNREACHABLE event. Out of retries: -ETIMEDOUT, as the kernel's CM gives
// (cma_ib_handler, IB_CM_REQ_ERROR). Ended early because the peer's address answered with ICMP
// port unreachable (Agent::on_unreachable), which the kernel's CM never looks at: -ECONNREFUSED,
// the socket's word for it (and the kernel rdma_cm's for a refused iWARP connection) — nothing
// timed out, and a synchronous rdma_connect then fails with "Connection refused".
int timeout_status(const Event& ev) {
  return ev.unreachable ? -ECONNREFUSED : -ETIMEDOUT;
}

// SIDR REP or no answer, for the active UD id: ESTABLISHED with the peer's QP and Q_Key, or
// UNREACHABLE — a refused SIDR's status is the SIDR REP's (IBTA table 121: 1 = service ID not
// supported, 2 = rejected by the service, …), a timeout's -ETIMEDOUT.
void on_sidr_answer(CmPort& p, const Event& ev) {
  auto it = by_sidr().find({&p, ev.id});
  if (it == by_sidr().end()) return;
  IdObj* o = it->second;
  const IdEvent what = id_event_of(ev);
  IdStep s = step_of(o, what);
  if (!s.ok) return;
  forget_sidr(o);
  enter(o, what, s);
  if (what == IdEvent::kSidrTimeout) {
    post(o, *s.report, timeout_status(ev));
    return;
  }
  const SidrRep& r = ev.sidr_rep;
  EventObj* e = new_event(o, *s.report, what == IdEvent::kSidrRep ? 0 : static_cast<int>(r.status));
  set_ud_pd(e, r.private_data);
  if (what == IdEvent::kSidrRep) {
    o->remote_qpn = r.qpn;
    o->remote_qkey = r.qkey;
    e->ev.param.ud.ah_attr = ah_to(o);
    e->ev.param.ud.qp_num = r.qpn;
    e->ev.param.ud.qkey = r.qkey;
  }
  post_event(o, e);
}

// The connection parameters of a CONNECT_RESPONSE or ESTABLISHED event from the REP.
void set_rep_param(EventObj* e, const Rep& r) {
  set_conn_pd(e, r.private_data);
  set_conn_param(e, r);
}

// REP for the active id. Without a QP the application hears CONNECT_RESPONSE and establishes;
// with one, rdma_cm moves it to RTR and RTS and sends the RTU (ESTABLISHED), or rejects the REP
// when the QP cannot move (CONNECT_ERROR).
void on_rep(CmPort& p, IdObj* o, const Event& ev) {
  const Rep& r = ev.rep;
  IdStep s = step_of(o, id_event_of(ev, o->id.qp ? RepOutcome::kQpReady : RepOutcome::kToApp));
  if (!s.ok) return;
  o->remote_qpn = r.local_qpn;
  o->remote_psn = r.starting_psn;
  // The REP's initiator depth is what the passive side reads from us; its responder
  // resources what we may read from it.
  o->responder_resources = std::min<uint8_t>(o->responder_resources, r.initiator_depth);
  o->initiator_depth = std::min<uint8_t>(o->initiator_depth, r.responder_resources);
  o->rnr_retry_count = r.rnr_retry_count;
  RepOutcome outcome = RepOutcome::kToApp;
  int rc = 0;
  if (o->id.qp) {
    rc = move_qp(o, IBV_QPS_RTR);
    if (rc == 0) rc = move_qp(o, IBV_QPS_RTS);
    if (rc != 0) {
      p.agent->reject(o->comm_id, static_cast<uint16_t>(RejReason::kConsumerReject), {},
                      svc().now());
      forget_conn(o);
      outcome = RepOutcome::kQpError;
    } else {
      p.agent->establish(o->comm_id, {}, svc().now());
      outcome = RepOutcome::kQpReady;
    }
  }
  const IdEvent what = id_event_of(ev, outcome);
  s = id_step(o->state, what);  // the same state: taken like the first
  enter(o, what, s);
  if (outcome == RepOutcome::kQpError) {
    post(o, *s.report, -rc);
    return;
  }
  EventObj* e = new_event(o, *s.report, 0);
  set_rep_param(e, r);
  post_event(o, e);
}

// Everything else names the id's connection: REJ, the timeouts, RTU, disconnection, time wait.
void on_conn_event(IdObj* o, const Event& ev) {
  using T = Event::Type;
  const IdEvent what = id_event_of(ev);
  IdStep s = step_of(o, what);
  if (!s.ok) return;
  switch (ev.type) {
    case T::kRej:
      // Said at info level, with what the reason means: the program sees only
      // RDMA_CM_EVENT_REJECTED and a number.
      log().info("rdma_cm: connection to {} rejected by the peer: {} (REJ reason {})",
                 format_ip_port(o->remote_ip, o->remote_port), rej_reason_text(ev.rej.reason),
                 ev.rej.reason);
      [[fallthrough]];
    case T::kReqTimeout:
    case T::kRepTimeout:
      qp_to_error(o);
      forget_conn(o);
      break;
    case T::kTimeWaitExit:
      forget_conn(o);
      break;
    default:
      break;
  }
  enter(o, what, s);
  if (!s.report) return;  // a DREQ after DISCONNECTED was given
  const int status = ev.type == T::kRej                                       ? ev.rej.reason
                     : ev.type == T::kReqTimeout || ev.type == T::kRepTimeout ? timeout_status(ev)
                                                                              : 0;
  EventObj* e = new_event(o, *s.report, status);
  if (ev.type == T::kRej) {
    set_conn_pd(e, ev.rej.private_data);
  } else if (ev.type == T::kDreq || ev.type == T::kDrep || ev.type == T::kDreqTimeout) {
    set_conn_pd(e, ev.private_data);
  }
  post_event(o, e);
}

void on_agent_event(CmPort& p, const Event& ev) {
  using T = Event::Type;
  log().debug("rdma_cm: {}: CM {} for connection {:#x} from {}", p.vdev->cfg.name,
              event_name(ev.type), ev.id, ev.peer_ip.to_string());
  switch (ev.type) {
    case T::kReq:
    case T::kSidrReq:
      return on_request(p, ev);
    case T::kSidrRep:
    case T::kSidrTimeout:
      return on_sidr_answer(p, ev);
    default:
      break;
  }
  auto it = by_comm().find({&p, ev.id});
  if (it == by_comm().end()) return;
  if (ev.type == T::kRep) return on_rep(p, it->second, ev);
  on_conn_event(it->second, ev);
}

}  // namespace

void ensure_handler() {
  static std::once_flag once;
  std::call_once(once, [] { svc().set_handler(on_agent_event); });
}

}  // namespace uroce::cm
