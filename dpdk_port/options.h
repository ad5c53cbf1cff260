// A DPDK device's options and the keys that set them — the body of
// UROCE_DEVICES=name=dpdk(key=value;…), docs/configuration.md. The port declares and reads its
// own keys (one table, transport/spec/spec.h); the engine hands it the body as written. No DPDK
// header here, and built with or without DPDK, so a dpdk(…) device is checked (and `uroce config`
// shows it) on a build that cannot open it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "transport/spec/spec.h"
#include "transport/wire/ip.h"

namespace uroce::dpdk {

struct DpdkPortOptions {
  // The DPDK device: a vdev string ("net_memif0,role=server,socket=/tmp/m.sock",
  // "net_af_packet0,iface=veth0", "net_tap0,iface=dtap0", "net_ring0") or a PCI address
  // ("0000:03:00.0"; then `eal` must not hold --no-pci).
  std::string dev;
  // The device address: IPv4 (IPv4-mapped) or IPv6 — one family per device.
  wire::IpAddr ip;
  uint32_t prefix_len = 0;  // the subnet of `ip` (ip=a.b.c.d/N, ip=fd00::1/N); 0: all on-link
  // Next hop for addresses off the subnet, of the address's family; :: (unspecified) = none
  // (they fail to resolve).
  wire::IpAddr gateway;
  bool has_mac = false;  // mac= given (else the port's own MAC)
  std::array<uint8_t, 6> mac{};
  // Extra EAL arguments (eal=…, split on blanks), after uroce's own: --no-huge -m 256 --no-pci
  // --no-telemetry -l 0 --file-prefix=uroce<pid>. Only the first DPDK device of a process
  // initialises the EAL.
  std::vector<std::string> eal_args;
  uint16_t vlan = 0;       // 802.1Q VLAN id, 1..4094; 0 = untagged
  uint8_t priority = 3;    // 802.1p PCP of RoCE data on a VLAN (RoCE deployments: 3)
  uint8_t data_dscp = 26;  // DSCP of data packets (RoCE deployments' class)
  uint32_t mtu = 0;        // port MTU (IP datagram bytes) to set; 0 = the port's default
  // Static neighbours (neigh=ip@mac, repeatable): never resolved by ARP or neighbour discovery.
  struct Neighbour {
    wire::IpAddr ip;
    std::array<uint8_t, 6> mac{};
  };
  std::vector<Neighbour> neighbours;
  // RoCE v1 (EtherType 0x8915) at GID index 1 besides RoCEv2 at index 0 (roce_v1=1).
  bool roce_v1 = false;
  // Tests only (no key): send payloads by reference (PortCaps::tx_gather_min) on a PMD that does
  // not copy frames as it sends them — net_ring in one process, whose other end reads each frame
  // while the test still holds the payload. uroce turns gathering on by itself only where it is
  // safe (memif in copy mode).
  bool force_tx_gather = false;
  // Share the device with the other processes of the user that open it (share=1): a host process
  // (uroce-dpdk-host) owns the port and each process is its client (hosted_port.h).
  bool share = false;
  // The body as written (parse_options): what a client hands the host it starts.
  std::string body;
};

// Every key of a dpdk(…) body.
const spec::Schema<DpdkPortOptions>& options_schema();

// Reads a dpdk(…) body ("dev=…;ip=…;…": fields separated by ';', so `dev` keeps DPDK's own
// commas; empty fields are ignored) into *o. False and a message naming the key and the value
// on error ("vlan '4095' is not a VLAN id 1..4094", "missing key 'ip' (…)").
bool parse_options(std::string_view body, DpdkPortOptions* o, std::string* err);

}  // namespace uroce::dpdk
