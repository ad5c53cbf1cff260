// The checklist's first step, the physical link: its speed and duplex, the NIC's own error
// counters, its PAUSE setting and PAUSE counters — what `ethtool`, `ethtool -S` and `ethtool -a`
// show. For a kernel interface doctor reads them itself (/sys/class/net, the ethtool ioctl); a
// DPDK port's NIC belongs to the process that runs it, which publishes them (ports/port.h,
// NicInfo; entries "nic_*"), and doctor reads that.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/stats_shm.h"
#include "ports/port.h"
#include "tools/doctor/report.h"

namespace uroce::doctor {

// The verdicts (pure). `source` says whose figures these are ("eth0", "the DPDK port net_… as
// process 42 reads it"). Three checks: device.speed, device.nic_errors, device.pause.
std::vector<Check> nic_checks(const NicInfo& n, const std::string& source);

// A published device's NIC figures; nullopt when its file has none (a kernel UDP port).
std::optional<NicInfo> nic_from_snapshot(const stats_shm::Snapshot& s);

// A kernel interface's figures: speed, duplex and statistics from sys_root/NETDEV (sysfs), the
// 802.3x PAUSE setting from the ethtool ioctl (when `ask_driver`; unknown where the driver has
// none, as veth). Counters the interface lacks read as 0.
NicInfo nic_from_netdev(const std::string& netdev, const std::string& sys_root = "/sys/class/net",
                        bool ask_driver = true);

}  // namespace uroce::doctor
