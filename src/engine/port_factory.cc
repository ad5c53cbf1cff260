#include "engine/port_factory.h"

#include "ports/udp/udp_port.h"

namespace uroce {

std::unique_ptr<Port> open_port(const DeviceConfig& cfg, PortCounters& counters, std::string* err) {
  UdpPortOptions opt;
  opt.ipv4 = cfg.ipv4;
  opt.netdev = cfg.netdev;
  opt.gso = cfg.gso;
  return UdpPort::open(opt, counters, err);
}

}  // namespace uroce
