// rdma_cm's connection calls (rdma_cm.h): what rdma_connect, rdma_accept, rdma_reject,
// rdma_establish, rdma_disconnect, rdma_notify and rdma_destroy_id ask of the id's CM agent
// (agent.h), and the parameters they send — each asks the id's state machine first (id_state.h)
// and takes its step once the agent took the call. The agent's answers come back as events
// (rdma_cm_events.cc).
#include <algorithm>

#include "cm/rdma_cm.h"

namespace uroce::cm {

namespace {

uint8_t clamp_rd(uint8_t v) {
  return v == RDMA_MAX_RESP_RES ? kMaxRdAtom : v;
}

bool rd_atomic_too_deep(const rdma_conn_param* cp) {
  return (cp->responder_resources != RDMA_MAX_RESP_RES && cp->responder_resources > kMaxRdAtom) ||
         (cp->initiator_depth != RDMA_MAX_INIT_DEPTH && cp->initiator_depth > kMaxRdAtom);
}

// UD: a SIDR REQ with the IP CM header and the application's private data.
int connect_sidr(IdObj* o, const IdStep& s, const IpCmHeader& h, std::span<const uint8_t> user) {
  CmPort* p = o->port;
  auto pd = make_ip_private_data(h, user, sidr_req::kPrivateData.len);
  if (!pd) return EINVAL;
  SidrReq r;
  r.service_id = service_id(static_cast<uint16_t>(o->id.ps), o->remote_port);
  r.private_data = std::move(*pd);
  o->sidr_id = p->agent->sidr_request(o->remote_ip, std::move(r), svc().now());
  remember_sidr(o);
  enter(o, IdEvent::kConnect, s);
  svc().flush(*p);
  return 0;
}

// UD: a SIDR REP with the id's QP (or the application's QPN), and nothing more on this side.
int accept_sidr(IdObj* o, const rdma_conn_param* cp, std::vector<uint8_t> user) {
  IdStep s = step_of(o, IdEvent::kAcceptSidr);
  if (!s.ok) return s.err;
  CmPort* p = o->port;
  SidrRep r;
  r.status = SidrStatus::kQpValid;
  r.qpn = o->id.qp ? o->id.qp->qp_num : (cp ? cp->qp_num : 0);
  r.qkey = RDMA_UDP_QKEY;
  r.service_id = service_id(static_cast<uint16_t>(o->id.ps), o->local_port);
  if (user.size() > sidr_rep::kPrivateData.len) return EINVAL;
  r.private_data = std::move(user);
  if (int rc = p->agent->sidr_reply(o->sidr_id, std::move(r), svc().now())) return rc;
  forget_sidr(o);
  enter(o, IdEvent::kAcceptSidr, s);
  svc().flush(*p);
  return 0;
}

}  // namespace

// The REQ carries the IP CM header (Annex A11), the path of the RoCEv2 GIDs, the id's QP (or the
// application's QPN) and the connection parameters, clamped to what the device has.
int connect_id(IdObj* o, const rdma_conn_param* cp) {
  IdStep s = step_of(o, IdEvent::kConnect);
  if (!s.ok) return s.err;
  CmPort* p = o->port;
  IpCmHeader h;
  h.ip_version = o->remote_ip.is_v4() ? 4 : 6;  // the device's family (resolve_addr checks)
  h.src_port = o->local_port;
  h.src = o->local_ip;
  h.dst = o->remote_ip;
  std::span<const uint8_t> user;
  if (cp && cp->private_data_len)
    user = {static_cast<const uint8_t*>(cp->private_data), cp->private_data_len};
  if (o->id.qp_type == IBV_QPT_UD) return connect_sidr(o, s, h, user);
  auto pd = make_ip_private_data(h, user, req::kPrivateData.len);
  if (!pd) return EINVAL;
  if (cp && rd_atomic_too_deep(cp)) return EINVAL;
  o->responder_resources = cp ? clamp_rd(cp->responder_resources) : kMaxRdAtom;
  o->initiator_depth = cp ? clamp_rd(cp->initiator_depth) : kMaxRdAtom;
  o->retry_count = cp ? std::min<uint8_t>(cp->retry_count, 7) : kRetryCountDefault;
  o->rnr_retry_count = cp ? std::min<uint8_t>(cp->rnr_retry_count, 7) : kRnrRetryDefault;
  o->flow_control = cp ? cp->flow_control : true;
  o->local_psn = rng()() & 0xffffff;
  o->path_mtu = p->mtu_enum;
  Req r;
  r.service_id = service_id(static_cast<uint16_t>(o->id.ps), o->remote_port);
  r.local_qpn = o->id.qp ? o->id.qp->qp_num : (cp ? cp->qp_num : 0);
  r.responder_resources = o->responder_resources;
  r.initiator_depth = o->initiator_depth;
  r.transport_service_type = 0;
  r.end_to_end_flow_control = o->flow_control;
  r.starting_psn = o->local_psn;
  r.retry_count = o->retry_count;
  r.rnr_retry_count = o->rnr_retry_count;
  r.pkey = 0xffff;
  r.path_mtu = o->path_mtu;
  r.srq = o->id.qp ? o->id.qp->srq != nullptr : (cp && cp->srq);
  r.primary.local_gid = to_gid(p->gid);
  r.primary.remote_gid = to_gid(gid_of(o->remote_ip));
  r.primary.traffic_class = o->tos;
  r.primary.hop_limit = 64;
  r.primary.local_ack_timeout = o->ack_timeout;
  r.private_data = std::move(*pd);
  o->comm_id = p->agent->connect(o->remote_ip, std::move(r), svc().now());
  remember_conn(o);
  enter(o, IdEvent::kConnect, s);
  svc().flush(*p);
  return 0;
}

// RC: the id's QP (if it has one) to RTR and RTS, then the REP with what the application allows
// within what the REQ asked.
int accept_id(IdObj* o, const rdma_conn_param* cp) {
  std::vector<uint8_t> user;
  if (cp && cp->private_data_len) {
    auto* b = static_cast<const uint8_t*>(cp->private_data);
    user.assign(b, b + cp->private_data_len);
  }
  if (o->id.qp_type == IBV_QPT_UD) return accept_sidr(o, cp, std::move(user));
  IdStep s = step_of(o, IdEvent::kAccept);
  if (!s.ok) return s.err;
  CmPort* p = o->port;
  if (user.size() > rep::kPrivateData.len) return EINVAL;
  if (cp) {
    if (rd_atomic_too_deep(cp)) return EINVAL;
    if (cp->responder_resources != RDMA_MAX_RESP_RES)
      o->responder_resources = std::min(o->responder_resources, cp->responder_resources);
    if (cp->initiator_depth != RDMA_MAX_INIT_DEPTH)
      o->initiator_depth = std::min(o->initiator_depth, cp->initiator_depth);
  }
  if (o->id.qp) {
    int rc = move_qp(o, IBV_QPS_RTR);
    if (rc == 0) rc = move_qp(o, IBV_QPS_RTS);
    if (rc != 0) return rc;
  }
  Rep r;
  r.local_qpn = o->id.qp ? o->id.qp->qp_num : (cp ? cp->qp_num : 0);
  r.starting_psn = o->local_psn;
  r.responder_resources = o->responder_resources;
  r.initiator_depth = o->initiator_depth;
  r.end_to_end_flow_control = cp ? cp->flow_control : true;
  r.rnr_retry_count = cp ? std::min<uint8_t>(cp->rnr_retry_count, 7) : kRnrRetryDefault;
  r.srq = o->id.qp ? o->id.qp->srq != nullptr : (cp && cp->srq);
  r.private_data = std::move(user);
  if (int rc = p->agent->accept(o->comm_id, std::move(r), svc().now())) return rc;
  enter(o, IdEvent::kAccept, s);
  svc().flush(*p);
  return 0;
}

// REJ "consumer reject" (IBTA 12.6.7, reason 28) with the application's private data, or a SIDR
// REP that refuses.
int reject_id(IdObj* o, const void* private_data, uint8_t private_data_len) {
  IdStep s = step_of(o, IdEvent::kReject);
  if (!s.ok) return s.err;
  if (!o->port) return EINVAL;
  const Time now = svc().now();
  std::span<const uint8_t> pd(static_cast<const uint8_t*>(private_data),
                              private_data ? private_data_len : 0);
  int rc;
  if (o->id.qp_type == IBV_QPT_UD) {
    SidrRep r;
    r.status = SidrStatus::kRejected;
    r.service_id = service_id(static_cast<uint16_t>(o->id.ps), o->local_port);
    r.private_data.assign(pd.begin(), pd.end());
    rc = o->port->agent->sidr_reply(o->sidr_id, r, now);
    forget_sidr(o);
  } else {
    rc = o->port->agent->reject(o->comm_id, static_cast<uint16_t>(RejReason::kConsumerReject), pd,
                                now);
    forget_conn(o);
  }
  if (rc) return rc;
  enter(o, IdEvent::kReject, s);
  svc().flush(*o->port);
  return 0;
}

// After CONNECT_RESPONSE, for an application that moved its own QP: the RTU.
int establish_id(IdObj* o) {
  IdStep s = step_of(o, IdEvent::kEstablish);
  if (!s.ok) return s.err;
  if (!o->port || !o->comm_id) return EINVAL;
  if (int rc = o->port->agent->establish(o->comm_id, {}, svc().now())) return rc;
  enter(o, IdEvent::kEstablish, s);
  svc().flush(*o->port);
  return 0;
}

// RC: the QP to ERR (librdmacm flushes it first, whatever comes of the DREQ), then DREQ — or the
// DREP of the peer's DREQ; nothing more once the connection is gone. UD: nothing to do.
int disconnect_id(IdObj* o) {
  if (o->id.qp_type == IBV_QPT_UD) return 0;
  if (o->comm_id) qp_to_error(o);
  IdStep s = step_of(o, IdEvent::kDisconnect);
  if (!s.ok) return s.err;
  if (o->comm_id) {
    if (int rc = o->port->agent->disconnect(o->comm_id, {}, svc().now())) return rc;
  }
  enter(o, IdEvent::kDisconnect, s);
  if (o->comm_id) svc().flush(*o->port);
  return 0;
}

// IBV_EVENT_COMM_EST on the passive side: the QP saw traffic before the RTU, which is then not
// waited for (the kernel's CM: ib_cm_notify). Other events mean nothing to the CM.
void notify_id(IdObj* o, ibv_event_type event) {
  if (event != IBV_EVENT_COMM_EST) return;
  IdStep s = step_of(o, IdEvent::kNotifyEstablished);
  if (!s.ok || !o->port || !o->comm_id) return;
  if (o->port->agent->notify_established(o->comm_id) == 0) {
    enter(o, IdEvent::kNotifyEstablished, s);
    post(o, *s.report, 0);
  }
}

void destroy_id(IdObj* o) {
  const Time now = svc().now();
  for (CmPort* p : o->listen_ports) {
    p->agent->unlisten(service_id(static_cast<uint16_t>(o->id.ps), o->local_port));
    svc().flush(*p);
  }
  o->listen_ports.clear();
  // What waited for a listen that will not come is answered as nobody listening (REJ).
  for (CmPort* p : o->reserved_ports) {
    p->agent->unreserve(service_id(static_cast<uint16_t>(o->id.ps), o->local_port), now);
    svc().flush(*p);
  }
  o->reserved_ports.clear();
  if (o->port && o->comm_id) {
    o->port->agent->destroy(o->comm_id, now);
    forget_conn(o);
    svc().flush(*o->port);
  }
  if (o->port && o->sidr_id) {
    if (o->state == IdState::kConnectRequest) {
      SidrRep r;
      r.status = SidrStatus::kRejected;
      o->port->agent->sidr_reply(o->sidr_id, r, now);
    }
    o->port->agent->destroy(o->sidr_id, now);
    forget_sidr(o);
    svc().flush(*o->port);
  }
  advance(o, IdEvent::kDestroy);
  // Events not yet acknowledged keep the memory until they are (queued ones are dropped when
  // read); librdmacm blocks here instead, which deadlocks an application that destroys an id
  // from its own event handler before acknowledging the event.
  if (o->events_out == 0) free_id(o);
}

}  // namespace uroce::cm
