// The keys of a dpdk(…) device (options.h): one row each, in the order docs/configuration.md
// lists them.
#include "dpdk_port/options.h"

#include <optional>
#include <type_traits>

namespace uroce::dpdk {
namespace {

using Key = spec::Key<DpdkPortOptions>;

// A key whose value is a decimal integer in [lo, hi], stored in the field `F` maps to.
template <typename F>
Key uint_key(const char* name, uint64_t lo, uint64_t hi, const char* what, F field, const char* def,
             const char* doc) {
  return Key{.name = name,
             .set =
                 [=](DpdkPortOptions& o, std::string_view v, std::string* why) {
                   uint64_t n = 0;
                   if (!spec::read_uint(v, lo, hi, &n)) {
                     *why = what;
                     return false;
                   }
                   field(o) = static_cast<std::remove_reference_t<decltype(field(o))>>(n);
                   return true;
                 },
             .get = [=](const DpdkPortOptions& o) { return std::to_string(field(o)); },
             .def = def,
             .doc = doc};
}

spec::Schema<DpdkPortOptions> make_schema() {
  spec::Schema<DpdkPortOptions> s;
  std::vector<Key>& k = s.keys;
  k.push_back(Key{.name = "dev",
                  .set =
                      [](DpdkPortOptions& o, std::string_view v, std::string* why) {
                        if (v.empty()) {
                          *why = "is empty";
                          return false;
                        }
                        o.dev = std::string(v);
                        return true;
                      },
                  .get = [](const DpdkPortOptions& o) { return o.dev; },
                  .doc = "a DPDK vdev string (net_memif…, net_af_packet…, net_tap…, net_ring…) or "
                         "a PCI address",
                  .required = true});
  k.push_back(Key{.name = "ip",
                  .set =
                      [](DpdkPortOptions& o, std::string_view v, std::string* why) {
                        std::string_view addr = v;
                        std::string_view prefix;
                        const size_t slash = v.find('/');
                        if (slash != std::string_view::npos) {
                          prefix = v.substr(slash + 1);
                          addr = v.substr(0, slash);
                        }
                        const std::optional<wire::IpAddr> a = wire::IpAddr::parse(addr);
                        if (!a || *a == wire::IpAddr{}) {
                          *why = "is not an IPv4 or IPv6 address";
                          return false;
                        }
                        const uint64_t max = a->is_v4() ? 32 : 128;
                        uint64_t n = 0;
                        if (!prefix.empty() && !spec::read_uint(prefix, 1, max, &n)) {
                          *why = a->is_v4() ? "has a prefix that is not 1..32"
                                            : "has a prefix that is not 1..128";
                          return false;
                        }
                        o.ip = *a;
                        o.prefix_len = uint32_t(n);
                        return true;
                      },
                  .get =
                      [](const DpdkPortOptions& o) {
                        std::string s = o.ip.to_string();
                        if (o.prefix_len) s.append("/").append(std::to_string(o.prefix_len));
                        return s;
                      },
                  .doc = "the device's address, IPv4 a.b.c.d[/N] or IPv6 (fd00::1[/N]), and its "
                         "subnet (without /N every address is on-link)",
                  .required = true});
  k.push_back(Key{.name = "gw",
                  .set =
                      [](DpdkPortOptions& o, std::string_view v, std::string* why) {
                        const std::optional<wire::IpAddr> a = wire::IpAddr::parse(v);
                        if (!a || *a == wire::IpAddr{}) {
                          *why = "is not an IPv4 or IPv6 address";
                          return false;
                        }
                        o.gateway = *a;
                        return true;
                      },
                  .get =
                      [](const DpdkPortOptions& o) {
                        return o.gateway != wire::IpAddr{} ? o.gateway.to_string()
                                                           : std::string("none");
                      },
                  .def = "none",
                  .doc = "the next hop for addresses off the subnet, of the address's family "
                         "(none: they never resolve)"});
  k.push_back(Key{.name = "mac",
                  .set =
                      [](DpdkPortOptions& o, std::string_view v, std::string* why) {
                        if (!spec::read_mac(v, o.mac.data())) {
                          *why = "is not a MAC address aa:bb:cc:dd:ee:ff";
                          return false;
                        }
                        if (o.mac[0] & 1) {
                          *why = "is a multicast MAC address";
                          return false;
                        }
                        o.has_mac = true;
                        return true;
                      },
                  .get =
                      [](const DpdkPortOptions& o) {
                        return o.has_mac ? spec::mac_text(o.mac.data()) : std::string("port");
                      },
                  .def = "port",
                  .doc = "the device's unicast MAC (port: the port's own)"});
  k.push_back(uint_key(
      "vlan", 1, 4094, "is not a VLAN id 1..4094", [](auto& o) -> auto& { return o.vlan; }, "0",
      "send 802.1Q-tagged frames on this VLAN (0: untagged)"));
  k.push_back(uint_key(
      "prio", 0, 7, "is not an 802.1p priority 0..7", [](auto& o) -> auto& { return o.priority; },
      "3", "the 802.1p priority (PCP) of RoCE data on the VLAN"));
  k.push_back(uint_key(
      "dscp", 0, 63, "is not a DSCP 0..63", [](auto& o) -> auto& { return o.data_dscp; }, "26",
      "the DSCP of data packets (a QP's GRH traffic class overrides it)"));
  k.push_back(uint_key(
      "mtu", 576, 9702, "is not an MTU 576..9702", [](auto& o) -> auto& { return o.mtu; }, "0",
      "the port MTU to set (0: the port's own)"));
  k.push_back(Key{
      .name = "neigh",
      .set =
          [](DpdkPortOptions& o, std::string_view v, std::string* why) {
            // The last '@': an IPv6 address has none, but its text has colons like a MAC.
            const size_t at = v.rfind('@');
            DpdkPortOptions::Neighbour nb;
            const std::optional<wire::IpAddr> a =
                at == std::string_view::npos ? std::nullopt : wire::IpAddr::parse(v.substr(0, at));
            if (!a || !spec::read_mac(v.substr(at + 1), nb.mac.data())) {
              *why = "is not ip@aa:bb:cc:dd:ee:ff";
              return false;
            }
            nb.ip = *a;
            o.neighbours.push_back(nb);
            return true;
          },
      .get =
          [](const DpdkPortOptions& o) {
            std::string s;
            for (const auto& n : o.neighbours) {
              if (!s.empty()) s += ' ';
              s.append(n.ip.to_string()).append("@").append(spec::mac_text(n.mac.data()));
            }
            return s;
          },
      .doc = "a static neighbour ip@mac, never resolved by ARP or neighbour discovery "
             "(repeatable)",
      .repeatable = true});
  k.push_back(Key{.name = "eal",
                  .set =
                      [](DpdkPortOptions& o, std::string_view v, std::string*) {
                        while (!v.empty()) {
                          const size_t sp = v.find(' ');
                          const std::string_view arg = v.substr(0, sp);
                          if (!arg.empty()) o.eal_args.emplace_back(arg);
                          if (sp == std::string_view::npos) break;
                          v.remove_prefix(sp + 1);
                        }
                        return true;
                      },
                  .get =
                      [](const DpdkPortOptions& o) {
                        std::string s;
                        for (const std::string& a : o.eal_args) {
                          if (!s.empty()) s += ' ';
                          s += a;
                        }
                        return s;
                      },
                  .doc = "extra EAL arguments, blank-separated, after uroce's own"});
  k.push_back(spec::bool_key<DpdkPortOptions>(
      "roce_v1", spec::kAllScopes, [](auto& o) -> auto& { return o.roce_v1; },
      "RoCE v1 (EtherType 0x8915) beside v2, at GID index 1", "0", "1", "0"));
  k.push_back(spec::bool_key<DpdkPortOptions>(
      "share", spec::kAllScopes, [](auto& o) -> auto& { return o.share; },
      "share the device with the user's other processes through a host process that owns the "
      "port (uroce-dpdk-host)",
      "0", "1", "0"));
  return s;
}

}  // namespace

const spec::Schema<DpdkPortOptions>& options_schema() {
  static const spec::Schema<DpdkPortOptions> s = make_schema();
  return s;
}

bool parse_options(std::string_view body, DpdkPortOptions* o, std::string* err) {
  if (!spec::apply(options_schema(), spec::entries(body, ';'), *o, err, {.skip_empty = true}))
    return false;
  o->body = std::string(body);
  // One family per device: its gateway and neighbours are of its address's.
  const bool v4 = o->ip.is_v4();
  const auto other = [&](const wire::IpAddr& a) { return a.is_v4() != v4; };
  std::string bad;
  if (o->gateway != wire::IpAddr{} && other(o->gateway)) bad = "gw";
  for (const auto& n : o->neighbours)
    if (other(n.ip)) bad = "neigh";
  if (!bad.empty()) {
    *err = "key '" + bad + "' is not of the family of ip " + o->ip.to_string();
    return false;
  }
  // uroce's RoCE v1 GIDs are IPv4-mapped (the GRH names the IPv4 addresses).
  if (o->roce_v1 && !v4) {
    *err = "key 'roce_v1' needs an IPv4 address (ip " + o->ip.to_string() + " is IPv6)";
    return false;
  }
  return true;
}

}  // namespace uroce::dpdk
