// Queue pairs: creation, the state machine calls (the transport validates transitions and
// attribute masks, IBTA ch. 10.3), and posting. Posting converts each work request into a
// transport WQE after validating its shape; like rdma-core providers, a bad WR fails with a
// positive errno and *bad_wr pointing at it, and the WRs before it are posted.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "ah.h"
#include "util/log.h"
#include "objects.h"
#include "provider.h"
#include "transport/qp_state.h"
#include "transport/wr_opcode.h"

namespace uroce::verbs {
namespace {

// IBV_SEND_* flags an RC send WR may carry. IBV_SEND_IP_CSUM is for raw packet QPs only.
constexpr unsigned kRcSendFlags =
    IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;

constexpr int kQpInitKnownMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                                 IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
                                 IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
                                 IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

// Checks of a modify_qp request that need the device (the transport checks the rest): the one
// port, the one P_Key, the one source GID, RoCE's mandatory GRH with a destination of the device's
// address family, and a
// path MTU the port supports. Returns the attribute refused and why, or {0, nullptr}.
struct Refused {
  int attr = 0;
  const char* why = nullptr;
  // What to do about it, for a refusal a user meets by running a program as is (a RoCE address
  // the program built for InfiniBand): said once at the default log level (warn_once).
  const char* fix = nullptr;
};
Refused check_device_attrs(VQp* qp, const ibv_qp_attr& a, int mask) {
  if ((mask & IBV_QP_PORT) && a.port_num != 1) return {IBV_QP_PORT, "port_num must be 1"};
  if ((mask & IBV_QP_PKEY_INDEX) && a.pkey_index != 0)
    return {IBV_QP_PKEY_INDEX, "pkey_index must be 0 (one P_Key)"};
  if (mask & IBV_QP_AV) {
    const ibv_ah_attr& ah = a.ah_attr;
    // RoCE addresses by GID: GRH required (Annex A16/A17).
    if (!ah.is_global) return {IBV_QP_AV, "ah_attr.is_global is 0: RoCE needs the GRH", kFixNoGrh};
    if (ah.grh.sgid_index != 0 &&
        !(ah.grh.sgid_index == transport::kRoceV1GidIndex && qp->ctx->dev->roce_v1()))
      return {IBV_QP_AV,
              qp->ctx->dev->roce_v1() ? "ah_attr.grh.sgid_index must be 0 (RoCEv2) or 1 (RoCE v1)"
                                      : "ah_attr.grh.sgid_index must be 0",
              kFixGidIndex};
    // The device's own family only (an IPv4-mapped DGID on an IPv4 device, IPv6 on an IPv6 one).
    wire::IpAddr dst;
    if (const char* why = dgid_destination(qp->ctx->dev->is_ipv6(), ah.grh.dgid, &dst))
      return {IBV_QP_AV, why, kFixIpv6Gid};
    if (ah.port_num != 0 && ah.port_num != 1) return {IBV_QP_AV, "ah_attr.port_num must be 0 or 1"};
  }
  if (mask & IBV_QP_PATH_MTU) {
    // Read as the int the C caller stored: a value outside enum ibv_mtu is a bad attribute, not
    // something to load as the enum (in C++ that is undefined, and UBSan says so).
    static_assert(sizeof(a.path_mtu) == sizeof(int));
    int mtu;
    std::memcpy(&mtu, &a.path_mtu, sizeof mtu);
    if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096)
      return {IBV_QP_PATH_MTU, "path_mtu is not an ibv_mtu (IBV_MTU_256..IBV_MTU_4096)"};
    unsigned bytes = 128u << mtu;  // IBV_MTU_256 = 1
    if (bytes > qp->ctx->dev->mtu_bytes())
      return {IBV_QP_PATH_MTU, "path_mtu above the port's active MTU (ibv_query_port)"};
  }
  return {};
}

// UROCE_LOG=debug: which attribute an ibv_modify_qp refused, and why.
void log_refused_modify(VQp* qp, ibv_qp_state cur, const ibv_qp_attr& a, int mask,
                        const Refused& r) {
  // Read as the int the caller stored: the refusal may be that it is no ibv_qp_state.
  const char* next = (mask & IBV_QP_STATE)
                         ? transport::to_string(ibv_qp_state(std::clamp(
                               transport::stored_int(a.qp_state), 0, int(IBV_QPS_UNKNOWN))))
                         : "same state";
  log().debug("ibv_modify_qp(QP {:#x}, {} -> {}, mask {}): EINVAL: {}{}{}", qp->qpx.qp_base.qp_num,
              transport::to_string(cur), next, transport::attr_mask_to_string(mask),
              r.attr ? transport::attr_mask_to_string(r.attr) : "", r.attr ? ": " : "", r.why);
  if (r.fix) warn_once(fmt::format("ibv_modify_qp: EINVAL: {}; {}", r.why, r.fix));
}

// A QP reset or destroyed leaves no completion of its own in its CQs (Cq::clean). In RESET the
// transport produces none, so nothing can arrive after the cleaning.
void clean_cqs(VQp* qp) {
  const uint32_t qpn = qp->qpx.qp_base.qp_num;
  // An XRC send QP has no receive CQ; an XRC receive QP completes into its SRQs' CQs, which
  // other receive QPs share: what it completed there stays, as on an RNIC.
  if (qp->scq) qp->scq->impl.clean(qpn);
  if (qp->rcq && qp->rcq != qp->scq) qp->rcq->impl.clean(qpn);
}

// A work request refused before it reaches the queue: UROCE_LOG=debug names the field.
int refuse_wr(const VQp* qp, const char* verb, uint64_t wr_id, int err, const char* why) {
  log().debug("{}(QP {:#x}): {} for wr_id {:#x}: {}", verb, qp->qpx.qp_base.qp_num,
              err == EOPNOTSUPP ? "EOPNOTSUPP" : "EINVAL", wr_id, why);
  return err;
}

int to_send_wqe(const VQp* qp, const ibv_send_wr& wr, transport::SendWqe& w) {
  const auto refuse = [&](int err, const char* why) {
    return refuse_wr(qp, "ibv_post_send", wr.wr_id, err, why);
  };
  // Read as the int the C caller stored (transport::stored_int; found by fuzz_post_wr): loading
  // a value outside the enum as ibv_wr_opcode is undefined in C++.
  if (const int op = transport::stored_int(wr.opcode);
      op < IBV_WR_RDMA_WRITE || op > IBV_WR_ATOMIC_WRITE)
    return refuse(EINVAL, "opcode is not an ibv_wr_opcode");
  const transport::WrOpcodeInfo& op = transport::wr_opcode_info(wr.opcode);
  if (!op.supported) return refuse(EOPNOTSUPP, "opcode not implemented (docs/verbs.md)");
  if (wr.send_flags & ~kRcSendFlags)
    return refuse(EINVAL, "send_flags has a flag other than FENCE, SIGNALED, SOLICITED, INLINE");
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > qp->cap.max_send_sge)
    return refuse(EINVAL, "num_sge negative or above the QP's max_send_sge");
  if (wr.num_sge > 0 && !wr.sg_list) return refuse(EINVAL, "sg_list is NULL");

  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.send_flags = wr.send_flags;
  w.imm_be = 0;
  w.remote_addr = 0;
  w.rkey = 0;
  w.compare_add = 0;
  w.swap = 0;
  // XRC: the SRQ at the destination, named in every request (ibv_post_send(3)).
  w.xrc_srqn = qp->qpx.qp_base.qp_type == IBV_QPT_XRC_SEND ? wr.qp_type.xrc.remote_srqn : 0;
  w.ud_dst_ip = {};
  w.ud_remote_qpn = w.ud_remote_qkey = 0;
  w.ud_traffic_class = 0;
  w.ud_roce_v1 = false;
  // Local operations on the key table: no data, no destination (mw.cc, send_queue.h). The
  // scatter/gather list of such a WR is ignored, as by rdma-core providers.
  if (wr.opcode == IBV_WR_LOCAL_INV) {
    w.imm_be = wr.invalidate_rkey;
    w.num_sge = 0;
    w.inline_len = 0;
    return (wr.send_flags & IBV_SEND_INLINE) ? EINVAL : 0;
  }
  if (wr.opcode == IBV_WR_BIND_MW) {
    if (wr.send_flags & IBV_SEND_INLINE) return EINVAL;
    return mw_bind_wqe(qp->ctx, wr.bind_mw.mw, wr.bind_mw.rkey, wr.bind_mw.bind_info, w);
  }
  if (qp->qpx.qp_base.qp_type == IBV_QPT_UD) {
    if (int rc = ud_dest(qp->qpx.qp_base.context, wr, w)) return rc;
  }
  // What the WR holds for its opcode (the opcode table's row).
  if (op.flags & transport::kWrImm) w.imm_be = wr.imm_data;
  if (op.flags & transport::kWrInvalidate) w.imm_be = wr.invalidate_rkey;
  if (op.flags & transport::kWrRdma) {
    w.remote_addr = wr.wr.rdma.remote_addr;
    w.rkey = wr.wr.rdma.rkey;
  }
  if (op.flags & transport::kWrAtomic) {
    w.remote_addr = wr.wr.atomic.remote_addr;
    w.rkey = wr.wr.atomic.rkey;
    w.compare_add = wr.wr.atomic.compare_add;
    w.swap = wr.wr.atomic.swap;
  }

  w.num_sge = 0;
  w.inline_len = 0;
  if (wr.send_flags & IBV_SEND_INLINE) {
    // Inline data is copied now: the application may reuse its buffer as soon as post returns,
    // and inline SGEs carry no lkey to check (ibv_post_send(3)).
    if (!(op.flags & transport::kWrInline))
      return refuse(EINVAL, "IBV_SEND_INLINE with an opcode that sends no data of its own");
    uint64_t total = 0;
    for (int i = 0; i < wr.num_sge; ++i) total += wr.sg_list[i].length;
    if (total > qp->cap.max_inline_data)
      return refuse(EINVAL, "inline data above the QP's max_inline_data");
    uint32_t off = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
      const ibv_sge& s = wr.sg_list[i];
      if (s.length == 0) continue;
      std::memcpy(w.inline_data.data() + off, reinterpret_cast<const void*>(s.addr), s.length);
      off += s.length;
    }
    w.inline_len = off;
    return 0;
  }
  for (int i = 0; i < wr.num_sge; ++i) {
    w.sge[i] = transport::Sge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
  }
  w.num_sge = static_cast<uint32_t>(wr.num_sge);
  return 0;
}

int to_recv_wqe(const VQp* qp, const ibv_recv_wr& wr, transport::RecvWqe& w) {
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > qp->cap.max_recv_sge)
    return refuse_wr(qp, "ibv_post_recv", wr.wr_id, EINVAL,
                     "num_sge negative or above the QP's max_recv_sge");
  if (wr.num_sge > 0 && !wr.sg_list)
    return refuse_wr(qp, "ibv_post_recv", wr.wr_id, EINVAL, "sg_list is NULL");
  w.wr_id = wr.wr_id;
  for (int i = 0; i < wr.num_sge; ++i)
    w.sge[i] = transport::Sge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
  w.num_sge = static_cast<uint32_t>(wr.num_sge);
  return 0;
}

// Per-thread staging for converted WQEs, so that posting allocates nothing in steady state.
thread_local std::vector<transport::SendWqe> t_send_wqes;
thread_local std::vector<ibv_send_wr*> t_send_wrs;
thread_local std::vector<transport::RecvWqe> t_recv_wqes;
thread_local std::vector<ibv_recv_wr*> t_recv_wrs;

}  // namespace

void init_qp_abi(VQp* qp, ibv_context* ctx, void* qp_context, ibv_qp_type type,
                 ibv_qp_state state) {
  ibv_qp& q = qp->qpx.qp_base;
  q.context = ctx;
  q.qp_context = qp_context;
  q.qp_num = qp->tqp->qpn();
  q.handle = q.qp_num;
  q.state = state;
  q.qp_type = type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  q.events_completed = 0;
  qp->qpx.comp_mask = 0;
}

void VQp::qp_event(uint32_t, ibv_event_type type) {
  ibv_async_event ev{};
  ev.element.qp = to_ibv(this);
  ev.event_type = type;
  ctx->async.push(ev);
}

ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* a) {
  VContext* c = to_v(ctx);
  // A refusal: errno, and UROCE_LOG=debug names the field.
  const auto refuse = [](int err, const char* why) -> ibv_qp* {
    log().debug("ibv_create_qp: {}: {}", err == EOPNOTSUPP ? "EOPNOTSUPP" : "EINVAL", why);
    errno = err;
    return nullptr;
  };
  if (!a) return refuse(EINVAL, "init_attr is NULL");
  if (a->comp_mask & ~static_cast<uint32_t>(kQpInitKnownMask))
    return refuse(EINVAL, "comp_mask has unknown bits");
  // Creation flags and a TSO header size are accepted when they ask for nothing: no creation
  // flag (scatter FCS, CVLAN stripping, source QPN, self-multicast blocking…) is implemented, and
  // TSO is for raw packet QPs. RSS is not implemented.
  if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags != 0)
    return refuse(EOPNOTSUPP, "create_flags: no creation flag is supported");
  if ((a->comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) && a->max_tso_header != 0)
    return refuse(EOPNOTSUPP, "max_tso_header: TSO is not supported");
  constexpr uint32_t kImplemented = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                                    IBV_QP_INIT_ATTR_CREATE_FLAGS |
                                    IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_XRCD;
  if (a->comp_mask & ~kImplemented) return refuse(EOPNOTSUPP, "comp_mask: RSS is not supported");
  // An XRC receive QP has neither PD, CQs nor queues: made apart (xrc.cc).
  if (transport::stored_int(a->qp_type) == IBV_QPT_XRC_RECV) return create_xrc_recv_qp(ctx, a);
  if (a->comp_mask & IBV_QP_INIT_ATTR_XRCD)
    return refuse(EINVAL, "comp_mask: an XRC domain is for XRC receive QPs");
  const bool xrc_send = transport::stored_int(a->qp_type) == IBV_QPT_XRC_SEND;
  const bool send_ops = a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if (send_ops) {
    if (int rc = check_send_ops(a->send_ops_flags, xrc_send ? IBV_QPT_XRC_SEND : IBV_QPT_RC))
      return refuse(rc, "send_ops_flags asks for an operation not implemented");
  }
  if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || a->pd->context != ctx)
    return refuse(EINVAL, "no PD of this context");
  if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD &&
      !xrc_send)  // raw packet QPs: not implemented
    return refuse(EOPNOTSUPP, "qp_type: only RC, UC, UD and XRC are implemented");
  VSrq* srq = nullptr;
  if (xrc_send) {
    // The send half receives nothing (ibv_create_qp_ex(3)): no receive CQ, SRQ or queue.
    if (a->srq) return refuse(EINVAL, "srq: an XRC send QP receives nothing");
    a->recv_cq = nullptr;
    a->cap.max_recv_wr = 0;
    a->cap.max_recv_sge = 0;
  }
  if (a->srq) {
    // SRQs feed RC and UD QPs (IBTA 10.2.9.1); UC QPs take from their own receive queue.
    if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UD)
      return refuse(EOPNOTSUPP, "srq: only RC and UD QPs take an SRQ");
    srq = a->srq->context == ctx ? to_v(a->srq) : nullptr;
    std::lock_guard<std::mutex> g(c->mu);
    if (!srq || !c->srqs.count(srq)) return refuse(EINVAL, "srq is not an SRQ of this context");
    ++srq->qp_refs;  // now, so that the SRQ cannot go away while the QP is being created
    // ibv_create_qp(3): the receive caps are ignored when an SRQ is given.
    a->cap.max_recv_wr = 0;
    a->cap.max_recv_sge = 0;
  }
  // Drops that reference again on every failure below; the QP keeps it on success.
  struct SrqRef {
    VContext* c;
    VSrq* s;
    ~SrqRef() {
      if (!s) return;
      std::lock_guard<std::mutex> g(c->mu);
      --s->qp_refs;
    }
  } srq_ref{c, srq};
  if (!a->send_cq || a->send_cq->context != ctx ||
      (!xrc_send && (!a->recv_cq || a->recv_cq->context != ctx)))
    return refuse(EINVAL, "send_cq or recv_cq missing or of another context");
  ibv_qp_cap& cap = a->cap;
  if (cap.max_send_wr > transport::kMaxQpWr || cap.max_recv_wr > transport::kMaxQpWr)
    return refuse(EINVAL, "cap.max_send_wr or cap.max_recv_wr above the device's max_qp_wr");
  if (cap.max_send_sge > transport::kMaxSge || cap.max_recv_sge > transport::kMaxSge)
    return refuse(EINVAL, "cap.max_send_sge or cap.max_recv_sge above the device's max_sge");
  if (cap.max_inline_data > transport::kMaxInlineData)
    return refuse(EINVAL, "cap.max_inline_data above what a uroce QP can inline (256 bytes)");
  // Report what the QP really provides: the SGE counts asked for (at least one) and the full
  // inline capacity, which every uroce QP has; providers may return more than requested.
  cap.max_send_sge = std::max<uint32_t>(cap.max_send_sge, 1);
  cap.max_recv_sge = std::max<uint32_t>(cap.max_recv_sge, 1);
  cap.max_inline_data = transport::kMaxInlineData;
  if (srq || xrc_send) cap.max_recv_sge = 0;  // the SRQ's max_sge applies; XRC send: none

  VPd* pd = to_v(a->pd);
  VCq* scq = to_v(a->send_cq);
  VCq* rcq = a->recv_cq ? to_v(a->recv_cq) : nullptr;
  VQp* qp = nullptr;
  try {
    qp = new VQp();
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
    return nullptr;
  }
  qp->ctx = c;
  qp->scq = scq;
  qp->rcq = rcq;
  qp->cap = cap;
  qp->sq_sig_all = a->sq_sig_all != 0;

  transport::QpInit init;
  init.type = a->qp_type;
  init.port_mtu = c->dev->mtu_bytes();  // UD messages are limited by the port MTU
  init.pd = pd->handle;
  init.local_ip = c->dev->addr();
  init.max_send_wr = cap.max_send_wr;
  init.max_recv_wr = cap.max_recv_wr;
  init.max_send_sge = cap.max_send_sge;
  init.max_recv_sge = cap.max_recv_sge;
  init.max_inline_data = cap.max_inline_data;
  init.sq_sig_all = qp->sq_sig_all;
  init.send_cq = &scq->impl;
  init.recv_cq = rcq ? &rcq->impl : nullptr;
  init.srq = srq ? srq->impl.get() : nullptr;
  init.events = qp;
  int err = 0;
  try {
    qp->tqp = c->dev->create_qp(init, &err);
  } catch (const std::bad_alloc&) {
    qp->tqp = nullptr;
    err = ENOMEM;
  }
  if (!qp->tqp) {
    delete qp;
    errno = err ? err : ENOMEM;
    return nullptr;
  }

  init_qp_abi(qp, ctx, a->qp_context, a->qp_type, IBV_QPS_RESET);
  ibv_qp& q = qp->qpx.qp_base;
  q.pd = a->pd;
  q.send_cq = a->send_cq;
  q.recv_cq = a->recv_cq;
  q.srq = a->srq;
  if (send_ops) init_send_ops(qp, a->send_ops_flags);
  if (send_ops && a->qp_type == IBV_QPT_UD) qp->qpx.wr_set_ud_addr = wr_set_ud_addr;
  if (send_ops && xrc_send) qp->qpx.wr_set_xrc_srqn = wr_set_xrc_srqn;

  std::lock_guard<std::mutex> g(c->mu);
  ++scq->qp_refs;
  if (rcq) ++rcq->qp_refs;
  qp->srq = srq;
  srq_ref.s = nullptr;  // the QP holds the reference (released by destroy_qp)
  c->qps.insert(qp);
  return &q;
}

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (!attr) {
    errno = EINVAL;
    return nullptr;
  }
  auto ex = shared_init_attr<ibv_qp_init_attr_ex>(*attr);
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_qp* qp = create_qp_ex(pd->context, &ex);
  if (qp) attr->cap = ex.cap;  // the caps actually granted (ibv_create_qp(3))
  return qp;
}

int modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  VQp* qp = to_v(ibqp);
  if (!attr) {
    log().debug("ibv_modify_qp(QP {:#x}): EINVAL: attr is NULL", ibqp->qp_num);
    return EINVAL;
  }
  if (const Refused r = check_device_attrs(qp, *attr, mask); r.why != nullptr) {
    log_refused_modify(qp, ibqp->state, *attr, mask, r);
    return EINVAL;
  }
  int rc = qp->ctx->dev->modify_qp(qp->tqp, *attr, mask);
  if (rc) {
    if (log().should_log(spdlog::level::debug)) {
      // The transport refused it: ask its validation again, against the state the QP is in
      // (the state field of ibv_qp is the application's view and may be stale).
      ibv_qp_attr cur{};
      ibv_qp_init_attr init{};
      qp->ctx->dev->query_qp(qp->tqp, cur, init);
      const transport::ModifyCheck c = transport::check_modify(ibqp->qp_type, cur.qp_state, *attr,
                                                               mask, qp->ctx->dev->is_ipv6());
      log_refused_modify(qp, cur.qp_state, *attr, mask,
                         Refused{c.attrs, c.why ? c.why : "refused by the transport"});
    }
    return rc;
  }
  // The state field of struct ibv_qp is part of the ABI: applications read it directly.
  if (mask & IBV_QP_STATE) ibqp->state = attr->qp_state;
  if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET) clean_cqs(qp);
  return 0;
}

int modify_qp_rate_limit(ibv_qp* qp, ibv_qp_rate_limit_attr* attr) {
  if (!attr || attr->comp_mask) return EINVAL;
  // A burst size or typical packet size tunes ConnectX's shaper, and only with a rate (mlx5
  // refuses them alone). uroce's pacer paces each packet at the rate, with the device's own
  // burst allowance (UROCE_CC pacer_burst): they are accepted with a rate and not used.
  if ((attr->max_burst_sz || attr->typical_pkt_sz) && !attr->rate_limit) return EINVAL;
  ibv_qp_attr a{};
  a.rate_limit = attr->rate_limit;
  return modify_qp(qp, &a, IBV_QP_RATE_LIMIT);
}

int query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
  VQp* qp = to_v(ibqp);
  if (!attr || !init) return EINVAL;
  std::memset(attr, 0, sizeof *attr);
  std::memset(init, 0, sizeof *init);
  qp->ctx->dev->query_qp(qp->tqp, *attr, *init);
  // What the verbs layer knows better than the transport: the objects and the granted caps.
  init->qp_context = ibqp->qp_context;
  init->send_cq = ibqp->send_cq;
  init->recv_cq = ibqp->recv_cq;
  init->srq = ibqp->srq;
  init->qp_type = ibqp->qp_type;
  init->sq_sig_all = qp->sq_sig_all;
  init->cap = qp->cap;
  attr->cap = qp->cap;
  return 0;
}

int destroy_qp(ibv_qp* ibqp) {
  VQp* qp = to_v(ibqp);
  VContext* c = qp->ctx;
  if (qp->tgt) {
    // An XRC receive QP's handle: closed; the QP goes with the last one (xrc.cc).
    close_tgt_handle(qp);
  } else {
    int rc = c->dev->destroy_qp(qp->tqp);
    if (rc) return rc;
    clean_cqs(qp);
  }
  {
    std::lock_guard<std::mutex> g(c->mu);
    c->qps.erase(qp);
    if (qp->scq) --qp->scq->qp_refs;
    if (qp->rcq) --qp->rcq->qp_refs;
    if (qp->srq) --qp->srq->qp_refs;
  }
  // Affiliated async events handed out must be acknowledged first (ibv_destroy_qp(3)).
  pthread_mutex_lock(&ibqp->mutex);
  while (ibqp->events_completed != qp->async_events_reported)
    pthread_cond_wait(&ibqp->cond, &ibqp->mutex);
  pthread_mutex_unlock(&ibqp->mutex);
  pthread_cond_destroy(&ibqp->cond);
  pthread_mutex_destroy(&ibqp->mutex);
  delete qp;
  return 0;
}

// UROCE_LOG=debug: why the transport refused a WQE (transport/qp.h, post_send and post_recv).
static void log_refused_post(VQp* qp, const char* verb, uint64_t wr_id, int rc) {
  if (!log().should_log(spdlog::level::debug)) return;
  ibv_qp_attr cur{};
  ibv_qp_init_attr init{};
  qp->ctx->dev->query_qp(qp->tqp, cur, init);
  log().debug("{}(QP {:#x}, {}): {} for wr_id {:#x}: {}", verb, qp->qpx.qp_base.qp_num,
              transport::to_string(cur.qp_state), rc == ENOMEM ? "ENOMEM" : "EINVAL", wr_id,
              rc == ENOMEM ? "the queue is full (max_send_wr / max_recv_wr)"
                           : "not accepted in this state or by this QP type, or a malformed "
                             "READ/ATOMIC/local operation (ibv_post_send(3))");
}

// ibv_post_send / ibv_post_recv: converts the chain into WQEs up to the first invalid WR, posts
// that valid prefix in one call (ibv_post_send(3): the WRs before *bad_wr are posted), and
// reports the first WR that was not posted. `to_wqe(wr, wqe)` validates one WR; `post(wqes, n,
// &bad_index)` posts n WQEs. The staging vectors are per thread and keep their capacity.
namespace {
template <typename Wr, typename Wqe, typename ToWqe, typename Post>
int post_chain(Wr* wr, Wr** bad, std::vector<Wqe>& wqes, std::vector<Wr*>& wrs, ToWqe to_wqe,
               Post post) {
  if (wr && !wr->next) {
    // One WR, what a latency-bound program posts: staged on the stack. The per-thread vectors
    // are thread_local objects with destructors, which a shared library reaches through
    // __tls_get_addr on every use (a callgrind of ibv_rc_pingpong: nine calls a round trip
    // between posting a send and a receive).
    // Not value-initialised: a SendWqe is ~600 bytes, most of them SGE and inline room a small
    // WR leaves alone; the converter writes every field the transport reads (as it does into a
    // reused staging slot), and an aggregate's object begins in the storage implicitly.
    static_assert(std::is_aggregate_v<Wqe> && std::is_trivially_destructible_v<Wqe>);
    alignas(Wqe) unsigned char storage[sizeof(Wqe)];
    Wqe& one = *std::launder(reinterpret_cast<Wqe*>(storage));
    int err = to_wqe(*wr, one);
    if (!err) {
      size_t bad_index = 0;
      err = post(&one, 1, &bad_index);
    }
    if (err && bad) *bad = wr;
    return err;
  }
  wrs.clear();
  int err = 0;
  Wr* first_bad = nullptr;
  Wr* w = wr;
  try {
    for (; w; w = w->next) {
      if (wqes.size() <= wrs.size()) wqes.emplace_back();
      err = to_wqe(*w, wqes[wrs.size()]);
      if (err) {
        first_bad = w;
        break;
      }
      wrs.push_back(w);
    }
  } catch (const std::bad_alloc&) {  // growing the staging vectors: WRs so far are still valid
    err = ENOMEM;
    first_bad = w;
  }
  if (!wrs.empty()) {
    size_t bad_index = 0;
    int rc = post(wqes.data(), wrs.size(), &bad_index);
    if (rc) {
      if (bad) *bad = bad_index < wrs.size() ? wrs[bad_index] : wrs.front();
      return rc;
    }
  }
  if (err) {
    if (bad) *bad = first_bad;
    return err;
  }
  return 0;
}
}  // namespace

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) {
  VQp* qp = to_v(ibqp);
  return post_chain(
      wr, bad, t_send_wqes, t_send_wrs,
      [qp](const ibv_send_wr& w, transport::SendWqe& wqe) { return to_send_wqe(qp, w, wqe); },
      [qp](const transport::SendWqe* wqes, size_t n, size_t* bad_index) {
        const int rc = qp->ctx->dev->post_send(qp->tqp, wqes, n, bad_index);
        if (rc) log_refused_post(qp, "ibv_post_send", wqes[*bad_index].wr_id, rc);
        return rc;
      });
}

int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  VQp* qp = to_v(ibqp);
  if (qp->srq) {  // its receives are posted to the SRQ (ibv_post_recv(3))
    if (bad) *bad = wr;
    return EINVAL;
  }
  return post_chain(
      wr, bad, t_recv_wqes, t_recv_wrs,
      [qp](const ibv_recv_wr& w, transport::RecvWqe& wqe) { return to_recv_wqe(qp, w, wqe); },
      [qp](const transport::RecvWqe* wqes, size_t n, size_t* bad_index) {
        const int rc = qp->ctx->dev->post_recv(qp->tqp, wqes, n, bad_index);
        if (rc) log_refused_post(qp, "ibv_post_recv", wqes[*bad_index].wr_id, rc);
        return rc;
      });
}

ibv_qp_ex* qp_to_qp_ex(ibv_qp* ibqp) {
  // Only QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS have the ibv_wr_* interface, as in
  // rdma-core.
  VQp* qp = to_v(ibqp);
  return qp->send_ops ? &qp->qpx : nullptr;
}

void destroy_context_objects(VContext* c) {
  // QPs first (the engine stops completing into CQs), then SRQs, CQs, channels, MRs and PDs.
  // Events the application never acknowledged do not block a close.
  std::unique_lock<std::mutex> g(c->mu);
  const auto qps = std::exchange(c->qps, {});
  const auto srqs = std::exchange(c->srqs, {});
  const auto ahs = std::exchange(c->ahs, {});
  const auto cqs = std::exchange(c->cqs, {});
  const auto chs = std::exchange(c->channels, {});
  const auto mrs = std::exchange(c->mrs, {});
  const auto pds = std::exchange(c->pds, {});
  g.unlock();
  for (VQp* qp : qps) {
    if (qp->tgt)
      close_tgt_handle(qp);
    else
      c->dev->destroy_qp(qp->tqp);
    delete qp;
  }
  for (VSrq* srq : srqs) destroy_srq_object(srq);
  destroy_context_xrcds(c);  // after the SRQs and QPs that use the domains
  for (VAh* ah : ahs) delete ah;
  for (VCq* cq : cqs) delete cq;
  for (VChannel* ch : chs) delete ch;
  destroy_context_mws(c);  // windows hold their MRs (dereg_mr is EBUSY while bound) and PDs
  for (VMr* mr : mrs) {
    c->dev->dereg_mr(mr->mr.lkey);
    delete mr;
  }
  for (VPd* pd : pds) {
    c->dev->dealloc_pd(pd->handle);
    delete pd;
  }
}

}  // namespace uroce::verbs
