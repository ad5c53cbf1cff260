// The DPDK port's public face: options and a factory, with no DPDK header in sight, so the
// engine (and everything else) builds without DPDK's compiler flags. See dpdk_port.h.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ports/port.h"

namespace uroce::dpdk {

struct DpdkPortOptions {
  std::string dev;  // vdev string or PCI address (DpdkDeviceConfig::dev)
  uint32_t ipv4 = 0;
  uint32_t prefix_len = 0;  // 0: every address on-link
  uint32_t gateway = 0;
  bool has_mac = false;
  std::array<uint8_t, 6> mac{};
  std::vector<std::string> eal_args;
  uint16_t vlan = 0;
  uint8_t priority = 3;  // PCP of data packets on a VLAN
  uint8_t data_dscp = 26;
  uint32_t mtu = 0;
  struct Neighbour {
    uint32_t ip = 0;
    std::array<uint8_t, 6> mac{};
  };
  std::vector<Neighbour> neighbours;
  bool roce_v1 = false;
  // Tests only (no configuration key): send payloads by reference (PortCaps::tx_gather_min) on a
  // PMD that does not copy frames as it sends them — net_ring in one process, whose other end reads
  // each frame while the test still holds the payload. uroce turns gathering on by itself only
  // where it is safe (memif in copy mode).
  bool force_tx_gather = false;
};

// Opens (probes, configures, starts) the DPDK port; initialises the EAL first if needed.
// nullptr and *err naming what failed.
std::unique_ptr<Port> open_port(const DpdkPortOptions& opt, PortCounters& counters,
                                std::string* err);

// True when uroce was built with DPDK (always, where this header's library is linked).
constexpr bool kAvailable = true;

}  // namespace uroce::dpdk
