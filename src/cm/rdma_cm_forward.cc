// Forwarding (rdma_cm.h). An id whose first address is not a uroce device's (a bind or a resolve
// source of another address or family, or a resolve whose route leaves from such an address) is
// handed to the system librdmacm, reached through dlvsym(RTLD_NEXT, name, "RDMACM_1.x") as
// src/verbs reaches libibverbs: the IdObj keeps a real id (`real`) on a real event channel behind
// the application's channel, and from then on every call on it goes to the real library. The
// real id's public fields are copied into the application's id after each call and event (pull),
// and those the application may set itself (qp, pd, srq, CQs) are copied back before each call
// (push). Real events are read from the real channel by rdma_get_cm_event and wrapped in an
// EventObj whose id and listen_id are the application's ids (a CONNECT_REQUEST makes the IdObj
// of its new id); acknowledging the wrapper acknowledges the real event. An async channel's fd
// is an epoll fd over uroce's event fd and, once it has one, the real channel's fd, so the
// application polls one fd for both. The real library is touched only when an id is forwarded
// (docs/rdma-cm.md, "Ids of other RDMA devices").
//
// The real library calls its own exports through the PLT (rdma_create_id calls
// rdma_create_event_channel, rdma_create_qp calls rdma_create_qp_ex, rsockets all of them), and
// under LD_PRELOAD those calls reach liburoce's exports with the real library's objects. A
// thread-local depth counts uroce's calls into the real library; while it is non-zero every
// export passes its arguments straight to the real function. rsockets, called by the
// application, is not inside such a call, so it still runs over uroce's rdma_cm.
#include <fcntl.h>
#include <sys/epoll.h>

#include "cm/rdma_cm.h"
#include "util/log.h"

namespace uroce::cm {

thread_local int t_in_real = 0;

// Under uroce-run, for every program linked against librdmacm.so.1; not for a program linked to
// liburoce alone.
bool real_present() {
  return UROCE_REAL(rdma_create_id, "RDMACM_1.0") != nullptr;
}

// 0, or the real library's errno (ENODEV without kernel RDMA). mu not held.
int real_channel(ChannelObj* ch, rdma_event_channel** out) {
  std::lock_guard<std::mutex> g(ch->real_mu);
  if (rdma_event_channel* r = ch->real.load(std::memory_order_acquire)) {
    *out = r;
    return 0;
  }
  auto create = UROCE_REAL(rdma_create_event_channel, "RDMACM_1.0");
  auto destroy = UROCE_REAL(rdma_destroy_event_channel, "RDMACM_1.0");
  if (!create || !destroy) return ENOSYS;
  rdma_event_channel* r;
  {
    InReal in;
    errno = 0;
    r = create();
  }
  if (!r) return errno ? errno : ENODEV;
  // get_event reads it without blocking and waits on the fds itself.
  int err = 0;
  int fl = fcntl(r->fd, F_GETFL);
  if (fl < 0 || fcntl(r->fd, F_SETFL, fl | O_NONBLOCK) < 0) err = errno;
  if (!err && ch->epfd >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = r->fd;
    if (epoll_ctl(ch->epfd, EPOLL_CTL_ADD, r->fd, &ev) < 0) err = errno;
  }
  if (err) {
    InReal in;
    destroy(r);
    return err;
  }
  ch->real.store(r, std::memory_order_release);
  *out = r;
  return 0;
}

void pull(IdObj* o) {
  const rdma_cm_id* r = o->real.load(std::memory_order_acquire);
  rdma_cm_id& id = o->id;
  id.verbs = r->verbs;
  id.route = r->route;  // path_rec points into the real id, alive as long as it
  id.port_num = r->port_num;
  id.ps = r->ps;
  id.qp_type = r->qp_type;
  id.qp = r->qp;
  id.pd = r->pd;
  id.srq = r->srq;
  id.send_cq = r->send_cq;
  id.recv_cq = r->recv_cq;
  id.send_cq_channel = r->send_cq_channel;
  id.recv_cq_channel = r->recv_cq_channel;
  o->pushed = {
      r->qp, r->pd, r->srq, r->send_cq, r->recv_cq, r->send_cq_channel, r->recv_cq_channel};
}

void push(IdObj* o) {
  rdma_cm_id* r = o->real.load(std::memory_order_acquire);
  const rdma_cm_id& id = o->id;
  const AppFields& p = o->pushed;
  if (id.qp != p.qp) r->qp = id.qp;
  if (id.pd != p.pd) r->pd = id.pd;
  if (id.srq != p.srq) r->srq = id.srq;
  if (id.send_cq != p.send_cq) r->send_cq = id.send_cq;
  if (id.recv_cq != p.recv_cq) r->recv_cq = id.recv_cq;
  if (id.send_cq_channel != p.send_cq_channel) r->send_cq_channel = id.send_cq_channel;
  if (id.recv_cq_channel != p.recv_cq_channel) r->recv_cq_channel = id.recv_cq_channel;
}

int forward_id(IdObj* o, const std::function<int(rdma_cm_id*)>& first, bool* no_rdma) {
  struct Opt {
    bool set;
    int name;
    uint8_t u8;
    int i;
    bool is_int;
  };
  Opt opts[4];
  {
    std::lock_guard<std::mutex> g(svc().mu());
    opts[0] = {o->tos_set, RDMA_OPTION_ID_TOS, o->tos, 0, false};
    opts[1] = {o->reuseaddr_set, RDMA_OPTION_ID_REUSEADDR, 0, o->reuseaddr ? 1 : 0, true};
    opts[2] = {o->afonly_set, RDMA_OPTION_ID_AFONLY, 0, o->afonly, true};
    opts[3] = {o->ack_timeout_set, RDMA_OPTION_ID_ACK_TIMEOUT, o->ack_timeout, 0, false};
  }
  auto undo = [&](int err) {
    std::lock_guard<std::mutex> g(svc().mu());
    advance(o, IdEvent::kForwardFailed);
    return fail(err);
  };
  rdma_event_channel* rch = nullptr;
  if (int rc = real_channel(o->chan, &rch)) {
    if (no_rdma) *no_rdma = true;
    return undo(rc);
  }
  auto create = UROCE_REAL(rdma_create_id, "RDMACM_1.0");
  auto destroy = UROCE_REAL(rdma_destroy_id, "RDMACM_1.0");
  auto set_option = UROCE_REAL(rdma_set_option, "RDMACM_1.0");
  rdma_cm_id* r = nullptr;
  int err = 0;
  {
    InReal in;
    // The real id's context is the IdObj: events name their id by it.
    int rc = create(rch, &r, o, o->id.ps);
    for (Opt& op : opts) {
      if (rc != 0 || !op.set) continue;
      rc = op.is_int ? set_option(r, RDMA_OPTION_ID, op.name, &op.i, sizeof op.i)
                     : set_option(r, RDMA_OPTION_ID, op.name, &op.u8, sizeof op.u8);
    }
    if (rc == 0) rc = first(r);
    if (rc != 0) {
      err = errno ? errno : EIO;
      if (r) destroy(r);
    }
  }
  if (err) return undo(err);
  std::lock_guard<std::mutex> g(svc().mu());
  o->real.store(r, std::memory_order_release);
  pull(o);
  log().debug("rdma_cm: id {} forwarded to the system librdmacm", static_cast<void*>(o));
  return 0;
}

namespace {

// A forwarded CONNECT_REQUEST's new id, for a synchronous listener: as librdmacm does (and
// child_of), it gets a synchronous channel of its own, real channel included. The real library
// counts a CONNECT_REQUEST against the listener, so migrating the new id does not wait for it
// to be acknowledged. 0 or an errno; mu not held.
int adopt_sync(IdObj* c) {
  ChannelObj* nc = new_channel(true);
  if (!nc) return errno;
  rdma_event_channel* rch = nullptr;
  int err = real_channel(nc, &rch);
  if (!err) {
    InReal in;
    if (UROCE_REAL(rdma_migrate_id, "RDMACM_1.0")(c->real.load(), rch) != 0) err = errno;
  }
  if (err) {
    destroy_channel(nc);
    return err;
  }
  std::lock_guard<std::mutex> g(svc().mu());
  c->chan = nc;
  c->own_chan = true;
  c->id.channel = &nc->ch;
  return 0;
}

}  // namespace

// Its id (and listen_id) are the application's ids, a CONNECT_REQUEST's new id gets its IdObj,
// and the fields the event changed in the real id are pulled. mu not held.
int take_real_event(rdma_cm_event* re, rdma_cm_event** out) {
  auto* e = new EventObj();
  e->real = re;
  e->ev = *re;  // the parameters, private data pointing into the real event
  IdObj* child = nullptr;
  bool sync_listener = false;
  {
    std::lock_guard<std::mutex> g(svc().mu());
    if (re->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      auto* l = static_cast<IdObj*>(re->listen_id->context);
      child = new IdObj();
      child->accepted = true;
      advance(child, IdEvent::kForward);
      child->id.context = l->id.context;
      child->chan = l->chan;
      child->id.channel = &l->chan->ch;
      child->real.store(re->id, std::memory_order_release);
      re->id->context = child;  // it carried the listener's (librdmacm copies it)
      ids().insert(child);
      sync_listener = l->chan->sync;
      e->ev.listen_id = &l->id;
      e->owner = child;
    } else {
      e->owner = static_cast<IdObj*>(re->id->context);
      if (re->listen_id) e->ev.listen_id = &static_cast<IdObj*>(re->listen_id->context)->id;
    }
    pull(e->owner);
    e->ev.id = &e->owner->id;
    ++e->owner->events_out;
  }
  if (child && sync_listener) {
    if (int err = adopt_sync(child)) {
      // As librdmacm when it cannot set up a request's id: refuse the request, drop the id.
      rdma_cm_id* r = child->real.load();
      {
        InReal in;
        UROCE_REAL(rdma_reject, "RDMACM_1.0")(r, nullptr, 0);
      }
      rdma_ack_cm_event(&e->ev);
      {
        InReal in;
        UROCE_REAL(rdma_destroy_id, "RDMACM_1.0")(r);
      }
      std::lock_guard<std::mutex> g(svc().mu());
      advance(child, IdEvent::kDestroy);
      if (child->events_out == 0) free_id(child);
      return fail(err);
    }
  }
  *out = &e->ev;
  return 0;
}

}  // namespace uroce::cm
