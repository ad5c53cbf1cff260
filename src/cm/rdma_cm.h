// librdmacm's public API (rdma/rdma_cma.h) for uroce devices, exported by liburoce at librdmacm's
// own symbol versions (liburoce.map), so that under uroce-run an unmodified rping, perftest -R or
// rdma_server finds it in front of the system librdmacm. The system librdmacm talks only to the
// kernel's /dev/infiniband/rdma_cm; here the CM runs in the process (service.h, agent.h) and
// speaks the IB CM protocol on each device's QP1. This header is internal to liburoce: the
// objects, and what each file of the layer offers the others.
//
// One concern per file, around the id state machine (id_state.h: a table of transitions, pure):
//   rdma_cm_objects.cc  ids, events and their lifetime; the id's transitions (one debug line
//                       each); the options (rdma_set_option)
//   rdma_cm_channel.cc  event channels: the queue, waiting, reading uroce's events and the real
//                       library's in turn; synchronous ids (a NULL channel)
//   rdma_cm_forward.cc  ids of other RDMA devices, handed to the system librdmacm
//   rdma_cm_address.cc  binding, resolving, ports, route; rdma_getaddrinfo
//   rdma_cm_qp.cc       the QP attributes rdma_cm sets and its QP transitions; QPs, CQs, SRQs and
//                       multicast of an id
//   rdma_cm_connect.cc  the application's connection calls into the CM agent (connect, accept,
//                       reject, establish, disconnect, notify, destroy)
//   rdma_cm_events.cc   the CM agent's events → the ids' transitions and rdma_cm events
//   rdma_cm_exports.cc  the exported functions: checks, forwarding, the lock, waiting of
//                       synchronous ids
//
// Objects: an event channel is a ChannelObj (rdma_event_channel first), an id an IdObj
// (rdma_cm_id first — applications read verbs, qp, route, event, pd, the CQs and channels from it,
// so they are filled as librdmacm fills them), an event an EventObj (rdma_cm_event first, with
// room for its private data).
//
// Locking: svc().mu() (service.h) guards every IdObj field below, the registries (ids(),
// by_comm(), by_sidr()) and the agents; the exports take it around uroce's work and never hold it
// while they wait for an event or call the real library (which may call these exports back).
// IdObj::real and ChannelObj::real are atomics set once; an EventQueue has its own lock.
//
// Events follow librdmacm over the kernel CM: ADDR_RESOLVED, ROUTE_RESOLVED, CONNECT_REQUEST
// (on the listener's channel, with the new id), CONNECT_RESPONSE (only for an id without a QP),
// ESTABLISHED (the active side after it moved its QP to RTS and sent the RTU; the passive side
// when the RTU arrives), REJECTED (status: the REJ reason), UNREACHABLE (-ETIMEDOUT),
// CONNECT_ERROR, DISCONNECTED, TIMEWAIT_EXIT, MULTICAST_JOIN. A channel of NULL (rdma_create_id
// or rdma_create_ep) makes the id synchronous: each call waits for its event, as librdmacm does.
#pragma once

#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "cm/agent.h"
#include "cm/id_state.h"
#include "cm/ip_cm.h"
#include "cm/service.h"
#include "engine/device.h"
#include "real.h"

namespace uroce::cm {

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

// ---- objects --------------------------------------------------------------------------------

struct EventObj;

// A channel's uroce events in order, and a semaphore eventfd readable while it holds any. pop()
// never blocks: get_event waits, over this fd and the real channel's.
class EventQueue {
 public:
  EventQueue();
  ~EventQueue();
  EventQueue(const EventQueue&) = delete;
  EventQueue& operator=(const EventQueue&) = delete;
  int fd() const { return fd_; }
  void close_fd();  // a retired channel's: its waiters see POLLNVAL or stay asleep
  void push(EventObj* e);
  // The oldest event, or null. The token is taken under the same lock as the event, so the
  // fd's count is always the queue's length.
  EventObj* pop();

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
  // Set by rdma_destroy_event_channel (retire_channel): the object stays, its fds are closed.
  std::atomic<bool> retired{false};
  bool retired_nonblocking = false;  // its fd was O_NONBLOCK: a late read gets EBADF
};

struct IdObj;

struct EventObj {
  rdma_cm_event ev;  // first
  IdObj* owner = nullptr;
  rdma_cm_event* real = nullptr;  // the real library's event this one translates (forwarded ids)
  uint8_t pd[kCmMessageBytes];    // private data the event points to
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
  // Changed only through enter() (rdma_cm_objects.cc), by the steps of id_state.h.
  IdState state = IdState::kIdle;
  CmPort* port = nullptr;  // the device the id is bound to; null: unbound or wildcard
  bool wildcard = false;
  // The id's addresses, of either family (wire::IpAddr: IPv4 ones IPv4-mapped), and the family
  // of the sockaddrs the application gave and reads back (AF_INET, AF_INET6). An unspecified
  // local address (0.0.0.0, ::) is a wildcard's. scope_id: sin6_scope_id of a link-local local
  // address (the device's interface), also reported with a link-local peer's address.
  sa_family_t family = AF_INET;
  IpAddr local_ip{}, remote_ip{};
  uint32_t scope_id = 0;
  uint16_t local_port = 0, remote_port = 0;
  std::vector<CmPort*> listen_ports;
  // The devices whose agents hold REQs for this id's service until it listens (rdma_bind_addr:
  // Agent::reserve); unreserved when the id is destroyed.
  std::vector<CmPort*> reserved_ports;
  // The devices on which this id holds (ps, local_port) against other processes sharing them
  // (PortShare::claim_service); released when the id is destroyed.
  std::vector<CmPort*> claimed;
  uint32_t comm_id = 0;  // the agent's connection (on `port`), in by_comm()
  uint32_t sidr_id = 0;  // SIDR REQ (active) or the SIDR REQ to answer (passive), in by_sidr()
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
  int events_out = 0;     // queued or handed out and not acknowledged
  // Forwarded: the system librdmacm's id (its context is this IdObj), set once; never cleared,
  // so that free_id knows id.route points into the real library's memory.
  std::atomic<rdma_cm_id*> real{nullptr};
  AppFields pushed;  // the app-settable fields as last pulled from `real`
  // Options set before the id had an address, replayed on the real id when it is forwarded.
  bool tos_set = false, reuseaddr_set = false, ack_timeout_set = false, afonly_set = false;
  int afonly = 0;
};

// ---- rdma_cm_objects.cc -----------------------------------------------------------------------

std::mt19937& rng();
CmService& svc();
std::set<IdObj*>& ids();  // every live IdObj (a cookie from the agent is checked against it)
// The ids of the agents' connections and SIDR exchanges, by (device, agent ID).
std::map<std::pair<CmPort*, uint32_t>, IdObj*>& by_comm();
std::map<std::pair<CmPort*, uint32_t>, IdObj*>& by_sidr();
inline IdObj* to_obj(rdma_cm_id* id) {
  return reinterpret_cast<IdObj*>(id);
}
// errno = err, -1: how the exports fail.
int fail(int err);

// The id's state machine (id_state.h). step_of: the step `ev` makes from o's state, a refusal
// logged; enter: takes it, with the transition's debug line ("id 0x… CONNECT --REJ--> REJECTED");
// advance: both, when the caller has nothing to do in between (false: refused). mu held.
IdStep step_of(const IdObj* o, IdEvent ev);
void enter(IdObj* o, IdEvent ev, const IdStep& s);
bool advance(IdObj* o, IdEvent ev);

// Events: made for `o`, filled by the caller, queued on o's channel (or `on`). mu held.
EventObj* new_event(IdObj* o, rdma_cm_event_type type, int status);
void set_conn_pd(EventObj* e, const std::vector<uint8_t>& pd, size_t skip = 0);
void set_ud_pd(EventObj* e, const std::vector<uint8_t>& pd, size_t skip = 0);
void post_event(IdObj* o, EventObj* e, ChannelObj* on = nullptr);
void post(IdObj* o, rdma_cm_event_type type, int status);
// The agent's connection (SIDR exchange) of `o` is over, or starts: the registries follow.
void remember_conn(IdObj* o);
void forget_conn(IdObj* o);
void remember_sidr(IdObj* o);
void forget_sidr(IdObj* o);
// Lifetime: an id goes when it is destroyed and its last event is acknowledged.
void free_id(IdObj* o);
// Claims (o->id.ps, port) for `o` on device `p` against the other processes sharing it (a no-op
// for a device this process has alone, or one `o` claimed already): 0 or EADDRINUSE. Released,
// on every device, by release_claims (free_id). mu held.
int claim_port(IdObj* o, CmPort* p, uint16_t port);
void release_claims(IdObj* o);
void release_event(EventObj* e);  // acknowledged, or dropped for a destroyed id. mu held.
// rdma_set_option on uroce's id: 0 or an errno. mu held.
int set_id_option(IdObj* o, int level, int optname, const void* optval, size_t optlen);

// ---- rdma_cm_channel.cc -----------------------------------------------------------------------

ChannelObj* new_channel(bool sync);    // null with errno
void destroy_channel(ChannelObj* ch);  // and the real channel behind it
// The application's rdma_destroy_event_channel: closes what destroy_channel closes but keeps the
// object, so that a thread that calls rdma_get_cm_event on it afterwards parks (see get_event).
void retire_channel(ChannelObj* ch);
// The channel's next event, uroce's or the real library's. 0, or -1 with errno. mu not held.
int get_event(ChannelObj* ch, rdma_cm_event** out);
// librdmacm's ucma_complete: a synchronous id's call waits for its event (0 or -1 with errno);
// an asynchronous id's returns 0 at once. mu not held.
int complete(IdObj* o);

// ---- rdma_cm_forward.cc -----------------------------------------------------------------------

// How deep this thread is in calls uroce made into the real library; while it is non-zero every
// export passes its arguments straight to the real function (rdma_cm_exports.cc).
extern thread_local int t_in_real;
struct InReal {
  InReal() { ++t_in_real; }
  ~InReal() { --t_in_real; }
  InReal(const InReal&) = delete;
  InReal& operator=(const InReal&) = delete;
};
bool real_present();  // a system librdmacm is loaded behind liburoce
// The real channel behind `ch`, made the first time an id on it is forwarded: 0 or an errno.
int real_channel(ChannelObj* ch, rdma_event_channel** out);
// The real id's public fields into the application's id (pull), and back those the application
// changed (push). mu held.
void pull(IdObj* o);
void push(IdObj* o);
// Hands `o`, reserved by its caller (FORWARDED, `real` still null), to the system librdmacm: a
// real id with the options set so far, then `first`, the call that gives it its first address.
// 0, or -1 with the real library's errno, and then `o` is IDLE and uroce's again. *no_rdma: the
// real library could not even make an event channel. mu not held.
int forward_id(IdObj* o, const std::function<int(rdma_cm_id*)>& first, bool* no_rdma = nullptr);
// Wraps an event the real library delivered for the application (its ids the application's).
int take_real_event(rdma_cm_event* re, rdma_cm_event** out);

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

// ---- rdma_cm_address.cc -----------------------------------------------------------------------

ibv_gid gid_of(uint32_t ip);  // the RoCEv2 GID of an IPv4 address (::ffff:a.b.c.d)
// The RoCEv2 GID of an address: its 16 bytes (IPv4-mapped for IPv4, the IPv6 address itself).
ibv_gid gid_of(const IpAddr& ip);
Gid to_gid(const ibv_gid& g);
bool get_sin(const sockaddr* a, uint32_t* ip, uint16_t* port);  // false: not AF_INET
// An AF_INET or AF_INET6 sockaddr, taken apart (an IPv4-mapped sin6_addr stays AF_INET6 with an
// IPv4 address, as the kernel's CM keeps the family the application gave).
struct SockAddr {
  sa_family_t family = AF_INET;
  IpAddr ip{};
  uint16_t port = 0;  // host order
  uint32_t scope_id = 0;
};
bool get_sa(const sockaddr* a, SockAddr* out);  // false: neither AF_INET nor AF_INET6
// Writes a sockaddr_in (AF_INET; `ip` must be IPv4) or sockaddr_in6 into `ss`.
void set_sa(sockaddr_storage& ss, sa_family_t family, const IpAddr& ip, uint16_t port,
            uint32_t scope_id = 0);
// The unspecified address of a family (0.0.0.0 IPv4-mapped, or ::), and whether an address is
// one (either), or a loopback address (127.0.0.0/8, ::1).
IpAddr any_addr(sa_family_t family);
bool is_any(const IpAddr& ip);
bool is_loopback(const IpAddr& ip);
// Whether an id accepts requests of one family only: an AF_INET id always; an AF_INET6 one when
// RDMA_OPTION_ID_AFONLY says so (the kernel's default is net.ipv6.bindv6only, 0).
bool af_only(const IdObj* o);
bool qp_type_for(rdma_port_space ps, ibv_qp_type* t);  // false: not a port space
void fill_route(IdObj* o);
// The uroce side of rdma_bind_addr, rdma_listen, rdma_resolve_addr, rdma_resolve_route: 0, or -1
// with errno; a bind or resolve may hand the id to the system librdmacm. mu not held.
int bind_id(IdObj* o, sockaddr* addr);
int listen_id(IdObj* o);
int resolve_addr(IdObj* o, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms);
int resolve_route(IdObj* o);
int getaddrinfo_ip(const char* node, const char* service, const rdma_addrinfo* hints,
                   rdma_addrinfo** res);
void freeaddrinfo_all(rdma_addrinfo* res);

// ---- rdma_cm_qp.cc ----------------------------------------------------------------------------

ibv_ah_attr ah_to(const IdObj* o);
// The attributes of `state` for the id's connection (rdma_init_qp_attr and the CM's own moves).
int qp_attr_for(const IdObj* o, ibv_qp_state state, ibv_qp_attr* a, int* mask);
int move_qp(IdObj* o, ibv_qp_state state);  // 0 or an errno
void qp_to_error(IdObj* o);
// rdma_create_qp/_ex, rdma_destroy_qp, rdma_create_srq, multicast: 0 or an errno. mu held.
int create_qp(IdObj* o, ibv_pd* pd, ibv_qp_init_attr* attr);
int create_qp_ex(IdObj* o, ibv_qp_init_attr_ex* attr);
void destroy_qp(IdObj* o);
int create_srq(IdObj* o, ibv_pd* pd, ibv_srq_init_attr* attr);
void destroy_srq(IdObj* o);  // touches the id's SRQ only: mu not needed
int join_multicast(IdObj* o, uint32_t group, void* context);
// An IPv6 group (rdma_join_multicast): -1 with EOPNOTSUPP, said once. mu not needed.
int refuse_ipv6_multicast();
int leave_multicast(IdObj* o, uint32_t group);

// ---- rdma_cm_connect.cc -----------------------------------------------------------------------

// The application's calls that drive the id's agent connection: 0 or an errno. mu held.
int connect_id(IdObj* o, const rdma_conn_param* cp);
int accept_id(IdObj* o, const rdma_conn_param* cp);
int reject_id(IdObj* o, const void* private_data, uint8_t private_data_len);
int establish_id(IdObj* o);
int disconnect_id(IdObj* o);
void notify_id(IdObj* o, ibv_event_type event);
// rdma_destroy_id: the agents forget the id (REJ or DREQ as the kernel's CM sends), it stops
// listening, and it is DESTROYED.
void destroy_id(IdObj* o);

// ---- rdma_cm_events.cc ------------------------------------------------------------------------

// Installs the handler of the agents' events (once; every export that makes an object calls it).
void ensure_handler();

}  // namespace uroce::cm
