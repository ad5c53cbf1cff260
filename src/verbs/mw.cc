// Memory windows (IBTA 10.6.7, ibv_alloc_mw(3), ibv_bind_mw(3)). The engine's key table holds
// each window's state (bound region, rights, current R_Key) and enforces it on every remote
// access; this layer allocates the ibv_mw objects and turns binds into send queue work requests:
// - type 1 windows are bound by the ibv_bind_mw verb, which posts an IBV_WR_BIND_MW for the
//   window with the next R_Key (ibv_inc_rkey) and updates mw->rkey, as rdma-core providers do;
//   a zero-length bind unbinds;
// - type 2 windows are bound by an IBV_WR_BIND_MW work request (ibv_post_send, ibv_wr_bind_mw)
//   naming the new R_Key, whose low 8 bits the consumer chooses, and are invalidated by
//   LOCAL_INV or a peer's SEND with invalidate.
// Rule violations found when the bind executes (MR without IBV_ACCESS_MW_BIND, range outside
// the MR, a bound type 2 window, PD mismatch, rights the MR cannot back) complete the work
// request with IBV_WC_MW_BIND_ERR, as on hardware; only malformed requests fail at post time.
#include <cerrno>
#include <new>

#include "objects.h"
#include "provider.h"

namespace uroce::verbs {
namespace {

// Send flags meaningful on a bind: a bind carries no data and raises no remote event.
constexpr unsigned kBindSendFlags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;

// Shape checks common to both ways of binding; the key table checks the rest on execution.
int fill_bind(VContext* c, ibv_mw* ibmw, uint32_t rkey, const ibv_mw_bind_info& info,
              transport::SendWqe& w) {
  if (ibmw == nullptr || ibmw->context != to_ibv(c)) return EINVAL;
  if (info.mr == nullptr) {
    // Only a type 1 unbind names no region (ibv_bind_mw(3)).
    if (info.length != 0 || info.addr != 0 || ibmw->type != IBV_MW_TYPE_1) return EINVAL;
  } else if (info.mr->context != to_ibv(c)) {
    return EINVAL;
  }
  w.opcode = IBV_WR_BIND_MW;
  w.num_sge = 0;
  w.inline_len = 0;
  w.bind = transport::MwBind{};
  w.bind.mw = ibmw->handle;
  w.bind.new_rkey = rkey;
  w.bind.mr_lkey = info.mr ? info.mr->lkey : 0;
  w.bind.addr = info.addr;
  w.bind.length = info.length;
  w.bind.access = info.mw_access_flags;
  return 0;
}

}  // namespace

int mw_bind_wqe(VContext* c, ibv_mw* ibmw, uint32_t rkey, const ibv_mw_bind_info& info,
                transport::SendWqe& w) {
  // Type 1 windows are bound through the verb only (IBTA 10.6.7.2.1).
  if (ibmw == nullptr || ibmw->type != IBV_MW_TYPE_2) return EINVAL;
  return fill_bind(c, ibmw, rkey, info, w);
}

ibv_mw* alloc_mw(ibv_pd* ibpd, ibv_mw_type type) {
  VPd* pd = to_v(ibpd);
  VContext* c = pd->ctx;
  try {
    auto* mw = new VMw();
    uint32_t handle = 0, rkey = 0;
    const int rc = c->dev->alloc_mw(pd->handle, type, &handle, &rkey);
    if (rc) {
      delete mw;
      errno = rc;
      return nullptr;
    }
    mw->ctx = c;
    mw->mw.context = to_ibv(c);
    mw->mw.pd = ibpd;
    mw->mw.rkey = rkey;
    mw->mw.handle = handle;
    mw->mw.type = type;
    std::lock_guard<std::mutex> g(c->mu);
    c->mws.insert(mw);
    return &mw->mw;
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
    return nullptr;
  }
}

int dealloc_mw(ibv_mw* ibmw) {
  VMw* mw = to_v(ibmw);
  VContext* c = mw->ctx;
  const int rc = c->dev->dealloc_mw(ibmw->handle);
  if (rc) return rc;
  {
    std::lock_guard<std::mutex> g(c->mu);
    c->mws.erase(mw);
  }
  delete mw;
  return 0;
}

int bind_mw(ibv_qp* ibqp, ibv_mw* ibmw, ibv_mw_bind* mw_bind) {
  if (ibqp == nullptr || ibmw == nullptr || mw_bind == nullptr) return EINVAL;
  VMw* mw = to_v(ibmw);
  VContext* c = mw->ctx;
  if (ibqp->context != to_ibv(c) || ibmw->type != IBV_MW_TYPE_1) return EINVAL;
  if (mw_bind->send_flags & ~kBindSendFlags) return EINVAL;
  VQp* qp = to_v(ibqp);
  transport::SendWqe w;
  w.wr_id = mw_bind->wr_id;
  w.send_flags = mw_bind->send_flags;
  const uint32_t rkey = ibv_inc_rkey(ibmw->rkey);
  int rc = fill_bind(c, ibmw, rkey, mw_bind->bind_info, w);
  if (rc) return rc;
  size_t bad = 0;
  rc = c->dev->post_send(qp->tqp, &w, 1, &bad);
  if (rc) return rc;
  // The key the peer must use from now on (ibv_bind_mw(3)); the old one dies when the bind
  // executes.
  ibmw->rkey = rkey;
  return 0;
}

void destroy_context_mws(VContext* c) {
  std::set<VMw*> mws;
  {
    std::lock_guard<std::mutex> g(c->mu);
    mws.swap(c->mws);
  }
  for (VMw* mw : mws) {
    c->dev->dealloc_mw(mw->mw.handle);
    delete mw;
  }
}

}  // namespace uroce::verbs
