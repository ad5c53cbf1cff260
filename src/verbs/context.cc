// Device contexts: ibv_open_device / ibv_close_device, the ops tables the inline verbs call
// through, and the per-context async event queue.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "engine/counters.h"
#include "util/log.h"
#include "objects.h"
#include "provider.h"
#include "transport/memory_table.h"

namespace uroce::verbs {
namespace {

constexpr const char* kContextFdName = "uroce-context";

// ibv_context_ops entries are called by the inline verbs without a NULL check, so every one an
// application can reach with a uroce object is filled. Those of features uroce does not have
// report EOPNOTSUPP.
int op_compat_query_device(ibv_context* ctx, ibv_device_attr* attr) {
  return with_errno(query_device(ctx, attr));
}
int op_compat_query_port(ibv_context* ctx, uint8_t port, struct _compat_ibv_port_attr* attr) {
  return with_errno(
      query_port(ctx, port, reinterpret_cast<ibv_port_attr*>(attr), kCompatPortAttrBytes));
}

// The inline verbs return what these return; like rdma-core's, a failure is also left in errno
// (entry.cc explains why). poll_cq fails with a negative errno.
template <auto F, typename... A>
int op_errno(A... a) {
  return with_errno(F(a...));
}
int op_poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  const int got = poll_cq(cq, n, wc);
  if (got < 0) errno = -got;
  return got;
}

void fill_ops(VContext* c) {
  ibv_context_ops& ops = c->vctx.context.ops;
  ops._compat_query_device = op_compat_query_device;
  ops._compat_query_port = op_compat_query_port;
  ops.poll_cq = op_poll_cq;
  ops.req_notify_cq = op_errno<req_notify_cq, ibv_cq*, int>;
  ops.post_send = op_errno<post_send, ibv_qp*, ibv_send_wr*, ibv_send_wr**>;
  ops.post_recv = op_errno<post_recv, ibv_qp*, ibv_recv_wr*, ibv_recv_wr**>;
  ops.post_srq_recv = op_errno<post_srq_recv, ibv_srq*, ibv_recv_wr*, ibv_recv_wr**>;  // srq.cc
  ops.alloc_mw = alloc_mw;  // sets errno itself
  ops.dealloc_mw = op_errno<dealloc_mw, ibv_mw*>;
  ops.bind_mw = op_errno<bind_mw, ibv_qp*, ibv_mw*, ibv_mw_bind*>;

  // verbs_context members: a NULL member makes the inline verb return EOPNOTSUPP (or fall back
  // to the legacy entry point), which is the truth for everything not listed here.
  verbs_context& v = c->vctx;
  v.query_port = op_errno<query_port, ibv_context*, uint8_t, ibv_port_attr*, size_t>;
  v.query_device_ex = op_errno<query_device_ex, ibv_context*, const ibv_query_device_ex_input*,
                               ibv_device_attr_ex*, size_t>;
  v.create_qp_ex = create_qp_ex;
  v.create_srq_ex = create_srq_ex;  // basic and XRC SRQs; tag matching reports EOPNOTSUPP
  v.open_xrcd = open_xrcd;          // xrc.cc
  v.close_xrcd = close_xrcd;
  v.get_srq_num = get_srq_num;
  v.open_qp = open_qp;
  v.create_cq_ex = create_cq_ex;
  v.query_rt_values = op_errno<query_rt_values, ibv_context*, ibv_values_ex*>;
  v.modify_qp_rate_limit = op_errno<modify_qp_rate_limit, ibv_qp*, ibv_qp_rate_limit_attr*>;
  // Prefetching on-demand regions, where the host has on-demand paging (memory.cc).
  if (transport::TableMemory::on_demand_supported())
    v.advise_mr = op_errno<advise_mr, ibv_pd*, ibv_advise_mr_advice, uint32_t, ibv_sge*, uint32_t>;
}

}  // namespace

int query_rt_values(ibv_context*, ibv_values_ex* values) {
  if (!values) return EINVAL;
  if (values->comp_mask & ~uint32_t(IBV_VALUES_MASK_RAW_CLOCK)) return EINVAL;
  // The device clock of completion timestamps (ibv_wc_read_completion_ts): CLOCK_MONOTONIC in
  // nanoseconds, hca_core_clock 1 GHz (src/engine/cq.cc).
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK)
    clock_gettime(CLOCK_MONOTONIC, &values->raw_clock);
  return 0;
}

VContext::VContext(VDevice* d, std::shared_ptr<Device> engine)
    : ContextAbi{}, udev(d), dev(std::move(engine)) {
  verbs_context& v = vctx;
  v.sz = sizeof(verbs_context);
  ibv_context& c = v.context;
  c.device = &udev->dev;
  c.abi_compat = __VERBS_ABI_IS_EXTENDED;
  // There is no uverbs command channel, but programs treat cmd_fd as a file they may dup and
  // hand to ibv_import_device (pyverbs' shared-PD tests do): an inert memfd whose name marks it
  // as a uroce context (is_context_fd), or -1 if none can be had.
  c.cmd_fd = memfd_create(kContextFdName, MFD_CLOEXEC);
  c.async_fd = async.fd();
  c.num_comp_vectors = 1;
  pthread_mutex_init(&c.mutex, nullptr);
  fill_ops(this);
  // Port state changes are unaffiliated events: every open context receives them.
  port_listener = dev->add_port_listener([this](ibv_event_type type) {
    ibv_async_event ev{};
    ev.element.port_num = 1;  // a uroce device has one port
    ev.event_type = type;
    async.push(ev);
  });
}

VContext::~VContext() {
  dev->remove_port_listener(port_listener);
  if (vctx.context.cmd_fd >= 0) close(vctx.context.cmd_fd);
  pthread_mutex_destroy(&vctx.context.mutex);
}

bool is_context_fd(int fd) {
  char path[64], target[128];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  // memfds read as "/memfd:NAME (deleted)".
  return std::strncmp(target, "/memfd:", 7) == 0 &&
         std::strncmp(target + 7, kContextFdName, std::strlen(kContextFdName)) == 0;
}

bool VContext::live_cq(VCq* cq) {
  std::lock_guard<std::mutex> g(mu);
  return cqs.count(cq) != 0;
}

bool VContext::live_qp(VQp* qp) {
  std::lock_guard<std::mutex> g(mu);
  return qps.count(qp) != 0;
}

ibv_context* open_device(ibv_device* dev) {
  VDevice* d = to_v(dev);
  std::string err;
  std::shared_ptr<Device> engine;
  try {
    engine = d->acquire(&err);
  } catch (const std::exception& e) {  // nothing may unwind through the C ABI
    err = e.what();
  }
  if (!engine) {
    uroce::log().error("cannot open device {}: {}", d->cfg.name, err);
    errno = ENODEV;
    return nullptr;
  }
  try {
    auto* c = new VContext(d, std::move(engine));
    return to_ibv(c);
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
  } catch (const std::exception& e) {  // no eventfd for the async queue
    uroce::log().error("cannot open device {}: {}", d->cfg.name, e.what());
    errno = EMFILE;
  }
  return nullptr;
}

int close_device(ibv_context* ctx) {
  VContext* c = to_v(ctx);
  // Like the kernel on close of the uverbs fd, release what the application left behind so the
  // engine stops referring to it.
  destroy_context_objects(c);
  delete c;
  return 0;
}

int query_counters(ibv_context* ctx, uroce_counter* out, int max) {
  int n = 0;
  to_v(ctx)->dev->counters().for_each([&](const char* name, uint64_t value) {
    if (n < max) out[n] = uroce_counter{name, value};
    ++n;
  });
  return n;
}

EventElement event_element(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_CQ_ERR:
      return EventElement::kCq;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return EventElement::kQp;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      return EventElement::kSrq;
    case IBV_EVENT_WQ_FATAL:
      return EventElement::kWq;
    default:
      return EventElement::kNone;
  }
}

namespace {

// Counts an event handed out for `obj` (ibv_get_async_event); destroy waits until as many are
// acknowledged.
template <class Obj>
void count_reported(Obj* obj, pthread_mutex_t* mutex) {
  pthread_mutex_lock(mutex);
  ++obj->async_events_reported;
  pthread_mutex_unlock(mutex);
}

// Counts an acknowledged event on the object it names and wakes a destroy waiting for it
// (ibv_destroy_cq/qp/srq wait until every event they had is acknowledged).
template <class Obj>
void count_acked(Obj* obj, uint32_t Obj::*completed) {
  pthread_mutex_lock(&obj->mutex);
  ++(obj->*completed);
  pthread_cond_signal(&obj->cond);
  pthread_mutex_unlock(&obj->mutex);
}

}  // namespace

int get_async_event(ibv_context* ctx, ibv_async_event* ev) {
  VContext* c = to_v(ctx);
  for (;;) {
    int rc = c->async.get(ev);
    if (rc) {
      errno = rc;
      return -1;
    }
    // An event whose object was destroyed while it was queued is skipped.
    switch (event_element(ev->event_type)) {
      case EventElement::kCq: {
        VCq* cq = to_v(ev->element.cq);
        if (!c->live_cq(cq)) continue;
        count_reported(cq, &cq->cq.mutex);
        return 0;
      }
      case EventElement::kQp: {
        VQp* qp = to_v(ev->element.qp);
        if (!c->live_qp(qp)) continue;
        count_reported(qp, &qp->qpx.qp_base.mutex);
        return 0;
      }
      case EventElement::kSrq: {
        VSrq* srq = to_v(ev->element.srq);
        if (!c->live_srq(srq)) continue;
        count_reported(srq, &srq->srq.mutex);
        return 0;
      }
      case EventElement::kWq:
      case EventElement::kNone:
        return 0;  // port and device events are not tied to an object; uroce has no WQs
    }
  }
}

void ack_async_event(ibv_async_event* ev) {
  switch (event_element(ev->event_type)) {
    case EventElement::kCq:
      return count_acked(ev->element.cq, &ibv_cq::async_events_completed);
    case EventElement::kQp:
      return count_acked(ev->element.qp, &ibv_qp::events_completed);
    case EventElement::kSrq:
      return count_acked(ev->element.srq, &ibv_srq::events_completed);
    case EventElement::kWq:
    case EventElement::kNone:
      return;
  }
}

}  // namespace uroce::verbs
