#include "tools/doctor/doctor.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "tools/doctor/counter_rules.h"
#include "tools/doctor/device_checks.h"
#include "tools/doctor/path_checks.h"
#include "tools/netdev.h"

namespace uroce::doctor {
namespace {

std::optional<uint32_t> resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return std::nullopt;
  const uint32_t ip = ntohl(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
  freeaddrinfo(res);
  return ip;
}

// The source address the kernel would use towards dst (a DPDK device's address is not the
// kernel's, so its probes leave from here).
uint32_t kernel_source_for(uint32_t dst) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in d{};
  d.sin_family = AF_INET;
  d.sin_addr.s_addr = htonl(dst);
  d.sin_port = htons(4791);
  uint32_t src = 0;
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&d), sizeof d) == 0) {
    sockaddr_in s{};
    socklen_t len = sizeof s;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&s), &len) == 0) src = ntohl(s.sin_addr.s_addr);
  }
  if (fd >= 0) close(fd);
  return src;
}

Section path_section(const DeviceConfig& c, uint32_t peer, const DoctorOptions& o) {
  PathOptions p;
  p.peer_ip = peer;
  p.wait_ms = o.wait_ms;
  Section sec;
  if (c.is_ipv6()) {
    // The path probes (ICMP echo, UDP to 4791, PMTU) speak IPv4; say so rather than probe
    // from another address than the device's.
    sec.name = "Path from " + c.name + " (" + format_device_addr(c) + ") to " + format_ipv4(peer);
    sec.checks.push_back({"path.family", "address family", Status::kSkip,
                          "the path checks are IPv4 only, and " + c.name + " is on IPv6"});
    return sec;
  }
  if (c.port == PortKind::kUdp && !c.netdev.empty()) {
    p.src_ip = c.ipv4;
    p.if_mtu = tools::netdev_mtu(c.netdev);
    sec.name = "Path from " + c.name + " (" + format_ipv4(c.ipv4) + ") to " + format_ipv4(peer);
  } else {
    // The probes need a kernel address: a DPDK port is its process's, and a device whose
    // address no interface has cannot send at all — the kernel's route shows the rest.
    p.src_ip = kernel_source_for(peer);
    p.if_mtu = c.port == PortKind::kDpdk ? (c.dpdk.mtu ? c.dpdk.mtu : 1500) : 0;
    sec.name = "Path from this host (" + format_ipv4(p.src_ip) + ", the kernel's route; " + c.name +
               "'s own port is not used) to " + format_ipv4(peer);
  }
  p.device_mtu = tools::ib_mtu_for(p.if_mtu);
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
      // The path checks are IPv4's (ping, a UDP probe from the device address).
      if (!q.peer_ip.is_v4() || q.peer_ip.v4() == 0) continue;
      PeerFigures& f = v.peers[q.peer_ip.v4()];
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
  std::optional<uint32_t> peer;
  if (!o.peer.empty()) {
    peer = resolve(o.peer);
    if (!peer) {
      std::fprintf(stderr, "uroce doctor: cannot resolve '%s' to an IPv4 address\n",
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
  if (peer) {
    DeviceConfig none;  // UROCE_DEVICES does not parse: probe from the kernel's source address
    none.name = "no device";
    r.sections.push_back(path_section(from ? *from : none, *peer, o));
  }
  for (Section& s : counter_sections(pub, o.device, from)) r.sections.push_back(std::move(s));
  const std::string text = o.json ? render_json(r) : render_text(r);
  std::fputs(text.c_str(), stdout);
  return exit_code(r);
}

}  // namespace uroce::doctor
