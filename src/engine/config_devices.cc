// UROCE_DEVICES (config.h, docs/configuration.md): the device list — name=address, name=netdev
// or name=dpdk(key=value;…), comma-separated — checked entry by entry (names, unicast addresses,
// nothing given twice), the interface an address lives on, and the default device when the
// variable is unset. A dpdk(…) body goes to the DPDK port's own keys (dpdk_port/options.h). Its
// own file: the only part of the configuration that asks the host (getifaddrs).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config.h"
#include "engine/config_values.h"

namespace uroce {

using config_values::kDevicesVar;
using config_values::set_err;

namespace {

// ibv_device.name is IBV_SYSFS_NAME_MAX (64) bytes including the terminator.
constexpr size_t kMaxNameLen = 63;

bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > kMaxNameLen) return false;
  for (char c : n) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

struct IfAddrs {
  ifaddrs* head = nullptr;
  IfAddrs() {
    if (getifaddrs(&head) != 0) head = nullptr;
  }
  ~IfAddrs() {
    if (head) freeifaddrs(head);
  }
  IfAddrs(const IfAddrs&) = delete;
  IfAddrs& operator=(const IfAddrs&) = delete;
};

uint32_t ipv4_of(const ifaddrs* ifa) {
  return ntohl(reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr)->sin_addr.s_addr);
}
bool is_ipv4(const ifaddrs* ifa) {
  return ifa->ifa_addr && ifa->ifa_addr->sa_family == AF_INET;
}
bool is_ipv6(const ifaddrs* ifa) {
  return ifa->ifa_addr && ifa->ifa_addr->sa_family == AF_INET6;
}
wire::IpAddr ipv6_of(const ifaddrs* ifa) {
  return wire::IpAddr::from_bytes(
      reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr)->sin6_addr.s6_addr);
}
// fe80::/10 (RFC 4291 2.5.6): meaningful only with the interface it is on.
bool is_link_local(const wire::IpAddr& a) {
  return a.bytes()[0] == 0xfe && (a.bytes()[1] & 0xc0) == 0x80;
}

std::string netdev_of(uint32_t ip);

// The interface an IPv6 address is configured on, "" if none.
std::string netdev_of6(const wire::IpAddr& ip, uint32_t scope_id) {
  IfAddrs ifs;
  for (ifaddrs* p = ifs.head; p; p = p->ifa_next) {
    if (!is_ipv6(p) || ipv6_of(p) != ip) continue;
    if (scope_id != 0 && if_nametoindex(p->ifa_name) != scope_id) continue;
    return p->ifa_name;
  }
  return {};
}

// An IPv6 device address as UROCE_DEVICES gives it: IPv6 text with, for a link-local address,
// "%ifname" (or "%index"). False and *why for anything else.
bool read_ipv6(std::string_view text, DeviceConfig* d, std::string* why) {
  std::string_view zone;
  if (const size_t pct = text.find('%'); pct != std::string_view::npos) {
    zone = text.substr(pct + 1);
    text = text.substr(0, pct);
  }
  const std::optional<wire::IpAddr> a = wire::IpAddr::parse(text);
  if (!a) {
    *why = std::string("bad IPv6 address '").append(text) + "'";
    return false;
  }
  if (a->is_v4()) {  // ::ffff:a.b.c.d is the IPv4 address
    d->ipv4 = a->v4();
    d->netdev = netdev_of(d->ipv4);
    return true;
  }
  const uint8_t first = a->bytes()[0];
  if (*a == wire::IpAddr{} || first == 0xff) {
    *why = "address " + a->to_string() + " is not unicast";
    return false;
  }
  uint32_t scope = 0;
  if (!zone.empty()) {
    const std::string z(zone);
    scope = if_nametoindex(z.c_str());
    if (scope == 0 && z.find_first_not_of("0123456789") == std::string::npos && z.size() < 10)
      scope = static_cast<uint32_t>(std::stoul(z));
    if (scope == 0) {
      *why = "no interface named '" + z + "' (the zone of " + a->to_string() + ")";
      return false;
    }
  } else if (is_link_local(*a)) {
    *why = "link-local address " + a->to_string() + " needs its interface: " + a->to_string() +
           "%ifname";
    return false;
  }
  d->ipv6 = *a;
  d->scope_id = is_link_local(*a) ? scope : 0;
  d->netdev = netdev_of6(*a, d->scope_id);
  if (d->netdev.empty() && scope != 0) {
    char name[IF_NAMESIZE] = {};
    if (if_indextoname(scope, name)) d->netdev = name;
  }
  return true;
}

// The interface an address belongs to: an exact match, else a loopback interface whose subnet
// holds it (127.0.0.2 is local through lo's 127.0.0.0/8 without being listed). "" if none.
std::string netdev_of(uint32_t ip) {
  IfAddrs ifs;
  for (ifaddrs* p = ifs.head; p; p = p->ifa_next)
    if (is_ipv4(p) && ipv4_of(p) == ip) return p->ifa_name;
  for (ifaddrs* p = ifs.head; p; p = p->ifa_next) {
    if (!is_ipv4(p) || !(p->ifa_flags & IFF_LOOPBACK) || !p->ifa_netmask) continue;
    uint32_t mask = ntohl(reinterpret_cast<const sockaddr_in*>(p->ifa_netmask)->sin_addr.s_addr);
    if ((ip & mask) == (ipv4_of(p) & mask)) return p->ifa_name;
  }
  return {};
}

}  // namespace

bool parse_dpdk_device(std::string_view body, DeviceConfig* d, std::string* err) {
  d->port = PortKind::kDpdk;
  d->netdev.clear();
  d->dpdk = dpdk::DpdkPortOptions{};
  if (!dpdk::parse_options(body, &d->dpdk, err)) return false;
  // The port frames either family itself (no socket, so no zone: a link-local address is
  // just an address on its one link).
  if (d->dpdk.ip.is_v4()) {
    d->ipv4 = d->dpdk.ip.v4();
    d->ipv6 = wire::IpAddr{};
  } else {
    d->ipv4 = 0;
    d->ipv6 = d->dpdk.ip;
    if (d->ipv6.bytes()[0] == 0xff) {
      *err = "ip " + d->ipv6.to_string() + " is not unicast";
      return false;
    }
  }
  d->dscp = d->dpdk.data_dscp;
  return true;
}

std::string format_ipv4(uint32_t ip) {
  return spec::ipv4_text(ip);
}

std::string format_device_addr(const DeviceConfig& d) {
  if (!d.is_ipv6()) return format_ipv4(d.ipv4);
  std::string s = d.ipv6.to_string();
  if (d.scope_id != 0) {
    char name[IF_NAMESIZE] = {};
    s.append("%").append(if_indextoname(d.scope_id, name) ? name : std::to_string(d.scope_id));
  }
  return s;
}

std::optional<wire::IpAddr> resolve_netdev_ipv6(const std::string& netdev, uint32_t* scope_id,
                                                std::string* err) {
  IfAddrs ifs;
  bool seen = false;
  std::optional<wire::IpAddr> link_local;
  for (ifaddrs* p = ifs.head; p; p = p->ifa_next) {
    if (netdev != p->ifa_name) continue;
    seen = true;
    if (!is_ipv6(p)) continue;
    const wire::IpAddr a = ipv6_of(p);
    if (!is_link_local(a)) {
      *scope_id = 0;
      return a;
    }
    if (!link_local) link_local = a;
  }
  if (link_local) {
    *scope_id = if_nametoindex(netdev.c_str());
    return link_local;
  }
  if (err)
    *err = seen ? "interface '" + netdev + "' has no IPv4 or IPv6 address"
                : "no interface named '" + netdev + "'";
  return std::nullopt;
}

std::optional<uint32_t> resolve_netdev_ipv4(const std::string& netdev, std::string* err) {
  IfAddrs ifs;
  bool seen = false;
  for (ifaddrs* p = ifs.head; p; p = p->ifa_next) {
    if (netdev != p->ifa_name) continue;
    seen = true;
    if (is_ipv4(p)) return ipv4_of(p);
  }
  if (err)
    *err = seen ? "interface '" + netdev + "' has no IPv4 address"
                : "no interface named '" + netdev + "'";
  return std::nullopt;
}

DeviceConfig default_device_config() {
  DeviceConfig d;
  d.name = "uroce0";
  IfAddrs ifs;
  for (ifaddrs* p = ifs.head; p; p = p->ifa_next) {
    if (!is_ipv4(p) || !(p->ifa_flags & IFF_UP) || (p->ifa_flags & IFF_LOOPBACK)) continue;
    d.ipv4 = ipv4_of(p);
    d.netdev = p->ifa_name;
    return d;
  }
  d.ipv4 = 0x7f000001;  // 127.0.0.1
  d.netdev = netdev_of(d.ipv4);
  return d;
}

std::optional<std::vector<DeviceConfig>> parse_devices(const std::string& text, std::string* err) {
  std::vector<DeviceConfig> out;
  std::set<wire::IpAddr> addrs;
  if (spec::trim(text).empty()) {
    set_err(err, kDevicesVar, "empty device list");
    return std::nullopt;
  }
  // Device names are the keys of this list; they are the user's, so there is no table, but a
  // name given twice is refused as a key given twice is everywhere.
  for (const spec::Entry& e : spec::entries(text, ',')) {
    if (e.key.empty() && !e.has_value) {
      set_err(err, kDevicesVar, "empty entry");
      return std::nullopt;
    }
    if (!e.has_value) {
      set_err(err, kDevicesVar,
              std::string("'").append(e.key).append("' is not name=address or name=netdev"));
      return std::nullopt;
    }
    const std::string_view name = e.key, value = e.value;
    if (!valid_name(name)) {
      set_err(err, kDevicesVar,
              std::string("bad device name '")
                  .append(name)
                  .append("' (1-63 characters of [A-Za-z0-9_.-])"));
      return std::nullopt;
    }
    if (value.empty()) {
      set_err(err, kDevicesVar,
              std::string("no address or netdev for device '").append(name) + "'");
      return std::nullopt;
    }
    DeviceConfig d;
    d.name = std::string(name);
    uint32_t ip = 0;
    if (value.substr(0, 5) == "dpdk(") {
      if (value.back() != ')') {
        set_err(err, kDevicesVar, "device '" + d.name + "': dpdk( without its closing ')'");
        return std::nullopt;
      }
      std::string why;
      if (!parse_dpdk_device(value.substr(5, value.size() - 6), &d, &why)) {
        set_err(err, kDevicesVar, "device '" + d.name + "': dpdk: " + why);
        return std::nullopt;
      }
    } else if (spec::read_ipv4(value, &ip)) {
      d.ipv4 = ip;
      d.netdev = netdev_of(ip);
    } else if (value.find(':') != std::string_view::npos) {
      std::string why;
      if (!read_ipv6(value, &d, &why)) {
        set_err(err, kDevicesVar, "device '" + d.name + "': " + why);
        return std::nullopt;
      }
    } else if (value.find_first_not_of("0123456789.") == std::string_view::npos) {
      // Looks like an address but is not a valid one (e.g. "10.0.0.256", "1.2.3").
      set_err(err, kDevicesVar, std::string("bad IPv4 address '").append(value) + "'");
      return std::nullopt;
    } else if (value.size() >= IFNAMSIZ) {
      set_err(err, kDevicesVar, std::string("netdev name '").append(value) + "' is too long");
      return std::nullopt;
    } else {
      // The interface's IPv4 address; an interface with none (an IPv6-only host) its IPv6 one.
      std::string why;
      const std::string nd(value);
      if (auto resolved = resolve_netdev_ipv4(nd, &why)) {
        d.ipv4 = *resolved;
      } else if (auto v6 = resolve_netdev_ipv6(nd, &d.scope_id, &why)) {
        d.ipv6 = *v6;
      } else {
        set_err(err, kDevicesVar, "device '" + d.name + "': " + why);
        return std::nullopt;
      }
      d.netdev = nd;
    }
    // A device needs one concrete unicast address to bind; INADDR_ANY, broadcast and multicast
    // addresses cannot carry RoCEv2 (its GID is the address).
    if (!d.is_ipv6() && (d.ipv4 == 0 || d.ipv4 == 0xffffffff || (d.ipv4 >> 28) == 0xe)) {
      set_err(err, kDevicesVar,
              "address " + format_ipv4(d.ipv4) + " of device '" + d.name + "' is not unicast");
      return std::nullopt;
    }
    for (const DeviceConfig& o : out) {
      if (o.name == d.name) {
        set_err(err, kDevicesVar, "device '" + d.name + "' given twice");
        return std::nullopt;
      }
    }
    if (!addrs.insert(d.addr()).second) {
      set_err(err, kDevicesVar, "address " + format_device_addr(d) + " used by two devices");
      return std::nullopt;
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace uroce
