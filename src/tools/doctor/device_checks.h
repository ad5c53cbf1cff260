// The device half of `uroce doctor`: is the configuration sane (UROCE_DEVICES through the one
// parser every uroce process uses, engine/config.h), and for each device the checks a RoCE
// engineer makes of an RNIC's port — address on an interface, link, MTU, GID, UDP 4791 free or
// held by uroce, and the physical link (nic_checks.h: speed, the NIC's errors, PAUSE). A DPDK
// port is seen only through its configuration and, when a process runs it, through what that
// process publishes (its link, and its NIC's figures): doctor never takes a port from its
// process.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/config.h"
#include "tools/doctor/report.h"
#include "tools/qp_view.h"

namespace uroce::doctor {

// UROCE_DEVICES and its neighbours: the parse (a failure is a failed check) and misspelt
// UROCE_* variables. `envp` as `environ`. Returns the devices when the parse succeeded.
std::optional<std::vector<DeviceConfig>> check_config(const char* const* envp,
                                                      std::vector<Check>& out);

// The checks of one device; `published`: the live processes' files (for who holds the device,
// and a DPDK port's link as its process sees it).
std::vector<Check> check_device(const DeviceConfig& c, const tools::Published& published);

// ---- verdicts (pure) -----------------------------------------------------------------------
// The interface MTU against RoCE's: the active IB MTU it gives the device, and whether a
// 4096-byte RoCE MTU fits (an interface MTU of at least 4160). `fix`: how to raise it, when
// not `ip link set dev NETDEV mtu 9000`. ipv6: the device is on an IPv6 address, whose 40-byte
// header leaves 20 bytes less for RoCE (src/engine/device.cc gives it the active MTU of an
// interface 20 bytes smaller).
Check mtu_verdict_device(const std::string& netdev, uint32_t if_mtu, const std::string& fix = {},
                         bool ipv6 = false);

}  // namespace uroce::doctor
