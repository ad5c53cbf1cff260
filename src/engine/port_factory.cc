#include "engine/port_factory.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "dpdk_port/hosted_port.h"
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
  if (cfg.port == PortKind::kDpdk && cfg.dpdk.share) {
    // A device several processes share: its host process owns the port (hosted_port.h).
    dpdk::DpdkPortOptions o = cfg.dpdk;
    o.ip = cfg.addr();
    o.data_dscp = cfg.dscp;
    return dpdk::open_hosted_port(o, counters, err);
  }
  if (cfg.port == PortKind::kDpdk) {
#if UROCE_HAVE_DPDK
    // The port read its own options from the dpdk(…) body (parse_dpdk_device); the address and
    // DSCP are the device's, which a caller may have set directly.
    dpdk::DpdkPortOptions o = cfg.dpdk;
    o.ip = cfg.addr();
    o.data_dscp = cfg.dscp;
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
  opt.ipv6 = cfg.ipv6;
  opt.scope_id = cfg.scope_id;
  opt.netdev = cfg.netdev;
  opt.share = cfg.share;
  // UROCE_GSO=auto batches on loopback only (DeviceConfig::gso says why).
  opt.gso = cfg.gso == DeviceConfig::Gso::kOn ||
            (cfg.gso == DeviceConfig::Gso::kAuto && is_loopback(cfg.netdev));
  return UdpPort::open(opt, counters, err);
}

}  // namespace uroce
