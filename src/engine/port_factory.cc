#include "engine/port_factory.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "ports/udp/udp_port.h"
#if UROCE_HAVE_DPDK
#include "dpdk_port/dpdk.h"
#endif

namespace uroce {
namespace {

// The interface is a loopback one (IFF_LOOPBACK); false when unknown.
bool is_loopback(const std::string& netdev) {
  if (netdev.empty() || netdev.size() >= IFNAMSIZ) return false;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, netdev.data(), netdev.size());
  const bool lo = ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_LOOPBACK);
  close(fd);
  return lo;
}

}  // namespace

std::unique_ptr<Port> open_port(const DeviceConfig& cfg, PortCounters& counters, std::string* err) {
  if (cfg.port == PortKind::kDpdk) {
#if UROCE_HAVE_DPDK
    dpdk::DpdkPortOptions o;
    o.dev = cfg.dpdk.dev;
    o.ipv4 = cfg.ipv4;
    o.prefix_len = cfg.dpdk.prefix_len;
    o.gateway = cfg.dpdk.gateway;
    o.has_mac = cfg.dpdk.has_mac;
    std::copy(std::begin(cfg.dpdk.mac), std::end(cfg.dpdk.mac), o.mac.begin());
    o.eal_args = cfg.dpdk.eal_args;
    o.vlan = cfg.dpdk.vlan;
    o.priority = cfg.dpdk.priority;
    o.data_dscp = cfg.dscp;
    o.mtu = cfg.dpdk.mtu;
    for (const auto& n : cfg.dpdk.neighbours) {
      dpdk::DpdkPortOptions::Neighbour nb;
      nb.ip = n.ip;
      std::copy(std::begin(n.mac), std::end(n.mac), nb.mac.begin());
      o.neighbours.push_back(nb);
    }
    o.roce_v1 = cfg.dpdk.roce_v1;
    return dpdk::open_port(o, counters, err);
#else
    if (err)
      *err =
          "uroce was built without DPDK (libdpdk-dev was not found when it was configured; "
          "scripts/install-deps.sh installs it), so dpdk(…) devices cannot open";
    return nullptr;
#endif
  }
  UdpPortOptions opt;
  opt.ipv4 = cfg.ipv4;
  opt.netdev = cfg.netdev;
  opt.share = cfg.share;
  // UROCE_GSO=auto batches on loopback only (DeviceConfig::gso says why).
  opt.gso = cfg.gso == DeviceConfig::Gso::kOn ||
            (cfg.gso == DeviceConfig::Gso::kAuto && is_loopback(cfg.netdev));
  return UdpPort::open(opt, counters, err);
}

}  // namespace uroce
