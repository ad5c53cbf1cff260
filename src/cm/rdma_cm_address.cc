// rdma_cm's addresses (rdma_cm.h): which device an id belongs to (binding, and the source of a
// resolve), which addresses are another RDMA device's (the id is then forwarded), ports, the
// route, and rdma_getaddrinfo. docs/rdma-cm.md, "How rdma_cm finds devices".
#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cm/rdma_cm.h"
#include "util/log.h"
#include "objects.h"

namespace uroce::cm {

constexpr uint16_t kEphemeralLo = 32768, kEphemeralHi = 60999;  // Linux's ip_local_port_range

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

namespace {

// ---- binding --------------------------------------------------------------------------------

bool port_taken(rdma_port_space ps, uint32_t ip, uint16_t port, const IdObj* self) {
  for (IdObj* o : ids()) {
    if (o == self || o->local_port != port || o->id.ps != ps) continue;
    // Ids a listener handed out share its port without holding it (as the kernel's CM): a new
    // listener may bind the port while connections accepted on the old one live on.
    // A forwarded id's ports are the kernel's CM's: another port space.
    if (!id_holds_port(o->state) || o->accepted) continue;
    if (o->wildcard || ip == 0 || o->local_ip == ip) return true;
  }
  return false;
}

}  // namespace

int claim_port(IdObj* o, CmPort* p, uint16_t port) {
  PortShare* share = p ? p->dev->port_share() : nullptr;
  if (!share || std::find(o->claimed.begin(), o->claimed.end(), p) != o->claimed.end()) return 0;
  if (int rc = share->claim_service(static_cast<uint16_t>(o->id.ps), port)) return rc;
  o->claimed.push_back(p);
  return 0;
}

void release_claims(IdObj* o) {
  for (CmPort* p : o->claimed)
    p->dev->port_share()->release_service(static_cast<uint16_t>(o->id.ps), o->local_port);
  o->claimed.clear();
}

namespace {

// Gives the id `port` (an ephemeral one for 0) on `ip` and the device `p` (null: none, for a
// wildcard or loopback address), and fills in its source. 0 or EADDRINUSE; the state is the
// caller's to change.
int take_port(IdObj* o, CmPort* p, uint32_t ip, uint16_t port) {
  if (port == 0) {
    for (int tries = 0; tries < 1000 && port == 0; ++tries) {
      uint16_t cand = static_cast<uint16_t>(kEphemeralLo + rng()() % (kEphemeralHi - kEphemeralLo));
      if (!port_taken(o->id.ps, ip, cand, o) && claim_port(o, p, cand) == 0) port = cand;
    }
    if (port == 0) return EADDRINUSE;
  } else if (port_taken(o->id.ps, ip, port, o)) {
    return EADDRINUSE;
  } else if (int rc = claim_port(o, p, port)) {
    return rc;  // another process sharing the device holds it
  }
  o->port = p;
  o->wildcard = p == nullptr;
  o->local_ip = ip;
  o->local_port = port;
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

// IDLE → BOUND on `ip`:`port` of device `p`. 0 or an errno. mu held.
int bind_to(IdObj* o, CmPort* p, uint32_t ip, uint16_t port) {
  IdStep s = step_of(o, IdEvent::kBind);
  if (!s.ok) return s.err;
  if (int rc = take_port(o, p, ip, port)) return rc;
  enter(o, IdEvent::kBind, s);
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

// ---- resolving ------------------------------------------------------------------------------

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
    for (verbs::VDevice* d : devs)
      if (d->cfg.ipv4 == src) return svc().port_of(d, err);
  return svc().port_of(devs.front(), err);
}

// Whether an IPv4 address is another RDMA device's: neither wildcard, nor loopback (uroce's, see
// bind_addr), nor a uroce device's. *err: a uroce device has it but cannot be opened. mu held.
bool foreign_ipv4(uint32_t ip, int* err) {
  if (ip == INADDR_ANY || (ip >> 24) == 127) return false;
  return svc().port_by_ip(ip, err) == nullptr && *err == 0;
}

// A malloc'ed copy of an address (rdma_freeaddrinfo frees it); false when out of memory.
bool copy_addr(const sockaddr* from, socklen_t len, sockaddr** to, socklen_t* to_len) {
  *to = static_cast<sockaddr*>(std::malloc(len));
  if (!*to) return false;
  std::memcpy(*to, from, len);
  *to_len = len;
  return true;
}

}  // namespace

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

// Refusals a user meets by pointing an unmodified program at the wrong address: said once per
// cause at the default log level (warn_once), with what to do, and the errno the kernel's CM
// gives (rdma_bind_addr to an address no RDMA device has: EADDRNOTAVAIL, from
// rdma_translate_ip / cma_acquire_dev_by_src_ip; an IPv6 address where only IPv4 is served:
// EAFNOSUPPORT).
namespace {
int refuse_no_device(const char* call, uint32_t ip) {
  warn_once(fmt::format(
      "rdma_cm: {}({}): EADDRNOTAVAIL: no uroce device has this address (nor any other RDMA "
      "device); the uroce devices are UROCE_DEVICES' (`uroce devices` lists them)",
      call, format_ipv4(ip)));
  return fail(EADDRNOTAVAIL);
}
int refuse_ipv6(const char* call) {
  warn_once(fmt::format(
      "rdma_cm: {}: EAFNOSUPPORT: IPv6 is not supported by uroce's rdma_cm (IPv6 devices "
      "carry verbs traffic, rdma_cm is IPv4 only); use an IPv4 address",
      call));
  return fail(EAFNOSUPPORT);
}
}  // namespace

// rdma_bind_addr's id owns its service from now on, not only once it listens. Programs tell the
// peer their port between rdma_bind_addr and rdma_listen (qperf, over its TCP connection), and
// with the kernel's CM the two calls are microseconds apart. Here the device may first have to be
// opened, so the devices the id can be reached on open now (a wildcard's: every device, as its
// listen will) — a REQ then finds a socket, not an ICMP port unreachable that would end the
// attempt at once — and their agents hold a REQ for the service until the listen
// (Agent::reserve). Other processes sharing a device steer the service's REQs here already.
// Best effort: a device that cannot open is left to rdma_listen, which says why. mu held.
namespace {
void reserve_service(IdObj* o) {
  std::vector<CmPort*> ports;
  if (o->port) {
    ports.push_back(o->port);
  } else if (o->wildcard) {
    for (verbs::VDevice* d : svc().devices()) {
      int err = 0;
      if (CmPort* p = svc().port_of(d, &err)) ports.push_back(p);
    }
  }
  const uint16_t ps = static_cast<uint16_t>(o->id.ps);
  const uint64_t sid = service_id(ps, o->local_port);
  for (CmPort* p : ports) {
    if (claim_port(o, p, o->local_port) != 0) continue;  // another process's: listen will say
    p->agent->reserve(sid);
    o->reserved_ports.push_back(p);
    if (PortShare* share = p->dev->port_share()) share->set_listening(ps, o->local_port, true);
  }
}
}  // namespace

// ---- the calls ------------------------------------------------------------------------------

int bind_id(IdObj* o, sockaddr* addr) {
  {
    std::lock_guard<std::mutex> g(svc().mu());
    IdStep s = step_of(o, IdEvent::kBind);
    if (!s.ok) return fail(s.err);
    uint32_t ip;
    uint16_t port;
    if (get_sin(addr, &ip, &port)) {
      int err = 0;
      if (!foreign_ipv4(ip, &err)) {
        if (err) return fail(err);
        if (int rc = bind_addr(o, ip, port))
          return rc == EADDRNOTAVAIL ? refuse_no_device("rdma_bind_addr", ip) : fail(rc);
        reserve_service(o);
        return 0;
      }
      if (!real_present()) return refuse_no_device("rdma_bind_addr", ip);  // no RDMA device has it
    } else if (!real_present()) {
      return refuse_ipv6("rdma_bind_addr");  // uroce is IPv4 only
    }
    advance(o, IdEvent::kForward);  // reserved: forward_id makes the real id
  }
  return forward_id(
      o, [addr](rdma_cm_id* r) { return UROCE_REAL(rdma_bind_addr, "RDMACM_1.0")(r, addr); });
}

int listen_id(IdObj* o) {
  // uroce's CM queues every request (the backlog is not enforced); the application sees them as
  // events.
  std::lock_guard<std::mutex> g(svc().mu());
  if (o->state == IdState::kIdle && bind_to(o, nullptr, 0, 0) != 0) return fail(EADDRINUSE);
  IdStep s = step_of(o, IdEvent::kListen);
  if (!s.ok) return fail(s.err);
  std::vector<CmPort*> ports;
  if (o->port) {
    ports.push_back(o->port);
  } else {
    // A wildcard listens on every uroce device, as the kernel's CM does on every RDMA device.
    for (verbs::VDevice* d : svc().devices()) {
      int err = 0;
      if (CmPort* p = svc().port_of(d, &err)) ports.push_back(p);
    }
    if (ports.empty()) return fail(ENODEV);
  }
  // Other processes sharing a device: the port is this process's there (a wildcard's too, on
  // every device), and the device's connection requests for it come here.
  for (CmPort* p : ports)
    if (int rc = claim_port(o, p, o->local_port)) return fail(rc);
  const uint64_t sid = service_id(static_cast<uint16_t>(o->id.ps), o->local_port);
  for (size_t i = 0; i < ports.size(); ++i) {
    if (int rc = ports[i]->agent->listen(sid, reinterpret_cast<uint64_t>(o))) {
      for (size_t k = 0; k < i; ++k) ports[k]->agent->unlisten(sid);
      return fail(rc);
    }
  }
  o->listen_ports = ports;
  for (CmPort* p : ports)
    if (PortShare* share = p->dev->port_share())
      share->set_listening(static_cast<uint16_t>(o->id.ps), o->local_port, true);
  enter(o, IdEvent::kListen, s);
  // Said at info level: the integration tests wait for it before starting a client.
  log().info("rdma_cm: listening on {}:{}{}", o->port ? format_ipv4(o->local_ip) : "*",
             o->local_port, o->port ? "" : " (every uroce device)");
  // The REQs that came between rdma_bind_addr and now (reserve_service).
  for (CmPort* p : ports) {
    p->agent->take_held(sid, svc().now());
    svc().flush(*p);
  }
  return 0;
}

int resolve_addr(IdObj* o, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms) {
  // uroce's resolution is local (no ARP or SA query): it never waits, timeout_ms is for the
  // real library.
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
      if (!real_present()) return refuse_ipv6("rdma_resolve_addr");  // uroce is IPv4 only
      to = To::kReal;
    } else if (src_addr && sip != 0) {
      if (foreign_ipv4(sip, &err)) {
        if (!real_present()) return refuse_no_device("rdma_resolve_addr", sip);
        to = To::kReal;
      } else if (err) {
        return fail(err);
      }
    } else if (route_src && real_present() && foreign_ipv4(route_src, &err)) {
      to = To::kRealElseUroce;
    }
    if (to != To::kUroce) advance(o, IdEvent::kForward);  // reserved for forward_id
  }
  if (to != To::kUroce) {
    bool no_rdma = false;
    auto real_resolve = [=](rdma_cm_id* r) {
      return UROCE_REAL(rdma_resolve_addr, "RDMACM_1.0")(r, src_addr, dst_addr, timeout_ms);
    };
    if (forward_id(o, real_resolve, &no_rdma) == 0) return 0;
    // A route chosen by the kernel, with no kernel RDMA stack at all (the real library cannot
    // make an event channel): no RDMA device but uroce's can reach dst, and uroce serves it as
    // it did before forwarding existed (its first device; a DPDK device's address is not the
    // kernel's). Any other failure is the real library's answer.
    if (to == To::kReal || !no_rdma) return -1;
  }
  if (!dst4) return refuse_ipv6("rdma_resolve_addr");
  std::lock_guard<std::mutex> g(svc().mu());
  if (src_addr && o->state == IdState::kIdle) {
    if (!get_sin(src_addr, &sip, &sport)) return refuse_ipv6("rdma_resolve_addr");
    if (int rc = bind_addr(o, sip, sport))
      return rc == EADDRNOTAVAIL ? refuse_no_device("rdma_resolve_addr", sip) : fail(rc);
  }
  if (o->state == IdState::kIdle && bind_to(o, nullptr, 0, 0) != 0) return fail(EADDRINUSE);
  IdStep s = step_of(o, IdEvent::kResolveAddr);
  if (!s.ok) return fail(s.err);
  if (!o->port) {  // unbound or wildcard: the device that reaches dst, on the port it has
    int err = 0;
    CmPort* p = choose_port(dip, &err);
    if (!p) return fail(err ? err : EADDRNOTAVAIL);
    if (int rc = take_port(o, p, p->ip, o->local_port)) return fail(rc);
  }
  o->remote_ip = dip;
  o->remote_port = dport;
  set_sin(o->id.route.addr.dst_storage, dip, dport);
  o->id.route.addr.addr.ibaddr.dgid = gid_of(dip);
  enter(o, IdEvent::kResolveAddr, s);
  post(o, *s.report, 0);
  return 0;
}

int resolve_route(IdObj* o) {
  std::lock_guard<std::mutex> g(svc().mu());
  IdStep s = step_of(o, IdEvent::kResolveRoute);
  if (!s.ok) return fail(s.err);
  fill_route(o);
  enter(o, IdEvent::kResolveRoute, s);
  post(o, *s.report, 0);
  return 0;
}

// ---- rdma_getaddrinfo -----------------------------------------------------------------------

// IPv4 names and numbers through the system resolver; the RDMA fields as librdmacm fills them
// for an IP address (port space from the hints, TCP by default). As librdmacm's: with a node or a
// service, getaddrinfo's first IPv4 answer is the source (RAI_PASSIVE) or the destination;
// without either, the addresses come from the hints alone (libfabric's verbs provider asks so,
// with only a source address). A source in the hints fills a result that has none.
int getaddrinfo_ipv4(const char* node, const char* service, const rdma_addrinfo* hints,
                     rdma_addrinfo** res) {
  if (!res || (!node && !service && !hints)) return fail(EINVAL);
  if (hints && hints->ai_family && hints->ai_family != AF_INET)
    return refuse_ipv6("rdma_getaddrinfo");
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
      freeaddrinfo_all(r);
      return fail(EAFNOSUPPORT);
    }
    ok = copy_addr(hints->ai_src_addr, hints->ai_src_len, &r->ai_src_addr, &r->ai_src_len);
  }
  if (!ok) {
    freeaddrinfo_all(r);
    return fail(ENOMEM);
  }
  *res = r;
  return 0;
}

void freeaddrinfo_all(rdma_addrinfo* res) {
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

}  // namespace uroce::cm
