#include "tools/doctor/doctor.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "tools/doctor/counter_rules.h"
#include "tools/doctor/device_checks.h"
#include "tools/doctor/path_checks.h"
#include "tools/netdev.h"

namespace uroce::doctor {
namespace {

// The peer's addresses, IPv4 ones IPv4-mapped: a literal of either family, or every A and AAAA
// record of a name, in getaddrinfo's order. Empty when nothing resolves.
std::vector<wire::IpAddr> resolve(const std::string& host) {
  std::vector<wire::IpAddr> out;
  if (auto lit = wire::IpAddr::parse(host)) return {*lit};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;  // one entry per address, not one per socket type
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return out;
  for (const addrinfo* a = res; a; a = a->ai_next) {
    wire::IpAddr ip;
    if (a->ai_family == AF_INET) {
      ip = wire::IpAddr(ntohl(reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr));
    } else if (a->ai_family == AF_INET6) {
      ip = wire::IpAddr::from_bytes(
          reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr.s6_addr);
    } else {
      continue;
    }
    if (std::find(out.begin(), out.end(), ip) == out.end()) out.push_back(ip);
  }
  freeaddrinfo(res);
  return out;
}

// The source address the kernel would use towards dst (a DPDK device's address is not the
// kernel's, so its probes leave from here); the family's any-address (0.0.0.0, ::) when it has
// no route.
wire::IpAddr kernel_source_for(const wire::IpAddr& dst) {
  const int family = family_of(dst);
  int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage d;
  const socklen_t dlen = make_sockaddr(dst, 4791, 0, &d);
  wire::IpAddr src = dst.is_v4() ? wire::IpAddr(0u) : wire::IpAddr{};
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&d), dlen) == 0) {
    sockaddr_storage s{};
    socklen_t len = sizeof s;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&s), &len) == 0) {
      if (s.ss_family == AF_INET) {
        src = wire::IpAddr(ntohl(reinterpret_cast<const sockaddr_in*>(&s)->sin_addr.s_addr));
      } else if (s.ss_family == AF_INET6) {
        src =
            wire::IpAddr::from_bytes(reinterpret_cast<const sockaddr_in6*>(&s)->sin6_addr.s6_addr);
      }
    }
  }
  if (fd >= 0) close(fd);
  return src;
}

const char* family_name(const wire::IpAddr& ip) {
  return ip.is_v4() ? "IPv4" : "IPv6";
}

}  // namespace

wire::IpAddr choose_peer(const std::vector<wire::IpAddr>& candidates, bool device_ipv6) {
  for (const wire::IpAddr& ip : candidates)
    if (ip.is_v4() != device_ipv6) return ip;
  return candidates.empty() ? wire::IpAddr{} : candidates.front();
}

std::optional<Check> family_mismatch(const std::string& device, const std::string& device_addr,
                                     bool device_ipv6, const std::string& peer_text,
                                     const wire::IpAddr& peer) {
  if (peer.is_v4() != device_ipv6) return std::nullopt;
  const std::string dev_family = device_ipv6 ? "IPv6" : "IPv4";
  const std::string peer_family = family_name(peer);
  Check k{"path.family", "address family", Status::kFail};
  k.evidence =
      device + " is on " + dev_family + " (" + device_addr + ") and " + peer_text +
      (peer_text == peer.to_string() ? " is" : " resolves only to " + peer.to_string() + ",") +
      " an " + peer_family +
      " address: a RoCEv2 packet travels in one family, so this device cannot reach "
      "that peer (an address handle from it could not name it either)";
  k.fix = "give the peer's " + dev_family + " address (or a name with " +
          (device_ipv6 ? "an AAAA" : "an A") + " record), or check from a device on " +
          peer_family + " (-d)";
  return k;
}

namespace {

// dev: the device the path starts at; nullptr when UROCE_DEVICES does not parse (the probes
// then leave from the kernel's source address).
Section path_section(const DeviceConfig* dev, const std::string& peer_text,
                     const wire::IpAddr& peer, const DoctorOptions& o) {
  DeviceConfig none;
  none.name = "no device";
  const DeviceConfig& c = dev ? *dev : none;
  PathOptions p;
  p.peer = peer;
  p.wait_ms = o.wait_ms;
  Section sec;
  if (dev) {
    if (auto k = family_mismatch(c.name, format_device_addr(c), c.is_ipv6(), peer_text, peer)) {
      sec.name = "Path from " + c.name + " (" + format_device_addr(c) + ") to " + peer.to_string();
      sec.checks.push_back(*k);
      return sec;
    }
  }
  if (c.port == PortKind::kUdp && !c.netdev.empty()) {
    sec.name = "Path from " + c.name + " (" + format_device_addr(c) + ") to " + peer.to_string();
    p.src = c.addr();
    p.scope_id = c.scope_id;
    p.if_mtu = tools::netdev_mtu(c.netdev);
  } else {
    // The probes need a kernel address: a DPDK port is its process's, and a device whose
    // address no interface has cannot send at all — the kernel's route shows the rest.
    p.src = kernel_source_for(peer);
    p.if_mtu = c.port == PortKind::kDpdk ? (c.dpdk.mtu ? c.dpdk.mtu : 1500) : 0;
    sec.name = "Path from this host (" + p.src.to_string() + ", the kernel's route; " + c.name +
               "'s own port is not used) to " + peer.to_string();
  }
  // An IPv6 device gets the active MTU of an interface 20 bytes smaller (its header is 40 bytes,
  // not 20: src/engine/device.cc).
  const bool v6 = !peer.is_v4();
  p.device_mtu = tools::ib_mtu_for(v6 && p.if_mtu > 20 ? p.if_mtu - 20 : p.if_mtu);
  p.dscp = static_cast<uint8_t>(o.dscp >= 0 ? o.dscp : c.dscp ? c.dscp : 26);
  sec.checks = check_path(p);
  return sec;
}

// The published devices, each a section; with -d only that device (its name and address:
// another host's device of the same name is not it).
std::vector<Section> counter_sections(const tools::Published& pub, const std::string& device,
                                      const DeviceConfig* chosen) {
  std::map<std::pair<std::string, wire::IpAddr>, DeviceCounterView> views;
  for (const auto& [path, s] : pub) {
    if (!device.empty() && s.id.device != device) continue;
    if (!device.empty() && chosen && s.id.ip != chosen->addr()) continue;
    DeviceCounterView& v = views[{s.id.device, s.id.ip}];
    v.device = s.id.device;
    v.ip = s.id.ip;
    v.pids.push_back(s.id.pid);
    v.port_active = v.port_active && s.port_state == stats_shm::kPortActive;
    for (const auto& [name, value] : s.counters) v.counters[name] += value;
    for (const stats_shm::QpRow& q : s.qps) {
      // No peer yet (UD, before RTR): all zeros, or 0.0.0.0 from an older publisher.
      if (q.peer_ip == wire::IpAddr{} || q.peer_ip == wire::IpAddr(0u)) continue;
      PeerFigures& f = v.peers[q.peer_ip];
      f.retransmitted_pkts += q.counters.retransmitted_pkts;
      f.local_ack_timeout_err += q.counters.local_ack_timeout_err;
      f.rnr += q.counters.rcvd_rnr_err + q.counters.send_rnr_err;
    }
  }
  std::vector<Section> out;
  for (const auto& [key, v] : views) {
    std::string pids;
    for (pid_t p : v.pids) {
      if (!pids.empty()) pids += ',';  // appended, not `a + b`: GCC 12's -Wrestrict at -O3
      pids += std::to_string(p);
    }
    out.push_back({"Counters of " + v.device + " (" + v.ip.to_string() + ") in pid " + pids +
                       ", since each started",
                   diagnose_counters(v)});
  }
  if (out.empty())
    out.push_back({"Running processes",
                   {{"counters", "published counters", Status::kSkip,
                     "no running uroce process publishes counters" +
                         (device.empty() ? std::string() : " for " + device) +
                         " (none runs, or UROCE_PUBLISH=0): nothing to read"}}});
  return out;
}

}  // namespace

CLI::App* add_command(CLI::App& app, DoctorOptions* o) {
  CLI::App* d = app.add_subcommand(
      "doctor",
      "Walk the RoCE checklist: the devices UROCE_DEVICES configures, the path to PEER "
      "(reachable, UDP 4791, path MTU, DSCP and ECN kept, round trip) and the running "
      "processes' counters; each check with its evidence and fix. Exit status 1 when a check "
      "fails");
  d->add_option("peer", o->peer, "Address (or host name) of a RoCE peer: check the path to it");
  d->add_option("-d,--device", o->device, "Only this device (and the path from it)");
  d->add_flag("--json", o->json, "Machine-readable output");
  d->add_option("--dscp", o->dscp, "DSCP of the TOS probe (default: the device's, else 26)")
      ->check(CLI::Range(0, 63));
  d->add_option("--wait-ms", o->wait_ms, "How long each probe waits for an answer (default 500)")
      ->check(CLI::Range(10, 60000));
  return d;
}

int cmd_doctor(const DoctorOptions& o, const tools::Collect& collect) {
  Report r;
  Section config{"Configuration", {}};
  auto cfgs = check_config(environ, config.checks);
  r.sections.push_back(std::move(config));
  const tools::Published pub = collect();
  std::vector<wire::IpAddr> peers;
  if (!o.peer.empty()) {
    peers = resolve(o.peer);
    if (peers.empty()) {
      std::fprintf(stderr, "uroce doctor: cannot resolve '%s' to an IPv4 or IPv6 address\n",
                   o.peer.c_str());
      return 2;
    }
  }
  const DeviceConfig* from = nullptr;
  if (cfgs) {
    for (const DeviceConfig& c : *cfgs) {
      if (!o.device.empty() && c.name != o.device) continue;
      if (!from) from = &c;
      r.sections.push_back(
          {"Device " + c.name + " (" + format_device_addr(c) + ")", check_device(c, pub)});
    }
    if (!o.device.empty() && !from) {
      std::fprintf(stderr, "uroce doctor: UROCE_DEVICES configures no device '%s'\n",
                   o.device.c_str());
      return 2;
    }
  }
  if (!peers.empty()) {
    // A name with both A and AAAA records: the address of the device's own family.
    const bool v6 = from && from->is_ipv6();
    r.sections.push_back(path_section(from, o.peer, choose_peer(peers, v6), o));
  }
  for (Section& s : counter_sections(pub, o.device, from)) r.sections.push_back(std::move(s));
  const std::string text = o.json ? render_json(r) : render_text(r);
  std::fputs(text.c_str(), stdout);
  return exit_code(r);
}

}  // namespace uroce::doctor
