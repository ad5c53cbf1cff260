// rdma_cm's objects (rdma_cm.h): the registries of ids, the events queued for them and how long
// both live, every change of an id's state (one debug line each), and the id's options.
#include <cstring>

#include "cm/rdma_cm.h"
#include "util/log.h"

extern "C" const char* rdma_event_str(rdma_cm_event_type event);

namespace uroce::cm {

std::mt19937& rng() {
  static std::mt19937 r{std::random_device{}()};
  return r;
}

CmService& svc() {
  return CmService::get();
}

std::set<IdObj*>& ids() {
  static auto* s = new std::set<IdObj*>();
  return *s;
}

std::map<std::pair<CmPort*, uint32_t>, IdObj*>& by_comm() {
  static auto* m = new std::map<std::pair<CmPort*, uint32_t>, IdObj*>();
  return *m;
}

std::map<std::pair<CmPort*, uint32_t>, IdObj*>& by_sidr() {
  static auto* m = new std::map<std::pair<CmPort*, uint32_t>, IdObj*>();
  return *m;
}

int fail(int err) {
  errno = err;
  return -1;
}

// ---- the id's transitions -------------------------------------------------------------------

IdStep step_of(const IdObj* o, IdEvent ev) {
  IdStep s = id_step(o->state, ev);
  if (s.ok) return s;
  if (s.err)
    log().debug("rdma_cm: id {} in {} refuses {} ({})", static_cast<const void*>(o),
                id_state_name(o->state), id_event_name(ev), std::strerror(s.err));
  else
    log().debug("rdma_cm: id {} in {} ignores {}", static_cast<const void*>(o),
                id_state_name(o->state), id_event_name(ev));
  return s;
}

void enter(IdObj* o, IdEvent ev, const IdStep& s) {
  log().debug("rdma_cm: id {} {} --{}--> {}", static_cast<void*>(o), id_state_name(o->state),
              id_event_name(ev), id_state_name(s.next));
  o->state = s.next;
}

bool advance(IdObj* o, IdEvent ev) {
  IdStep s = step_of(o, ev);
  if (s.ok) enter(o, ev, s);
  return s.ok;
}

// ---- events ---------------------------------------------------------------------------------

EventObj* new_event(IdObj* o, rdma_cm_event_type type, int status) {
  auto* e = new EventObj();
  e->owner = o;
  e->ev.id = &o->id;
  e->ev.event = type;
  e->ev.status = status;
  return e;
}

void set_conn_pd(EventObj* e, const std::vector<uint8_t>& pd, size_t skip) {
  size_t n = pd.size() > skip ? std::min(pd.size() - skip, sizeof e->pd) : 0;
  if (n) std::memcpy(e->pd, pd.data() + skip, n);
  e->ev.param.conn.private_data = n ? e->pd : nullptr;
  e->ev.param.conn.private_data_len = static_cast<uint8_t>(std::min<size_t>(n, 255));
}

void set_ud_pd(EventObj* e, const std::vector<uint8_t>& pd, size_t skip) {
  size_t n = pd.size() > skip ? std::min(pd.size() - skip, sizeof e->pd) : 0;
  if (n) std::memcpy(e->pd, pd.data() + skip, n);
  e->ev.param.ud.private_data = n ? e->pd : nullptr;
  e->ev.param.ud.private_data_len = static_cast<uint8_t>(std::min<size_t>(n, 255));
}

void post_event(IdObj* o, EventObj* e, ChannelObj* on) {
  log().debug("rdma_cm: id {} gets {} (status {})", static_cast<void*>(o),
              rdma_event_str(e->ev.event), e->ev.status);
  ++o->events_out;
  (on ? on : o->chan)->q.push(e);
}

void post(IdObj* o, rdma_cm_event_type type, int status) {
  post_event(o, new_event(o, type, status));
}

void remember_conn(IdObj* o) {
  by_comm()[{o->port, o->comm_id}] = o;
}

void forget_conn(IdObj* o) {
  by_comm().erase({o->port, o->comm_id});
  o->comm_id = 0;
}

void remember_sidr(IdObj* o) {
  by_sidr()[{o->port, o->sidr_id}] = o;
}

void forget_sidr(IdObj* o) {
  by_sidr().erase({o->port, o->sidr_id});
  o->sidr_id = 0;
}

// ---- lifetime -------------------------------------------------------------------------------

void free_id(IdObj* o) {
  release_claims(o);
  if (o->own_chan) destroy_channel(o->chan);
  if (!o->real.load(std::memory_order_relaxed)) delete o->id.route.path_rec;
  ids().erase(o);
  delete o;
}

void release_event(EventObj* e) {
  IdObj* o = e->owner;
  delete e;
  if (--o->events_out == 0 && o->state == IdState::kDestroyed) free_id(o);
}

// ---- options --------------------------------------------------------------------------------

int set_id_option(IdObj* o, int level, int optname, const void* optval, size_t optlen) {
  // The *_set flags: an id without an address yet may still be forwarded (forward_id replays
  // them on the real id).
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(uint8_t)) return EINVAL;
        o->tos = *static_cast<const uint8_t*>(optval);
        o->tos_set = true;
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
        if (optlen != sizeof(int)) return EINVAL;
        o->reuseaddr = *static_cast<const int*>(optval) != 0;
        o->reuseaddr_set = true;
        return 0;
      case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int)) return EINVAL;
        o->afonly = *static_cast<const int*>(optval);
        o->afonly_set = true;
        return 0;  // uroce is IPv4 only: nothing to restrict
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(uint8_t)) return EINVAL;
        o->ack_timeout = std::min<uint8_t>(*static_cast<const uint8_t*>(optval), 31);
        o->ack_timeout_set = true;
        return 0;
      default:
        return ENOSYS;
    }
  }
  if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH)
    return EOPNOTSUPP;  // RoCE resolves its path from IP: no SA path to set
  return ENOSYS;
}

}  // namespace uroce::cm
