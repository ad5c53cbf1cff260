// librdmacm's public API (rdma/rdma_cma.h) for uroce devices, exported by liburoce at librdmacm's
// own symbol versions (liburoce.map), so that under uroce-run an unmodified rping, perftest -R or
// rdma_server finds it in front of the system librdmacm. The system librdmacm talks only to the
// kernel's /dev/infiniband/rdma_cm; here the CM runs in the process (service.h, agent.h) and
// speaks the IB CM protocol on each device's QP1.
//
// Objects: an event channel is a ChannelObj (rdma_event_channel first), an id an IdObj
// (rdma_cm_id first — applications read verbs, qp, route, event, pd, the CQs and channels from it,
// so they are filled as librdmacm fills them), an event an EventObj (rdma_cm_event first, with
// room for its private data).
//
// Forwarding. An id whose first address is not a uroce device's (a bind or a resolve source of
// another address or family, or a resolve whose route leaves from such an address) is handed to
// the system librdmacm, reached through dlvsym(RTLD_NEXT, name, "RDMACM_1.x") as src/verbs
// reaches libibverbs: the IdObj keeps a real id (`real`) on a real event channel behind the
// application's channel, and from then on every call on it goes to the real library. The real
// id's public fields are copied into the application's id after each call and event (pull),
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
// under LD_PRELOAD those calls reach these functions with the real library's objects. A
// thread-local depth counts uroce's calls into the real library; while it is non-zero every
// export passes its arguments straight to the real function. rsockets, called by the
// application, is not inside such a call, so it still runs over uroce's rdma_cm.
//
// Events follow librdmacm over the kernel CM: ADDR_RESOLVED, ROUTE_RESOLVED, CONNECT_REQUEST
// (on the listener's channel, with the new id), CONNECT_RESPONSE (only for an id without a QP),
// ESTABLISHED (the active side after it moved its QP to RTS and sent the RTU; the passive side
// when the RTU arrives), REJECTED (status: the REJ reason), UNREACHABLE (-ETIMEDOUT),
// CONNECT_ERROR, DISCONNECTED, TIMEWAIT_EXIT, MULTICAST_JOIN. A channel of NULL (rdma_create_id
// or rdma_create_ep) makes the id synchronous: each call waits for its event, as librdmacm does.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <system_error>

#include "cm/agent.h"
#include "cm/ip_cm.h"
#include "cm/service.h"
#include "engine/cq.h"
#include "util/log.h"
#include "ah.h"
#include "objects.h"
#include "provider.h"
#include "real.h"

#define UROCE_EXPORT extern "C" __attribute__((visibility("default")))

namespace uv = uroce::verbs;

extern "C" const char* rdma_event_str(rdma_cm_event_type event);

namespace uroce::cm {
namespace {

// ---- tunables -------------------------------------------------------------------------------
// QP local ACK timeout of rdma_cm connections unless RDMA_OPTION_ID_ACK_TIMEOUT says otherwise:
// 4.096 µs × 2^14 = 67 ms (the kernel derives ~0.5 s for RoCE from its packet lifetime; uroce's
// transport probes after ~2 RTT anyway, see transport/completer.h).
constexpr uint8_t kDefaultAckTimeout = 14;
// RNR timer of the QPs rdma_cm moves to RTR (IBTA table 45: 20 = 10.24 ms). The kernel's CM
// leaves 0 (655 ms), which makes every RNR NAK stall a connection for most of a second. It was 12
// (0.64 ms): then a receiver that posts its next receive only after its own send completed —
// pyverbs' external-QP test does — and is descheduled for a scheduler tick or two (4 ms each at
// HZ=250) on a loaded host, ran the peer out of the 5 RNR retries librdmacm's connection
// parameters give (5 × 0.64 ms), about one run in three on this 2-core machine. 5 × 10.24 ms
// covers a dozen ticks and still costs an RNR 10 ms, not 655.
constexpr uint8_t kMinRnrTimer = 20;
constexpr uint8_t kRetryCountDefault = 7;  // rdma_connect(id, NULL): librdmacm's defaults
constexpr uint8_t kRnrRetryDefault = 7;
constexpr uint32_t kMaxRdAtom = DeviceLimits::kMaxQpRdAtom;
constexpr uint16_t kEphemeralLo = 32768, kEphemeralHi = 60999;  // Linux's ip_local_port_range

struct EventObj;

// A channel's uroce events in order, and a semaphore eventfd readable while it holds any. pop()
// never blocks: get_event waits, over this fd and the real channel's.
class EventQueue {
 public:
  EventQueue() : fd_(eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE | EFD_NONBLOCK)) {
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  }
  ~EventQueue() { close(fd_); }
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;
  int fd() const { return fd_; }
  void push(EventObj* e) {
    std::lock_guard<std::mutex> g(mu_);
    q_.push_back(e);
    uint64_t one = 1;
    ssize_t r = write(fd_, &one, sizeof one);  // cannot fail short of 2^64-2 unread events
    (void)r;
  }
  // The oldest event, or null. The token is taken under the same lock as the event, so the
  // fd's count is always the queue's length.
  EventObj* pop() {
    std::lock_guard<std::mutex> g(mu_);
    if (q_.empty()) return nullptr;
    EventObj* e = q_.front();
    q_.pop_front();
    uint64_t v;
    ssize_t r = read(fd_, &v, sizeof v);
    (void)r;
    return e;
  }

 private:
  int fd_;
  std::mutex mu_;
  std::deque<EventObj*> q_;
};

struct ChannelObj {
  rdma_event_channel ch;  // first: the application's view
  EventQueue q;           // uroce's events
  bool sync = false;      // the private channel of a synchronous id
  // An async channel's fd (ch.fd): an epoll fd over q.fd() and, once an id on the channel is
  // forwarded, the real channel's fd, so that the application's poll sees both. It is made with
  // the channel, as the application may poll (and set O_NONBLOCK on) ch.fd before any id exists.
  // -1 for a synchronous id's channel, whose fd is q.fd() (only uroce waits on it).
  int epfd = -1;
  // The system librdmacm's channel behind this one, made by the first forwarded id (real_mu
  // serialises that); its fd is O_NONBLOCK, get_event does the waiting.
  std::mutex real_mu;
  std::atomic<rdma_event_channel*> real{nullptr};
  std::atomic<unsigned> turn{0};  // get_event alternates which source it reads first
};

struct IdObj;

struct EventObj {
  rdma_cm_event ev;  // first
  IdObj* owner = nullptr;
  rdma_cm_event* real = nullptr;  // the real library's event this one translates (forwarded ids)
  uint8_t pd[kCmMessageBytes];    // private data the event points to
};

enum class IdState : uint8_t {
  kIdle,
  kBound,
  kAddrResolved,
  kRouteResolved,
  kListen,
  kConnect,         // REQ / SIDR REQ out
  kConnectRequest,  // passive: a REQ is waiting for accept/reject
  kAccepting,       // passive: REP out
  kConnected,
  kDisconnected,
  kRejected,
  kForwarded,  // the system librdmacm's (IdObj::real); uroce keeps no state of its own for it
};

// The fields of rdma_cm_id an application may set itself (rsockets puts its own CQs and
// channels in the id before rdma_create_qp, and rdma_destroy_qp destroys them), as last copied
// from the real id: a field that differs from it was set by the application and is pushed.
struct AppFields {
  ibv_qp* qp = nullptr;
  ibv_pd* pd = nullptr;
  ibv_srq* srq = nullptr;
  ibv_cq* send_cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  ibv_comp_channel* send_cq_channel = nullptr;
  ibv_comp_channel* recv_cq_channel = nullptr;
};

struct IdObj {
  rdma_cm_id id;  // first
  ChannelObj* chan = nullptr;
  bool own_chan = false;  // a synchronous id's private channel (freed with it)
  IdState state = IdState::kIdle;
  CmPort* port = nullptr;  // the device the id is bound to; null: unbound or wildcard
  bool wildcard = false;
  uint32_t local_ip = 0, remote_ip = 0;  // host order
  uint16_t local_port = 0, remote_port = 0;
  std::vector<CmPort*> listen_ports;
  uint32_t comm_id = 0;  // the agent's connection (on `port`)
  uint32_t sidr_id = 0;  // SIDR REQ (active) or the SIDR REQ to answer (passive)
  // What the peer asked for or answered (REQ / REP), from this side's point of view. local_psn:
  // the PSN this side receives first (the Starting PSN it sends); remote_psn: the one it sends
  // first (the peer's Starting PSN).
  uint32_t remote_qpn = 0, remote_qkey = 0;
  uint32_t remote_psn = 0, local_psn = 0;
  uint8_t responder_resources = 0, initiator_depth = 0;
  uint8_t retry_count = kRetryCountDefault, rnr_retry_count = kRnrRetryDefault;
  uint8_t path_mtu = IBV_MTU_1024;
  bool flow_control = false;
  // Options.
  uint8_t tos = 0;
  uint8_t ack_timeout = kDefaultAckTimeout;
  bool reuseaddr = false;
  ibv_sa_path_rec path{};
  // rdma_create_ep on a passive id: the QP every id rdma_get_request returns gets.
  bool has_ep_qp_attr = false;
  ibv_qp_init_attr ep_qp_attr{};
  ibv_pd* ep_pd = nullptr;
  // Multicast groups joined (IPv4, host order) and their contexts.
  std::map<uint32_t, void*> mcast;
  bool accepted = false;  // created for a connection request on a listener
  bool disconnect_reported = false;
  bool destroyed = false;
  int events_out = 0;  // queued or handed out and not acknowledged
  // Forwarded: the system librdmacm's id (its context is this IdObj), set once; never cleared,
  // so that free_id knows id.route points into the real library's memory.
  std::atomic<rdma_cm_id*> real{nullptr};
  AppFields pushed;  // the app-settable fields as last pulled from `real`
  // Options set before the id had an address, replayed on the real id when it is forwarded.
  bool tos_set = false, reuseaddr_set = false, ack_timeout_set = false, afonly_set = false;
  int afonly = 0;
};

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

IdObj* to_obj(rdma_cm_id* id) {
  return reinterpret_cast<IdObj*>(id);
}

int fail(int err) {
  errno = err;
  return -1;
}

// librdmacm's port space → QP type (rdma_create_id).
bool qp_type_for(rdma_port_space ps, ibv_qp_type* t) {
  switch (ps) {
    case RDMA_PS_TCP:
    case RDMA_PS_IB:
      *t = IBV_QPT_RC;
      return true;
    case RDMA_PS_UDP:
    case RDMA_PS_IPOIB:
      *t = IBV_QPT_UD;
      return true;
  }
  return false;
}

ibv_gid gid_of(uint32_t ip) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  uint32_t be = htonl(ip);
  std::memcpy(&g.raw[12], &be, 4);
  return g;
}

Gid to_gid(const ibv_gid& g) {
  Gid out;
  std::memcpy(out.data(), g.raw, 16);
  return out;
}

void set_sin(sockaddr_storage& ss, uint32_t ip, uint16_t port) {
  std::memset(&ss, 0, sizeof ss);
  auto* s = reinterpret_cast<sockaddr_in*>(&ss);
  s->sin_family = AF_INET;
  s->sin_addr.s_addr = htonl(ip);
  s->sin_port = htons(port);
}

bool get_sin(const sockaddr* a, uint32_t* ip, uint16_t* port) {
  if (!a || a->sa_family != AF_INET) return false;
  const auto* s = reinterpret_cast<const sockaddr_in*>(a);
  *ip = ntohl(s->sin_addr.s_addr);
  *port = ntohs(s->sin_port);
  return true;
}

// A malloc'ed copy of an address (rdma_freeaddrinfo frees it); false when out of memory.
bool copy_addr(const sockaddr* from, socklen_t len, sockaddr** to, socklen_t* to_len) {
  *to = static_cast<sockaddr*>(std::malloc(len));
  if (!*to) return false;
  std::memcpy(*to, from, len);
  *to_len = len;
  return true;
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

void set_conn_pd(EventObj* e, const std::vector<uint8_t>& pd, size_t skip = 0) {
  size_t n = pd.size() > skip ? std::min(pd.size() - skip, sizeof e->pd) : 0;
  if (n) std::memcpy(e->pd, pd.data() + skip, n);
  e->ev.param.conn.private_data = n ? e->pd : nullptr;
  e->ev.param.conn.private_data_len = static_cast<uint8_t>(std::min<size_t>(n, 255));
}

void set_ud_pd(EventObj* e, const std::vector<uint8_t>& pd, size_t skip = 0) {
  size_t n = pd.size() > skip ? std::min(pd.size() - skip, sizeof e->pd) : 0;
  if (n) std::memcpy(e->pd, pd.data() + skip, n);
  e->ev.param.ud.private_data = n ? e->pd : nullptr;
  e->ev.param.ud.private_data_len = static_cast<uint8_t>(std::min<size_t>(n, 255));
}

void post_event(IdObj* o, EventObj* e, ChannelObj* on = nullptr) {
  log().debug("rdma_cm: id {} gets {} (status {})", static_cast<void*>(o),
              rdma_event_str(e->ev.event), e->ev.status);
  ++o->events_out;
  (on ? on : o->chan)->q.push(e);
}

void post(IdObj* o, rdma_cm_event_type type, int status) {
  post_event(o, new_event(o, type, status));
}

// ---- the system librdmacm ------------------------------------------------------------------

// How deep this thread is in calls uroce made into the real library (see the file comment).
thread_local int t_in_real = 0;

struct InReal {
  InReal() { ++t_in_real; }
  ~InReal() { --t_in_real; }
  InReal(const InReal&) = delete;
  InReal& operator=(const InReal&) = delete;
};

// Whether a system librdmacm is loaded behind liburoce (under uroce-run, for every program
// linked against librdmacm.so.1; not for a program linked to liburoce alone).
bool real_present() {
  return UROCE_REAL(rdma_create_id, "RDMACM_1.0") != nullptr;
}

// Closes a channel and the real channel behind it (the real library's destroy only closes its
// fd and frees it: it calls nothing back, so mu may be held).
void destroy_channel(ChannelObj* ch) {
  if (rdma_event_channel* r = ch->real.load(std::memory_order_acquire)) {
    InReal in;
    UROCE_REAL(rdma_destroy_event_channel, "RDMACM_1.0")(r);
  }
  if (ch->epfd >= 0) close(ch->epfd);
  delete ch;
}

// The real channel behind `ch`, made the first time an id on it is forwarded: 0, or the real
// library's errno (ENODEV without kernel RDMA). mu not held.
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

// Copies the real id's public fields into the application's id. mu held.
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

// Copies into the real id the fields the application changed since the last pull. mu held.
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

// A call on a forwarded id: the application's fields pushed, the real function called without
// mu (it may call these exports back), the real id's fields pulled. Returns the call's result
// with the real library's errno.
template <typename Call>
auto fwd(IdObj* o, Call&& call) {
  rdma_cm_id* r = o->real.load(std::memory_order_acquire);
  {
    std::lock_guard<std::mutex> g(svc().mu());
    push(o);
  }
  int err;
  auto rc = [&] {
    InReal in;
    errno = 0;
    auto v = call(r);
    err = errno;
    return v;
  }();
  {
    std::lock_guard<std::mutex> g(svc().mu());
    pull(o);
  }
  errno = err;
  return rc;
}

void free_id(IdObj* o) {
  if (o->own_chan) destroy_channel(o->chan);
  if (!o->real.load(std::memory_order_relaxed)) delete o->id.route.path_rec;
  ids().erase(o);
  delete o;
}

// An event was acknowledged (or dropped for a destroyed id). mu held.
void release_event(EventObj* e) {
  IdObj* o = e->owner;
  delete e;
  if (--o->events_out == 0 && o->destroyed) free_id(o);
}

// ---- binding --------------------------------------------------------------------------------

bool port_taken(rdma_port_space ps, uint32_t ip, uint16_t port, const IdObj* self) {
  for (IdObj* o : ids()) {
    if (o == self || o->destroyed || o->local_port != port || o->id.ps != ps) continue;
    // Ids a listener handed out share its port without holding it (as the kernel's CM): a new
    // listener may bind the port while connections accepted on the old one live on.
    // A forwarded id's ports are the kernel's CM's: another port space.
    if (o->state == IdState::kIdle || o->state == IdState::kForwarded || o->accepted) continue;
    if (o->wildcard || ip == 0 || o->local_ip == ip) return true;
  }
  return false;
}

int bind_to(IdObj* o, CmPort* p, uint32_t ip, uint16_t port) {
  if (port == 0) {
    for (int tries = 0; tries < 1000 && port == 0; ++tries) {
      uint16_t cand = static_cast<uint16_t>(kEphemeralLo + rng()() % (kEphemeralHi - kEphemeralLo));
      if (!port_taken(o->id.ps, ip, cand, o)) port = cand;
    }
    if (port == 0) return EADDRINUSE;
  } else if (port_taken(o->id.ps, ip, port, o)) {
    return EADDRINUSE;
  }
  o->port = p;
  o->wildcard = p == nullptr;
  o->local_ip = ip;
  o->local_port = port;
  o->state = IdState::kBound;
  set_sin(o->id.route.addr.src_storage, ip, port);
  if (p) {
    o->id.verbs = p->ctx;
    // librdmacm gives every id of a device that device's PD (ucma_get_device), and programs use
    // it: UCX's rdmacm CM creates a QP on id->pd before it connects.
    o->id.pd = p->pd;
    o->id.port_num = 1;
    o->id.route.addr.addr.ibaddr.sgid = p->gid;
    o->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
  }
  return 0;
}

// rdma_bind_addr (and the source of rdma_resolve_addr): the device whose address `ip` is. A
// loopback address (127.0.0.0/8) no uroce device has binds no device, like INADDR_ANY: the
// kernel's CM counts loopback addresses as "any" (cma_any_addr), so such an id gets no device
// (verbs NULL), a listener listens on every device, and rdma_get_local_addr still says
// 127.0.0.1. libfabric's verbs provider relies on it: without a node it binds "localhost" and
// then takes the addresses of the devices' interfaces. Any other address is EADDRNOTAVAIL.
int bind_addr(IdObj* o, uint32_t ip, uint16_t port) {
  CmPort* p = nullptr;
  if (ip != INADDR_ANY) {
    int err = 0;
    p = svc().port_by_ip(ip, &err);
    if (!p && (err != 0 || (ip >> 24) != 127)) return err ? err : EADDRNOTAVAIL;
  }
  return bind_to(o, p, ip, port);
}

// The source address the kernel's routing table picks towards `dst`, or 0 when it has no route.
uint32_t route_source(uint32_t dst) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(dst);
  to.sin_port = htons(4791);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  uint32_t src = 0;
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0)
    src = ntohl(me.sin_addr.s_addr);
  close(fd);
  return src;
}

// The device an active id without a source address uses to reach `dst`: the one whose address
// the kernel would pick as the route's source, else the first uroce device (several processes on
// one host use 127.0.0.x addresses, where the kernel's choice is always 127.0.0.1).
CmPort* choose_port(uint32_t dst, int* err) {
  const auto& devs = svc().devices();
  if (devs.empty()) {
    *err = EADDRNOTAVAIL;
    return nullptr;
  }
  if (uint32_t src = route_source(dst))
    for (uv::VDevice* d : devs)
      if (d->cfg.ipv4 == src) return svc().port_of(d, err);
  return svc().port_of(devs.front(), err);
}

// Whether an IPv4 address is another RDMA device's: neither wildcard, nor loopback (uroce's, see
// bind_addr), nor a uroce device's. *err: a uroce device has it but cannot be opened. mu held.
bool foreign_ipv4(uint32_t ip, int* err) {
  if (ip == INADDR_ANY || (ip >> 24) == 127) return false;
  return svc().port_by_ip(ip, err) == nullptr && *err == 0;
}

// Hands the id `o`, reserved for forwarding by its caller (state kForwarded, `real` still null),
// to the system librdmacm: a real id on the real channel behind o's, with the options set so
// far, then `first` — the call that gives it its first address (bind or resolve). 0, or -1 with
// the real library's errno, and then `o` is idle and uroce's again. *no_rdma: the real library
// could not even make an event channel (no kernel RDMA stack at all). mu not held.
template <typename First>
int forward_id(IdObj* o, First&& first, bool* no_rdma = nullptr) {
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
    o->state = IdState::kIdle;
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

void fill_route(IdObj* o) {
  CmPort* p = o->port;
  ibv_sa_path_rec& r = o->path;
  r = {};
  std::memcpy(r.sgid.raw, p->gid.raw, 16);
  ibv_gid d = gid_of(o->remote_ip);
  std::memcpy(r.dgid.raw, d.raw, 16);
  r.hop_limit = 64;
  r.traffic_class = o->tos;
  r.reversible = 1;
  r.numb_path = 1;
  r.pkey = htons(0xffff);
  r.mtu_selector = 2;  // exactly
  r.mtu = p->mtu_enum;
  r.rate_selector = 2;
  r.rate = IBV_RATE_MAX;
  r.packet_life_time_selector = 2;
  r.packet_life_time = 12;
  if (!o->id.route.path_rec) o->id.route.path_rec = new ibv_sa_path_rec();
  *o->id.route.path_rec = r;
  o->id.route.num_paths = 1;
  o->id.route.addr.addr.ibaddr.dgid = d;
}

// ---- QPs ------------------------------------------------------------------------------------

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

int access_flags(const IdObj* o) {
  // As the kernel's CM: remote writes always, reads and atomics when responder resources exist.
  int f = IBV_ACCESS_REMOTE_WRITE;
  if (o->responder_resources) f |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  return f;
}

// The attributes of `state` for the id's connection (rdma_init_qp_attr and our own moves).
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
      if (o->state != IdState::kConnect && o->state != IdState::kConnectRequest &&
          o->state != IdState::kAccepting && o->state != IdState::kConnected)
        return EINVAL;
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

// ---- the agent's events → rdma_cm events --------------------------------------------------

std::map<std::pair<CmPort*, uint32_t>, IdObj*>& by_comm() {
  static auto* m = new std::map<std::pair<CmPort*, uint32_t>, IdObj*>();
  return *m;
}

std::map<std::pair<CmPort*, uint32_t>, IdObj*>& by_sidr() {
  static auto* m = new std::map<std::pair<CmPort*, uint32_t>, IdObj*>();
  return *m;
}

IdObj* child_of(IdObj* l, CmPort& p, uint32_t peer, const IpCmHeader& h) {
  auto* c = new IdObj();
  c->accepted = true;
  c->id.context = l->id.context;
  c->id.ps = l->id.ps;
  c->id.qp_type = l->id.qp_type;
  c->id.verbs = p.ctx;
  c->id.pd = p.pd;
  c->id.port_num = 1;
  if (l->chan->sync) {
    // A synchronous listener's requests become synchronous ids (librdmacm migrates them).
    c->chan = new ChannelObj();
    c->chan->sync = true;
    c->chan->ch.fd = c->chan->q.fd();
    c->own_chan = true;
  } else {
    c->chan = l->chan;
  }
  c->id.channel = &c->chan->ch;
  c->port = &p;
  c->local_ip = p.ip;
  c->local_port = l->local_port;
  c->remote_ip = peer;
  c->remote_port = h.src_port;
  // The PSN this side receives first is fixed with the id, not at rdma_accept: an application
  // that manages its own QP moves it to RTR with rdma_init_qp_attr before it accepts, and the
  // REP must announce that PSN (the kernel's CM uses the id's seq_num for both).
  c->local_psn = rng()() & 0xffffff;
  c->tos = l->tos;
  c->ack_timeout = l->ack_timeout;
  set_sin(c->id.route.addr.src_storage, c->local_ip, c->local_port);
  set_sin(c->id.route.addr.dst_storage, c->remote_ip, c->remote_port);
  c->id.route.addr.addr.ibaddr.sgid = p.gid;
  c->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
  fill_route(c);
  ids().insert(c);
  return c;
}

// The connection parameters of a CONNECT_RESPONSE or ESTABLISHED event from the REP, seen from the
// active side (as the kernel's CM reports them: what it may read from the peer is the REP's
// responder resources, so they are its initiator depth).
void set_rep_param(EventObj* e, const Rep& r) {
  set_conn_pd(e, r.private_data);
  rdma_conn_param& cp = e->ev.param.conn;
  cp.responder_resources = r.initiator_depth;
  cp.initiator_depth = r.responder_resources;
  cp.flow_control = r.end_to_end_flow_control;
  cp.rnr_retry_count = r.rnr_retry_count;
  cp.srq = r.srq;
  cp.qp_num = r.local_qpn;
}

void on_agent_event(CmPort& p, const Event& ev) {
  using T = Event::Type;
  log().debug("rdma_cm: {}: CM {} for connection {:#x} from {}", p.vdev->cfg.name,
              event_name(ev.type), ev.id, format_ipv4(ev.peer_ip));
  switch (ev.type) {
    case T::kReq:
    case T::kSidrReq: {
      auto* l = reinterpret_cast<IdObj*>(ev.listen_cookie);
      const bool sidr = ev.type == T::kSidrReq;
      const auto& pd = sidr ? ev.sidr_req.private_data : ev.req.private_data;
      auto h = parse_ip_private_data(pd);
      if (!ids().count(l) || l->destroyed || l->state != IdState::kListen || !h) {
        // Not an IP CM request we can serve (A11 header missing or IPv6): the kernel's
        // rdma_cm rejects these as the consumer.
        if (sidr) {
          SidrRep r;
          r.status = SidrStatus::kRejected;
          r.service_id = ev.sidr_req.service_id;
          p.agent->sidr_reply(ev.id, r, svc().now());
        } else {
          p.agent->reject(ev.id, static_cast<uint16_t>(RejReason::kConsumerReject), {},
                          svc().now());
        }
        return;
      }
      IdObj* c = child_of(l, p, ev.peer_ip, *h);
      c->state = IdState::kConnectRequest;
      EventObj* e = new_event(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
      e->ev.listen_id = &l->id;
      if (sidr) {
        c->sidr_id = ev.id;
        by_sidr()[{&p, ev.id}] = c;
        set_ud_pd(e, pd, kIpCmHeaderBytes);
        e->ev.param.ud.ah_attr = ah_to(c);
      } else {
        const Req& r = ev.req;
        c->comm_id = ev.id;
        by_comm()[{&p, ev.id}] = c;
        c->remote_qpn = r.local_qpn;
        c->remote_psn = r.starting_psn;
        // From the passive side's point of view (as the kernel's CM reports them): what the
        // active side can read from us is our responder resources.
        c->responder_resources = std::min<uint8_t>(r.initiator_depth, kMaxRdAtom);
        c->initiator_depth = std::min<uint8_t>(r.responder_resources, kMaxRdAtom);
        c->retry_count = r.retry_count;
        c->rnr_retry_count = r.rnr_retry_count;
        c->flow_control = r.end_to_end_flow_control;
        c->path_mtu =
            std::min<uint8_t>(r.path_mtu ? r.path_mtu : uint8_t{IBV_MTU_1024}, p.mtu_enum);
        if (r.primary.local_ack_timeout) c->ack_timeout = r.primary.local_ack_timeout;
        set_conn_pd(e, pd, kIpCmHeaderBytes);
        rdma_conn_param& cp = e->ev.param.conn;
        cp.responder_resources = r.initiator_depth;
        cp.initiator_depth = r.responder_resources;
        cp.flow_control = r.end_to_end_flow_control;
        cp.retry_count = r.retry_count;
        cp.rnr_retry_count = r.rnr_retry_count;
        cp.srq = r.srq;
        cp.qp_num = r.local_qpn;
      }
      // On the listener's channel, also when the new id has a channel of its own (synchronous).
      post_event(c, e, l->chan);
      return;
    }
    case T::kSidrRep: {
      auto it = by_sidr().find({&p, ev.id});
      if (it == by_sidr().end()) return;
      IdObj* o = it->second;
      by_sidr().erase(it);
      o->sidr_id = 0;
      const SidrRep& r = ev.sidr_rep;
      if (r.status != SidrStatus::kQpValid) {
        o->state = IdState::kRejected;
        // As the kernel's rdma_cm: a refused SIDR is UNREACHABLE, its status the SIDR REP status
        // (IBTA table 121: 1 = service ID not supported, 2 = rejected by the service, …).
        EventObj* e = new_event(o, RDMA_CM_EVENT_UNREACHABLE, static_cast<int>(r.status));
        set_ud_pd(e, r.private_data);
        post_event(o, e);
        return;
      }
      o->state = IdState::kConnected;
      o->remote_qpn = r.qpn;
      o->remote_qkey = r.qkey;
      EventObj* e = new_event(o, RDMA_CM_EVENT_ESTABLISHED, 0);
      set_ud_pd(e, r.private_data);
      e->ev.param.ud.ah_attr = ah_to(o);
      e->ev.param.ud.qp_num = r.qpn;
      e->ev.param.ud.qkey = r.qkey;
      post_event(o, e);
      return;
    }
    case T::kSidrTimeout: {
      auto it = by_sidr().find({&p, ev.id});
      if (it == by_sidr().end()) return;
      IdObj* o = it->second;
      by_sidr().erase(it);
      o->sidr_id = 0;
      o->state = IdState::kRejected;
      post(o, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      return;
    }
    default:
      break;
  }
  auto it = by_comm().find({&p, ev.id});
  if (it == by_comm().end()) return;
  IdObj* o = it->second;
  auto forget = [&] {
    by_comm().erase({&p, ev.id});
    o->comm_id = 0;
  };
  switch (ev.type) {
    case T::kRep: {
      const Rep& r = ev.rep;
      o->remote_qpn = r.local_qpn;
      o->remote_psn = r.starting_psn;
      // The REP's initiator depth is what the passive side reads from us; its responder
      // resources what we may read from it.
      o->responder_resources = std::min<uint8_t>(o->responder_resources, r.initiator_depth);
      o->initiator_depth = std::min<uint8_t>(o->initiator_depth, r.responder_resources);
      o->rnr_retry_count = r.rnr_retry_count;
      if (!o->id.qp) {
        // The application manages its QP: it gets the REP and calls rdma_establish().
        EventObj* e = new_event(o, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
        set_rep_param(e, r);
        post_event(o, e);
        return;
      }
      int rc = move_qp(o, IBV_QPS_RTR);
      if (rc == 0) rc = move_qp(o, IBV_QPS_RTS);
      if (rc != 0) {
        p.agent->reject(o->comm_id, static_cast<uint16_t>(RejReason::kConsumerReject), {},
                        svc().now());
        forget();
        o->state = IdState::kRejected;
        post(o, RDMA_CM_EVENT_CONNECT_ERROR, -rc);
        return;
      }
      p.agent->establish(o->comm_id, {}, svc().now());
      o->state = IdState::kConnected;
      EventObj* e = new_event(o, RDMA_CM_EVENT_ESTABLISHED, 0);
      set_rep_param(e, r);
      post_event(o, e);
      return;
    }
    case T::kEstablished:
      o->state = IdState::kConnected;
      post(o, RDMA_CM_EVENT_ESTABLISHED, 0);
      return;
    case T::kRej: {
      // Said at info level, with what the reason means: the program sees only
      // RDMA_CM_EVENT_REJECTED and a number.
      uroce::log().info("rdma_cm: connection to {}:{} rejected by the peer: {} (REJ reason {})",
                        uroce::format_ipv4(o->remote_ip), o->remote_port,
                        rej_reason_text(ev.rej.reason), ev.rej.reason);
      qp_to_error(o);
      forget();
      o->state = IdState::kRejected;
      EventObj* e = new_event(o, RDMA_CM_EVENT_REJECTED, ev.rej.reason);
      set_conn_pd(e, ev.rej.private_data);
      post_event(o, e);
      return;
    }
    case T::kReqTimeout:
    case T::kRepTimeout:
      qp_to_error(o);
      forget();
      o->state = IdState::kRejected;
      post(o, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT);
      return;
    case T::kDreq:
    case T::kDrep:
    case T::kDreqTimeout: {
      o->state = IdState::kDisconnected;
      if (o->disconnect_reported) return;
      o->disconnect_reported = true;
      EventObj* e = new_event(o, RDMA_CM_EVENT_DISCONNECTED, 0);
      set_conn_pd(e, ev.private_data);
      post_event(o, e);
      return;
    }
    case T::kTimeWaitExit:
      forget();
      post(o, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
      return;
    default:
      return;
  }
}

void ensure_handler() {
  static std::once_flag once;
  std::call_once(once, [] { svc().set_handler(on_agent_event); });
}

// ---- synchronous ids ------------------------------------------------------------------------

int get_event(ChannelObj* ch, rdma_cm_event** out);

// librdmacm's ucma_complete: a synchronous id's call waits for its event, keeps it in id->event
// (acknowledging the previous one) and turns a failure into errno.
int complete(IdObj* o) {
  if (!o->chan->sync) return 0;
  if (o->id.event) {
    rdma_ack_cm_event(o->id.event);
    o->id.event = nullptr;
  }
  rdma_cm_event* e = nullptr;
  if (get_event(o->chan, &e) != 0) return -1;
  o->id.event = e;
  if (e->status) {
    if (e->event == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
    return fail(e->status < 0 ? -e->status : e->status);
  }
  switch (e->event) {
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
      return fail(EHOSTUNREACH);
    case RDMA_CM_EVENT_REJECTED:
      return fail(ECONNREFUSED);
    default:
      return 0;
  }
}

ChannelObj* new_channel(bool sync) {
  ChannelObj* c = nullptr;
  try {
    c = new ChannelObj();
  } catch (const std::exception&) {
    errno = EMFILE;
    return nullptr;
  }
  c->sync = sync;
  c->ch.fd = c->q.fd();
  if (!sync) {
    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = c->q.fd();
    if (c->epfd < 0 || epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->q.fd(), &ev) < 0) {
      int err = errno;
      destroy_channel(c);
      errno = err;
      return nullptr;
    }
    c->ch.fd = c->epfd;
  }
  return c;
}

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

// Wraps an event the real library delivered on `ch` for the application: its id (and
// listen_id) are the application's ids, a CONNECT_REQUEST's new id gets its IdObj, and the
// fields the event changed in the real id are pulled. mu not held.
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
      child->state = IdState::kForwarded;
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
      child->destroyed = true;
      if (child->events_out == 0) free_id(child);
      return fail(err);
    }
  }
  *out = &e->ev;
  return 0;
}

// Waits until `ch` may have an event: its epoll fd (async), or its event fd and its real
// channel's fd (a synchronous id's channel). 0 or an errno (EINTR when a signal interrupted the
// wait: librdmacm's blocking read() of the channel returns it too).
int wait_channel(ChannelObj* ch) {
  pollfd p[2]{};
  nfds_t n = 0;
  if (ch->epfd >= 0) {
    p[n++] = {ch->epfd, POLLIN, 0};
  } else {
    p[n++] = {ch->q.fd(), POLLIN, 0};
    if (rdma_event_channel* r = ch->real.load(std::memory_order_acquire))
      p[n++] = {r->fd, POLLIN, 0};
  }
  return poll(p, n, -1) < 0 ? errno : 0;
}

// The channel's next event, uroce's or the real library's; the two are tried in turn so that
// neither starves the other. Blocks unless the application made ch.fd O_NONBLOCK (then EAGAIN);
// a synchronous id's channel always blocks. mu not held.
int get_event(ChannelObj* ch, rdma_cm_event** out) {
  for (;;) {
    const bool real_first = (ch->turn.fetch_add(1, std::memory_order_relaxed) & 1) != 0;
    for (int k = 0; k < 2; ++k) {
      if ((k == 0) == real_first) {
        rdma_event_channel* r = ch->real.load(std::memory_order_acquire);
        if (!r) continue;
        rdma_cm_event* re = nullptr;
        int rc, err;
        {
          InReal in;
          errno = 0;
          rc = UROCE_REAL(rdma_get_cm_event, "RDMACM_1.0")(r, &re);
          err = errno;
        }
        if (rc == 0) return take_real_event(re, out);
        if (err != EAGAIN && err != EWOULDBLOCK) return fail(err ? err : EIO);
        continue;
      }
      EventObj* e = ch->q.pop();
      if (!e) continue;
      std::lock_guard<std::mutex> g(svc().mu());
      if (e->owner->destroyed) {  // its id went away before the event was read: drop it
        release_event(e);
        k = -1;  // look at both sources again
        continue;
      }
      *out = &e->ev;
      return 0;
    }
    if (!ch->sync) {
      int fl = fcntl(ch->epfd, F_GETFL);
      if (fl < 0) return -1;
      if (fl & O_NONBLOCK) return fail(EAGAIN);
    }
    if (int rc = wait_channel(ch)) return fail(rc);
  }
}

// ---- connecting -----------------------------------------------------------------------------

uint8_t clamp_rd(uint8_t v) {
  return v == RDMA_MAX_RESP_RES ? kMaxRdAtom : v;
}

int do_connect(IdObj* o, const rdma_conn_param* cp) {
  if (o->state != IdState::kRouteResolved) return EINVAL;
  CmPort* p = o->port;
  const Time now = svc().now();
  IpCmHeader h;
  h.src_port = o->local_port;
  h.src_ip = o->local_ip;
  h.dst_ip = o->remote_ip;
  std::span<const uint8_t> user;
  if (cp && cp->private_data_len)
    user = {static_cast<const uint8_t*>(cp->private_data), cp->private_data_len};
  if (o->id.qp_type == IBV_QPT_UD) {
    auto pd = make_ip_private_data(h, user, sidr_req::kPrivateData.len);
    if (!pd) return EINVAL;
    SidrReq r;
    r.service_id = service_id(static_cast<uint16_t>(o->id.ps), o->remote_port);
    r.private_data = std::move(*pd);
    o->sidr_id = p->agent->sidr_request(o->remote_ip, std::move(r), now);
    by_sidr()[{p, o->sidr_id}] = o;
    o->state = IdState::kConnect;
    svc().flush(*p);
    return 0;
  }
  auto pd = make_ip_private_data(h, user, req::kPrivateData.len);
  if (!pd) return EINVAL;
  if (cp &&
      ((cp->responder_resources != RDMA_MAX_RESP_RES && cp->responder_resources > kMaxRdAtom) ||
       (cp->initiator_depth != RDMA_MAX_INIT_DEPTH && cp->initiator_depth > kMaxRdAtom)))
    return EINVAL;
  o->responder_resources = cp ? clamp_rd(cp->responder_resources) : kMaxRdAtom;
  o->initiator_depth = cp ? clamp_rd(cp->initiator_depth) : kMaxRdAtom;
  o->retry_count = cp ? std::min<uint8_t>(cp->retry_count, 7) : kRetryCountDefault;
  o->rnr_retry_count = cp ? std::min<uint8_t>(cp->rnr_retry_count, 7) : kRnrRetryDefault;
  o->flow_control = cp ? cp->flow_control : true;
  o->local_psn = rng()() & 0xffffff;
  o->path_mtu = p->mtu_enum;
  Req r;
  r.service_id = service_id(static_cast<uint16_t>(o->id.ps), o->remote_port);
  r.local_qpn = o->id.qp ? o->id.qp->qp_num : (cp ? cp->qp_num : 0);
  r.responder_resources = o->responder_resources;
  r.initiator_depth = o->initiator_depth;
  r.transport_service_type = 0;
  r.end_to_end_flow_control = o->flow_control;
  r.starting_psn = o->local_psn;
  r.retry_count = o->retry_count;
  r.rnr_retry_count = o->rnr_retry_count;
  r.pkey = 0xffff;
  r.path_mtu = o->path_mtu;
  r.srq = o->id.qp ? o->id.qp->srq != nullptr : (cp && cp->srq);
  r.primary.local_gid = to_gid(p->gid);
  r.primary.remote_gid = to_gid(gid_of(o->remote_ip));
  r.primary.traffic_class = o->tos;
  r.primary.hop_limit = 64;
  r.primary.local_ack_timeout = o->ack_timeout;
  r.private_data = std::move(*pd);
  o->comm_id = p->agent->connect(o->remote_ip, std::move(r), now);
  by_comm()[{p, o->comm_id}] = o;
  o->state = IdState::kConnect;
  svc().flush(*p);
  return 0;
}

int do_accept(IdObj* o, const rdma_conn_param* cp) {
  if (o->state != IdState::kConnectRequest) return EINVAL;
  CmPort* p = o->port;
  const Time now = svc().now();
  std::vector<uint8_t> user;
  if (cp && cp->private_data_len) {
    auto* b = static_cast<const uint8_t*>(cp->private_data);
    user.assign(b, b + cp->private_data_len);
  }
  if (o->id.qp_type == IBV_QPT_UD) {
    SidrRep r;
    r.status = SidrStatus::kQpValid;
    r.qpn = o->id.qp ? o->id.qp->qp_num : (cp ? cp->qp_num : 0);
    r.qkey = RDMA_UDP_QKEY;
    r.service_id = service_id(static_cast<uint16_t>(o->id.ps), o->local_port);
    if (user.size() > sidr_rep::kPrivateData.len) return EINVAL;
    r.private_data = std::move(user);
    int rc = p->agent->sidr_reply(o->sidr_id, std::move(r), now);
    if (rc) return rc;
    by_sidr().erase({p, o->sidr_id});
    o->sidr_id = 0;
    o->state = IdState::kConnected;  // no further event on the passive side (as the kernel)
    svc().flush(*p);
    return 0;
  }
  if (user.size() > rep::kPrivateData.len) return EINVAL;
  if (cp) {
    if ((cp->responder_resources != RDMA_MAX_RESP_RES && cp->responder_resources > kMaxRdAtom) ||
        (cp->initiator_depth != RDMA_MAX_INIT_DEPTH && cp->initiator_depth > kMaxRdAtom))
      return EINVAL;
    // What the application allows, within what the REQ asked.
    if (cp->responder_resources != RDMA_MAX_RESP_RES)
      o->responder_resources = std::min(o->responder_resources, cp->responder_resources);
    if (cp->initiator_depth != RDMA_MAX_INIT_DEPTH)
      o->initiator_depth = std::min(o->initiator_depth, cp->initiator_depth);
  }
  if (o->id.qp) {
    o->state = IdState::kAccepting;  // qp_attr_for checks it
    int rc = move_qp(o, IBV_QPS_RTR);
    if (rc == 0) rc = move_qp(o, IBV_QPS_RTS);
    if (rc != 0) {
      o->state = IdState::kConnectRequest;
      return rc;
    }
  }
  Rep r;
  r.local_qpn = o->id.qp ? o->id.qp->qp_num : (cp ? cp->qp_num : 0);
  r.starting_psn = o->local_psn;
  r.responder_resources = o->responder_resources;
  r.initiator_depth = o->initiator_depth;
  r.end_to_end_flow_control = cp ? cp->flow_control : true;
  r.rnr_retry_count = cp ? std::min<uint8_t>(cp->rnr_retry_count, 7) : kRnrRetryDefault;
  r.srq = o->id.qp ? o->id.qp->srq != nullptr : (cp && cp->srq);
  r.private_data = std::move(user);
  int rc = p->agent->accept(o->comm_id, std::move(r), now);
  if (rc) return rc;
  o->state = IdState::kAccepting;
  svc().flush(*p);
  return 0;
}

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

// Forget everything the agents know about the id and stop listening. mu held.
void detach(IdObj* o) {
  const Time now = svc().now();
  for (CmPort* p : o->listen_ports) {
    p->agent->unlisten(service_id(static_cast<uint16_t>(o->id.ps), o->local_port));
    svc().flush(*p);
  }
  o->listen_ports.clear();
  if (o->port && o->comm_id) {
    o->port->agent->destroy(o->comm_id, now);
    by_comm().erase({o->port, o->comm_id});
    o->comm_id = 0;
    svc().flush(*o->port);
  }
  if (o->port && o->sidr_id) {
    if (o->state == IdState::kConnectRequest) {
      SidrRep r;
      r.status = SidrStatus::kRejected;
      o->port->agent->sidr_reply(o->sidr_id, r, now);
    }
    o->port->agent->destroy(o->sidr_id, now);
    by_sidr().erase({o->port, o->sidr_id});
    o->sidr_id = 0;
    svc().flush(*o->port);
  }
}

}  // namespace
}  // namespace uroce::cm

using namespace uroce::cm;
using uroce::cm::IdObj;

// The real function `name`@`ver`, typed like the public declaration.
#define REAL_CM(name, ver) UROCE_REAL(name, ver)
// First thing in an export: when the real library is calling its own export (t_in_real), pass
// the call to the real function unchanged.
#define PASS_TO_REAL(name, ver, ...)                       \
  do {                                                     \
    if (t_in_real) return REAL_CM(name, ver)(__VA_ARGS__); \
  } while (0)

// ---- exported: event channels -------------------------------------------------------------

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
  destroy_channel(ch);
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
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR:
      return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
      return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR:
      return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE:
      return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED:
      return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED:
      return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED:
      return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN:
      return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR:
      return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE:
      return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

// ---- exported: ids ------------------------------------------------------------------------

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
    o->destroyed = true;
    if (o->events_out == 0) free_id(o);
    return 0;
  }
  std::lock_guard<std::mutex> g(svc().mu());
  detach(o);
  o->destroyed = true;
  // Events not yet acknowledged keep the memory until they are (queued ones are dropped when
  // read); librdmacm blocks here instead, which deadlocks an application that destroys an id
  // from its own event handler before acknowledging the event.
  if (o->events_out == 0) free_id(o);
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
  IdObj* o = to_obj(id);
  auto real_bind = [addr](rdma_cm_id* r) { return REAL_CM(rdma_bind_addr, "RDMACM_1.0")(r, addr); };
  if (o->real.load(std::memory_order_acquire)) return fwd(o, real_bind);
  if (!addr) return fail(EINVAL);
  {
    std::lock_guard<std::mutex> g(svc().mu());
    if (o->state != IdState::kIdle) return fail(EINVAL);
    uint32_t ip;
    uint16_t port;
    if (get_sin(addr, &ip, &port)) {
      int err = 0;
      if (!foreign_ipv4(ip, &err)) {
        if (err) return fail(err);
        if (int rc = bind_addr(o, ip, port)) return fail(rc);
        return 0;
      }
      if (!real_present()) return fail(EADDRNOTAVAIL);  // no RDMA device has it
    } else if (!real_present()) {
      return fail(EAFNOSUPPORT);  // uroce is IPv4 only
    }
    o->state = IdState::kForwarded;  // reserved: forward_id makes the real id
  }
  return forward_id(o, real_bind);
}

UROCE_EXPORT int rdma_listen(rdma_cm_id* id, int backlog) {
  PASS_TO_REAL(rdma_listen, "RDMACM_1.0", id, backlog);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  if (o->real.load(std::memory_order_acquire))
    return fwd(o,
               [backlog](rdma_cm_id* r) { return REAL_CM(rdma_listen, "RDMACM_1.0")(r, backlog); });
  // uroce's CM queues every request (the backlog is not enforced); the application sees them as
  // events.
  std::lock_guard<std::mutex> g(svc().mu());
  if (o->state == IdState::kIdle && bind_to(o, nullptr, 0, 0) != 0) return fail(EADDRINUSE);
  if (o->state != IdState::kBound) return fail(EINVAL);
  std::vector<CmPort*> ports;
  if (o->port) {
    ports.push_back(o->port);
  } else {
    // A wildcard listens on every uroce device, as the kernel's CM does on every RDMA device.
    for (uroce::verbs::VDevice* d : svc().devices()) {
      int err = 0;
      if (CmPort* p = svc().port_of(d, &err)) ports.push_back(p);
    }
    if (ports.empty()) return fail(ENODEV);
  }
  const uint64_t sid = service_id(static_cast<uint16_t>(id->ps), o->local_port);
  for (size_t i = 0; i < ports.size(); ++i) {
    if (int rc = ports[i]->agent->listen(sid, reinterpret_cast<uint64_t>(o))) {
      for (size_t k = 0; k < i; ++k) ports[k]->agent->unlisten(sid);
      return fail(rc);
    }
  }
  o->listen_ports = ports;
  o->state = IdState::kListen;
  // Said at info level: the integration tests wait for it before starting a client.
  uroce::log().info("rdma_cm: listening on {}:{}{}",
                    o->port ? uroce::format_ipv4(o->local_ip) : "*", o->local_port,
                    o->port ? "" : " (every uroce device)");
  return 0;
}

UROCE_EXPORT int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src_addr, sockaddr* dst_addr,
                                   int timeout_ms) {
  PASS_TO_REAL(rdma_resolve_addr, "RDMACM_1.0", id, src_addr, dst_addr, timeout_ms);
  if (!id || !dst_addr) return fail(EINVAL);
  IdObj* o = to_obj(id);
  auto real_resolve = [=](rdma_cm_id* r) {
    return REAL_CM(rdma_resolve_addr, "RDMACM_1.0")(r, src_addr, dst_addr, timeout_ms);
  };
  if (o->real.load(std::memory_order_acquire)) {
    if (fwd(o, real_resolve) != 0) return -1;
    return complete(o);
  }
  // uroce's resolution is local (no ARP or SA query): it never waits, timeout_ms is unused.
  uint32_t dip = 0, sip = 0;
  uint16_t dport = 0, sport = 0;
  const bool dst4 = get_sin(dst_addr, &dip, &dport);
  const bool src4 = src_addr && get_sin(src_addr, &sip, &sport);
  // Without a source, the one the kernel's route towards dst leaves from decides (a socket call:
  // made before taking mu).
  const uint32_t route_src = dst4 && (!src_addr || (src4 && sip == 0)) ? route_source(dip) : 0;
  enum class To { kUroce, kReal, kRealElseUroce } to = To::kUroce;
  {
    std::lock_guard<std::mutex> g(svc().mu());
    int err = 0;
    if (o->state != IdState::kIdle) {
      // Already bound: the bind decided.
    } else if ((src_addr && !src4) || !dst4) {
      if (!real_present()) return fail(EAFNOSUPPORT);  // uroce is IPv4 only
      to = To::kReal;
    } else if (src_addr && sip != 0) {
      if (foreign_ipv4(sip, &err)) {
        if (!real_present()) return fail(EADDRNOTAVAIL);
        to = To::kReal;
      } else if (err) {
        return fail(err);
      }
    } else if (route_src && real_present() && foreign_ipv4(route_src, &err)) {
      to = To::kRealElseUroce;
    }
    if (to != To::kUroce) o->state = IdState::kForwarded;  // reserved for forward_id
  }
  if (to != To::kUroce) {
    bool no_rdma = false;
    if (forward_id(o, real_resolve, &no_rdma) == 0) return complete(o);
    // A route chosen by the kernel, with no kernel RDMA stack at all (the real library cannot
    // make an event channel): no RDMA device but uroce's can reach dst, and uroce serves it as
    // it did before forwarding existed (its first device; a DPDK device's address is not the
    // kernel's). Any other failure is the real library's answer.
    if (to == To::kReal || !no_rdma) return -1;
  }
  if (!dst4) return fail(EAFNOSUPPORT);
  {
    std::lock_guard<std::mutex> g(svc().mu());
    if (src_addr && o->state == IdState::kIdle) {
      if (!get_sin(src_addr, &sip, &sport)) return fail(EAFNOSUPPORT);
      if (int rc = bind_addr(o, sip, sport)) return fail(rc);
    }
    if (o->state == IdState::kIdle && bind_to(o, nullptr, 0, 0) != 0) return fail(EADDRINUSE);
    if (o->state != IdState::kBound) return fail(EINVAL);
    if (!o->port) {  // unbound or wildcard: pick the device that reaches dst
      int err = 0;
      CmPort* p = choose_port(dip, &err);
      if (!p) return fail(err ? err : EADDRNOTAVAIL);
      uint16_t keep = o->local_port;
      o->state = IdState::kIdle;
      if (int rc = bind_to(o, p, p->ip, keep)) return fail(rc);
    }
    o->remote_ip = dip;
    o->remote_port = dport;
    set_sin(o->id.route.addr.dst_storage, dip, dport);
    o->id.route.addr.addr.ibaddr.dgid = gid_of(dip);
    o->state = IdState::kAddrResolved;
    post(o, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
  }
  return complete(o);
}

UROCE_EXPORT int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
  PASS_TO_REAL(rdma_resolve_route, "RDMACM_1.0", id, timeout_ms);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  if (o->real.load(std::memory_order_acquire)) {
    if (fwd(o, [=](rdma_cm_id* r) {
          return REAL_CM(rdma_resolve_route, "RDMACM_1.0")(r, timeout_ms);
        }) != 0)
      return -1;
    return complete(o);
  }
  {
    std::lock_guard<std::mutex> g(svc().mu());
    if (o->state != IdState::kAddrResolved) return fail(EINVAL);
    fill_route(o);
    o->state = IdState::kRouteResolved;
    post(o, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  }
  return complete(o);
}

UROCE_EXPORT int rdma_connect(rdma_cm_id* id, rdma_conn_param* conn_param) {
  PASS_TO_REAL(rdma_connect, "RDMACM_1.0", id, conn_param);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  if (o->real.load(std::memory_order_acquire)) {
    if (fwd(o, [=](rdma_cm_id* r) { return REAL_CM(rdma_connect, "RDMACM_1.0")(r, conn_param); }) !=
        0)
      return -1;
    return complete(o);
  }
  {
    std::lock_guard<std::mutex> g(svc().mu());
    if (int rc = do_connect(o, conn_param)) return fail(rc);
  }
  return complete(o);
}

UROCE_EXPORT int rdma_establish(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_establish, "RDMACM_1.2", id);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  if (o->real.load(std::memory_order_acquire))
    return fwd(o, [](rdma_cm_id* r) { return REAL_CM(rdma_establish, "RDMACM_1.2")(r); });
  std::lock_guard<std::mutex> g(svc().mu());
  if (o->state != IdState::kConnect || !o->port || !o->comm_id) return fail(EINVAL);
  if (int rc = o->port->agent->establish(o->comm_id, {}, svc().now())) return fail(rc);
  o->state = IdState::kConnected;
  svc().flush(*o->port);
  return 0;
}

UROCE_EXPORT int rdma_accept(rdma_cm_id* id, rdma_conn_param* conn_param) {
  PASS_TO_REAL(rdma_accept, "RDMACM_1.0", id, conn_param);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  if (o->real.load(std::memory_order_acquire)) {
    if (fwd(o, [=](rdma_cm_id* r) { return REAL_CM(rdma_accept, "RDMACM_1.0")(r, conn_param); }) !=
        0)
      return -1;
    return o->id.qp_type == IBV_QPT_UD ? 0 : complete(o);
  }
  bool ud;
  {
    std::lock_guard<std::mutex> g(svc().mu());
    if (int rc = do_accept(o, conn_param)) return fail(rc);
    ud = o->id.qp_type == IBV_QPT_UD;
  }
  // A synchronous passive id waits for ESTABLISHED (RC; UD has no further event).
  return ud ? 0 : complete(o);
}

UROCE_EXPORT int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  PASS_TO_REAL(rdma_reject, "RDMACM_1.0", id, private_data, private_data_len);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  if (o->real.load(std::memory_order_acquire))
    return fwd(o, [=](rdma_cm_id* r) {
      return REAL_CM(rdma_reject, "RDMACM_1.0")(r, private_data, private_data_len);
    });
  std::lock_guard<std::mutex> g(svc().mu());
  if (o->state != IdState::kConnectRequest || !o->port) return fail(EINVAL);
  const Time now = svc().now();
  std::span<const uint8_t> pd(static_cast<const uint8_t*>(private_data),
                              private_data ? private_data_len : 0);
  int rc;
  if (o->id.qp_type == IBV_QPT_UD) {
    SidrRep r;
    r.status = SidrStatus::kRejected;
    r.service_id = service_id(static_cast<uint16_t>(o->id.ps), o->local_port);
    r.private_data.assign(pd.begin(), pd.end());
    rc = o->port->agent->sidr_reply(o->sidr_id, r, now);
    by_sidr().erase({o->port, o->sidr_id});
    o->sidr_id = 0;
  } else {
    rc = o->port->agent->reject(o->comm_id, static_cast<uint16_t>(RejReason::kConsumerReject), pd,
                                now);
    by_comm().erase({o->port, o->comm_id});
    o->comm_id = 0;
  }
  if (rc) return fail(rc);
  o->state = IdState::kRejected;
  svc().flush(*o->port);
  return 0;
}

UROCE_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data,
                                 uint8_t private_data_len) {
  PASS_TO_REAL(rdma_reject_ece, "RDMACM_1.3", id, private_data, private_data_len);
  if (id && to_obj(id)->real.load(std::memory_order_acquire))
    return fwd(to_obj(id), [=](rdma_cm_id* r) {
      return REAL_CM(rdma_reject_ece, "RDMACM_1.3")(r, private_data, private_data_len);
    });
  return rdma_reject(id, private_data, private_data_len);  // uroce has no ECE: a plain reject
}

UROCE_EXPORT int rdma_disconnect(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_disconnect, "RDMACM_1.0", id);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  if (o->real.load(std::memory_order_acquire))
    return fwd(o, [](rdma_cm_id* r) { return REAL_CM(rdma_disconnect, "RDMACM_1.0")(r); });
  std::lock_guard<std::mutex> g(svc().mu());
  if (!o->port || !o->comm_id) {
    // UD ids, or a connection already gone (its DREQ answered and time wait over).
    if (o->id.qp_type == IBV_QPT_UD) return 0;
    return o->state == IdState::kDisconnected ? 0 : fail(EINVAL);
  }
  qp_to_error(o);  // librdmacm flushes the QP first
  int rc = o->port->agent->disconnect(o->comm_id, {}, svc().now());
  if (rc) return fail(rc);
  if (o->state != IdState::kDisconnected) o->state = IdState::kDisconnected;
  svc().flush(*o->port);
  return 0;
}

UROCE_EXPORT int rdma_notify(rdma_cm_id* id, ibv_event_type event) {
  PASS_TO_REAL(rdma_notify, "RDMACM_1.0", id, event);
  if (!id) return fail(EINVAL);
  IdObj* o = to_obj(id);
  if (o->real.load(std::memory_order_acquire))
    return fwd(o, [=](rdma_cm_id* r) { return REAL_CM(rdma_notify, "RDMACM_1.0")(r, event); });
  std::lock_guard<std::mutex> g(svc().mu());
  if (event != IBV_EVENT_COMM_EST) return 0;  // only COMM_EST means something to the CM
  if (!o->port || !o->comm_id || o->state != IdState::kAccepting) return 0;
  if (o->port->agent->notify_established(o->comm_id) == 0) {
    o->state = IdState::kConnected;
    post(o, RDMA_CM_EVENT_ESTABLISHED, 0);
  }
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
    ibv_qp_init_attr a = l->ep_qp_attr;
    int rc;
    if (c->real.load(std::memory_order_acquire)) {
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
  if (id && to_obj(id)->real.load(std::memory_order_acquire))
    return fwd(to_obj(id), [=](rdma_cm_id* r) {
      return REAL_CM(rdma_set_option, "RDMACM_1.0")(r, level, optname, optval, optlen);
    });
  if (!id || !optval) return fail(EINVAL);
  IdObj* o = to_obj(id);
  std::lock_guard<std::mutex> g(svc().mu());
  // The *_set flags: an id without an address yet may still be forwarded (forward_id replays
  // them on the real id).
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(uint8_t)) return fail(EINVAL);
        o->tos = *static_cast<uint8_t*>(optval);
        o->tos_set = true;
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
        if (optlen != sizeof(int)) return fail(EINVAL);
        o->reuseaddr = *static_cast<int*>(optval) != 0;
        o->reuseaddr_set = true;
        return 0;
      case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int)) return fail(EINVAL);
        o->afonly = *static_cast<int*>(optval);
        o->afonly_set = true;
        return 0;  // uroce is IPv4 only: nothing to restrict
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (optlen != sizeof(uint8_t)) return fail(EINVAL);
        o->ack_timeout = std::min<uint8_t>(*static_cast<uint8_t*>(optval), 31);
        o->ack_timeout_set = true;
        return 0;
      default:
        return fail(ENOSYS);
    }
  }
  if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH)
    return fail(EOPNOTSUPP);  // RoCE resolves its path from IP: no SA path to set
  return fail(ENOSYS);
}

UROCE_EXPORT int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  PASS_TO_REAL(rdma_init_qp_attr, "RDMACM_1.2", id, qp_attr, qp_attr_mask);
  if (id && to_obj(id)->real.load(std::memory_order_acquire))
    return fwd(to_obj(id), [=](rdma_cm_id* r) {
      return REAL_CM(rdma_init_qp_attr, "RDMACM_1.2")(r, qp_attr, qp_attr_mask);
    });
  if (!id || !qp_attr || !qp_attr_mask) return fail(EINVAL);
  IdObj* o = to_obj(id);
  std::lock_guard<std::mutex> g(svc().mu());
  if (int rc = qp_attr_for(o, qp_attr->qp_state, qp_attr, qp_attr_mask)) return fail(rc);
  return 0;
}

// ---- exported: QPs and SRQs ---------------------------------------------------------------

UROCE_EXPORT int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  PASS_TO_REAL(rdma_create_qp, "RDMACM_1.0", id, pd, qp_init_attr);
  if (id && to_obj(id)->real.load(std::memory_order_acquire))
    return fwd(to_obj(id), [=](rdma_cm_id* r) {
      return REAL_CM(rdma_create_qp, "RDMACM_1.0")(r, pd, qp_init_attr);
    });
  if (!id || !qp_init_attr) return fail(EINVAL);
  std::lock_guard<std::mutex> g(svc().mu());
  if (int rc = create_qp(to_obj(id), pd, qp_init_attr)) return fail(rc);
  return 0;
}

UROCE_EXPORT int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  PASS_TO_REAL(rdma_create_qp_ex, "RDMACM_1.0", id, attr);
  if (id && to_obj(id)->real.load(std::memory_order_acquire))
    return fwd(to_obj(id),
               [=](rdma_cm_id* r) { return REAL_CM(rdma_create_qp_ex, "RDMACM_1.0")(r, attr); });
  if (!id || !attr) return fail(EINVAL);
  // Only what ibv_qp_init_attr carries (and the PD) is served here.
  if (attr->comp_mask & ~static_cast<uint32_t>(IBV_QP_INIT_ATTR_PD)) return fail(EOPNOTSUPP);
  ibv_qp_init_attr a{};
  a.qp_context = attr->qp_context;
  a.send_cq = attr->send_cq;
  a.recv_cq = attr->recv_cq;
  a.srq = attr->srq;
  a.cap = attr->cap;
  a.qp_type = attr->qp_type;
  a.sq_sig_all = attr->sq_sig_all;
  ibv_pd* pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr;
  std::lock_guard<std::mutex> g(svc().mu());
  if (int rc = create_qp(to_obj(id), pd, &a)) return fail(rc);
  attr->cap = a.cap;
  return 0;
}

UROCE_EXPORT void rdma_destroy_qp(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_destroy_qp, "RDMACM_1.0", id);
  if (!id) return;
  if (to_obj(id)->real.load(std::memory_order_acquire)) {
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
  if (id && to_obj(id)->real.load(std::memory_order_acquire))
    return fwd(to_obj(id),
               [=](rdma_cm_id* r) { return REAL_CM(rdma_create_srq, "RDMACM_1.0")(r, pd, attr); });
  if (!id || !attr || !id->verbs) return fail(EINVAL);
  IdObj* o = to_obj(id);
  std::lock_guard<std::mutex> g(svc().mu());
  if (!pd) pd = o->port ? o->port->pd : nullptr;
  if (!pd) return fail(EINVAL);
  ibv_srq* srq = uv::create_srq(pd, attr);
  if (!srq) return -1;
  id->srq = srq;
  id->pd = pd;
  return 0;
}

UROCE_EXPORT int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
  PASS_TO_REAL(rdma_create_srq_ex, "RDMACM_1.0", id, attr);
  if (id && to_obj(id)->real.load(std::memory_order_acquire))
    return fwd(to_obj(id),
               [=](rdma_cm_id* r) { return REAL_CM(rdma_create_srq_ex, "RDMACM_1.0")(r, attr); });
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
  if (id && to_obj(id)->real.load(std::memory_order_acquire)) {
    fwd(to_obj(id), [](rdma_cm_id* r) {
      REAL_CM(rdma_destroy_srq, "RDMACM_1.0")(r);
      return 0;
    });
    return;
  }
  if (!id || !id->srq) return;
  uv::destroy_srq(id->srq);
  id->srq = nullptr;
}

// ---- exported: endpoints ------------------------------------------------------------------

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

// ---- exported: multicast (UD ids; IPv4 groups joined locally, no SA) ----------------------

UROCE_EXPORT int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  PASS_TO_REAL(rdma_join_multicast, "RDMACM_1.0", id, addr, context);
  if (id && to_obj(id)->real.load(std::memory_order_acquire)) {
    if (fwd(to_obj(id), [=](rdma_cm_id* r) {
          return REAL_CM(rdma_join_multicast, "RDMACM_1.0")(r, addr, context);
        }) != 0)
      return -1;
    return complete(to_obj(id));
  }
  if (!id || !addr) return fail(EINVAL);
  IdObj* o = to_obj(id);
  uint32_t group;
  uint16_t port;
  if (!get_sin(addr, &group, &port)) return fail(EAFNOSUPPORT);
  if ((group >> 28) != 0xe || id->qp_type != IBV_QPT_UD) return fail(EINVAL);
  {
    std::lock_guard<std::mutex> g(svc().mu());
    if (!o->port || o->mcast.count(group)) return fail(EINVAL);
    if (id->qp) {
      ibv_gid gid = gid_of(group);
      if (int rc = uv::attach_mcast(id->qp, &gid, 0)) return fail(rc);
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
  }
  return complete(o);
}

UROCE_EXPORT int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* mc_join_attr,
                                        void* context) {
  PASS_TO_REAL(rdma_join_multicast_ex, "RDMACM_1.1", id, mc_join_attr, context);
  if (id && to_obj(id)->real.load(std::memory_order_acquire)) {
    if (fwd(to_obj(id), [=](rdma_cm_id* r) {
          return REAL_CM(rdma_join_multicast_ex, "RDMACM_1.1")(r, mc_join_attr, context);
        }) != 0)
      return -1;
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
  if (id && to_obj(id)->real.load(std::memory_order_acquire))
    return fwd(to_obj(id),
               [=](rdma_cm_id* r) { return REAL_CM(rdma_leave_multicast, "RDMACM_1.0")(r, addr); });
  if (!id || !addr) return fail(EINVAL);
  IdObj* o = to_obj(id);
  uint32_t group;
  uint16_t port;
  if (!get_sin(addr, &group, &port)) return fail(EAFNOSUPPORT);
  std::lock_guard<std::mutex> g(svc().mu());
  auto it = o->mcast.find(group);
  if (it == o->mcast.end()) return fail(EADDRNOTAVAIL);
  if (id->qp) {
    ibv_gid gid = gid_of(group);
    uv::detach_mcast(id->qp, &gid, 0);
  }
  o->mcast.erase(it);
  return 0;
}

// ---- exported: addresses and devices ------------------------------------------------------

UROCE_EXPORT uint16_t rdma_get_src_port(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_get_src_port, "RDMACM_1.0", id);
  // A forwarded id's route is the real id's, pulled after every call and event.
  return id ? id->route.addr.src_sin.sin_port : 0;  // network order, as librdmacm
}

UROCE_EXPORT uint16_t rdma_get_dst_port(rdma_cm_id* id) {
  PASS_TO_REAL(rdma_get_dst_port, "RDMACM_1.0", id);
  return id ? id->route.addr.dst_sin.sin_port : 0;
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
  if (id && to_obj(id)->real.load(std::memory_order_acquire))
    return fwd(to_obj(id),
               [=](rdma_cm_id* r) { return REAL_CM(rdma_set_local_ece, "RDMACM_1.3")(r, ece); });
  return fail(EOPNOTSUPP);
}

UROCE_EXPORT int rdma_get_remote_ece(rdma_cm_id* id, ibv_ece* ece) {
  PASS_TO_REAL(rdma_get_remote_ece, "RDMACM_1.3", id, ece);
  if (id && to_obj(id)->real.load(std::memory_order_acquire))
    return fwd(to_obj(id),
               [=](rdma_cm_id* r) { return REAL_CM(rdma_get_remote_ece, "RDMACM_1.3")(r, ece); });
  return fail(EOPNOTSUPP);
}

// rdma_getaddrinfo: IPv4 names and numbers through the system resolver; the RDMA fields as
// librdmacm fills them for an IP address (port space from the hints, TCP by default).
// As librdmacm's: with a node or a service, getaddrinfo's first IPv4 answer is the source
// (RAI_PASSIVE) or the destination; without either, the addresses come from the hints alone
// (libfabric's verbs provider asks so, with only a source address). A source in the hints fills
// a result that has none.
UROCE_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                  rdma_addrinfo** res) {
  PASS_TO_REAL(rdma_getaddrinfo, "RDMACM_1.0", node, service, hints, res);
  if (!res || (!node && !service && !hints)) return fail(EINVAL);
  if (hints && hints->ai_family && hints->ai_family != AF_INET) return fail(EAFNOSUPPORT);
  const int flags = hints ? hints->ai_flags : 0;
  auto* r = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (!r) return fail(ENOMEM);
  r->ai_flags = flags;
  r->ai_family = AF_INET;
  r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
  r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type
                  : r->ai_port_space == RDMA_PS_UDP || r->ai_port_space == RDMA_PS_IPOIB
                      ? IBV_QPT_UD
                      : IBV_QPT_RC;
  bool ok = true;
  if (node || service) {
    addrinfo h{};
    h.ai_family = AF_INET;
    h.ai_socktype = SOCK_STREAM;
    if (flags & RAI_PASSIVE) h.ai_flags |= AI_PASSIVE;
    if (flags & RAI_NUMERICHOST) h.ai_flags |= AI_NUMERICHOST;
    addrinfo* ai = nullptr;
    int rc = getaddrinfo(node, service, &h, &ai);
    if (rc != 0) {
      std::free(r);
      errno = rc == EAI_SYSTEM ? errno : ENOENT;
      return rc;
    }
    ok = (flags & RAI_PASSIVE)
             ? copy_addr(ai->ai_addr, sizeof(sockaddr_in), &r->ai_src_addr, &r->ai_src_len)
             : copy_addr(ai->ai_addr, sizeof(sockaddr_in), &r->ai_dst_addr, &r->ai_dst_len);
    freeaddrinfo(ai);
  } else if (hints->ai_dst_addr && hints->ai_dst_len) {
    if (hints->ai_dst_addr->sa_family != AF_INET) {
      std::free(r);
      return fail(EAFNOSUPPORT);
    }
    ok = copy_addr(hints->ai_dst_addr, hints->ai_dst_len, &r->ai_dst_addr, &r->ai_dst_len);
  }
  if (ok && !r->ai_src_len && hints && hints->ai_src_addr && hints->ai_src_len) {
    if (hints->ai_src_addr->sa_family != AF_INET) {
      rdma_freeaddrinfo(r);
      return fail(EAFNOSUPPORT);
    }
    ok = copy_addr(hints->ai_src_addr, hints->ai_src_len, &r->ai_src_addr, &r->ai_src_len);
  }
  if (!ok) {
    rdma_freeaddrinfo(r);
    return fail(ENOMEM);
  }
  *res = r;
  return 0;
}

UROCE_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  PASS_TO_REAL(rdma_freeaddrinfo, "RDMACM_1.0", res);
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    std::free(res->ai_src_addr);
    std::free(res->ai_dst_addr);
    std::free(res->ai_src_canonname);
    std::free(res->ai_dst_canonname);
    std::free(res->ai_route);
    std::free(res->ai_connect);
    std::free(res);
    res = next;
  }
}
