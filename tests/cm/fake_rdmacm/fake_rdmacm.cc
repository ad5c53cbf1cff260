// A fake system librdmacm for tests/cm/rdma_cm_forward_test.cc: built as librdmacm.so.1 with
// librdmacm's version nodes and loaded in place of the system library through LD_LIBRARY_PATH,
// it stands for a real RDMA device ("fake0") that owns 192.0.2.1 (TEST-NET-1), so that uroce's
// forwarding of ids it does not own can be tested on a host without kernel RDMA.
//
// What it does, in one process and without threads, with librdmacm's event sequences:
//   bind       192.0.2.1 (any port) and 2001:db8::1; 198.51.100.0/24 is refused with EACCES (an
//              error no other part of the test returns, so it proves errors pass unchanged);
//              any other address EADDRNOTAVAIL;
//   resolve    to 192.0.2.1: ADDR_RESOLVED, then ROUTE_RESOLVED (id->verbs, id->pd and the route
//              are set when the event is read, as librdmacm does); other destinations:
//              ADDR_ERROR, status -EHOSTUNREACH;
//   connect    to a listener of its own: CONNECT_REQUEST on the listener's channel with a new
//              id (counted against the listener, as librdmacm does); no listener: REJECTED 8;
//   accept     ESTABLISHED on both ids; reject: REJECTED 28 with the private data;
//   disconnect DISCONNECTED on both ids; join_multicast: MULTICAST_JOIN.
// Like librdmacm, it calls some of its own exports through the PLT (rdma_create_qp calls
// rdma_create_qp_ex, rdma_accept calls rdma_init_qp_attr, rdma_create_id with no channel calls
// rdma_create_event_channel), which under uroce-run reach liburoce with this library's objects.
// FAKE_RDMACM_NODEV=1 makes rdma_create_event_channel fail with ENODEV, as the real library does
// without kernel RDMA. fake_rdmacm_calls() counts the calls made into the library.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr uint32_t kFakeIp = 0xc0000201;      // 192.0.2.1
constexpr uint32_t kRefusedNet = 0xc6336400;  // 198.51.100.0/24
const uint8_t kFakeIp6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

std::atomic<int> g_calls{0};
std::mutex g_mu;
std::condition_variable g_cv;  // an event was acknowledged

// The device the fake owns. Only its name and pointers are ever looked at: no verb may be called
// on these objects.
ibv_device g_dev = [] {
  ibv_device d{};
  std::snprintf(d.name, sizeof d.name, "fake0");
  return d;
}();
ibv_context g_ctx = [] {
  ibv_context c{};
  c.device = &g_dev;
  return c;
}();
ibv_pd g_pd = [] {
  ibv_pd p{};
  p.context = &g_ctx;
  return p;
}();

struct FEvent;

struct FChannel {
  rdma_event_channel ch;  // first
  std::deque<FEvent*> q;  // fd: a semaphore eventfd counting q
};

enum class St {
  kIdle,
  kBound,
  kAddrQueried,
  kAddr,
  kRoute,
  kListen,
  kConnReq,
  kConnect,
  kConnected,
  kDone
};

struct FId {
  rdma_cm_id id;  // first
  St st = St::kIdle;
  uint32_t lip = 0, rip = 0;
  uint16_t lport = 0, rport = 0;
  FId* peer = nullptr;
  bool own_cqs = false;
  ibv_sa_path_rec path{};
  int reported = 0, completed = 0;  // events read and acknowledged (librdmacm's counters)
};

struct FEvent {
  rdma_cm_event ev;        // first
  FId* counted = nullptr;  // the id whose counters the event moves (the listener's for a request)
  FId* apply = nullptr;    // the id whose fields are set when it is read
  uint8_t pd[256];
};

std::set<FId*> g_ids;
uint16_t g_next_port = 40000;
uint32_t g_next_qpn = 0x1000;

void count() {
  g_calls.fetch_add(1, std::memory_order_relaxed);
}

int fail(int err) {
  errno = err;
  return -1;
}

FId* to_f(rdma_cm_id* id) {
  return reinterpret_cast<FId*>(id);
}

FChannel* to_c(rdma_event_channel* ch) {
  return reinterpret_cast<FChannel*>(ch);
}

void set_sin(sockaddr_storage& ss, uint32_t ip, uint16_t port) {
  std::memset(&ss, 0, sizeof ss);
  auto* s = reinterpret_cast<sockaddr_in*>(&ss);
  s->sin_family = AF_INET;
  s->sin_addr.s_addr = htonl(ip);
  s->sin_port = htons(port);
}

// Queues an event for `to` on its channel. g_mu held.
FEvent* queue(FId* to, rdma_cm_event_type type, int status, FId* counted = nullptr) {
  auto* e = new FEvent();
  e->ev.id = &to->id;
  e->ev.event = type;
  e->ev.status = status;
  e->counted = counted ? counted : to;
  e->apply = to;
  to_c(to->id.channel)->q.push_back(e);
  uint64_t one = 1;
  ssize_t r = write(to->id.channel->fd, &one, sizeof one);
  (void)r;
  return e;
}

void set_pd(FEvent* e, const void* pd, uint8_t len) {
  if (!pd || !len) return;
  std::memcpy(e->pd, pd, len);
  e->ev.param.conn.private_data = e->pd;
  e->ev.param.conn.private_data_len = len;
}

void device_fields(FId* f) {
  f->id.verbs = &g_ctx;
  f->id.pd = &g_pd;
  f->id.port_num = 1;
}

// Waits (bounded) until every event read for `f` is acknowledged, as librdmacm blocks in
// rdma_destroy_id and rdma_migrate_id; a test that would hang there aborts instead.
void wait_acked(std::unique_lock<std::mutex>& g, FId* f, const char* who) {
  if (!g_cv.wait_for(g, std::chrono::seconds(5), [&] { return f->completed >= f->reported; })) {
    std::fprintf(stderr, "fake librdmacm: %s waited 5 s for unacknowledged events\n", who);
    std::abort();
  }
}

// Takes the queued events of `f` off its channel (the kernel drops them with the id). g_mu held.
void drop_queued(FId* f) {
  FChannel* c = to_c(f->id.channel);
  for (auto it = c->q.begin(); it != c->q.end();) {
    if ((*it)->apply == f || (*it)->counted == f) {
      uint64_t v;
      ssize_t r = read(c->ch.fd, &v, sizeof v);  // the count covers the queue: never blocks
      (void)r;
      delete *it;
      it = c->q.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

FAKE_EXPORT int fake_rdmacm_calls(void) {
  return g_calls.load(std::memory_order_relaxed);
}

FAKE_EXPORT rdma_event_channel* rdma_create_event_channel(void) {
  count();
  const char* nodev = std::getenv("FAKE_RDMACM_NODEV");
  if (nodev && std::strcmp(nodev, "1") == 0) {
    errno = ENODEV;  // what librdmacm says without /dev/infiniband/rdma_cm
    return nullptr;
  }
  auto* c = new FChannel();
  c->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (c->ch.fd < 0) {
    delete c;
    return nullptr;
  }
  return &c->ch;
}

FAKE_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
  count();
  std::lock_guard<std::mutex> g(g_mu);
  FChannel* c = to_c(channel);
  for (FEvent* e : c->q) delete e;
  close(c->ch.fd);
  delete c;
}

FAKE_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  count();
  if (!channel || !event) return fail(EINVAL);
  uint64_t v;
  // librdmacm's is a write() to the channel's fd that waits unless it is O_NONBLOCK.
  if (read(channel->fd, &v, sizeof v) != sizeof v) return -1;
  std::lock_guard<std::mutex> g(g_mu);
  FChannel* c = to_c(channel);
  FEvent* e = c->q.front();
  c->q.pop_front();
  FId* f = e->apply;
  // What librdmacm learns from the kernel when it reads the event.
  switch (e->ev.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      device_fields(f);
      f->st = St::kAddr;
      break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      // path.traffic_class: rdma_set_option(TOS)
      f->id.route.path_rec = &f->path;
      f->id.route.num_paths = 1;
      f->st = St::kRoute;
      break;
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      device_fields(f);
      break;
    default:
      break;
  }
  ++e->counted->reported;
  *event = &e->ev;
  return 0;
}

FAKE_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  count();
  if (!event) return fail(EINVAL);
  auto* e = reinterpret_cast<FEvent*>(event);
  {
    std::lock_guard<std::mutex> g(g_mu);
    ++e->counted->completed;
  }
  g_cv.notify_all();
  delete e;
  return 0;
}

FAKE_EXPORT const char* rdma_event_str(rdma_cm_event_type) {
  count();
  return "FAKE EVENT";
}

FAKE_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context,
                               rdma_port_space ps) {
  count();
  if (!id) return fail(EINVAL);
  if (!channel) channel = rdma_create_event_channel();  // through the PLT, as librdmacm's
  if (!channel) return -1;
  auto* f = new FId();
  f->id.channel = channel;
  f->id.context = context;
  f->id.ps = ps;
  f->id.qp_type = ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
  std::lock_guard<std::mutex> g(g_mu);
  g_ids.insert(f);
  *id = &f->id;
  return 0;
}

FAKE_EXPORT int rdma_destroy_id(rdma_cm_id* id) {
  count();
  if (!id) return fail(EINVAL);
  FId* f = to_f(id);
  std::unique_lock<std::mutex> g(g_mu);
  wait_acked(g, f, "rdma_destroy_id");
  drop_queued(f);
  if (f->peer) f->peer->peer = nullptr;
  g_ids.erase(f);
  delete f;
  return 0;
}

FAKE_EXPORT int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
  count();
  if (!id || !channel) return fail(EINVAL);
  FId* f = to_f(id);
  std::unique_lock<std::mutex> g(g_mu);
  wait_acked(g, f, "rdma_migrate_id");
  // Queued events move with the id (the kernel migrates them).
  FChannel* from = to_c(id->channel);
  std::deque<FEvent*> moving;
  for (auto it = from->q.begin(); it != from->q.end();) {
    if ((*it)->apply == f) {
      uint64_t v;
      ssize_t r = read(from->ch.fd, &v, sizeof v);
      (void)r;
      moving.push_back(*it);
      it = from->q.erase(it);
    } else {
      ++it;
    }
  }
  id->channel = channel;
  for (FEvent* e : moving) {
    to_c(channel)->q.push_back(e);
    uint64_t one = 1;
    ssize_t r = write(channel->fd, &one, sizeof one);
    (void)r;
  }
  return 0;
}

FAKE_EXPORT int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
  count();
  if (!id || !addr) return fail(EINVAL);
  FId* f = to_f(id);
  std::lock_guard<std::mutex> g(g_mu);
  if (f->st != St::kIdle) return fail(EINVAL);
  if (addr->sa_family == AF_INET6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(addr);
    if (std::memcmp(&s6->sin6_addr, kFakeIp6, 16) != 0) return fail(EADDRNOTAVAIL);
    std::memcpy(&id->route.addr.src_storage, s6, sizeof *s6);
    device_fields(f);
    f->st = St::kBound;
    return 0;
  }
  if (addr->sa_family != AF_INET) return fail(EAFNOSUPPORT);
  auto* s = reinterpret_cast<sockaddr_in*>(addr);
  uint32_t ip = ntohl(s->sin_addr.s_addr);
  if ((ip & 0xffffff00) == kRefusedNet) return fail(EACCES);
  if (ip != kFakeIp) return fail(EADDRNOTAVAIL);
  uint16_t port = ntohs(s->sin_port);
  if (port == 0) port = g_next_port++;
  for (FId* o : g_ids)
    if (o != f && o->lport == port && (o->st == St::kListen || o->st == St::kBound))
      return fail(EADDRINUSE);
  f->lip = ip;
  f->lport = port;
  set_sin(id->route.addr.src_storage, ip, port);
  device_fields(f);
  f->st = St::kBound;
  return 0;
}

FAKE_EXPORT int rdma_listen(rdma_cm_id* id, int) {
  count();
  if (!id) return fail(EINVAL);
  FId* f = to_f(id);
  std::lock_guard<std::mutex> g(g_mu);
  if (f->st != St::kBound) return fail(EINVAL);
  f->st = St::kListen;
  return 0;
}

FAKE_EXPORT int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src, sockaddr* dst, int) {
  count();
  if (!id || !dst) return fail(EINVAL);
  FId* f = to_f(id);
  if (f->st == St::kIdle) {
    if (src) {
      if (rdma_bind_addr(id, src) != 0) return -1;  // through the PLT
    } else {
      sockaddr_in me{};
      me.sin_family = AF_INET;
      me.sin_addr.s_addr = htonl(kFakeIp);
      if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&me)) != 0) return -1;
    }
  }
  std::lock_guard<std::mutex> g(g_mu);
  if (f->st != St::kBound) return fail(EINVAL);
  if (dst->sa_family != AF_INET) return fail(EAFNOSUPPORT);
  auto* d = reinterpret_cast<sockaddr_in*>(dst);
  f->rip = ntohl(d->sin_addr.s_addr);
  f->rport = ntohs(d->sin_port);
  set_sin(id->route.addr.dst_storage, f->rip, f->rport);
  f->st = St::kAddrQueried;
  if (f->rip == kFakeIp)
    queue(f, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
  else
    queue(f, RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH);
  return 0;
}

FAKE_EXPORT int rdma_resolve_route(rdma_cm_id* id, int) {
  count();
  if (!id) return fail(EINVAL);
  FId* f = to_f(id);
  std::lock_guard<std::mutex> g(g_mu);
  if (f->st != St::kAddr) return fail(EINVAL);
  queue(f, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  return 0;
}

FAKE_EXPORT int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval,
                                size_t optlen) {
  count();
  if (!id || !optval) return fail(EINVAL);
  std::lock_guard<std::mutex> g(g_mu);
  if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_TOS && optlen == 1) {
    to_f(id)->path.traffic_class = *static_cast<uint8_t*>(optval);
    return 0;
  }
  return fail(ENOSYS);
}

FAKE_EXPORT int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
  count();
  if (!id || !attr) return fail(EINVAL);
  FId* f = to_f(id);
  std::lock_guard<std::mutex> g(g_mu);
  if (!id->verbs || id->qp) return fail(EINVAL);
  auto* qp = static_cast<ibv_qp*>(std::calloc(1, sizeof(ibv_qp)));
  qp->context = &g_ctx;
  qp->pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) && attr->pd ? attr->pd : &g_pd;
  qp->qp_num = g_next_qpn++;
  qp->qp_type = id->qp_type;
  qp->state = IBV_QPS_INIT;
  if (!attr->send_cq || !attr->recv_cq) {
    // As librdmacm: CQs for the sides the caller left out, kept in the id.
    auto* cq = static_cast<ibv_cq*>(std::calloc(1, sizeof(ibv_cq)));
    cq->context = &g_ctx;
    id->send_cq = id->recv_cq = cq;
    f->own_cqs = true;
  }
  qp->send_cq = attr->send_cq ? attr->send_cq : id->send_cq;
  qp->recv_cq = attr->recv_cq ? attr->recv_cq : id->recv_cq;
  id->qp = qp;
  id->pd = qp->pd;
  return 0;
}

FAKE_EXPORT int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  count();
  if (!id || !qp_init_attr) return fail(EINVAL);
  ibv_qp_init_attr_ex a{};
  a.send_cq = qp_init_attr->send_cq;
  a.recv_cq = qp_init_attr->recv_cq;
  a.cap = qp_init_attr->cap;
  a.qp_type = qp_init_attr->qp_type;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd;
  return rdma_create_qp_ex(id, &a);  // through the PLT, as librdmacm's
}

FAKE_EXPORT void rdma_destroy_qp(rdma_cm_id* id) {
  count();
  if (!id || !id->qp) return;
  FId* f = to_f(id);
  std::free(id->qp);
  id->qp = nullptr;
  if (f->own_cqs) {
    std::free(id->send_cq);
    id->send_cq = id->recv_cq = nullptr;
    f->own_cqs = false;
  }
}

FAKE_EXPORT int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  count();
  if (!id || !qp_attr || !qp_attr_mask || !id->qp) return fail(EINVAL);
  *qp_attr = {};
  qp_attr->qp_state = IBV_QPS_RTS;
  *qp_attr_mask = IBV_QP_STATE;
  return 0;
}

FAKE_EXPORT int rdma_connect(rdma_cm_id* id, rdma_conn_param* param) {
  count();
  if (!id) return fail(EINVAL);
  FId* f = to_f(id);
  std::lock_guard<std::mutex> g(g_mu);
  if (f->st != St::kRoute) return fail(EINVAL);
  FId* l = nullptr;
  for (FId* o : g_ids)
    if (o->st == St::kListen && o->lport == f->rport) l = o;
  f->st = St::kConnect;
  if (!l) {
    queue(f, RDMA_CM_EVENT_REJECTED, 8);  // IB_CM_REJ_INVALID_SERVICE_ID
    return 0;
  }
  auto* c = new FId();
  c->id.channel = l->id.channel;
  c->id.context = l->id.context;  // as librdmacm: the listener's
  c->id.ps = l->id.ps;
  c->id.qp_type = l->id.qp_type;
  c->lip = kFakeIp;
  c->lport = l->lport;
  c->rip = f->lip;
  c->rport = f->lport;
  set_sin(c->id.route.addr.src_storage, c->lip, c->lport);
  set_sin(c->id.route.addr.dst_storage, c->rip, c->rport);
  c->st = St::kConnReq;
  c->peer = f;
  f->peer = c;
  g_ids.insert(c);
  FEvent* e = queue(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0, l);
  e->ev.listen_id = &l->id;
  if (param) {
    set_pd(e, param->private_data, param->private_data_len);
    e->ev.param.conn.responder_resources = param->initiator_depth;
    e->ev.param.conn.initiator_depth = param->responder_resources;
    e->ev.param.conn.qp_num = id->qp ? id->qp->qp_num : param->qp_num;
  }
  return 0;
}

FAKE_EXPORT int rdma_accept(rdma_cm_id* id, rdma_conn_param* param) {
  count();
  if (!id) return fail(EINVAL);
  FId* f = to_f(id);
  if (id->qp) {
    ibv_qp_attr a;
    int mask;
    if (rdma_init_qp_attr(id, &a, &mask) != 0) return -1;  // through the PLT, as librdmacm's
  }
  std::lock_guard<std::mutex> g(g_mu);
  if (f->st != St::kConnReq || !f->peer) return fail(EINVAL);
  f->st = f->peer->st = St::kConnected;
  FEvent* e = queue(f->peer, RDMA_CM_EVENT_ESTABLISHED, 0);
  if (param) set_pd(e, param->private_data, param->private_data_len);
  queue(f, RDMA_CM_EVENT_ESTABLISHED, 0);
  return 0;
}

FAKE_EXPORT int rdma_reject(rdma_cm_id* id, const void* private_data, uint8_t private_data_len) {
  count();
  if (!id) return fail(EINVAL);
  FId* f = to_f(id);
  std::lock_guard<std::mutex> g(g_mu);
  if (f->st != St::kConnReq || !f->peer) return fail(EINVAL);
  f->st = f->peer->st = St::kDone;
  FEvent* e = queue(f->peer, RDMA_CM_EVENT_REJECTED, 28);  // IB_CM_REJ_CONSUMER_DEFINED
  set_pd(e, private_data, private_data_len);
  return 0;
}

FAKE_EXPORT int rdma_disconnect(rdma_cm_id* id) {
  count();
  if (!id) return fail(EINVAL);
  FId* f = to_f(id);
  std::lock_guard<std::mutex> g(g_mu);
  if (f->st != St::kConnected) return fail(EINVAL);
  f->st = St::kDone;
  queue(f, RDMA_CM_EVENT_DISCONNECTED, 0);
  if (f->peer && f->peer->st == St::kConnected) {
    f->peer->st = St::kDone;
    queue(f->peer, RDMA_CM_EVENT_DISCONNECTED, 0);
  }
  return 0;
}

FAKE_EXPORT int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  count();
  if (!id || !addr) return fail(EINVAL);
  std::lock_guard<std::mutex> g(g_mu);
  if (!id->verbs || id->qp_type != IBV_QPT_UD) return fail(EINVAL);
  FEvent* e = queue(to_f(id), RDMA_CM_EVENT_MULTICAST_JOIN, 0);
  e->ev.param.ud.private_data = context;
  e->ev.param.ud.qp_num = 0xffffff;
  return 0;
}

FAKE_EXPORT uint16_t rdma_get_src_port(rdma_cm_id* id) {
  count();
  return id ? id->route.addr.src_sin.sin_port : 0;
}

FAKE_EXPORT uint16_t rdma_get_dst_port(rdma_cm_id* id) {
  count();
  return id ? id->route.addr.dst_sin.sin_port : 0;
}

// Present so that a program built against librdmacm finds every version node it needs here; the
// fake device has nothing behind them.
FAKE_EXPORT int rdma_join_multicast_ex(rdma_cm_id*, rdma_cm_join_mc_attr_ex*, void*) {
  count();
  return fail(ENOSYS);
}

FAKE_EXPORT int rdma_establish(rdma_cm_id*) {
  count();
  return fail(ENOSYS);
}

FAKE_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data,
                                uint8_t private_data_len) {
  count();
  return rdma_reject(id, private_data, private_data_len);
}
