#include "tools/doctor/nic_checks.h"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

namespace uroce::doctor {
namespace {

std::string speed_text(uint64_t mbps) {
  if (mbps >= 1000 && mbps % 1000 == 0) return std::to_string(mbps / 1000) + " Gb/s";
  if (mbps >= 1000)
    return std::to_string(mbps / 1000) + "." + std::to_string(mbps % 1000 / 100) + " Gb/s";
  return std::to_string(mbps) + " Mb/s";
}

// The slowest link an RNIC negotiates; slower means autonegotiation fell back.
constexpr uint64_t kRoceMinMbps = 10'000;

Check speed_check(const NicInfo& n, const std::string& source) {
  Check k{"device.speed", "link speed"};
  if (n.link_speed_mbps == 0) {
    k.status = Status::kSkip;
    k.evidence = source + ": the driver reports no speed (a virtual device, or the link is down)";
    return k;
  }
  k.evidence = source + ": " + speed_text(n.link_speed_mbps) +
               (n.link_full_duplex ? ", full duplex" : ", HALF duplex");
  if (!n.link_full_duplex) {
    // RoCE has no half-duplex mode: a half-duplex link is an autonegotiation mismatch.
    k.status = Status::kFail;
    k.evidence += ": one end negotiated half duplex, so frames collide and are lost";
    k.fix =
        "turn autonegotiation on at both ends (or force the same speed and full duplex at both)";
  } else if (n.link_speed_mbps < kRoceMinMbps) {
    k.status = Status::kWarn;
    k.evidence += ", slower than any RoCE NIC runs (10 Gb/s and up): autonegotiation fell back?";
    k.fix = "check the cable or optic and the switch port's speed setting";
  }
  return k;
}

Check errors_check(const NicInfo& n, const std::string& source) {
  Check k{"device.nic_errors", "NIC errors"};
  std::string seen;
  auto add = [&seen](uint64_t v, const char* what) {
    if (v == 0) return;
    seen += (seen.empty() ? "" : "; ") + std::to_string(v) + " " + what;
  };
  add(n.rx_errors, "frames received in error (rx_errors: bad FCS or length)");
  add(n.rx_missed, "frames the NIC dropped for lack of receive descriptors (rx_missed)");
  add(n.rx_nombuf, "frames dropped for lack of receive buffers (rx_nombuf)");
  add(n.tx_errors, "frames the NIC failed to send (tx_errors)");
  if (seen.empty()) {
    k.evidence = source + ": no receive or transmit errors (rx_errors, rx_missed, tx_errors 0)";
    return k;
  }
  // Counters since the interface (the DPDK process) started: worth a look, not proof that the
  // link is bad now.
  k.status = Status::kWarn;
  k.evidence = source + ": " + seen;
  if (n.rx_errors)
    k.fix =
        "bad frames point at the cable, the optic or the peer port: compare the switch "
        "port's FCS errors, and watch whether the count grows";
  else if (n.rx_missed || n.rx_nombuf)
    k.fix =
        "the receiver did not keep up: give the engine a core of its own, or fewer busy "
        "threads beside it";
  else
    k.fix = "watch whether the count grows; the transport resends what was not sent";
  return k;
}

Check pause_check(const NicInfo& n, const std::string& source) {
  Check k{"device.pause", "PAUSE / PFC on the NIC"};
  std::string counted;
  if (n.pause_stats)
    counted = "; the NIC counted " + std::to_string(n.rx_pause) + " PAUSE/PFC frames received, " +
              std::to_string(n.tx_pause) + " sent";
  switch (n.flow_ctrl) {
    case NicInfo::kFcFull:
      k.evidence = source + ": 802.3x PAUSE on, both ways" + counted;
      break;
    case NicInfo::kFcRxPause:
      k.evidence = source + ": 802.3x PAUSE honoured when received, never sent" + counted;
      break;
    case NicInfo::kFcTxPause:
      k.evidence = source + ": 802.3x PAUSE sent, not honoured when received" + counted;
      break;
    case NicInfo::kFcNone:
      // Off is right when PFC does the job (PFC replaces global PAUSE) or ECN alone is the plan;
      // the NIC's PFC setting is not visible here, so this is worth a look, not a failure.
      k.status = Status::kWarn;
      k.evidence = source + ": 802.3x PAUSE off" + counted +
                   ". Lossless RoCE needs PFC on the RoCE priority (not visible from here) or "
                   "global PAUSE, end to end";
      k.fix =
          "enable PFC on the RoCE priority on the NIC and the switch (e.g. mlnx_qos -i IF "
          "--pfc 0,0,0,1,0,0,0,0), or rely on ECN with DCQCN and accept drops";
      break;
    default:
      k.status = Status::kSkip;
      k.evidence = source + ": the driver does not report its flow-control setting" + counted;
      break;
  }
  return k;
}

// A sysfs number; 0 when absent, unreadable or negative ("speed" is -1 without a link).
uint64_t read_u64(const std::string& path) {
  std::ifstream f(path);
  long long v = 0;
  return (f >> v) && v > 0 ? static_cast<uint64_t>(v) : 0;
}

}  // namespace

std::vector<Check> nic_checks(const NicInfo& n, const std::string& source) {
  return {speed_check(n, source), errors_check(n, source), pause_check(n, source)};
}

std::optional<NicInfo> nic_from_snapshot(const stats_shm::Snapshot& s) {
  NicInfo n;
  bool any = false;
  NicInfo::for_each(n, [&](const char* name, uint64_t& field) {
    for (const auto& [k, v] : s.counters)
      if (k == name) {
        field = v;
        any = true;
      }
  });
  if (!any) return std::nullopt;
  return n;
}

NicInfo nic_from_netdev(const std::string& netdev, const std::string& sys_root, bool ask_driver) {
  NicInfo n;
  const std::string dir = sys_root + "/" + netdev;
  // "speed" is -1 (or unreadable: EINVAL) where the driver has none or the link is down.
  n.link_speed_mbps = read_u64(dir + "/speed");
  {
    std::ifstream f(dir + "/duplex");
    std::string d;
    n.link_full_duplex = (f >> d) && d != "half";
  }
  n.rx_errors = read_u64(dir + "/statistics/rx_errors");
  n.rx_missed = read_u64(dir + "/statistics/rx_missed_errors");
  n.tx_errors = read_u64(dir + "/statistics/tx_errors");
  if (!ask_driver || netdev.size() >= IFNAMSIZ) return n;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return n;
  ethtool_pauseparam p{};
  p.cmd = ETHTOOL_GPAUSEPARAM;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, netdev.c_str(), netdev.size());
  ifr.ifr_data = reinterpret_cast<char*>(&p);
  if (ioctl(fd, SIOCETHTOOL, &ifr) == 0)
    n.flow_ctrl = p.rx_pause && p.tx_pause ? NicInfo::kFcFull
                  : p.rx_pause             ? NicInfo::kFcRxPause
                  : p.tx_pause             ? NicInfo::kFcTxPause
                                           : NicInfo::kFcNone;
  close(fd);
  return n;
}

}  // namespace uroce::doctor
