#include "tools/doctor/device_checks.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ports/link_watch.h"
#include "tools/doctor/nic_checks.h"
#include "tools/doctor/path_checks.h"
#include "tools/netdev.h"

namespace uroce::doctor {
namespace {

std::string pids_of(const DeviceConfig& c, const tools::Published& published, bool* active,
                    uint32_t* mtu) {
  std::string pids;
  for (const auto& [path, s] : published) {
    if (s.id.device != c.name || s.id.ip != c.addr()) continue;
    if (!pids.empty()) pids += ',';
    pids += std::to_string(s.id.pid);
    if (active) *active = s.port_state == stats_shm::kPortActive;
    if (mtu) *mtu = s.id.mtu;
  }
  return pids;
}

bool is_loopback(const std::string& netdev) {
  return netdev == "lo";
}

// The device's GID 0 as text: the IPv4-mapped address, or an IPv6 device's address itself.
std::string gid0_text(const DeviceConfig& c) {
  // append, not operator+: GCC 12's -Wrestrict false positive at -O3.
  return c.is_ipv6() ? c.ipv6.to_string() : std::string("::ffff:").append(format_ipv4(c.ipv4));
}

Check address_check(const DeviceConfig& c) {
  const std::string a = format_device_addr(c);
  Check k{"device.address", "address"};
  if (c.netdev.empty()) {
    k.status = Status::kFail;
    k.evidence = "no local interface has " + a + ": the device cannot open (EADDRNOTAVAIL)";
    k.fix = "add the address to the interface (ip addr add " + a + (c.is_ipv6() ? "/64" : "/24") +
            " dev IFACE), or name the interface: UROCE_DEVICES=" + c.name + "=IFACE";
    return k;
  }
  k.evidence = a + " is on " + c.netdev;
  if (is_loopback(c.netdev)) k.evidence += " (loopback: only processes on this host reach it)";
  return k;
}

Check link_check(const DeviceConfig& c) {
  Check k{"device.link", "link"};
  std::string why;
  auto link = LinkWatch::open(c.netdev, &why);
  if (!link) {
    k.status = Status::kSkip;
    k.evidence = "cannot watch " + c.netdev + ": " + why;
    return k;
  }
  if (link->up()) {
    k.evidence = c.netdev + " is up with a carrier: the port is ACTIVE";
    return k;
  }
  k.status = Status::kFail;
  k.evidence = c.netdev + " is down or has no carrier: the port is DOWN and nothing is sent";
  k.fix = "ip link set dev " + c.netdev +
          " up, and check its cable or its peer (ip link shows "
          "LOWER_UP when the carrier is there)";
  return k;
}

// UDP 4791 on the device's address: free, held by uroce processes (sharing it), or by
// something else — then no uroce process of this user can open the device.
Check port_check(const DeviceConfig& c, const std::string& pids) {
  Check k{"device.udp4791", "UDP 4791"};
  const std::string a = c.is_ipv6()
                            ? std::string("[").append(format_device_addr(c)).append("]:4791")
                            : format_ipv4(c.ipv4).append(":4791");
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (c.is_ipv6()) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    s6->sin6_family = AF_INET6;
    std::memcpy(&s6->sin6_addr, c.ipv6.data(), 16);
    s6->sin6_port = htons(4791);
    s6->sin6_scope_id = c.scope_id;
    len = sizeof *s6;
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    s4->sin_family = AF_INET;
    s4->sin_addr.s_addr = htonl(c.ipv4);
    s4->sin_port = htons(4791);
    len = sizeof *s4;
  }
  int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int on = 1;
  if (fd >= 0 && c.is_ipv6()) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
  const int rc = fd < 0 ? -1 : bind(fd, reinterpret_cast<sockaddr*>(&ss), len);
  const int err = errno;
  if (fd >= 0) close(fd);
  if (rc == 0) {
    k.evidence = a + " is free: no process has the device open now";
  } else if (err == EADDRINUSE && !pids.empty()) {
    k.evidence = a + " is held by the uroce processes that have the device open (pid " + pids + ")";
  } else if (err == EADDRINUSE) {
    k.status = Status::kWarn;
    k.evidence = a +
                 " is held by something that publishes no uroce counters: Linux rxe, another "
                 "program, another user's uroce process, or one run with UROCE_PUBLISH=0";
    k.fix =
        "ss -ulpn 'sport = :4791' names the holder; a uroce process of this user cannot "
        "open the device while something else holds the port";
  } else {
    k.status = Status::kSkip;
    k.evidence = "cannot try " + a + ": " + std::strerror(err);
  }
  return k;
}

std::vector<Check> dpdk_checks(const DeviceConfig& c, const tools::Published& published) {
  std::vector<Check> out;
  const dpdk::DpdkPortOptions& d = c.dpdk;
  bool active = false;
  uint32_t mtu = 0;
  const std::string pids = pids_of(c, published, &active, &mtu);
  out.push_back({"device.address", "address", Status::kPass,
                 format_device_addr(c) + " on DPDK device " + d.dev +
                     " (the port frames its own packets: no kernel interface has it)"});
  if (pids.empty()) {
    out.push_back({"device.link", "link", Status::kSkip,
                   "no running process has the device open, and doctor does not "
                   "take the port to look"});
  } else {
    Check k{"device.link", "link"};
    k.status = active ? Status::kPass : Status::kFail;
    k.evidence = std::string(active ? "ACTIVE" : "DOWN") + " as process " + pids + " sees it";
    if (!active) k.fix = "check the NIC's cable and the switch port";
    k.evidence += mtu ? "; active MTU " + std::to_string(mtu) : "";
    out.push_back(k);
  }
  out.push_back(
      {"device.gid", "GID table", Status::kPass,
       "index 0: " + gid0_text(c) + " (RoCE v2)" +
           (d.roce_v1 ? "; index 1: the same address as RoCE v1 (EtherType 0x8915)" : "")});
  const std::string port = d.dev.substr(0, d.dev.find(','));  // the PMD's name, without its args
  out.push_back(mtu_verdict_device("the DPDK port " + port, d.mtu ? d.mtu : 1500,
                                   "mtu=9000 in its dpdk(…) entry"));
  if (d.mtu == 0) out.back().evidence += " (mtu= not given: the port's default, taken as 1500)";
  Check q{"device.qos", "VLAN, PCP, DSCP"};
  if (d.vlan != 0) {
    q.evidence = "data packets carry VLAN " + std::to_string(d.vlan) + " PCP " +
                 std::to_string(d.priority) + " and DSCP " + std::to_string(d.data_dscp) +
                 ": the switch's PFC must be on priority " + std::to_string(d.priority);
  } else {
    q.status = Status::kWarn;
    q.evidence = "untagged (no vlan=): data packets carry DSCP " + std::to_string(d.data_dscp) +
                 " only, so the switch must classify RoCE by DSCP (trust dscp) for PFC to apply";
    q.fix = "vlan=ID (prio=3 by default) to carry PCP, or make the switch trust DSCP " +
            std::to_string(d.data_dscp);
  }
  out.push_back(q);
  // The NIC's own figures, as the process that runs the port publishes them.
  for (const auto& [path, s] : published) {
    if (s.id.device != c.name || s.id.ip != c.addr()) continue;
    if (auto nic = nic_from_snapshot(s)) {
      for (Check& k : nic_checks(*nic, "the DPDK port " + port + " as process " +
                                           std::to_string(s.id.pid) + " reads it"))
        out.push_back(std::move(k));
      return out;
    }
  }
  out.push_back({"device.nic", "NIC", Status::kSkip,
                 pids.empty() ? "link speed, errors and PAUSE are the DPDK port's: no running "
                                "process has it open, and doctor does not take the port to look"
                              : "the process that runs the port publishes no NIC figures (an "
                                "older uroce)"});
  return out;
}

}  // namespace

Check mtu_verdict_device(const std::string& netdev, uint32_t if_mtu, const std::string& fix,
                         bool ipv6) {
  Check k{"device.mtu", "MTU"};
  if (if_mtu == 0) {
    k.status = Status::kSkip;
    k.evidence = "cannot read the MTU of " + netdev;
    return k;
  }
  const uint32_t overhead = ipv6 ? kRoceIpv6Overhead : kRoceIpOverhead;
  const uint32_t active = tools::ib_mtu_for(ipv6 && if_mtu > 20 ? if_mtu - 20 : if_mtu);
  k.evidence = netdev + " MTU " + std::to_string(if_mtu) + ": the device reports active MTU " +
               std::to_string(active) + " (RoCE packets of up to " +
               std::to_string(active + overhead) + " bytes" + (ipv6 ? " over IPv6)" : ")");
  if (active < 4096) {
    k.status = Status::kWarn;
    k.evidence +=
        "; RoCE MTU 4096 needs an interface MTU of at least " + std::to_string(4096 + overhead);
    k.fix = (fix.empty() ? "ip link set dev " + netdev + " mtu 9000" : fix) +
            " (and the same on every hop and the peer)";
  }
  return k;
}

std::optional<std::vector<DeviceConfig>> check_config(const char* const* envp,
                                                      std::vector<Check>& out) {
  for (const std::string& w : misspelt_variables(envp))
    out.push_back({"config.variables", "UROCE_* variables", Status::kWarn, w,
                   "rename the variable: uroce ignores it"});
  std::string err;
  auto cfgs = load_device_config(&err);
  Check k{"config.devices", "UROCE_DEVICES"};
  if (!cfgs) {
    k.status = Status::kFail;
    k.evidence = err;
    k.fix = "correct UROCE_DEVICES (docs/configuration.md; uroce config shows every key)";
    out.push_back(k);
    return std::nullopt;
  }
  const char* v = std::getenv("UROCE_DEVICES");
  std::string list;
  for (const DeviceConfig& c : *cfgs)
    list += (list.empty() ? "" : ", ") + c.name + " " + format_device_addr(c) +
            (c.port == PortKind::kDpdk
                 ? " (DPDK " + c.dpdk.dev + ")"
                 : " (kernel UDP on " + (c.netdev.empty() ? "no interface" : c.netdev) + ")");
  k.evidence = (v && *v ? "parses: " : "unset: the default device, ") + list;
  out.push_back(k);
  return cfgs;
}

std::vector<Check> check_device(const DeviceConfig& c, const tools::Published& published) {
  if (c.port == PortKind::kDpdk) return dpdk_checks(c, published);
  std::vector<Check> out;
  out.push_back(address_check(c));
  if (c.netdev.empty()) return out;  // nothing more to look at without an interface
  out.push_back(link_check(c));
  out.push_back(mtu_verdict_device(c.netdev, tools::netdev_mtu(c.netdev), {}, c.is_ipv6()));
  out.push_back({"device.gid", "GID table", Status::kPass,
                 "index 0: " + gid0_text(c) +
                     (c.is_ipv6() ? " (RoCE v2, the IPv6 address itself"
                                  : " (RoCE v2, the IPv4-mapped address") +
                     "; pass -g 0 to the pingpong programs)"});
  out.push_back(port_check(c, pids_of(c, published, nullptr, nullptr)));
  if (is_loopback(c.netdev)) {
    out.push_back({"device.nic", "NIC", Status::kSkip, "loopback: no physical link to look at"});
  } else {
    for (Check& k : nic_checks(nic_from_netdev(c.netdev), c.netdev)) out.push_back(std::move(k));
  }
  return out;
}

}  // namespace uroce::doctor
