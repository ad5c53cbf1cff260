// librdmacm's exported functions (rdma/rdma_cma.h) at librdmacm's symbol versions
// (src/verbs/liburoce.map). Each is the same few steps: a call the real library makes into its
// own export passes straight through (PASS_TO_REAL, see rdma_cm_forward.cc); the arguments are
// checked; a forwarded id's call goes to the real library (fwd); uroce's own work is done under
// the CM's lock by the file of its concern (rdma_cm.h); a synchronous id then waits for its event
// (complete).
#include <cstdlib>

#include "cm/rdma_cm.h"

#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

using namespace uroce::cm;

// The real function `name`@`ver`, typed like the public declaration.
#define REAL_CM(name, ver) UROCE_REAL(name, ver)
// First thing in an export: when the real library is calling its own export (t_in_real), pass
// the call to the real function unchanged.
#define PASS_TO_REAL(name, ver, ...)                       \
  do {                                                     \
    if (t_in_real) return REAL_CM(name, ver)(__VA_ARGS__); \
  } while (0)
// The call `name`(real id, args…) on the forwarded id `id` (fwd: fields pushed and pulled).
#define CALL_REAL(id, name, ver, ...) \
  fwd(to_obj(id), [=](rdma_cm_id* r) { return REAL_CM(name, ver)(r __VA_OPT__(, ) __VA_ARGS__); })

namespace {

bool forwarded(rdma_cm_id* id) {
  return id && to_obj(id)->real.load(std::memory_order_acquire) != nullptr;
}

// uroce's side of a call, under the CM's lock: `work` returns 0 or an errno.
template <typename Work>
int locked(Work&& work) {
  std::lock_guard<std::mutex> g(svc().mu());
  if (int rc = work()) return fail(rc);
  return 0;
}

}  // namespace

// ---- event channels -------------------------------------------------------------------------

UROCE_EXPORT rdma_event_channel* rdma_create_event_channel(void) {
  PASS_TO_REAL(rdma_create_event_channel, "RDMACM_1.0");
  ensure_handler();
  ChannelObj* c = new_channel(false);
  return c ? &c->ch : nullptr;
}

UROCE_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
  PASS_TO_REAL(rdma_destroy_event_channel, "RDMACM_1.0", channel);
  if (!channel) return;
  auto* ch = reinterpret_cast<ChannelObj*>(channel);
  {
    // Events still queued will never be read (a DISCONNECTED that came after the application's
    // last rdma_get_cm_event, say): they go with the channel, as librdmacm's do, and a destroyed
    // id that waited for them is freed.
    std::lock_guard<std::mutex> g(svc().mu());
    while (EventObj* e = ch->q.pop()) release_event(e);
  }
  retire_channel(ch);
}

UROCE_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  PASS_TO_REAL(rdma_get_cm_event, "RDMACM_1.0", channel, event);
  if (!channel || !event) return fail(EINVAL);
  return get_event(reinterpret_cast<ChannelObj*>(channel), event);
}

UROCE_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  PASS_TO_REAL(rdma_ack_cm_event, "RDMACM_1.0", event);
  if (!event) return fail(EINVAL);
  auto* e = reinterpret_cast<EventObj*>(event);
  if (e->real) {
    // First the real event: that may let a real rdma_destroy_id waiting for it return, and
    // that id's IdObj is freed by whichever of the two takes mu last.
    InReal in;
    if (REAL_CM(rdma_ack_cm_event, "RDMACM_1.0")(e->real) != 0) return -1;
  }
  std::lock_guard<std::mutex> g(svc().mu());
  release_event(e);
  return 0;
}

UROCE_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  return cm_event_name(event);
}

// ---- ids ------------------------------------------------------------------------------------

UROCE_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                                rdma_port_space ps) {
  PASS_TO_REAL(rdma_create_id, "RDMACM_1.0", channel, id, context, ps);
  ensure_handler();
  ibv_qp_type t;
  if (!id || !qp_type_for(ps, &t)) return fail(EINVAL);
  ChannelObj* ch = channel ? reinterpret_cast<ChannelObj*>(channel) : new_channel(true);
  if (!ch) return -1;
  auto* o = new IdObj();
  o->id.context = context;
  o->id.ps = ps;
  o->id.qp_type = t;
  o->chan = ch;
  o->own_chan = channel == nullptr;
  o->id.channel = &ch->ch;
  {
    std::lock_guard<std::mutex> g(svc().mu());
    ids().insert(o);
  }
  *id = &o->id;
  return 0;
}

UROCE_EXPORT int rdma_destroy_id(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_destroy_id, "RDMACM_1.0", id);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  rdma_cm_event* held = id->event;  // a synchronous id's last event
  id->event = nullptr;
  if (held) rdma_ack_cm_event(held);
  if (rdma_cm_id* r = o->real.load(std::memory_order_acquire)) {
    // The real library's destroy waits until the id's events are acknowledged, as it does
    // without uroce; when it returns no event of the id is left anywhere.
    int rc;
    {
      InReal in;
      rc = REAL_CM(rdma_destroy_id, "RDMACM_1.0")(r);
    }
    if (rc != 0) return -1;
    std::lock_guard<std::mutex> g(svc().mu());
    advance(o, IdEvent::kDestroy);
    if (o->events_out == 0) free_id(o);
    return 0;
  }
  std::lock_guard<std::mutex> g(svc().mu());
  destroy_id(o);
  return 0;
}

UROCE_EXPORT int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  PASS_TO_REAL(rdma_migrate_id, "RDMACM_1.0", id, channel);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  ChannelObj* ch = channel ? reinterpret_cast<ChannelObj*>(channel) : new_channel(true);
  if (!ch) return -1;
  if (rdma_cm_id* r = o->real.load(std::memory_order_acquire)) {
    // The real id moves to the real channel behind the new one (the real library waits, as
    // without uroce, until the id's events on the old channel are acknowledged).
    rdma_event_channel* rch = nullptr;
    int err = real_channel(ch, &rch);
    if (!err) {
      InReal in;
      if (REAL_CM(rdma_migrate_id, "RDMACM_1.0")(r, rch) != 0) err = errno;
    }
    if (err) {
      if (!channel) destroy_channel(ch);
      return fail(err);
    }
  }
  ChannelObj* old = nullptr;
  {
    std::lock_guard<std::mutex> g(svc().mu());
    if (o->own_chan && o->chan != ch) old = o->chan;
    o->chan = ch;
    o->own_chan = channel == nullptr;
    o->id.channel = &ch->ch;
  }
  if (old) destroy_channel(old);
  return 0;
}

UROCE_EXPORT int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  PASS_TO_REAL(rdma_bind_addr, "RDMACM_1.0", id, addr);
  if (!id) return fail(EINVAL);
  if (forwarded(id)) return CALL_REAL(id, rdma_bind_addr, "RDMACM_1.0", addr);
  if (!addr) return fail(EINVAL);
  return bind_id(to_obj(id), addr);
}

UROCE_EXPORT int rdma_listen(rdma_cm_id* id, int backlog) {
  PASS_TO_REAL(rdma_listen, "RDMACM_1.0", id, backlog);
  if (!id) return fail(EINVAL);
  if (forwarded(id)) return CALL_REAL(id, rdma_listen, "RDMACM_1.0", backlog);
  return listen_id(to_obj(id));
}

UROCE_EXPORT int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr,
                                   int timeout_ms) {
  PASS_TO_REAL(rdma_resolve_addr, "RDMACM_1.0", id, src_addr, dst_addr, timeout_ms);
  if (!id || !dst_addr) return fail(EINVAL);
  int rc = forwarded(id)
               ? CALL_REAL(id, rdma_resolve_addr, "RDMACM_1.0", src_addr, dst_addr, timeout_ms)
               : resolve_addr(to_obj(id), src_addr, dst_addr, timeout_ms);
  return rc != 0 ? -1 : complete(to_obj(id));
}

UROCE_EXPORT int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  PASS_TO_REAL(rdma_resolve_route, "RDMACM_1.0", id, timeout_ms);
  if (!id) return fail(EINVAL);
  int rc = forwarded(id) ? CALL_REAL(id, rdma_resolve_route, "RDMACM_1.0", timeout_ms)
                         : resolve_route(to_obj(id));
  return rc != 0 ? -1 : complete(to_obj(id));
}

UROCE_EXPORT int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  PASS_TO_REAL(rdma_connect, "RDMACM_1.0", id, conn_param);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  int rc = forwarded(id) ? CALL_REAL(id, rdma_connect, "RDMACM_1.0", conn_param)
                         : locked([&] { return connect_id(o, conn_param); });
  return rc != 0 ? -1 : complete(o);
}

UROCE_EXPORT int rdma_establish(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_establish, "RDMACM_1.2", id);
  if (!id) return fail(EINVAL);
  if (forwarded(id)) return CALL_REAL(id, rdma_establish, "RDMACM_1.2");
  return locked([&] { return establish_id(to_obj(id)); });
}

UROCE_EXPORT int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  PASS_TO_REAL(rdma_accept, "RDMACM_1.0", id, conn_param);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  int rc = forwarded(id) ? CALL_REAL(id, rdma_accept, "RDMACM_1.0", conn_param)
                         : locked([&] { return accept_id(o, conn_param); });
  if (rc != 0) return -1;
  // A synchronous passive id waits for ESTABLISHED (RC; UD has no further event).
  return o->id.qp_type == IBV_QPT_UD ? 0 : complete(o);
}

UROCE_EXPORT int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  PASS_TO_REAL(rdma_reject, "RDMACM_1.0", id, private_data, private_data_len);
  if (!id) return fail(EINVAL);
  if (forwarded(id))
    return CALL_REAL(id, rdma_reject, "RDMACM_1.0", private_data, private_data_len);
  return locked([&] { return reject_id(to_obj(id), private_data, private_data_len); });
}

UROCE_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data,
                                 uint8_t private_data_len) {
  PASS_TO_REAL(rdma_reject_ece, "RDMACM_1.3", id, private_data, private_data_len);
  if (forwarded(id))
    return CALL_REAL(id, rdma_reject_ece, "RDMACM_1.3", private_data, private_data_len);
  return rdma_reject(id, private_data, private_data_len);  // uroce has no ECE: a plain reject
}

UROCE_EXPORT int rdma_disconnect(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_disconnect, "RDMACM_1.0", id);
  if (!id) return fail(EINVAL);
  if (forwarded(id)) return CALL_REAL(id, rdma_disconnect, "RDMACM_1.0");
  return locked([&] { return disconnect_id(to_obj(id)); });
}

UROCE_EXPORT int rdma_notify(rdma_cm_id* id, ibv_event_type event) {
  PASS_TO_REAL(rdma_notify, "RDMACM_1.0", id, event);
  if (!id) return fail(EINVAL);
  if (forwarded(id)) return CALL_REAL(id, rdma_notify, "RDMACM_1.0", event);
  std::lock_guard<std::mutex> g(svc().mu());
  notify_id(to_obj(id), event);
  return 0;
}

UROCE_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id) {
  PASS_TO_REAL(rdma_get_request, "RDMACM_1.0", listen, id);
  if (!listen || !id) return fail(EINVAL);
  IdObj* l = to_obj(listen);
  if (!l->chan->sync) return fail(EINVAL);
  if (listen->event) {
    rdma_ack_cm_event(listen->event);
    listen->event = nullptr;
  }
  rdma_cm_event* e = nullptr;
  if (get_event(l->chan, &e) != 0) return -1;
  if (e->status) {
    int err = e->status < 0 ? -e->status : e->status;
    rdma_ack_cm_event(e);
    return fail(err);
  }
  if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    rdma_ack_cm_event(e);
    return fail(EINVAL);
  }
  IdObj* c = to_obj(e->id);
  if (l->has_ep_qp_attr) {
    // The QP rdma_create_ep was given for the listener's requests.
    ibv_qp_init_attr a = l->ep_qp_attr;
    int rc;
    if (forwarded(&c->id)) {
      rc = rdma_create_qp(&c->id, l->ep_pd, &a) == 0 ? 0 : errno;
    } else {
      std::lock_guard<std::mutex> g(svc().mu());
      rc = create_qp(c, l->ep_pd, &a);
    }
    if (rc) {
      rdma_reject(&c->id, nullptr, 0);
      rdma_ack_cm_event(e);
      rdma_destroy_id(&c->id);
      return fail(rc);
    }
  }
  c->id.event = e;  // acknowledged by the id's next synchronous call (rdma_accept)
  *id = &c->id;
  return 0;
}

UROCE_EXPORT int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval,
                                 size_t optlen) {
  PASS_TO_REAL(rdma_set_option, "RDMACM_1.0", id, level, optname, optval, optlen);
  if (forwarded(id))
    return CALL_REAL(id, rdma_set_option, "RDMACM_1.0", level, optname, optval, optlen);
  if (!id || !optval) return fail(EINVAL);
  return locked([&] { return set_id_option(to_obj(id), level, optname, optval, optlen); });
}

UROCE_EXPORT int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  PASS_TO_REAL(rdma_init_qp_attr, "RDMACM_1.2", id, qp_attr, qp_attr_mask);
  if (forwarded(id)) return CALL_REAL(id, rdma_init_qp_attr, "RDMACM_1.2", qp_attr, qp_attr_mask);
  if (!id || !qp_attr || !qp_attr_mask) return fail(EINVAL);
  return locked([&] { return qp_attr_for(to_obj(id), qp_attr->qp_state, qp_attr, qp_attr_mask); });
}

// ---- QPs and SRQs ---------------------------------------------------------------------------

UROCE_EXPORT int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  PASS_TO_REAL(rdma_create_qp, "RDMACM_1.0", id, pd, qp_init_attr);
  if (forwarded(id)) return CALL_REAL(id, rdma_create_qp, "RDMACM_1.0", pd, qp_init_attr);
  if (!id || !qp_init_attr) return fail(EINVAL);
  return locked([&] { return create_qp(to_obj(id), pd, qp_init_attr); });
}

UROCE_EXPORT int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  PASS_TO_REAL(rdma_create_qp_ex, "RDMACM_1.0", id, attr);
  if (forwarded(id)) return CALL_REAL(id, rdma_create_qp_ex, "RDMACM_1.0", attr);
  if (!id || !attr) return fail(EINVAL);
  return locked([&] { return create_qp_ex(to_obj(id), attr); });
}

UROCE_EXPORT void rdma_destroy_qp(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_destroy_qp, "RDMACM_1.0", id);
  if (!id) return;
  if (forwarded(id)) {
    fwd(to_obj(id), [](rdma_cm_id* r) {
      REAL_CM(rdma_destroy_qp, "RDMACM_1.0")(r);
      return 0;
    });
    return;
  }
  std::lock_guard<std::mutex> g(svc().mu());
  destroy_qp(to_obj(id));
}

UROCE_EXPORT int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  PASS_TO_REAL(rdma_create_srq, "RDMACM_1.0", id, pd, attr);
  if (forwarded(id)) return CALL_REAL(id, rdma_create_srq, "RDMACM_1.0", pd, attr);
  if (!id || !attr || !id->verbs) return fail(EINVAL);
  return locked([&] { return create_srq(to_obj(id), pd, attr); });
}

UROCE_EXPORT int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  PASS_TO_REAL(rdma_create_srq_ex, "RDMACM_1.0", id, attr);
  if (forwarded(id)) return CALL_REAL(id, rdma_create_srq_ex, "RDMACM_1.0", attr);
  if (!id || !attr) return fail(EINVAL);
  if (attr->comp_mask & ~static_cast<uint32_t>(IBV_SRQ_INIT_ATTR_PD)) return fail(EOPNOTSUPP);
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC)
    return fail(EOPNOTSUPP);
  ibv_srq_init_attr a{};
  a.srq_context = attr->srq_context;
  a.attr = attr->attr;
  int rc = rdma_create_srq(id, (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? attr->pd : nullptr, &a);
  if (rc == 0) attr->attr = a.attr;
  return rc;
}

UROCE_EXPORT void rdma_destroy_srq(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_destroy_srq, "RDMACM_1.0", id);
  if (forwarded(id)) {
    fwd(to_obj(id), [](rdma_cm_id* r) {
      REAL_CM(rdma_destroy_srq, "RDMACM_1.0")(r);
      return 0;
    });
    return;
  }
  if (!id || !id->srq) return;
  destroy_srq(to_obj(id));
}

// ---- endpoints ------------------------------------------------------------------------------

UROCE_EXPORT int rdma_create_ep(rdma_cm_id** id, rdma_addrinfo* res, ibv_pd* pd,
                                ibv_qp_init_attr* qp_init_attr) {
  PASS_TO_REAL(rdma_create_ep, "RDMACM_1.0", id, res, pd, qp_init_attr);
  // Made of the exports: the bind or resolve below decides whether the id is forwarded.
  if (!id || !res) return fail(EINVAL);
  rdma_cm_id* cm_id;
  if (rdma_create_id(nullptr, &cm_id, nullptr, static_cast<rdma_port_space>(res->ai_port_space)))
    return -1;
  IdObj* o = to_obj(cm_id);
  int rc;
  if (res->ai_flags & RAI_PASSIVE) {
    rc = rdma_bind_addr(cm_id, res->ai_src_addr);
    if (rc == 0 && qp_init_attr) {
      // Kept for the ids rdma_get_request hands out.
      o->has_ep_qp_attr = true;
      o->ep_qp_attr = *qp_init_attr;
      o->ep_pd = pd;
    }
  } else {
    rc = rdma_resolve_addr(cm_id, res->ai_src_len ? res->ai_src_addr : nullptr, res->ai_dst_addr,
                           2000);
    if (rc == 0) rc = rdma_resolve_route(cm_id, 2000);
    if (rc == 0 && qp_init_attr) rc = rdma_create_qp(cm_id, pd, qp_init_attr);
  }
  if (rc) {
    int err = errno;
    rdma_destroy_id(cm_id);
    return fail(err);
  }
  *id = cm_id;
  return 0;
}

UROCE_EXPORT void rdma_destroy_ep(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_destroy_ep, "RDMACM_1.0", id);
  if (!id) return;
  if (id->qp) rdma_destroy_qp(id);
  if (id->srq) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

// ---- multicast ------------------------------------------------------------------------------

UROCE_EXPORT int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  PASS_TO_REAL(rdma_join_multicast, "RDMACM_1.0", id, addr, context);
  if (forwarded(id)) {
    if (CALL_REAL(id, rdma_join_multicast, "RDMACM_1.0", addr, context) != 0) return -1;
    return complete(to_obj(id));
  }
  if (!id || !addr) return fail(EINVAL);
  if (addr->sa_family == AF_INET6) return refuse_ipv6_multicast();
  uint32_t group;
  uint16_t port;
  if (!get_sin(addr, &group, &port)) return fail(EAFNOSUPPORT);
  if (locked([&] { return join_multicast(to_obj(id), group, context); }) != 0) return -1;
  return complete(to_obj(id));
}

UROCE_EXPORT int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* mc_join_attr,
                                        void* context) {
  PASS_TO_REAL(rdma_join_multicast_ex, "RDMACM_1.1", id, mc_join_attr, context);
  if (forwarded(id)) {
    if (CALL_REAL(id, rdma_join_multicast_ex, "RDMACM_1.1", mc_join_attr, context) != 0) return -1;
    return complete(to_obj(id));
  }
  if (!mc_join_attr || !(mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS))
    return fail(EINVAL);
  if ((mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) &&
      mc_join_attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER &&
      mc_join_attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return fail(EINVAL);
  return rdma_join_multicast(id, mc_join_attr->addr, context);
}

UROCE_EXPORT int rdma_leave_multicast(rdma_cm_id* id, sockaddr* addr) {
  PASS_TO_REAL(rdma_leave_multicast, "RDMACM_1.0", id, addr);
  if (forwarded(id)) return CALL_REAL(id, rdma_leave_multicast, "RDMACM_1.0", addr);
  if (!id || !addr) return fail(EINVAL);
  if (addr->sa_family == AF_INET6) return fail(EADDRNOTAVAIL);  // never joined (join refuses it)
  uint32_t group;
  uint16_t port;
  if (!get_sin(addr, &group, &port)) return fail(EAFNOSUPPORT);
  return locked([&] { return leave_multicast(to_obj(id), group); });
}

// ---- addresses and devices ------------------------------------------------------------------

// The port of an address, in network order, as librdmacm's ucma_get_port reads it: sin_port,
// sin6_port; 0 for another family (librdmacm takes an AF_IB address's from its service ID:
// rdma-core 44 ships no <rdma/ib.h> here, and no uroce id is AF_IB).
static uint16_t port_of(const sockaddr* a) {
  switch (a->sa_family) {
    case AF_INET:
      return reinterpret_cast<const sockaddr_in*>(a)->sin_port;
    case AF_INET6:
      return reinterpret_cast<const sockaddr_in6*>(a)->sin6_port;
    default:
      return 0;
  }
}

UROCE_EXPORT uint16_t rdma_get_src_port(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_get_src_port, "RDMACM_1.0", id);
  // A forwarded id's route is the real id's, pulled after every call and event.
  return id ? port_of(&id->route.addr.src_addr) : 0;  // network order, as librdmacm
}

UROCE_EXPORT uint16_t rdma_get_dst_port(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_get_dst_port, "RDMACM_1.0", id);
  return id ? port_of(&id->route.addr.dst_addr) : 0;
}

UROCE_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
  PASS_TO_REAL(rdma_get_devices, "RDMACM_1.0", num_devices);
  // uroce's devices only: asking the real library would start it (and fail without kernel RDMA)
  // in every program that lists devices (docs/rdma-cm.md, "Ids of other RDMA devices").
  ensure_handler();
  std::lock_guard<std::mutex> g(svc().mu());
  const auto& devs = svc().devices();
  auto** list = static_cast<ibv_context**>(std::calloc(devs.size() + 1, sizeof(ibv_context*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  int n = 0;
  for (uroce::verbs::VDevice* d : devs) {
    int err = 0;
    if (CmPort* p = svc().port_of(d, &err)) list[n++] = p->ctx;
  }
  if (num_devices) *num_devices = n;
  return list;
}

UROCE_EXPORT void rdma_free_devices(ibv_context** list) {
  PASS_TO_REAL(rdma_free_devices, "RDMACM_1.0", list);
  std::free(list);  // the contexts stay open: ids use them
}

UROCE_EXPORT int rdma_set_local_ece(rdma_cm_id* id, ibv_ece* ece) {
  PASS_TO_REAL(rdma_set_local_ece, "RDMACM_1.3", id, ece);
  if (forwarded(id)) return CALL_REAL(id, rdma_set_local_ece, "RDMACM_1.3", ece);
  return fail(EOPNOTSUPP);
}

UROCE_EXPORT int rdma_get_remote_ece(rdma_cm_id* id, ibv_ece* ece) {
  PASS_TO_REAL(rdma_get_remote_ece, "RDMACM_1.3", id, ece);
  if (forwarded(id)) return CALL_REAL(id, rdma_get_remote_ece, "RDMACM_1.3", ece);
  return fail(EOPNOTSUPP);
}

UROCE_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                  rdma_addrinfo** res) {
  PASS_TO_REAL(rdma_getaddrinfo, "RDMACM_1.0", node, service, hints, res);
  return getaddrinfo_ip(node, service, hints, res);
}

UROCE_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  PASS_TO_REAL(rdma_freeaddrinfo, "RDMACM_1.0", res);
  freeaddrinfo_all(res);
}
