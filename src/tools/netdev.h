// What the `uroce` command reads about a kernel interface, for `uroce devices` and `uroce
// doctor`: its MTU, and the active IB MTU a device on it reports.
#pragma once

#include <cstdint>
#include <string>

namespace uroce::tools {

// The interface's MTU (SIOCGIFMTU); 0 when unknown.
uint32_t netdev_mtu(const std::string& netdev);

// The active IB MTU a device on this netdev reports: the largest of 4096..256 whose RoCEv2
// packets (IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ImmDt 4 + ICRC 4 around the payload) fit the
// interface MTU. The same rule as Device::open (src/engine/device.cc); 1500 when unknown.
uint32_t ib_mtu_for(uint32_t if_mtu);

}  // namespace uroce::tools
