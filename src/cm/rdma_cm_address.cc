// rdma_cm's addresses (rdma_cm.h): which device an id belongs to (binding, and the source of a
// resolve), which addresses are another RDMA device's (the id is then forwarded), ports, the
// route, and rdma_getaddrinfo. docs/rdma-cm.md, "How rdma_cm finds devices".
#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <array>
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

ibv_gid gid_of(const IpAddr& ip) {
  ibv_gid g{};
  std::memcpy(g.raw, ip.data(), 16);
  return g;
}

Gid to_gid(const ibv_gid& g) {
  Gid out;
  std::memcpy(out.data(), g.raw, 16);
  return out;
}

void set_sa(sockaddr_storage& ss, sa_family_t family, const IpAddr& ip, uint16_t port,
            uint32_t scope_id) {
  std::memset(&ss, 0, sizeof ss);
  if (family == AF_INET) {
    auto* s = reinterpret_cast<sockaddr_in*>(&ss);
    s->sin_family = AF_INET;
    s->sin_addr.s_addr = htonl(ip.v4());
    s->sin_port = htons(port);
    return;
  }
  auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
  s->sin6_family = AF_INET6;
  s->sin6_port = htons(port);
  std::memcpy(s->sin6_addr.s6_addr, ip.data(), 16);
  // A scope means something only for a link-local address (RFC 4007); elsewhere it is 0, as the
  // kernel reports it.
  if (IN6_IS_ADDR_LINKLOCAL(&s->sin6_addr)) s->sin6_scope_id = scope_id;
}

bool get_sa(const sockaddr* a, SockAddr* out) {
  if (!a) return false;
  if (a->sa_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(a);
    *out = {AF_INET, IpAddr(ntohl(s->sin_addr.s_addr)), ntohs(s->sin_port), 0};
    return true;
  }
  if (a->sa_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(a);
    *out = {AF_INET6, IpAddr::from_bytes(s->sin6_addr.s6_addr), ntohs(s->sin6_port),
            s->sin6_scope_id};
    return true;
  }
  return false;
}

IpAddr any_addr(sa_family_t family) {
  return family == AF_INET ? IpAddr(0u) : IpAddr{};
}

bool is_any(const IpAddr& ip) {
  return ip == IpAddr{} || ip == IpAddr(0u);
}

bool is_loopback(const IpAddr& ip) {
  static constexpr std::array<uint8_t, 16> kLoopback6{0, 0, 0, 0, 0, 0, 0, 0,
                                                      0, 0, 0, 0, 0, 0, 0, 1};
  return ip.is_v4() ? (ip.v4() >> 24) == 127 : ip == IpAddr(kLoopback6);
}

bool af_only(const IdObj* o) {
  return o->family == AF_INET || (o->afonly_set && o->afonly != 0);
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

// Whether `port` on `ip` is another id's, for `self` (its family and AFONLY already set).
bool port_taken(rdma_port_space ps, const IpAddr& ip, uint16_t port, const IdObj* self) {
  for (IdObj* o : ids()) {
    if (o == self || o->local_port != port || o->id.ps != ps) continue;
    // Ids a listener handed out share its port without holding it (as the kernel's CM): a new
    // listener may bind the port while connections accepted on the old one live on.
    // A forwarded id's ports are the kernel's CM's: another port space.
    if (!id_holds_port(o->state) || o->accepted) continue;
    // As the kernel's cma_check_port: two ids that each take one family only, of different
    // families, never collide (0.0.0.0:P and an AFONLY [::]:P); a dual-stack [::] does.
    if (af_only(self) && af_only(o) && self->family != o->family) continue;
    if (o->wildcard || is_any(ip) || o->local_ip == ip) return true;
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
int take_port(IdObj* o, CmPort* p, const IpAddr& ip, uint16_t port) {
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
  if (p) o->scope_id = p->scope_id;
  set_sa(o->id.route.addr.src_storage, o->family, ip, port, o->scope_id);
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

// IDLE → BOUND on `ip`:`port` of device `p`, the id's addresses of `family`. 0 or an errno. mu
// held.
int bind_to(IdObj* o, CmPort* p, sa_family_t family, const IpAddr& ip, uint16_t port) {
  IdStep s = step_of(o, IdEvent::kBind);
  if (!s.ok) return s.err;
  o->family = family;
  o->scope_id = 0;
  if (int rc = take_port(o, p, ip, port)) return rc;
  enter(o, IdEvent::kBind, s);
  return 0;
}

// rdma_bind_addr (and the source of rdma_resolve_addr): the device whose address `a.ip` is, of
// either family. A loopback address (127.0.0.0/8, ::1) no uroce device has binds no device, like
// INADDR_ANY and ::: the kernel's CM counts loopback addresses as "any" (cma_any_addr), so such
// an id gets no device (verbs NULL), a listener listens on every device (of its family, unless a
// dual-stack AF_INET6 one), and rdma_get_local_addr still says 127.0.0.1. libfabric's verbs
// provider relies on it: without a node it binds "localhost" and then takes the addresses of
// the devices' interfaces. Any other address is EADDRNOTAVAIL — an IPv4 address where the
// devices are IPv6 ones too, as the kernel's rdma_translate_ip says for an address no netdev has.
int bind_addr(IdObj* o, const SockAddr& a) {
  CmPort* p = nullptr;
  if (!is_any(a.ip)) {
    int err = 0;
    p = svc().port_by_ip(a.ip, &err);
    if (!p && (err != 0 || !is_loopback(a.ip))) return err ? err : EADDRNOTAVAIL;
  }
  return bind_to(o, p, a.family, a.ip, a.port);
}

// ---- resolving ------------------------------------------------------------------------------

// The source address the kernel's routing table picks towards `dst` (of dst's family; a
// link-local one on interface `scope_id`), or :: when it has no route.
IpAddr route_source(const SockAddr& dst) {
  sockaddr_storage to{};
  set_sa(to, dst.ip.is_v4() ? AF_INET : AF_INET6, dst.ip, 4791, dst.scope_id);
  int fd = socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return IpAddr{};
  sockaddr_storage me{};
  socklen_t len = sizeof me;
  IpAddr src{};
  SockAddr got;
  const socklen_t to_len = to.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (connect(fd, reinterpret_cast<sockaddr*>(&to), to_len) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
      get_sa(reinterpret_cast<sockaddr*>(&me), &got))
    src = got.ip;
  close(fd);
  return src;
}

// The device an active id without a source address uses to reach `dst`: of dst's family, the
// one whose address the kernel would pick as the route's source (`route_src`), else the first
// such uroce device (several processes on one host use 127.0.0.x addresses, where the kernel's
// choice is always 127.0.0.1). None of that family: ENODEV, as the kernel's CM when the route's
// netdev has no RDMA device with a GID of that family (cma_acquire_dev_by_src_ip).
CmPort* choose_port(const IpAddr& dst, const IpAddr& route_src, int* err) {
  verbs::VDevice* first = nullptr;
  for (verbs::VDevice* d : svc().devices()) {
    if (d->cfg.is_ipv6() == dst.is_v4()) continue;  // another family
    if (!is_any(route_src) && d->cfg.addr() == route_src) return svc().port_of(d, err);
    if (!first) first = d;
  }
  if (!first) {
    *err = svc().devices().empty() ? EADDRNOTAVAIL : ENODEV;
    return nullptr;
  }
  return svc().port_of(first, err);
}

// Whether an address is another RDMA device's: neither wildcard, nor loopback (uroce's, see
// bind_addr), nor a uroce device's. *err: a uroce device has it but cannot be opened. mu held.
bool foreign_ip(const IpAddr& ip, int* err) {
  if (is_any(ip) || is_loopback(ip)) return false;
  return svc().port_by_ip(ip, err) == nullptr && *err == 0;
}

// Whether a wildcard id listens on device `p`: an id of one family only on that family's
// devices, a dual-stack AF_INET6 one on every device (the kernel's cma_match_private_data lets a
// non-AFONLY wildcard take requests of both IP versions).
bool serves(const IdObj* o, const CmPort* p) {
  return !af_only(o) || (o->family == AF_INET6) == p->is_v6();
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
// EAFNOSUPPORT; a destination of a family no device has: ENODEV, as cma_acquire_dev_by_src_ip).
namespace {
int refuse_no_device(const char* call, const IpAddr& ip) {
  warn_once(fmt::format(
      "rdma_cm: {}({}): EADDRNOTAVAIL: no uroce device has this address (nor any other RDMA "
      "device); the uroce devices are UROCE_DEVICES' (`uroce devices` lists them)",
      call, ip.to_string()));
  return fail(EADDRNOTAVAIL);
}
int refuse_family(const char* call) {
  warn_once(fmt::format(
      "rdma_cm: {}: EAFNOSUPPORT: uroce's rdma_cm serves IP addresses (AF_INET, AF_INET6); an "
      "AF_IB address goes to the system librdmacm, and there is none here",
      call));
  return fail(EAFNOSUPPORT);
}
int refuse_no_family(const char* call, const IpAddr& dst) {
  warn_once(fmt::format(
      "rdma_cm: {}({}): ENODEV: no uroce device is {} (UROCE_DEVICES: a device has one address, "
      "IPv4 or IPv6; `uroce devices` lists them)",
      call, dst.to_string(), dst.is_v4() ? "IPv4" : "IPv6"));
  return fail(ENODEV);
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
      if (CmPort* p = svc().port_of(d, &err); p && serves(o, p)) ports.push_back(p);
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
    SockAddr a;
    if (get_sa(addr, &a)) {
      int err = 0;
      if (!foreign_ip(a.ip, &err)) {
        if (err) return fail(err);
        if (int rc = bind_addr(o, a))
          return rc == EADDRNOTAVAIL ? refuse_no_device("rdma_bind_addr", a.ip) : fail(rc);
        reserve_service(o);
        return 0;
      }
      if (!real_present())
        return refuse_no_device("rdma_bind_addr", a.ip);  // no RDMA device has it
    } else if (!real_present()) {
      return refuse_family("rdma_bind_addr");  // AF_IB: the system librdmacm's
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
  // An unbound id listens on 0.0.0.0, as the kernel's rdma_listen binds it (AF_INET).
  if (o->state == IdState::kIdle && bind_to(o, nullptr, AF_INET, any_addr(AF_INET), 0) != 0)
    return fail(EADDRINUSE);
  IdStep s = step_of(o, IdEvent::kListen);
  if (!s.ok) return fail(s.err);
  std::vector<CmPort*> ports;
  if (o->port) {
    ports.push_back(o->port);
  } else {
    // A wildcard listens on every uroce device (of its family: serves()), as the kernel's CM
    // does on every RDMA device.
    for (verbs::VDevice* d : svc().devices()) {
      int err = 0;
      if (CmPort* p = svc().port_of(d, &err); p && serves(o, p)) ports.push_back(p);
    }
    // The kernel's CM would listen on no device and wait for one; here the device list is fixed
    // for the process's life, so nothing could ever connect: ENODEV, and why (a 0.0.0.0
    // listener where every device is IPv6 — rdma_server's and perftest -R's default).
    if (ports.empty()) {
      if (!svc().devices().empty())
        warn_once(fmt::format(
            "rdma_cm: rdma_listen: ENODEV: a wildcard {} listener takes {} requests only and no "
            "uroce device is {}; listen on the device's address or on [::] (both families)",
            o->family == AF_INET ? "0.0.0.0" : "AFONLY [::]",
            o->family == AF_INET ? "IPv4" : "IPv6", o->family == AF_INET ? "IPv4" : "IPv6"));
      return fail(ENODEV);
    }
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
  log().info(
      "rdma_cm: listening on {}{}",
      o->port ? format_ip_port(o->local_ip, o->local_port) : fmt::format("*:{}", o->local_port),
      o->port                ? ""
      : !af_only(o)          ? " (every uroce device)"
      : o->family == AF_INET ? " (every IPv4 uroce device)"
                             : " (every IPv6 uroce device)");
  // The REQs that came between rdma_bind_addr and now (reserve_service).
  for (CmPort* p : ports) {
    p->agent->take_held(sid, svc().now());
    svc().flush(*p);
  }
  return 0;
}

int resolve_addr(IdObj* o, sockaddr* src_addr, sockaddr* dst_addr, int timeout_ms) {
  // uroce's resolution is local (no ARP, neighbour discovery or SA query): it never waits,
  // timeout_ms is for the real library.
  SockAddr dst, src;
  const bool dst_ip = get_sa(dst_addr, &dst);
  const bool src_ip = src_addr && get_sa(src_addr, &src);
  // Without a source, the one the kernel's route towards dst leaves from decides (a socket call:
  // made before taking mu).
  const IpAddr route_src =
      dst_ip && (!src_addr || (src_ip && is_any(src.ip))) ? route_source(dst) : IpAddr{};
  enum class To { kUroce, kReal, kRealElseUroce } to = To::kUroce;
  {
    std::lock_guard<std::mutex> g(svc().mu());
    int err = 0;
    if (o->state != IdState::kIdle) {
      // Already bound: the bind decided.
    } else if ((src_addr && !src_ip) || !dst_ip) {
      if (!real_present()) return refuse_family("rdma_resolve_addr");  // AF_IB
      to = To::kReal;
    } else if (src_addr && !is_any(src.ip)) {
      if (foreign_ip(src.ip, &err)) {
        if (!real_present()) return refuse_no_device("rdma_resolve_addr", src.ip);
        to = To::kReal;
      } else if (err) {
        return fail(err);
      }
    } else if (!is_any(route_src) && real_present() && foreign_ip(route_src, &err)) {
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
  if (!dst_ip) return refuse_family("rdma_resolve_addr");
  std::lock_guard<std::mutex> g(svc().mu());
  if (src_addr && o->state == IdState::kIdle) {
    if (!src_ip) return refuse_family("rdma_resolve_addr");
    // The kernel's CM: a source of another family than the destination is EINVAL.
    if (src.family != dst.family) return fail(EINVAL);
    if (int rc = bind_addr(o, src))
      return rc == EADDRNOTAVAIL ? refuse_no_device("rdma_resolve_addr", src.ip) : fail(rc);
  }
  // Unbound: the destination's family, any address (cma_bind_addr).
  if (o->state == IdState::kIdle && bind_to(o, nullptr, dst.family, any_addr(dst.family), 0) != 0)
    return fail(EADDRINUSE);
  // An id bound to one family resolves only that family (rdma_resolve_addr: EINVAL), and an id
  // on a device only destinations of the device's family.
  if (o->family != dst.family || (o->port && o->port->is_v6() == dst.ip.is_v4()))
    return fail(EINVAL);
  IdStep s = step_of(o, IdEvent::kResolveAddr);
  if (!s.ok) return fail(s.err);
  if (!o->port) {  // unbound or wildcard: the device that reaches dst, on the port it has
    int err = 0;
    CmPort* p = choose_port(dst.ip, route_src, &err);
    if (!p) {
      if (err == ENODEV) return refuse_no_family("rdma_resolve_addr", dst.ip);
      return fail(err ? err : EADDRNOTAVAIL);
    }
    if (int rc = take_port(o, p, p->ip, o->local_port)) return fail(rc);
  }
  o->remote_ip = dst.ip;
  o->remote_port = dst.port;
  // A link-local peer is on the device's link: its scope is the device's interface.
  set_sa(o->id.route.addr.dst_storage, o->family, dst.ip, dst.port,
         dst.scope_id ? dst.scope_id : o->scope_id);
  o->id.route.addr.addr.ibaddr.dgid = gid_of(dst.ip);
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

namespace {

// Which of getaddrinfo's answers to take, when the hints leave the family open: the first whose
// family a uroce device has (a name such as "localhost" answers ::1 first on most hosts, and an
// IPv4-only setup must keep working), else the first.
const addrinfo* pick_answer(const addrinfo* ai) {
  bool v4 = false, v6 = false;
  for (verbs::VDevice* d : svc().devices()) (d->cfg.is_ipv6() ? v6 : v4) = true;
  for (const addrinfo* a = ai; a; a = a->ai_next)
    if ((a->ai_family == AF_INET && v4) || (a->ai_family == AF_INET6 && v6)) return a;
  return ai;
}

}  // namespace

// IP names and numbers, of either family, through the system resolver; the RDMA fields as
// librdmacm fills them for an IP address (port space from the hints, TCP by default). As
// librdmacm's: with a node or a service, getaddrinfo's first answer (of the hints' family; with
// none, see pick_answer) is the source (RAI_PASSIVE) or the destination; without either, the
// addresses come from the hints alone (libfabric's verbs provider asks so, with only a source
// address). A source in the hints fills a result that has none.
int getaddrinfo_ip(const char* node, const char* service, const rdma_addrinfo* hints,
                   rdma_addrinfo** res) {
  if (!res || (!node && !service && !hints)) return fail(EINVAL);
  const int family = hints ? hints->ai_family : AF_UNSPEC;
  if (family != AF_UNSPEC && family != AF_INET && family != AF_INET6)
    return refuse_family("rdma_getaddrinfo");
  const int flags = hints ? hints->ai_flags : 0;
  auto* r = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  if (!r) return fail(ENOMEM);
  r->ai_flags = flags;
  r->ai_family = family == AF_UNSPEC ? AF_INET : family;
  r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
  r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type
                  : r->ai_port_space == RDMA_PS_UDP || r->ai_port_space == RDMA_PS_IPOIB
                      ? IBV_QPT_UD
                      : IBV_QPT_RC;
  auto ip_family = [](const sockaddr* a) {
    return a->sa_family == AF_INET || a->sa_family == AF_INET6;
  };
  bool ok = true;
  if (node || service) {
    addrinfo h{};
    h.ai_family = family;
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
    const addrinfo* a = family == AF_UNSPEC ? pick_answer(ai) : ai;
    r->ai_family = a->ai_family;
    ok = (flags & RAI_PASSIVE)
             ? copy_addr(a->ai_addr, a->ai_addrlen, &r->ai_src_addr, &r->ai_src_len)
             : copy_addr(a->ai_addr, a->ai_addrlen, &r->ai_dst_addr, &r->ai_dst_len);
    freeaddrinfo(ai);
  } else if (hints->ai_dst_addr && hints->ai_dst_len) {
    if (!ip_family(hints->ai_dst_addr)) {
      std::free(r);
      return fail(EAFNOSUPPORT);
    }
    r->ai_family = hints->ai_dst_addr->sa_family;
    ok = copy_addr(hints->ai_dst_addr, hints->ai_dst_len, &r->ai_dst_addr, &r->ai_dst_len);
  }
  if (ok && !r->ai_src_len && hints && hints->ai_src_addr && hints->ai_src_len) {
    if (!ip_family(hints->ai_src_addr)) {
      freeaddrinfo_all(r);
      return fail(EAFNOSUPPORT);
    }
    if (!r->ai_dst_len) r->ai_family = hints->ai_src_addr->sa_family;
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
