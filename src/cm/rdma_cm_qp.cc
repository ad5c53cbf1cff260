// rdma_cm's QPs (rdma_cm.h): the attributes the CM gives a connection's QP and the moves it makes
// itself, as the kernel's CM does (docs/rdma-cm.md, "QP transitions"): an RC QP to INIT at
// creation (a UD QP on to RTS), to RTR and RTS when the REP is taken (active) or in rdma_accept
// (passive), to ERR on a REJ, a timeout or rdma_disconnect. Also the QP, CQs and SRQ an id
// makes for the application, and its multicast groups.
#include <algorithm>

#include "ah.h"
#include "cm/rdma_cm.h"
#include "provider.h"
#include "util/log.h"

namespace uroce::cm {

namespace uv = uroce::verbs;

ibv_ah_attr ah_to(const IdObj* o) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.grh.dgid = gid_of(o->remote_ip);
  ah.grh.sgid_index = 0;
  ah.grh.hop_limit = 64;
  ah.grh.traffic_class = o->tos;
  ah.port_num = 1;
  return ah;
}

namespace {

int access_flags(const IdObj* o) {
  // As the kernel's CM: remote writes always, reads and atomics when responder resources exist.
  int f = IBV_ACCESS_REMOTE_WRITE;
  if (o->responder_resources) f |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  return f;
}

}  // namespace

int qp_attr_for(const IdObj* o, ibv_qp_state state, ibv_qp_attr* a, int* mask) {
  *a = {};
  a->qp_state = state;
  const bool ud = o->id.qp_type == IBV_QPT_UD;
  switch (state) {
    case IBV_QPS_INIT:
      a->pkey_index = 0;
      a->port_num = 1;
      *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (ud) {
        a->qkey = RDMA_UDP_QKEY;
        *mask |= IBV_QP_QKEY;
      } else {
        a->qp_access_flags = access_flags(o);
        *mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR:
      *mask = IBV_QP_STATE;
      if (ud) return 0;
      if (!id_knows_peer(o->state)) return EINVAL;
      a->ah_attr = ah_to(o);
      a->path_mtu = static_cast<ibv_mtu>(o->path_mtu);
      a->dest_qp_num = o->remote_qpn;
      // A REQ's or REP's Starting PSN is the PSN its sender expects to receive (IBTA 12.7.7,
      // 12.7.29; the kernel's cm.c sets rq_psn from its own and sq_psn from the peer's).
      a->rq_psn = o->local_psn;
      a->max_dest_rd_atomic = o->responder_resources;
      a->min_rnr_timer = kMinRnrTimer;
      *mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      return 0;
    case IBV_QPS_RTS:
      a->sq_psn = ud ? 0 : o->remote_psn;
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (ud) return 0;
      a->timeout = o->ack_timeout;
      a->retry_cnt = o->retry_count;
      a->rnr_retry = o->rnr_retry_count;
      a->max_rd_atomic = o->initiator_depth;
      *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      return 0;
    default:
      return EINVAL;
  }
}

int move_qp(IdObj* o, ibv_qp_state state) {
  ibv_qp_attr a;
  int mask;
  if (int rc = qp_attr_for(o, state, &a, &mask)) return rc;
  if (state == IBV_QPS_RTR && o->id.qp->state == IBV_QPS_INIT && o->id.qp_type != IBV_QPT_UD) {
    // The access flags follow the negotiated responder resources (set at INIT before they were
    // known): INIT → RTR takes them as an optional attribute.
    a.qp_access_flags = access_flags(o);
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  return uv::modify_qp(o->id.qp, &a, mask);
}

void qp_to_error(IdObj* o) {
  if (!o->id.qp) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  uv::modify_qp(o->id.qp, &a, IBV_QP_STATE);
}

// ---- the id's QP, CQs and SRQ ---------------------------------------------------------------

namespace {

int create_cqs(IdObj* o, ibv_qp_init_attr* attr) {
  // librdmacm creates a CQ (and completion channel) for each side the caller left NULL, and
  // keeps them in the id, where rdma_get_send_comp/rdma_get_recv_comp look for them.
  if (!attr->recv_cq) {
    o->id.recv_cq_channel = uv::create_comp_channel(o->id.verbs);
    if (!o->id.recv_cq_channel) return ENOMEM;
    o->id.recv_cq = uv::create_cq(o->id.verbs, std::max<int>(attr->cap.max_recv_wr, 1), &o->id,
                                  o->id.recv_cq_channel, 0);
    if (!o->id.recv_cq) return ENOMEM;
    attr->recv_cq = o->id.recv_cq;
  }
  if (!attr->send_cq) {
    o->id.send_cq_channel = uv::create_comp_channel(o->id.verbs);
    if (!o->id.send_cq_channel) return ENOMEM;
    o->id.send_cq = uv::create_cq(o->id.verbs, std::max<int>(attr->cap.max_send_wr, 1), &o->id,
                                  o->id.send_cq_channel, 0);
    if (!o->id.send_cq) return ENOMEM;
    attr->send_cq = o->id.send_cq;
  }
  return 0;
}

// The CQs and channels in the id, as librdmacm's rdma_destroy_qp destroys them — also those the
// application put there itself (rsockets does), and one CQ or channel serving both sides once.
void destroy_cqs(IdObj* o) {
  if (o->id.recv_cq) uv::destroy_cq(o->id.recv_cq);
  if (o->id.send_cq && o->id.send_cq != o->id.recv_cq) uv::destroy_cq(o->id.send_cq);
  if (o->id.recv_cq_channel) uv::destroy_comp_channel(o->id.recv_cq_channel);
  if (o->id.send_cq_channel && o->id.send_cq_channel != o->id.recv_cq_channel)
    uv::destroy_comp_channel(o->id.send_cq_channel);
  o->id.recv_cq = o->id.send_cq = nullptr;
  o->id.recv_cq_channel = o->id.send_cq_channel = nullptr;
}

}  // namespace

int create_qp(IdObj* o, ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (!o->id.verbs || !o->port) return EINVAL;  // not bound to a device yet
  if (!pd) pd = o->port->pd;
  if (pd->context != o->id.verbs) return EINVAL;
  if (o->id.qp) return EINVAL;
  ibv_qp_init_attr a = *attr;
  a.qp_type = o->id.qp_type;
  if (o->id.srq && !a.srq) a.srq = o->id.srq;
  if (int rc = create_cqs(o, &a)) {
    destroy_cqs(o);
    return rc;
  }
  ibv_qp* qp = uv::create_qp(pd, &a);
  if (!qp) {
    int rc = errno ? errno : ENOMEM;
    destroy_cqs(o);
    return rc;
  }
  o->id.qp = qp;
  o->id.pd = pd;
  attr->cap = a.cap;  // librdmacm returns the capabilities granted
  int rc = move_qp(o, IBV_QPS_INIT);
  if (rc == 0 && o->id.qp_type == IBV_QPT_UD) {
    rc = move_qp(o, IBV_QPS_RTR);
    if (rc == 0) rc = move_qp(o, IBV_QPS_RTS);
  }
  if (rc != 0) {
    uv::destroy_qp(qp);
    o->id.qp = nullptr;
    destroy_cqs(o);
    return rc;
  }
  return 0;
}

int create_qp_ex(IdObj* o, ibv_qp_init_attr_ex* attr) {
  // Only what ibv_qp_init_attr carries (and the PD) is served here.
  if (attr->comp_mask & ~static_cast<uint32_t>(IBV_QP_INIT_ATTR_PD)) return EOPNOTSUPP;
  auto a = uv::shared_init_attr<ibv_qp_init_attr>(*attr);
  ibv_pd* pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr;
  if (int rc = create_qp(o, pd, &a)) return rc;
  attr->cap = a.cap;
  return 0;
}

void destroy_qp(IdObj* o) {
  if (o->id.qp) {
    for (auto& [group, ctx] : o->mcast) {
      ibv_gid g = gid_of(group);
      uv::detach_mcast(o->id.qp, &g, 0);
    }
    uv::destroy_qp(o->id.qp);
    o->id.qp = nullptr;
  }
  destroy_cqs(o);
}

int create_srq(IdObj* o, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (!pd) pd = o->port ? o->port->pd : nullptr;
  if (!pd) return EINVAL;
  ibv_srq* srq = uv::create_srq(pd, attr);
  if (!srq) return errno;
  o->id.srq = srq;
  o->id.pd = pd;
  return 0;
}

void destroy_srq(IdObj* o) {
  uv::destroy_srq(o->id.srq);
  o->id.srq = nullptr;
}

// ---- multicast (UD ids; IPv4 groups joined locally, no SA) ----------------------------------

// IPv6 multicast (ff00::/8 groups, MLD) is not done: the UDP port joins IPv4 groups only. The
// kernel's CM does join IPv6 groups on RoCE devices, so this is uroce's limit, said as such.
int refuse_ipv6_multicast() {
  warn_once(
      "rdma_cm: rdma_join_multicast: EOPNOTSUPP: uroce joins IPv4 multicast groups only (on an "
      "IPv4 device); IPv6 multicast is not supported (docs/rdma-cm.md)");
  return fail(EOPNOTSUPP);
}

int join_multicast(IdObj* o, uint32_t group, void* context) {
  if ((group >> 28) != 0xe || o->id.qp_type != IBV_QPT_UD) return EINVAL;
  if (!o->port || o->mcast.count(group)) return EINVAL;
  if (o->port->is_v6()) {  // an IPv4 group from an IPv6 device: neither family fits
    refuse_ipv6_multicast();
    return EOPNOTSUPP;
  }
  if (o->id.qp) {
    ibv_gid gid = gid_of(group);
    if (int rc = uv::attach_mcast(o->id.qp, &gid, 0)) return rc;
  }
  o->mcast[group] = context;
  EventObj* e = new_event(o, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.grh.dgid = gid_of(group);
  ah.grh.hop_limit = 64;
  ah.port_num = 1;
  e->ev.param.ud.ah_attr = ah;
  e->ev.param.ud.qp_num = 0xffffff;  // the multicast QPN
  e->ev.param.ud.qkey = RDMA_UDP_QKEY;
  e->ev.param.ud.private_data = context;  // librdmacm hands the join's context back here
  post_event(o, e);
  return 0;
}

int leave_multicast(IdObj* o, uint32_t group) {
  auto it = o->mcast.find(group);
  if (it == o->mcast.end()) return EADDRNOTAVAIL;
  if (o->id.qp) {
    ibv_gid gid = gid_of(group);
    uv::detach_mcast(o->id.qp, &gid, 0);
  }
  o->mcast.erase(it);
  return 0;
}

}  // namespace uroce::cm
