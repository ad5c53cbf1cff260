// Completion channels and completion queues, including the extended poll API of ibv_create_cq_ex.
// The engine's Cq holds the completions and the arm state; CompChannel holds the eventfd.
#include <cerrno>
#include <ctime>
#include <memory>
#include <new>

#include "objects.h"
#include "provider.h"

namespace uroce::verbs {
namespace {

// Work-completion fields the extended CQ can report: those ibv_wc carries, and the time the
// completion was queued. CVLAN, flow tags and tag matching are not produced by the transport.
constexpr uint64_t kSupportedWcFlags =
    IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
    IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS |
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

uint64_t clock_ns(clockid_t id) {
  timespec t{};
  clock_gettime(id, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}

// ---- extended poll API: ibv_start_poll / ibv_next_poll / ibv_end_poll and the readers ----
int ex_next(ibv_cq_ex* cqx) {
  VCq* cq = to_v(cqx);
  if (cq->impl.poll(1, &cq->cur, &cq->cur_ts) != 1) return ENOENT;
  cqx->status = cq->cur.status;
  cqx->wr_id = cq->cur.wr_id;
  return 0;
}
int ex_start(ibv_cq_ex* cqx, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return EINVAL;
  int rc = ex_next(cqx);
  // As in poll_cq: an empty CQ lets the polling thread drive progress, and is looked at again.
  if (rc == ENOENT) {
    to_v(cqx)->ctx->dev->poll_progress();
    rc = ex_next(cqx);
  }
  to_v(cqx)->ctx->dev->note_poll_result(rc == 0);
  return rc;
}
void ex_end(ibv_cq_ex*) {}
// ibv_cq_ex's read_* callbacks for the fields ibv_wc carries: each returns its member of the
// completion the last ibv_start_poll/ibv_next_poll fetched, as the callback's type `R`.
template <class R, auto Member>
R ex_read(ibv_cq_ex* c) {
  return to_v(c)->cur.*Member;
}
// The device clock is CLOCK_MONOTONIC in nanoseconds (hca_core_clock 1 GHz, query.cc).
uint64_t ex_completion_ts(ibv_cq_ex* c) {
  return to_v(c)->cur_ts;
}
// Wall-clock time of the same instant: the monotonic stamp shifted by the current offset between
// the two clocks (a wall-clock step between queueing and reading shifts it too, as an NIC's
// clock translation would).
uint64_t ex_completion_wallclock_ns(ibv_cq_ex* c) {
  const uint64_t mono = clock_ns(CLOCK_MONOTONIC);
  const uint64_t real = clock_ns(CLOCK_REALTIME);
  const uint64_t age = mono - to_v(c)->cur_ts;  // the stamp is never in the future
  return real - age;
}

VChannel* channel_of(ibv_context* ctx, ibv_comp_channel* ch, int* err) {
  *err = 0;
  if (!ch) return nullptr;
  // A channel of another context (or of a real device) cannot deliver uroce events.
  if (ch->context != ctx) {
    *err = EINVAL;
    return nullptr;
  }
  return to_v(ch);
}

VCq* make_cq(ibv_context* ctx, uint32_t cqe, void* cq_context, ibv_comp_channel* ibch,
             uint32_t comp_vector, bool timestamps = false) {
  VContext* c = to_v(ctx);
  if (cqe < 1 || cqe > DeviceLimits::kMaxCqe || comp_vector >= 1) {
    errno = EINVAL;
    return nullptr;
  }
  int err = 0;
  VChannel* ch = channel_of(ctx, ibch, &err);
  if (err) {
    errno = err;
    return nullptr;
  }
  try {
    auto cq = std::make_unique<VCq>(c, cqe, ch, timestamps);
    cq->cq.cq_context = cq_context;
    std::lock_guard<std::mutex> g(c->mu);
    if (c->cqs.size() >= DeviceLimits::kMaxCq) {
      errno = ENOMEM;  // the limit ibv_query_device reports as max_cq
      return nullptr;
    }
    if (ch) ++ch->ch.refcnt;
    c->cqs.insert(cq.get());
    return cq.release();
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
    return nullptr;
  }
}

}  // namespace

VCq::VCq(VContext* c, uint32_t cqe, VChannel* ch, bool timestamps)
    : CqAbi{},
      ctx(c),
      channel(ch),
      impl(cqe, ch ? &ch->impl : nullptr, to_ibv(this), &c->async, timestamps) {
  ibv_cq_ex& x = cq;
  x.context = &c->vctx.context;
  x.channel = ch ? &ch->ch : nullptr;
  x.cqe = static_cast<int>(cqe);
  // verbs_init_cq is libibverbs-internal: the event bookkeeping is initialised here.
  pthread_mutex_init(&x.mutex, nullptr);
  pthread_cond_init(&x.cond, nullptr);
  x.comp_events_completed = 0;
  x.async_events_completed = 0;
  x.start_poll = ex_start;
  x.next_poll = ex_next;
  x.end_poll = ex_end;
  x.read_opcode = ex_read<ibv_wc_opcode, &ibv_wc::opcode>;
  x.read_vendor_err = ex_read<uint32_t, &ibv_wc::vendor_err>;
  x.read_byte_len = ex_read<uint32_t, &ibv_wc::byte_len>;
  x.read_imm_data = ex_read<__be32, &ibv_wc::imm_data>;
  x.read_qp_num = ex_read<uint32_t, &ibv_wc::qp_num>;
  x.read_src_qp = ex_read<uint32_t, &ibv_wc::src_qp>;
  x.read_wc_flags = ex_read<unsigned, &ibv_wc::wc_flags>;
  x.read_slid = ex_read<uint32_t, &ibv_wc::slid>;
  x.read_sl = ex_read<uint8_t, &ibv_wc::sl>;
  x.read_dlid_path_bits = ex_read<uint8_t, &ibv_wc::dlid_path_bits>;
  x.read_completion_ts = ex_completion_ts;
  x.read_completion_wallclock_ns = ex_completion_wallclock_ns;
}

VChannel::~VChannel() {
  // A program that polled the channel's fd in its own loop had the port's wait fds added to its
  // set (Engine::watch_port_on).
  if (ctx) ctx->dev->forget_channel(impl);
}

ibv_comp_channel* create_comp_channel(ibv_context* ctx) {
  VContext* c = to_v(ctx);
  try {
    auto* ch = new VChannel();
    ch->ctx = c;
    ch->ch.context = ctx;
    ch->ch.fd = ch->impl.fd();
    ch->ch.refcnt = 0;
    std::lock_guard<std::mutex> g(c->mu);
    c->channels.insert(ch);
    return &ch->ch;
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
  } catch (const std::exception&) {  // no eventfd
    errno = EMFILE;
  }
  return nullptr;
}

int destroy_comp_channel(ibv_comp_channel* ibch) {
  VChannel* ch = to_v(ibch);
  VContext* c = ch->ctx;
  {
    std::lock_guard<std::mutex> g(c->mu);
    if (ch->ch.refcnt > 0) return EBUSY;  // CQs still deliver events to it
    c->channels.erase(ch);
  }
  delete ch;
  return 0;
}

ibv_cq* create_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ch,
                  int comp_vector) {
  if (cqe < 1 || comp_vector < 0) {
    errno = EINVAL;
    return nullptr;
  }
  VCq* cq =
      make_cq(ctx, static_cast<uint32_t>(cqe), cq_context, ch, static_cast<uint32_t>(comp_vector));
  return cq ? to_ibv(cq) : nullptr;
}

ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  if (!attr) {
    errno = EINVAL;
    return nullptr;
  }
  constexpr uint32_t kKnownMask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
  if ((attr->comp_mask & ~kKnownMask) || (attr->wc_flags & ~kSupportedWcFlags)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // A single-threaded CQ may be used from one thread only: the locked CQ satisfies that too.
  // Ignoring overrun is not offered (the CQ reports its overrun).
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
      (attr->flags & ~static_cast<uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED))) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
      (!attr->parent_domain || attr->parent_domain->context != ctx)) {
    errno = EINVAL;
    return nullptr;
  }
  // Only a CQ that can be asked for timestamps reads the clock per completion.
  const bool timestamps = attr->wc_flags & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                            IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK);
  VCq* cq = make_cq(ctx, attr->cqe, attr->cq_context, attr->channel, attr->comp_vector, timestamps);
  return cq ? &cq->cq : nullptr;
}

int destroy_cq(ibv_cq* ibcq) {
  VCq* cq = to_v(ibcq);
  VContext* c = cq->ctx;
  {
    std::lock_guard<std::mutex> g(c->mu);
    if (cq->qp_refs > 0) return EBUSY;  // a QP still completes into it
    c->cqs.erase(cq);
    if (cq->channel) --cq->channel->ch.refcnt;
  }
  // Every event handed to the application must be acknowledged before the CQ goes away
  // (ibv_get_cq_event(3)): wait for ibv_ack_cq_events / ibv_ack_async_event.
  pthread_mutex_lock(&cq->cq.mutex);
  while (cq->cq.comp_events_completed != cq->comp_events_reported ||
         cq->cq.async_events_completed != cq->async_events_reported)
    pthread_cond_wait(&cq->cq.cond, &cq->cq.mutex);
  pthread_mutex_unlock(&cq->cq.mutex);
  pthread_cond_destroy(&cq->cq.cond);
  pthread_mutex_destroy(&cq->cq.mutex);
  delete cq;
  return 0;
}

int resize_cq(ibv_cq* ibcq, int cqe) {
  VCq* cq = to_v(ibcq);
  if (cqe < 1 || static_cast<uint32_t>(cqe) > DeviceLimits::kMaxCqe) return EINVAL;
  int rc = cq->impl.resize(static_cast<uint32_t>(cqe));
  if (rc) return rc;
  cq->cq.cqe = cqe;
  return 0;
}

int get_cq_event(ibv_comp_channel* ibch, ibv_cq** out_cq, void** out_ctx) {
  VChannel* ch = to_v(ibch);
  for (;;) {
    void* cookie = nullptr;
    // The sleeping thread receives what wakes it (Device::get_cq_event).
    int rc = ch->ctx->dev->get_cq_event(ch->impl, &cookie);
    if (rc) {
      errno = rc;
      return -1;
    }
    auto* cq = static_cast<ibv_cq*>(cookie);
    // An event of a CQ destroyed after it was queued is dropped, as the kernel does.
    if (!ch->ctx->live_cq(to_v(cq))) continue;
    pthread_mutex_lock(&cq->mutex);
    ++to_v(cq)->comp_events_reported;
    pthread_mutex_unlock(&cq->mutex);
    *out_cq = cq;
    *out_ctx = cq->cq_context;
    return 0;
  }
}

void ack_cq_events(ibv_cq* cq, unsigned n) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += n;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
  if (n < 0 || (n > 0 && !wc)) return -EINVAL;
  VCq* vcq = to_v(cq);
  int got = vcq->impl.poll(n, wc);
  // An application that busy-polls drives progress itself when its CQ is empty, so its latency
  // does not depend on the engine thread being scheduled next to the spinning poller. The CQ is
  // looked at again whatever that pass did: while this thread waited (for the device, or on a
  // loaded host for a core), another one may have completed work — the engine thread takes the
  // receive side when a poller goes a handoff without polling — and a result older than that
  // contradicts what the program learns next by other means (libfabric's rxm read its CQ empty,
  // then its peer's rdma_cm disconnect, closed the connection and reported the last SEND, ACKed
  // before the disconnect was sent, as flushed).
  if (got == 0 && n > 0) {
    vcq->ctx->dev->poll_progress();
    got = vcq->impl.poll(n, wc);
  }
  if (n > 0) vcq->ctx->dev->note_poll_result(got > 0);
  return got;
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
  // Arming a CQ announces a wait for its event instead of polling: in ibv_get_cq_event, or
  // elsewhere, and then the engine receives meanwhile (Engine::on_arm).
  to_v(cq)->ctx->dev->on_arm();
  return to_v(cq)->impl.req_notify(solicited_only != 0);
}

}  // namespace uroce::verbs
