// Shared receive queues: ibv_create_srq / ibv_create_srq_ex (basic SRQs), ibv_modify_srq,
// ibv_query_srq, ibv_destroy_srq and ibv_post_srq_recv (an inline verb that calls
// ibv_context_ops::post_srq_recv). The queue itself is transport::Srq; RC QPs created with an SRQ
// take their receive WQEs from it (transport/srq.h). Posting takes only the queue's own lock
// (transport/recv_queue.h); every other call on the queue holds the device lock, which also
// serialises the responders of the QPs that consume from it.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <new>
#include <vector>

#include "objects.h"
#include "provider.h"
#include "transport/qp_state.h"
#include "util/log.h"

namespace uroce::verbs {
namespace {

constexpr uint32_t kSrqInitKnownMask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                       IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                                       IBV_SRQ_INIT_ATTR_TM;

thread_local std::vector<transport::RecvWqe> t_srq_wqes;
// ibv_srq::handle: unique in the process (no kernel object numbers it).
std::atomic<uint32_t> g_next_handle{1};

int to_recv_wqe(const VSrq* s, const ibv_recv_wr& wr, transport::RecvWqe& w) {
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > s->impl->max_sge()) return EINVAL;
  if (wr.num_sge > 0 && !wr.sg_list) return EINVAL;
  w.wr_id = wr.wr_id;
  for (int i = 0; i < wr.num_sge; ++i)
    w.sge[i] = transport::Sge{wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
  w.num_sge = static_cast<uint32_t>(wr.num_sge);
  return 0;
}

}  // namespace

bool VContext::live_srq(VSrq* srq) {
  std::lock_guard<std::mutex> g(mu);
  return srqs.count(srq) != 0;
}

void VSrq::srq_limit_reached() {
  ibv_async_event ev{};
  ev.element.srq = to_ibv(this);
  ev.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
  ctx->async.push(ev);
}

ibv_srq* create_srq(ibv_pd* ibpd, ibv_srq_init_attr* attr, const transport::SrqInit* xrc) {
  if (!ibpd || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  VContext* c = to_v(ibpd->context);
  {
    std::lock_guard<std::mutex> g(c->mu);
    if (c->srqs.size() >= DeviceLimits::kMaxSrq) {
      errno = ENOMEM;  // the limit ibv_query_device reports as max_srq
      return nullptr;
    }
  }
  transport::SrqInit init;
  if (xrc) init = *xrc;  // an XRC SRQ's domain, PD and CQ
  // At least what was asked for (ibv_create_srq(3)); srq_limit is irrelevant at creation.
  init.max_wr = attr->attr.max_wr;
  init.max_sge = std::max<uint32_t>(attr->attr.max_sge, 1);
  if (int rc = transport::Srq::check_init(init)) {
    errno = rc;
    return nullptr;
  }
  VSrq* s = nullptr;
  try {
    s = new VSrq();
    init.events = s;  // the limit event reaches the application through this object
    s->impl = std::make_unique<transport::Srq>(init);
  } catch (const std::bad_alloc&) {
    delete s;
    errno = ENOMEM;
    return nullptr;
  }
  s->ctx = c;
  ibv_srq& q = s->srq;
  q.context = ibpd->context;
  q.srq_context = attr->srq_context;
  q.pd = ibpd;
  q.handle = g_next_handle.fetch_add(1, std::memory_order_relaxed);
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  q.events_completed = 0;
  attr->attr.max_wr = init.max_wr;
  attr->attr.max_sge = init.max_sge;
  attr->attr.srq_limit = 0;
  std::lock_guard<std::mutex> g(c->mu);
  c->srqs.insert(s);
  return &q;
}

// An XRC SRQ (IBV_SRQT_XRC; IBTA 10.2.9.4): a basic SRQ that also has a domain, a CQ of its own
// and a number on the device that XRC requests name it by.
ibv_srq* create_xrc_srq(ibv_context* ctx, ibv_srq_init_attr_ex* attr) {
  const auto refuse = [](const char* why) -> ibv_srq* {
    log().debug("ibv_create_srq_ex(XRC): EINVAL: {}", why);
    errno = EINVAL;
    return nullptr;
  };
  constexpr uint32_t kNeeded = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
  if ((attr->comp_mask & kNeeded) != kNeeded || !attr->xrcd || !attr->cq || !attr->pd)
    return refuse("an XRC SRQ needs an XRC domain, a CQ and a PD");
  if (attr->xrcd->context != ctx || attr->cq->context != ctx || attr->pd->context != ctx)
    return refuse("xrcd, cq or pd of another context");
  VContext* c = to_v(ctx);
  VXrcd* x = to_v(attr->xrcd);
  VCq* cq = to_v(attr->cq);
  {
    std::lock_guard<std::mutex> g(c->mu);
    if (!c->xrcds.count(x)) return refuse("xrcd is not an open XRC domain");
    if (!c->cqs.count(cq)) return refuse("cq is not a CQ of this context");
    ++cq->qp_refs;  // the CQ cannot go while the SRQ completes into it
  }
  ibv_srq_init_attr base{};
  base.srq_context = attr->srq_context;
  base.attr = attr->attr;
  transport::SrqInit extra;
  extra.xrcd = x->dom->id;
  extra.pd = to_v(attr->pd)->handle;
  extra.cq = &cq->impl;
  ibv_srq* s = create_srq(attr->pd, &base, &extra);
  if (!s) {
    std::lock_guard<std::mutex> g(c->mu);
    --cq->qp_refs;
    return nullptr;
  }
  VSrq* v = to_v(s);
  v->srq_num = c->dev->add_xrc_srq(v->impl.get());
  if (v->srq_num == 0) {
    destroy_srq(s);  // every number in use: as out of SRQs
    errno = ENOMEM;
    return nullptr;
  }
  v->xrcd = x->dom;
  v->cq = cq;
  {
    std::lock_guard<std::mutex> g(x->dom->mu);
    ++x->dom->users;
  }
  attr->attr = base.attr;
  return s;
}

ibv_srq* create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* attr) {
  if (!attr || (attr->comp_mask & ~kSrqInitKnownMask)) {
    errno = EINVAL;
    return nullptr;
  }
  const int type = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)
                       ? transport::stored_int(attr->srq_type)
                       : int(IBV_SRQT_BASIC);
  if (type == IBV_SRQT_XRC) return create_xrc_srq(ctx, attr);
  // Tag-matching SRQs need the tag-matching engine: not implemented.
  if (type != IBV_SRQT_BASIC ||
      (attr->comp_mask & (IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM))) {
    errno = type == IBV_SRQT_TM || (attr->comp_mask & IBV_SRQ_INIT_ATTR_TM) ? EOPNOTSUPP : EINVAL;
    return nullptr;
  }
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd || attr->pd->context != ctx) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_srq_init_attr base{};
  base.srq_context = attr->srq_context;
  base.attr = attr->attr;
  ibv_srq* s = create_srq(attr->pd, &base);
  if (s) attr->attr = base.attr;
  return s;
}

int modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  if (!attr) return EINVAL;
  VSrq* s = to_v(ibsrq);
  std::lock_guard<std::mutex> g(s->ctx->dev->lock());
  return s->impl->modify(*attr, mask);
}

int query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  if (!attr) return EINVAL;
  VSrq* s = to_v(ibsrq);
  std::lock_guard<std::mutex> g(s->ctx->dev->lock());
  s->impl->query(*attr);
  return 0;
}

// What an SRQ holds beyond itself: an XRC SRQ's number on the device (a message in progress
// into it at an XRC receive QP is dropped there), its CQ reference and its place in the domain.
static void release_xrc(VSrq* s, bool cq_ref) {
  if (s->srq_num == 0) return;
  s->ctx->dev->remove_xrc_srq(s->srq_num);
  s->srq_num = 0;
  if (cq_ref && s->cq) {
    std::lock_guard<std::mutex> g(s->ctx->mu);
    --s->cq->qp_refs;
  }
  if (s->xrcd) {
    std::lock_guard<std::mutex> g(s->xrcd->mu);
    --s->xrcd->users;
  }
}

void destroy_srq_object(VSrq* s) {
  release_xrc(s, /*cq_ref=*/false);  // the context's CQs go right after
  delete s;
}

int destroy_srq(ibv_srq* ibsrq) {
  VSrq* s = to_v(ibsrq);
  VContext* c = s->ctx;
  {
    std::lock_guard<std::mutex> g(c->mu);
    if (s->qp_refs > 0) return EBUSY;  // QPs still take from it (ibv_destroy_srq(3))
    c->srqs.erase(s);
  }
  release_xrc(s, /*cq_ref=*/true);
  // Limit events handed out must be acknowledged first, as for QPs and CQs.
  pthread_mutex_lock(&ibsrq->mutex);
  while (ibsrq->events_completed != s->async_events_reported)
    pthread_cond_wait(&ibsrq->cond, &ibsrq->mutex);
  pthread_mutex_unlock(&ibsrq->mutex);
  pthread_cond_destroy(&ibsrq->cond);
  pthread_mutex_destroy(&ibsrq->mutex);
  delete s;
  return 0;
}

int post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  VSrq* s = to_v(ibsrq);
  auto& wqes = t_srq_wqes;
  // Validate and convert outside the device lock; post the valid prefix (ibv_post_srq_recv(3):
  // the WRs before *bad_wr are posted).
  size_t n = 0;
  int err = 0;
  ibv_recv_wr* w = wr;
  try {
    for (; w; w = w->next, ++n) {
      if (wqes.size() <= n) wqes.emplace_back();
      err = to_recv_wqe(s, *w, wqes[n]);
      if (err) break;
    }
  } catch (const std::bad_alloc&) {
    err = ENOMEM;
  }
  // Without the device lock, as ibv_post_recv (transport/recv_queue.h).
  size_t posted = 0;
  for (; posted < n; ++posted) {
    if (int rc = s->impl->post_recv(wqes[posted])) {
      err = rc;
      break;
    }
  }
  if (err) {
    if (bad) {
      *bad = wr;
      for (size_t i = 0; i < posted; ++i) *bad = (*bad)->next;
    }
    return err;
  }
  return 0;
}

}  // namespace uroce::verbs
