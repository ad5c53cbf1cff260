// Device and fault-injection configuration, from the environment:
//   UROCE_DEVICES=name=addr|netdev[,name=…]   e.g. uroce0=127.0.0.2  or  uroce0=eth0
//   UROCE_FAULTS=loss=0.05,seed=7             see docs/configuration.md
// An empty variable counts as unset. Every device gets the same FaultConfig.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace uroce {

struct FaultConfig {
  double rx_loss = 0.0;  // probability of dropping each received packet
  uint64_t seed = 1;     // PRNG seed: the same seed drops the same packets
  bool enabled() const { return rx_loss > 0.0; }
};

struct DeviceConfig {
  std::string name;    // "uroce0"
  uint32_t ipv4 = 0;   // host byte order
  std::string netdev;  // interface the address belongs to, if known ("lo", "eth0")
  FaultConfig faults;
};

// Parses UROCE_DEVICES (or the default when unset: uroce0 on the IPv4 address of the first up,
// non-loopback interface, else 127.0.0.1) and UROCE_FAULTS. On a malformed value returns nullopt
// and a message naming the variable and the bad part.
std::optional<std::vector<DeviceConfig>> load_device_config(std::string* err);
std::optional<std::vector<DeviceConfig>> parse_devices(const std::string& spec, std::string* err);
std::optional<FaultConfig> parse_faults(const std::string& spec, std::string* err);

// The device used when UROCE_DEVICES is unset or empty.
DeviceConfig default_device_config();
// The first IPv4 address of interface `netdev`; nullopt and a message if it has none.
std::optional<uint32_t> resolve_netdev_ipv4(const std::string& netdev, std::string* err);
// "a.b.c.d" of a host-order address.
std::string format_ipv4(uint32_t ip);

}  // namespace uroce
