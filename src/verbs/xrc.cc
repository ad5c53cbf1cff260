// XRC domains and XRC receive QPs: ibv_open_xrcd / ibv_close_xrcd, ibv_get_srq_num, and the
// receive (target) QP's life — created by ibv_create_qp_ex, opened again by ibv_open_qp, gone
// with its last handle (ibv_open_xrcd(3), ibv_open_qp(3), ibv_create_qp_ex(3)). XRC SRQs are
// made in srq.cc, XRC send QPs in qp.cc; the transport carries the XRCETH (transport/srq.h,
// transport/qp.cc).
//
// Domains are shared as the kernel shares them (ib_uverbs_open_xrcd): the opens of one file on a
// device share its domain (O_CREAT creates it when there is none, O_EXCL refuses one that
// exists, without O_CREAT a missing one is EINVAL); fd -1 makes a domain of its own. A handle of
// a domain on a file closes at once, the domain staying while anything uses it; the one handle
// of a domain not on a file cannot close while SRQs or QPs use the domain (EBUSY). Sharing spans
// the contexts of this process: another process opening the same file gets a domain of its own
// (docs/verbs.md, "XRC").
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <new>

#include "objects.h"
#include "provider.h"
#include "transport/qp_state.h"
#include "util/log.h"

namespace uroce::verbs {

XrcDomain::~XrcDomain() {
  if (!on_file || udev == nullptr) return;
  std::lock_guard<std::mutex> g(udev->xrc_mu);
  auto it = udev->xrc_files.find(file);
  if (it != udev->xrc_files.end() && it->second.expired()) udev->xrc_files.erase(it);
}

void TgtQp::qp_event(uint32_t, ibv_event_type type) {
  // Every handle of the QP learns of it, each on its own context (ibv_open_qp(3): the opened QP
  // gets the events of the QP).
  std::lock_guard<std::mutex> g(mu);
  for (VQp* h : handles) {
    ibv_async_event ev{};
    ev.element.qp = to_ibv(h);
    ev.event_type = type;
    h->ctx->async.push(ev);
  }
}

TgtQp::~TgtQp() {
  if (tqp != nullptr) dom->dev->destroy_qp(tqp);
  std::lock_guard<std::mutex> g(dom->mu);
  --dom->users;
}

ibv_xrcd* open_xrcd(ibv_context* ctx, ibv_xrcd_init_attr* attr) {
  const auto refuse = [](int err, const char* why) -> ibv_xrcd* {
    log().debug("ibv_open_xrcd: {}: {}", err == EBADF ? "EBADF" : "EINVAL", why);
    errno = err;
    return nullptr;
  };
  if (!attr) return refuse(EINVAL, "init_attr is NULL");
  // The kernel takes both fields (ib_uverbs_open_xrcd); rdma-core's callers always set them.
  constexpr uint32_t kNeeded = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  if ((attr->comp_mask & ~kNeeded) || (attr->comp_mask & kNeeded) != kNeeded)
    return refuse(EINVAL, "comp_mask must be IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS");
  if (attr->oflags & ~(O_CREAT | O_EXCL))
    return refuse(EINVAL, "oflags other than O_CREAT, O_EXCL");
  VContext* c = to_v(ctx);
  VDevice* udev = c->udev;
  std::shared_ptr<XrcDomain> dom;
  try {
    if (attr->fd == -1) {
      dom = std::make_shared<XrcDomain>();
    } else {
      struct stat st {};
      if (fstat(attr->fd, &st) != 0) return refuse(EBADF, "fd is not an open file");
      const std::pair<dev_t, ino_t> key{st.st_dev, st.st_ino};
      std::lock_guard<std::mutex> g(udev->xrc_mu);
      auto it = udev->xrc_files.find(key);
      if (it != udev->xrc_files.end()) dom = it->second.lock();
      if (dom && (attr->oflags & O_EXCL))
        return refuse(EINVAL, "O_EXCL: the file already has an XRC domain");
      if (!dom && !(attr->oflags & O_CREAT))
        return refuse(EINVAL, "no XRC domain on this file and no O_CREAT");
      if (!dom) {
        dom = std::make_shared<XrcDomain>();
        dom->on_file = true;
        dom->file = key;
        dom->udev = udev;
        udev->xrc_files[key] = dom;
      }
    }
    if (dom->id == 0) {
      dom->dev = c->dev;
      dom->id = c->dev->alloc_xrcd();
    }
    auto* x = new VXrcd();
    x->ctx = c;
    x->dom = dom;
    x->xrcd.context = ctx;
    std::lock_guard<std::mutex> g(c->mu);
    c->xrcds.insert(x);
    return &x->xrcd;
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
    return nullptr;
  }
}

int close_xrcd(ibv_xrcd* xrcd) {
  if (!xrcd) return EINVAL;
  VXrcd* x = to_v(xrcd);
  VContext* c = x->ctx;
  {
    std::lock_guard<std::mutex> g(x->dom->mu);
    // A domain of its own (fd -1) goes with its one handle, which SRQs and QPs still in it keep
    // open; one on a file outlives its handles while anything uses it.
    if (!x->dom->on_file && x->dom->users > 0) return EBUSY;
  }
  {
    std::lock_guard<std::mutex> g(c->mu);
    c->xrcds.erase(x);
  }
  delete x;
  return 0;
}

int get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
  if (!srq || !srq_num) return EINVAL;
  VSrq* s = to_v(srq);
  // Only an XRC SRQ has a number requests name it by; a basic SRQ is reached through its QPs.
  if (s->srq_num == 0) return EOPNOTSUPP;
  *srq_num = s->srq_num;
  return 0;
}

// A new handle on `tgt` in context `c`, as ibv_create_qp_ex or ibv_open_qp return it.
static ibv_qp* add_tgt_handle(VContext* c, const std::shared_ptr<TgtQp>& tgt, void* qp_context) {
  VQp* qp = nullptr;
  try {
    qp = new VQp();
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
    return nullptr;
  }
  qp->ctx = c;
  qp->tgt = tgt;
  qp->tqp = tgt->tqp;
  ibv_qp_attr cur{};
  ibv_qp_init_attr init{};
  c->dev->query_qp(tgt->tqp, cur, init);
  init_qp_abi(qp, to_ibv(c), qp_context, IBV_QPT_XRC_RECV, cur.qp_state);
  {
    std::lock_guard<std::mutex> g(tgt->mu);
    tgt->handles.insert(qp);
  }
  std::lock_guard<std::mutex> g(c->mu);
  c->qps.insert(qp);
  return to_ibv(qp);
}

ibv_qp* create_xrc_recv_qp(ibv_context* ctx, ibv_qp_init_attr_ex* a) {
  VContext* c = to_v(ctx);
  const auto refuse = [](int err, const char* why) -> ibv_qp* {
    log().debug("ibv_create_qp_ex(XRC_RECV): {}: {}", err == EOPNOTSUPP ? "EOPNOTSUPP" : "EINVAL",
                why);
    errno = err;
    return nullptr;
  };
  if (!(a->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !a->xrcd || a->xrcd->context != ctx)
    return refuse(EINVAL, "an XRC receive QP needs an XRC domain of this context");
  {
    VXrcd* x = to_v(a->xrcd);
    std::lock_guard<std::mutex> g(c->mu);
    if (!c->xrcds.count(x)) return refuse(EINVAL, "xrcd is not an open XRC domain");
  }
  if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
    return refuse(EINVAL, "an XRC receive QP sends nothing (send_ops_flags)");
  // It has no queues of its own: the caps are zero, and no CQ, SRQ or PD belongs to it.
  a->cap = ibv_qp_cap{};
  const std::shared_ptr<XrcDomain>& dom = to_v(a->xrcd)->dom;
  std::shared_ptr<TgtQp> tgt;
  try {
    tgt = std::make_shared<TgtQp>();
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
    return nullptr;
  }
  tgt->dom = dom;
  {
    std::lock_guard<std::mutex> g(dom->mu);
    ++dom->users;  // ~TgtQp gives it back, whether or not the QP comes to be
  }
  transport::QpInit init;
  init.type = IBV_QPT_XRC_RECV;
  init.local_ip = c->dev->addr();
  init.port_mtu = c->dev->mtu_bytes();
  init.xrcd = dom->id;
  init.events = tgt.get();
  int err = 0;
  try {
    tgt->tqp = c->dev->create_qp(init, &err);
  } catch (const std::bad_alloc&) {
    err = ENOMEM;
  }
  if (!tgt->tqp) {
    errno = err ? err : ENOMEM;
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> g(dom->mu);
    dom->tgt_qps[tgt->tqp->qpn()] = tgt;
  }
  return add_tgt_handle(c, tgt, a->qp_context);
}

ibv_qp* open_qp(ibv_context* ctx, ibv_qp_open_attr* a) {
  const auto refuse = [](int err, const char* why) -> ibv_qp* {
    log().debug("ibv_open_qp: {}: {}", err == ENOENT ? "ENOENT" : "EINVAL", why);
    errno = err;
    return nullptr;
  };
  if (!a) return refuse(EINVAL, "attr is NULL");
  constexpr uint32_t kNeeded = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if ((a->comp_mask & ~(kNeeded | IBV_QP_OPEN_ATTR_CONTEXT)) || (a->comp_mask & kNeeded) != kNeeded)
    return refuse(EINVAL, "comp_mask must name the QP number, the XRC domain and the type");
  if (transport::stored_int(a->qp_type) != IBV_QPT_XRC_RECV)
    return refuse(EINVAL, "only XRC receive QPs are opened (qp_type IBV_QPT_XRC_RECV)");
  VContext* c = to_v(ctx);
  if (!a->xrcd || a->xrcd->context != ctx) return refuse(EINVAL, "xrcd is not of this context");
  VXrcd* x = to_v(a->xrcd);
  {
    std::lock_guard<std::mutex> g(c->mu);
    if (!c->xrcds.count(x)) return refuse(EINVAL, "xrcd is not an open XRC domain");
  }
  std::shared_ptr<TgtQp> tgt;
  {
    std::lock_guard<std::mutex> g(x->dom->mu);
    auto it = x->dom->tgt_qps.find(a->qp_num);
    if (it != x->dom->tgt_qps.end()) tgt = it->second.lock();
  }
  // The kernel answers a number it does not know in the domain with EINVAL too.
  if (!tgt) return refuse(EINVAL, "no XRC receive QP of that number in the domain (this process)");
  return add_tgt_handle(c, tgt,
                        (a->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? a->qp_context : nullptr);
}

void close_tgt_handle(VQp* qp) {
  std::shared_ptr<TgtQp> tgt = std::move(qp->tgt);
  {
    std::lock_guard<std::mutex> g(tgt->mu);
    tgt->handles.erase(qp);
  }
  // The last handle destroys the QP (~TgtQp, when `tgt` goes); its number leaves the domain's
  // list first. ibv_open_qp takes a new reference under the same lock, so none can appear
  // between the count and the erase.
  std::lock_guard<std::mutex> g(tgt->dom->mu);
  if (tgt.use_count() == 1) tgt->dom->tgt_qps.erase(tgt->tqp->qpn());
}

void destroy_context_xrcds(VContext* c) {
  std::unique_lock<std::mutex> g(c->mu);
  const auto xrcds = std::exchange(c->xrcds, {});
  g.unlock();
  for (VXrcd* x : xrcds) delete x;
}

}  // namespace uroce::verbs
