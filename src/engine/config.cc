// Parsing of UROCE_DEVICES, UROCE_FAULTS and UROCE_CC. Every malformed value is reported with the
// variable and the offending token; nothing here throws or aborts on bad input.
#include "engine/config.h"

#include "transport/cc/parse.h"

#include <unistd.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <set>
#include <string_view>

namespace uroce {
namespace {

constexpr std::string_view kDevicesVar = "UROCE_DEVICES";
constexpr std::string_view kFaultsVar = "UROCE_FAULTS";
constexpr std::string_view kStatsVar = "UROCE_STATS";
constexpr std::string_view kPcapVar = "UROCE_PCAP";
constexpr std::string_view kEarlyRetransmitVar = "UROCE_EARLY_RETRANSMIT";
constexpr std::string_view kGsoVar = "UROCE_GSO";
constexpr std::string_view kShareVar = "UROCE_SHARE";
constexpr std::string_view kIcrcVar = "UROCE_ICRC";
constexpr std::string_view kCcVar = "UROCE_CC";
// ibv_device.name is IBV_SYSFS_NAME_MAX (64) bytes including the terminator.
constexpr size_t kMaxNameLen = 63;

void set_err(std::string* err, std::string_view var, const std::string& msg) {
  if (err) *err = std::string(var) + ": " + msg;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Splits on `sep` outside parentheses, keeping empty pieces, so "a,,b" and "a," can be
// reported and a dpdk(…) body keeps its commas.
std::vector<std::string_view> split_top(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && s[i] == '(') ++depth;
    if (i < s.size() && s[i] == ')' && depth > 0) --depth;
    if (i == s.size() || (s[i] == sep && depth == 0)) {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  return out;
}

std::vector<std::string_view> split_commas(std::string_view s) {
  return split_top(s, ',');
}

// "aa:bb:cc:dd:ee:ff" (hex, case-insensitive).
bool parse_mac(std::string_view s, uint8_t out[6]) {
  if (s.size() != 17) return false;
  for (int i = 0; i < 6; ++i) {
    uint8_t v = 0;
    for (int k = 0; k < 2; ++k) {
      char c = s[i * 3 + k];
      v = static_cast<uint8_t>(v << 4);
      if (c >= '0' && c <= '9')
        v |= static_cast<uint8_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<uint8_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<uint8_t>(c - 'A' + 10);
      else
        return false;
    }
    if (i < 5 && s[i * 3 + 2] != ':') return false;
    out[i] = v;
  }
  return true;
}

// A decimal integer in [lo, hi].
bool parse_uint(std::string_view s, uint64_t lo, uint64_t hi, uint64_t* out) {
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string_view::npos)
    return false;
  uint64_t v = std::stoull(std::string(s));
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > kMaxNameLen) return false;
  for (char c : n) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// Strict dotted-quad IPv4 (inet_pton refuses "1.2.3", octal and hex forms). Host byte order.
std::optional<uint32_t> parse_ipv4(std::string_view s) {
  if (s.size() > 15 || s.find('\0') != std::string_view::npos) return std::nullopt;
  std::string tmp(s);
  in_addr a{};
  if (inet_pton(AF_INET, tmp.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
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
  d->dscp = 26;
  d->netdev.clear();
  DpdkDeviceConfig& c = d->dpdk;
  bool have_ip = false;
  for (std::string_view field : split_top(body, ';')) {
    if (field.empty()) continue;
    size_t eq = field.find('=');
    std::string_view key = trim(field.substr(0, eq));
    std::string_view val = eq == std::string_view::npos ? "" : trim(field.substr(eq + 1));
    auto bad = [&](const std::string& why) {
      if (err) *err = "dpdk " + std::string(key) + "='" + std::string(val) + "': " + why;
      return false;
    };
    uint64_t n = 0;
    if (eq == std::string_view::npos) {
      if (err) *err = "dpdk field '" + std::string(field) + "' is not key=value";
      return false;
    } else if (key == "dev") {
      if (val.empty()) return bad("empty");
      c.dev = std::string(val);
    } else if (key == "ip") {
      std::string_view addr = val;
      size_t slash = val.find('/');
      if (slash != std::string_view::npos) {
        if (!parse_uint(val.substr(slash + 1), 1, 32, &n)) return bad("prefix is not 1..32");
        c.prefix_len = static_cast<uint32_t>(n);
        addr = val.substr(0, slash);
      }
      auto ip = parse_ipv4(addr);
      if (!ip) return bad("not an IPv4 address");
      d->ipv4 = *ip;
      have_ip = true;
    } else if (key == "gw") {
      auto ip = parse_ipv4(val);
      if (!ip) return bad("not an IPv4 address");
      c.gateway = *ip;
    } else if (key == "mac") {
      if (!parse_mac(val, c.mac)) return bad("not a MAC address aa:bb:cc:dd:ee:ff");
      if (c.mac[0] & 1) return bad("a multicast MAC address");
      c.has_mac = true;
    } else if (key == "eal") {
      std::string_view rest = val;
      while (!rest.empty()) {
        size_t sp = rest.find(' ');
        std::string_view arg = rest.substr(0, sp);
        if (!arg.empty()) c.eal_args.emplace_back(arg);
        if (sp == std::string_view::npos) break;
        rest.remove_prefix(sp + 1);
      }
    } else if (key == "vlan") {
      if (!parse_uint(val, 1, 4094, &n)) return bad("not a VLAN id 1..4094");
      c.vlan = static_cast<uint16_t>(n);
    } else if (key == "prio") {
      if (!parse_uint(val, 0, 7, &n)) return bad("not an 802.1p priority 0..7");
      c.priority = static_cast<uint8_t>(n);
    } else if (key == "dscp") {
      if (!parse_uint(val, 0, 63, &n)) return bad("not a DSCP 0..63");
      d->dscp = static_cast<uint8_t>(n);
    } else if (key == "mtu") {
      if (!parse_uint(val, 576, 9702, &n)) return bad("not an MTU 576..9702");
      c.mtu = static_cast<uint32_t>(n);
    } else if (key == "neigh") {
      size_t at = val.find('@');
      DpdkDeviceConfig::Neighbour nb;
      auto ip = parse_ipv4(val.substr(0, at));
      if (at == std::string_view::npos || !ip || !parse_mac(val.substr(at + 1), nb.mac))
        return bad("not ip@aa:bb:cc:dd:ee:ff");
      nb.ip = *ip;
      c.neighbours.push_back(nb);
    } else if (key == "roce_v1") {
      if (val != "0" && val != "1") return bad("not 0 or 1");
      c.roce_v1 = val == "1";
    } else {
      if (err)
        *err = "unknown dpdk key '" + std::string(key) +
               "' (dev, ip, gw, mac, eal, vlan, prio, dscp, mtu, neigh, roce_v1)";
      return false;
    }
  }
  if (c.dev.empty()) {
    if (err) *err = "dpdk device without dev= (a vdev string or a PCI address)";
    return false;
  }
  if (!have_ip) {
    if (err) *err = "dpdk device without ip= (its IPv4 address)";
    return false;
  }
  return true;
}

std::string format_ipv4(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 0xff) + "." +
         std::to_string((ip >> 8) & 0xff) + "." + std::to_string(ip & 0xff);
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

std::optional<std::vector<DeviceConfig>> parse_devices(const std::string& spec, std::string* err) {
  std::vector<DeviceConfig> out;
  std::set<std::string> names;
  std::set<uint32_t> addrs;
  if (trim(spec).empty()) {
    set_err(err, kDevicesVar, "empty device list");
    return std::nullopt;
  }
  for (std::string_view entry : split_commas(spec)) {
    if (entry.empty()) {
      set_err(err, kDevicesVar, "empty entry in '" + spec + "'");
      return std::nullopt;
    }
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) {
      set_err(err, kDevicesVar, "'" + std::string(entry) + "' is not name=address or name=netdev");
      return std::nullopt;
    }
    std::string_view name = trim(entry.substr(0, eq));
    std::string_view value = trim(entry.substr(eq + 1));
    if (!valid_name(name)) {
      set_err(err, kDevicesVar,
              "bad device name '" + std::string(name) + "' in '" + std::string(entry) +
                  "' (1-63 characters of [A-Za-z0-9_.-])");
      return std::nullopt;
    }
    if (value.empty()) {
      set_err(err, kDevicesVar, "no address or netdev for device '" + std::string(name) + "'");
      return std::nullopt;
    }
    DeviceConfig d;
    d.name = std::string(name);
    if (value.substr(0, 5) == "dpdk(") {
      if (value.back() != ')') {
        set_err(err, kDevicesVar, "device '" + d.name + "': dpdk( without its closing ')'");
        return std::nullopt;
      }
      std::string why;
      if (!parse_dpdk_device(value.substr(5, value.size() - 6), &d, &why)) {
        set_err(err, kDevicesVar, "device '" + d.name + "': " + why);
        return std::nullopt;
      }
    } else if (auto ip = parse_ipv4(value)) {
      d.ipv4 = *ip;
      d.netdev = netdev_of(*ip);
    } else if (value.find_first_not_of("0123456789.") == std::string_view::npos) {
      // Looks like an address but is not a valid one (e.g. "10.0.0.256", "1.2.3").
      set_err(err, kDevicesVar, "bad IPv4 address '" + std::string(value) + "'");
      return std::nullopt;
    } else if (value.size() >= IFNAMSIZ) {
      set_err(err, kDevicesVar, "netdev name '" + std::string(value) + "' is too long");
      return std::nullopt;
    } else {
      std::string why;
      auto resolved = resolve_netdev_ipv4(std::string(value), &why);
      if (!resolved) {
        set_err(err, kDevicesVar, "device '" + std::string(name) + "': " + why);
        return std::nullopt;
      }
      d.ipv4 = *resolved;
      d.netdev = std::string(value);
    }
    // A device needs one concrete unicast address to bind; INADDR_ANY, broadcast and multicast
    // addresses cannot carry RoCEv2 (its GID is the address).
    if (d.ipv4 == 0 || d.ipv4 == 0xffffffff || (d.ipv4 >> 28) == 0xe) {
      set_err(err, kDevicesVar,
              "address " + format_ipv4(d.ipv4) + " of device '" + d.name + "' is not unicast");
      return std::nullopt;
    }
    if (!names.insert(d.name).second) {
      set_err(err, kDevicesVar, "device name '" + d.name + "' given twice");
      return std::nullopt;
    }
    if (!addrs.insert(d.ipv4).second) {
      set_err(err, kDevicesVar, "address " + format_ipv4(d.ipv4) + " used by two devices");
      return std::nullopt;
    }
    out.push_back(std::move(d));
  }
  return out;
}

namespace {

// A probability: plain decimal in [0, 1]. strtod accepts "nan", "inf", hex floats and leading
// blanks; only plain decimals pass.
bool parse_probability(const std::string& name, const std::string& value, double* out,
                       std::string* err) {
  bool plain = !value.empty() && value.find_first_not_of("0123456789.eE+-") == std::string::npos;
  char* end = nullptr;
  errno = 0;
  double p = plain ? std::strtod(value.c_str(), &end) : 0.0;
  if (!plain || errno != 0 || end != value.c_str() + value.size() || !std::isfinite(p)) {
    set_err(err, kFaultsVar, name + " '" + value + "' is not a number");
    return false;
  }
  if (p < 0.0 || p > 1.0) {
    set_err(err, kFaultsVar, name + " '" + value + "' is out of range [0, 1]");
    return false;
  }
  *out = p;
  return true;
}

// A small count in [1, max]: depth, len, bits.
bool parse_count(const std::string& name, const std::string& value, uint32_t max, uint32_t* out,
                 std::string* err) {
  if (value.empty() || value.size() > 9 ||
      value.find_first_not_of("0123456789") != std::string::npos) {
    set_err(err, kFaultsVar, name + " '" + value + "' is not a positive integer");
    return false;
  }
  unsigned long v = std::strtoul(value.c_str(), nullptr, 10);
  if (v < 1 || v > max) {
    set_err(err, kFaultsVar,
            name + " '" + value + "' is out of range [1, " + std::to_string(max) + "]");
    return false;
  }
  *out = static_cast<uint32_t>(v);
  return true;
}

// A duration: a plain decimal with a unit (ns, us, ms, s), at most 10 s. The unit is required:
// "delay=5" could mean anything.
bool parse_duration(const std::string& name, const std::string& value, uint64_t* out_ns,
                    std::string* err) {
  size_t num_end = value.find_first_not_of("0123456789.");
  std::string num = value.substr(0, num_end);
  std::string unit = num_end == std::string::npos ? "" : value.substr(num_end);
  double scale = 0;
  if (unit == "ns")
    scale = 1;
  else if (unit == "us")
    scale = 1e3;
  else if (unit == "ms")
    scale = 1e6;
  else if (unit == "s")
    scale = 1e9;
  char* end = nullptr;
  double v = num.empty() ? -1 : std::strtod(num.c_str(), &end);
  if (num.empty() || end != num.c_str() + num.size()) {
    set_err(err, kFaultsVar, name + " '" + value + "' is not a duration (e.g. 500us, 2ms)");
    return false;
  }
  if (scale == 0) {
    set_err(err, kFaultsVar, name + " '" + value + "' needs a unit: ns, us, ms or s");
    return false;
  }
  double ns = v * scale;
  if (ns > 10e9) {
    set_err(err, kFaultsVar, name + " '" + value + "' is out of range [0, 10s]");
    return false;
  }
  *out_ns = static_cast<uint64_t>(ns + 0.5);
  return true;
}

// A rate: a plain decimal with a unit, kbit, mbit or gbit (10^3, 10^6, 10^9 bit/s, as tc writes
// them), from 1 kbit to 1000 gbit.
bool parse_rate(const std::string& name, const std::string& value, uint64_t* out_bps,
                std::string* err) {
  size_t num_end = value.find_first_not_of("0123456789.");
  std::string num = value.substr(0, num_end);
  std::string unit = num_end == std::string::npos ? "" : value.substr(num_end);
  double scale = unit == "kbit" ? 1e3 : unit == "mbit" ? 1e6 : unit == "gbit" ? 1e9 : 0;
  char* end = nullptr;
  double v = num.empty() ? -1 : std::strtod(num.c_str(), &end);
  if (num.empty() || end != num.c_str() + num.size()) {
    set_err(err, kFaultsVar, name + " '" + value + "' is not a rate (e.g. 800mbit, 10gbit)");
    return false;
  }
  if (scale == 0) {
    set_err(err, kFaultsVar, name + " '" + value + "' needs a unit: kbit, mbit or gbit");
    return false;
  }
  const double bps = v * scale;
  if (bps < 1e3 || bps > 1e12) {
    set_err(err, kFaultsVar, name + " '" + value + "' is out of range [1kbit, 1000gbit]");
    return false;
  }
  *out_bps = static_cast<uint64_t>(bps + 0.5);
  return true;
}

// A size in bytes: an unsigned decimal, optionally with k (KiB) or m (MiB), at most 1 GiB.
bool parse_size(const std::string& name, const std::string& value, uint64_t* out,
                std::string* err) {
  std::string num = value;
  uint64_t scale = 1;
  if (!num.empty() && (num.back() == 'k' || num.back() == 'm')) {
    scale = num.back() == 'k' ? 1024 : 1024 * 1024;
    num.pop_back();
  }
  if (num.empty() || num.size() > 10 || num.find_first_not_of("0123456789") != std::string::npos) {
    set_err(err, kFaultsVar, name + " '" + value + "' is not a size (bytes, or with k or m)");
    return false;
  }
  const uint64_t v = std::stoull(num) * scale;
  if (v > (uint64_t{1} << 30)) {
    set_err(err, kFaultsVar, name + " '" + value + "' is out of range [0, 1024m]");
    return false;
  }
  *out = v;
  return true;
}

// Splits on ':' keeping empty pieces.
std::vector<std::string> split_colons(std::string_view s) {
  std::vector<std::string> out;
  for (;;) {
    size_t c = s.find(':');
    out.emplace_back(trim(s.substr(0, c)));
    if (c == std::string_view::npos) break;
    s.remove_prefix(c + 1);
  }
  return out;
}

// One fault entry without its direction prefix: kind=value[:param=value...]. `name` is the key as
// written (for messages).
bool parse_fault_entry(const std::string& name, const std::string& kind,
                       const std::vector<std::string>& parts, FaultSpec& spec, double* loss,
                       std::string* err) {
  // parts[0] is the main value; the rest are param=value.
  auto params_ok = [&](std::initializer_list<const char*> allowed, auto&& apply) {
    std::set<std::string> seen;
    for (size_t i = 1; i < parts.size(); ++i) {
      size_t eq = parts[i].find('=');
      if (parts[i].empty() || eq == std::string::npos) {
        set_err(err, kFaultsVar, name + ": '" + parts[i] + "' is not param=value");
        return false;
      }
      std::string p(trim(std::string_view(parts[i]).substr(0, eq)));
      std::string v(trim(std::string_view(parts[i]).substr(eq + 1)));
      bool known = false;
      for (const char* a : allowed) known |= p == a;
      if (!known) {
        std::string list;
        for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
        set_err(err, kFaultsVar,
                name + ": unknown parameter '" + p + "'" +
                    (list.empty() ? " (it takes none)" : " (known: " + list + ")"));
        return false;
      }
      if (!seen.insert(p).second) {
        set_err(err, kFaultsVar, name + ": parameter '" + p + "' given twice");
        return false;
      }
      if (!apply(p, v)) return false;
    }
    return true;
  };
  const std::string& value = parts[0];
  if (kind == "loss") {
    return parse_probability(name, value, loss, err) &&
           params_ok({}, [](const std::string&, const std::string&) { return true; });
  }
  if (kind == "ce") {
    return parse_probability(name, value, &spec.ce, err) &&
           params_ok({}, [](const std::string&, const std::string&) { return true; });
  }
  if (kind == "dup") {
    return parse_probability(name, value, &spec.dup, err) &&
           params_ok({}, [](const std::string&, const std::string&) { return true; });
  }
  if (kind == "burst") {
    return parse_probability(name, value, &spec.burst, err) &&
           params_ok({"len"}, [&](const std::string&, const std::string& v) {
             return parse_count(name + ":len", v, 1000, &spec.burst_len, err);
           });
  }
  if (kind == "corrupt") {
    return parse_probability(name, value, &spec.corrupt, err) &&
           params_ok({"bits"}, [&](const std::string&, const std::string& v) {
             return parse_count(name + ":bits", v, 64, &spec.corrupt_bits, err);
           });
  }
  if (kind == "reorder") {
    return parse_probability(name, value, &spec.reorder, err) &&
           params_ok({"depth"}, [&](const std::string&, const std::string& v) {
             return parse_count(name + ":depth", v, 1000, &spec.reorder_depth, err);
           });
  }
  if (kind == "delay") {
    return parse_duration(name, value, &spec.delay_ns, err) &&
           params_ok({"jitter"}, [&](const std::string&, const std::string& v) {
             return parse_duration(name + ":jitter", v, &spec.jitter_ns, err);
           });
  }
  if (kind == "queue") {
    if (!parse_rate(name, value, &spec.queue_bps, err) ||
        !params_ok({"buffer", "kmin", "kmax", "pmax", "mark"}, [&](const std::string& p,
                                                                   const std::string& v) {
          if (p == "pmax") return parse_probability(name + ":pmax", v, &spec.queue_pmax, err);
          if (p == "mark") {
            if (v != "enqueue" && v != "dequeue") {
              set_err(err, kFaultsVar, name + ":mark '" + v + "' is not enqueue or dequeue");
              return false;
            }
            spec.queue_mark_dequeue = v == "dequeue";
            return true;
          }
          uint64_t* field = p == "buffer" ? &spec.queue_buffer
                            : p == "kmin" ? &spec.queue_kmin
                                          : &spec.queue_kmax;
          return parse_size(name + ":" + p, v, field, err);
        })) {
      return false;
    }
    if (spec.queue_kmin > spec.queue_kmax) {
      set_err(err, kFaultsVar, name + ": kmin must not exceed kmax");
      return false;
    }
    return true;
  }
  set_err(err, kFaultsVar,
          "unknown key '" + name + "' (known: [rx.|tx.]loss, burst, corrupt, dup, reorder, " +
              "delay; rx.queue, rx.ce; seed)");
  return false;
}

}  // namespace

std::optional<FaultConfig> parse_faults(const std::string& spec, std::string* err) {
  FaultConfig f;
  if (trim(spec).empty()) return f;
  std::set<std::string> seen;  // canonical keys: "rx.loss", "tx.dup", "seed"
  for (std::string_view entry : split_commas(spec)) {
    if (entry.empty()) {
      set_err(err, kFaultsVar, "empty entry in '" + spec + "'");
      return std::nullopt;
    }
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos) {
      set_err(err, kFaultsVar, "'" + std::string(entry) + "' is not key=value");
      return std::nullopt;
    }
    std::string key(trim(entry.substr(0, eq)));
    std::string value(trim(entry.substr(eq + 1)));
    if (key == "seed") {
      if (!seen.insert(key).second) {
        set_err(err, kFaultsVar, "key 'seed' given twice");
        return std::nullopt;
      }
      // Decimal only; strtoull would accept "-1" (as 2^64-1) and leading blanks.
      if (value.empty() || value.size() > 20 ||
          value.find_first_not_of("0123456789") != std::string::npos) {
        set_err(err, kFaultsVar, "seed '" + value + "' is not an unsigned decimal integer");
        return std::nullopt;
      }
      errno = 0;
      unsigned long long s = std::strtoull(value.c_str(), nullptr, 10);
      if (errno == ERANGE) {
        set_err(err, kFaultsVar, "seed '" + value + "' is out of range [0, 2^64)");
        return std::nullopt;
      }
      f.seed = s;
      continue;
    }
    // Plain keys apply to receive, as UROCE_FAULTS always did.
    bool tx = key.starts_with("tx.");
    std::string kind = (tx || key.starts_with("rx.")) ? key.substr(3) : key;
    std::string canonical = (tx ? "tx." : "rx.") + kind;
    if (!seen.insert(canonical).second) {
      set_err(err, kFaultsVar,
              "key '" + key + "' given twice" +
                  (canonical == key ? "" : " (plain keys mean receive: " + canonical + ")"));
      return std::nullopt;
    }
    if (tx && kind == "queue") {
      set_err(err, kFaultsVar,
              "'" + key + "': the switch queue models a device's receive side (rx.queue)");
      return std::nullopt;
    }
    if (tx && kind == "ce") {
      set_err(err, kFaultsVar, "'" + key + "': CE marking is applied on receive (rx.ce)");
      return std::nullopt;
    }
    FaultSpec& s = tx ? f.tx : f.rx;
    double* loss = tx ? &f.tx.loss : &f.rx_loss;
    if (!parse_fault_entry(key, kind, split_colons(value), s, loss, err)) return std::nullopt;
  }
  return f;
}

std::string expand_pcap_path(const std::string& pattern, const std::string& device,
                             bool several_devices) {
  std::string out;
  bool named = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'p' || c == 'd' || c == '%') {
        ++i;
        if (c == 'p') out += std::to_string(getpid());
        if (c == 'd') {
          out += device;
          named = true;
        }
        if (c == '%') out += '%';
        continue;
      }
    }
    out += pattern[i];
  }
  if (several_devices && !named) {
    // One file per device: insert the name before the extension of the last path component.
    size_t slash = out.rfind('/');
    size_t dot = out.rfind('.');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) dot = out.size();
    out.insert(dot, "." + device);
  }
  return out;
}

bool apply_cc(const std::string& value, std::vector<DeviceConfig>& devices, std::string* err) {
  namespace cc = transport::cc;
  std::optional<cc::CcConfig> all;
  std::vector<std::pair<DeviceConfig*, cc::CcConfig>> per_device;
  std::string_view rest = value;
  for (;;) {
    const size_t semi = rest.find(';');
    const std::string_view section = trim(rest.substr(0, semi));
    if (section.empty()) {
      set_err(err, kCcVar, "empty section");
      return false;
    }
    std::string_view spec = section;
    DeviceConfig* dev = nullptr;
    const size_t colon = section.find(':');
    if (colon != std::string_view::npos) {
      const std::string_view name = trim(section.substr(0, colon));
      spec = trim(section.substr(colon + 1));
      for (DeviceConfig& d : devices) {
        if (d.name == name) dev = &d;
      }
      if (dev == nullptr) {
        set_err(err, kCcVar, "no device '" + std::string(name) + "' (UROCE_DEVICES names them)");
        return false;
      }
      for (const auto& [d, c] : per_device) {
        if (d == dev) {
          set_err(err, kCcVar, "device '" + std::string(name) + "' given twice");
          return false;
        }
      }
    } else if (all) {
      set_err(err, kCcVar, "more than one section without a device name");
      return false;
    }
    std::string e;
    std::optional<cc::CcConfig> c = cc::parse_cc(spec, &e);
    if (!c) {
      set_err(err, kCcVar, (dev ? dev->name + ": " : std::string()) + e);
      return false;
    }
    if (dev) {
      per_device.emplace_back(dev, *c);
    } else {
      all = *c;
    }
    if (semi == std::string_view::npos) break;
    rest.remove_prefix(semi + 1);
  }
  for (DeviceConfig& d : devices) d.cc = all ? *all : cc::CcConfig{};
  for (const auto& [d, c] : per_device) d->cc = c;
  return true;
}

std::optional<std::vector<DeviceConfig>> load_device_config(std::string* err) {
  const char* devs = std::getenv(std::string(kDevicesVar).c_str());
  const char* faults = std::getenv(std::string(kFaultsVar).c_str());
  std::vector<DeviceConfig> out;
  // An empty variable counts as unset, as shells make "VAR=" easy to leave behind.
  if (devs && *devs) {
    auto parsed = parse_devices(devs, err);
    if (!parsed) return std::nullopt;
    out = std::move(*parsed);
  } else {
    out.push_back(default_device_config());
  }
  auto f = parse_faults(faults ? faults : "", err);
  if (!f) return std::nullopt;
  for (auto& d : out) d.faults = *f;

  const char* stats = std::getenv(std::string(kStatsVar).c_str());
  std::string_view sv = stats ? stats : "";
  if (sv != "" && sv != "0" && sv != "1") {
    set_err(err, kStatsVar, "'" + std::string(sv) + "' is not 0 or 1");
    return std::nullopt;
  }
  const char* er = std::getenv(std::string(kEarlyRetransmitVar).c_str());
  std::string_view erv = er ? er : "";
  if (erv != "" && erv != "0" && erv != "1") {
    set_err(err, kEarlyRetransmitVar, "'" + std::string(erv) + "' is not 0 or 1");
    return std::nullopt;
  }
  const char* gso = std::getenv(std::string(kGsoVar).c_str());
  std::string_view gv = gso ? gso : "";
  if (gv != "" && gv != "0" && gv != "1" && gv != "auto") {
    set_err(err, kGsoVar, "'" + std::string(gv) + "' is not 0, 1 or auto");
    return std::nullopt;
  }
  const char* share = std::getenv(std::string(kShareVar).c_str());
  std::string_view shv = share ? share : "";
  if (shv != "" && shv != "0" && shv != "1") {
    set_err(err, kShareVar, "'" + std::string(shv) + "' is not 0 or 1");
    return std::nullopt;
  }
  const char* icrc = std::getenv(std::string(kIcrcVar).c_str());
  const std::string_view iv = icrc ? icrc : "";
  const std::optional<wire::IcrcRoutine> routine = wire::parse_icrc_routine(iv);
  if (!routine) {
    set_err(err, kIcrcVar, "'" + std::string(iv) + "' is not auto, pclmul, isal or zlib");
    return std::nullopt;
  }
  if (!wire::icrc_routine_available(*routine)) {
    set_err(err, kIcrcVar,
            "'" + std::string(iv) +
                "' is not available here: it needs a CPU with PCLMULQDQ and a libisal that exports "
                "crc32_gzip_refl_by8_02 or crc32_gzip_refl_by8");
    return std::nullopt;
  }
  const char* ccv = std::getenv(std::string(kCcVar).c_str());
  if (ccv && *ccv && !apply_cc(ccv, out, err)) return std::nullopt;
  const char* pcap = std::getenv(std::string(kPcapVar).c_str());
  for (auto& d : out) {
    d.gso = gv == "1"   ? DeviceConfig::Gso::kOn
            : gv == "0" ? DeviceConfig::Gso::kOff
                        : DeviceConfig::Gso::kAuto;
    d.print_stats = sv == "1";
    d.early_retransmit = erv != "0";
    d.share = shv != "0";
    d.icrc = *routine;
    if (pcap && *pcap) d.pcap_path = expand_pcap_path(pcap, d.name, out.size() > 1);
  }
  return out;
}

}  // namespace uroce
