// The configuration uroce reads from the environment: UROCE_DEVICES (the device list; a dpdk(…)
// device's body goes to the DPDK port's own keys, dpdk_port/options.h), UROCE_FAULTS, UROCE_CC
// (transport/cc/parse.h) and the single-value variables. Each spec's keys are one table read by
// the parser every spec shares (transport/spec/spec.h); this file holds the tables of
// UROCE_FAULTS and of the variables, and the grammar around them. Every malformed value is
// reported with the variable and the offending token; nothing here throws or aborts on bad input.
#include "engine/config.h"

#include <unistd.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string_view>

#include "engine/stats_shm.h"
#include "transport/cc/parse.h"
#include "util/log.h"

namespace uroce {
namespace {

constexpr std::string_view kDevicesVar = "UROCE_DEVICES";
constexpr std::string_view kFaultsVar = "UROCE_FAULTS";
constexpr std::string_view kCcVar = "UROCE_CC";
// ibv_device.name is IBV_SYSFS_NAME_MAX (64) bytes including the terminator.
constexpr size_t kMaxNameLen = 63;

void set_err(std::string* err, std::string_view var, const std::string& msg) {
  if (err) (*err = var).append(": ").append(msg);
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
  d->netdev.clear();
  d->dpdk = dpdk::DpdkPortOptions{};
  if (!dpdk::parse_options(body, &d->dpdk, err)) return false;
  d->ipv4 = d->dpdk.ipv4;
  d->dscp = d->dpdk.data_dscp;
  return true;
}

std::string format_ipv4(uint32_t ip) {
  return spec::ipv4_text(ip);
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
  std::set<uint32_t> addrs;
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
    } else if (value.find_first_not_of("0123456789.") == std::string_view::npos) {
      // Looks like an address but is not a valid one (e.g. "10.0.0.256", "1.2.3").
      set_err(err, kDevicesVar, std::string("bad IPv4 address '").append(value) + "'");
      return std::nullopt;
    } else if (value.size() >= IFNAMSIZ) {
      set_err(err, kDevicesVar, std::string("netdev name '").append(value) + "' is too long");
      return std::nullopt;
    } else {
      std::string why;
      auto resolved = resolve_netdev_ipv4(std::string(value), &why);
      if (!resolved) {
        set_err(err, kDevicesVar, "device '" + d.name + "': " + why);
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
    for (const DeviceConfig& o : out) {
      if (o.name == d.name) {
        set_err(err, kDevicesVar, "device '" + d.name + "' given twice");
        return std::nullopt;
      }
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

// --- UROCE_FAULTS: the values its keys take. Each reader says what is wrong with a value; the
// parser names the key and the value (spec.h).

// A probability: plain decimal in [0, 1]. strtod accepts "nan", "inf", hex floats and leading
// blanks; only plain decimals pass.
bool read_probability(std::string_view value, double* out, std::string* why) {
  const std::string v(value);
  const bool plain = !v.empty() && v.find_first_not_of("0123456789.eE+-") == std::string::npos;
  char* end = nullptr;
  errno = 0;
  const double p = plain ? std::strtod(v.c_str(), &end) : 0.0;
  if (!plain || errno != 0 || end != v.c_str() + v.size() || !std::isfinite(p)) {
    *why = "is not a number";
    return false;
  }
  if (p < 0.0 || p > 1.0) {
    *why = "is out of range [0, 1]";
    return false;
  }
  *out = p;
  return true;
}

// A small count in [1, max]: depth, len, bits.
bool read_count(std::string_view v, uint32_t max, uint32_t* out, std::string* why) {
  uint64_t n = 0;
  if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string_view::npos) {
    *why = "is not a positive integer";
    return false;
  }
  if (!spec::read_uint(v, 1, max, &n)) {
    (*why = "is out of range [1, ").append(std::to_string(max)).append("]");
    return false;
  }
  *out = uint32_t(n);
  return true;
}

// A decimal followed by a unit from `units` (name, scale): "1.5ms", "800mbit". Scale 0: the
// number is not a plain decimal; -1: the unit is missing or unknown.
double read_with_unit(std::string_view v,
                      std::initializer_list<std::pair<const char*, double>> units, double* scale) {
  const size_t num_end = v.find_first_not_of("0123456789.");
  const std::string num(v.substr(0, num_end));
  const std::string_view unit = num_end == std::string_view::npos ? "" : v.substr(num_end);
  char* end = nullptr;
  const double x = num.empty() ? -1 : std::strtod(num.c_str(), &end);
  *scale = 0;
  if (num.empty() || end != num.c_str() + num.size()) return x;
  *scale = -1;
  for (const auto& [name, s] : units) {
    if (unit == name) *scale = s;
  }
  return x;
}

// A duration: a plain decimal with a unit (ns, us, ms, s), at most 10 s. The unit is required:
// "delay=5" could mean anything.
bool read_duration(std::string_view v, uint64_t* out_ns, std::string* why) {
  double scale;
  const double x = read_with_unit(v, {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}}, &scale);
  if (scale == 0) {
    *why = "is not a duration (e.g. 500us, 2ms)";
    return false;
  }
  if (scale < 0) {
    *why = "needs a unit: ns, us, ms or s";
    return false;
  }
  const double ns = x * scale;
  if (ns > 10e9) {
    *why = "is out of range [0, 10s]";
    return false;
  }
  *out_ns = static_cast<uint64_t>(ns + 0.5);
  return true;
}

// A rate: a plain decimal with a unit, kbit, mbit or gbit (10^3, 10^6, 10^9 bit/s, as tc writes
// them), from 1 kbit to 1000 gbit.
bool read_rate(std::string_view v, uint64_t* out_bps, std::string* why) {
  double scale;
  const double x = read_with_unit(v, {{"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}}, &scale);
  if (scale == 0) {
    *why = "is not a rate (e.g. 800mbit, 10gbit)";
    return false;
  }
  if (scale < 0) {
    *why = "needs a unit: kbit, mbit or gbit";
    return false;
  }
  const double bps = x * scale;
  if (bps < 1e3 || bps > 1e12) {
    *why = "is out of range [1kbit, 1000gbit]";
    return false;
  }
  *out_bps = static_cast<uint64_t>(bps + 0.5);
  return true;
}

// A size in bytes: an unsigned decimal, optionally with k (KiB) or m (MiB), at most 1 GiB.
bool read_size(std::string_view v, uint64_t* out, std::string* why) {
  std::string_view num = v;
  uint64_t scale = 1;
  if (!num.empty() && (num.back() == 'k' || num.back() == 'm')) {
    scale = num.back() == 'k' ? 1024 : 1024 * 1024;
    num.remove_suffix(1);
  }
  uint64_t n = 0;
  if (num.size() > 10 || !spec::read_uint(num, 0, ~uint64_t{0}, &n)) {
    *why = "is not a size (bytes, or with k or m)";
    return false;
  }
  if (n * scale > (uint64_t{1} << 30)) {
    *why = "is out of range [0, 1024m]";
    return false;
  }
  *out = n * scale;
  return true;
}

// The values as `uroce config` shows them, in the forms the readers take.
std::string number_text(double d) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  return ec == std::errc() ? std::string(buf, end) : "?";
}
std::string scaled_text(uint64_t v, std::initializer_list<std::pair<const char*, uint64_t>> units) {
  for (const auto& [name, scale] : units) {
    if (v != 0 && v % scale == 0) return std::to_string(v / scale) + name;
  }
  return std::to_string(v);
}
std::string duration_text(uint64_t ns) {
  return ns == 0
             ? "0ns"
             : scaled_text(ns, {{"s", 1'000'000'000}, {"ms", 1'000'000}, {"us", 1'000}, {"ns", 1}});
}
std::string size_text(uint64_t b) {
  return scaled_text(b, {{"m", 1024 * 1024}, {"k", 1024}, {"", 1}});
}

using FaultKey = spec::Key<FaultConfig>;
using ParamKey = spec::Key<FaultSpec>;

// A key of configuration `C` whose value `read` parses into the field `F` maps to and `show`
// writes back.
template <typename C, typename F, typename Read, typename Show>
spec::Key<C> value_key(const char* name, spec::Scopes scopes, F field, Read read, Show show,
                       const char* def, const char* label, const char* doc) {
  return spec::Key<C>{
      .name = name,
      .scopes = scopes,
      .set = [=](C& c, std::string_view v, std::string* why) { return read(v, &field(c), why); },
      .get = [=](const C& c) { return show(field(c)); },
      .def = def,
      .doc = doc,
      .label = label};
}

bool read_seed(std::string_view v, uint64_t* out, std::string* why) {
  // Decimal only; strtoull would accept "-1" (as 2^64-1) and leading blanks.
  if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string_view::npos) {
    *why = "is not an unsigned decimal integer";
    return false;
  }
  if (std::from_chars(v.data(), v.data() + v.size(), *out).ec != std::errc()) {
    *why = "is out of range [0, 2^64)";
    return false;
  }
  return true;
}

std::string rate_text(uint64_t bps) {
  return bps ? scaled_text(bps, {{"gbit", 1'000'000'000}, {"mbit", 1'000'000}, {"kbit", 1'000}})
             : std::string("off");
}
std::string uint_text(uint64_t v) {
  return std::to_string(v);
}

// The fault kinds, in the order docs/configuration.md lists them; a kind's bit is its
// parameters' scope.
constexpr const char* kKinds[] = {"loss",    "burst", "corrupt", "dup",
                                  "reorder", "delay", "queue",   "ce"};
spec::Scopes kind_scope(std::string_view kind) {
  for (size_t i = 0; i < std::size(kKinds); ++i) {
    if (kind == kKinds[i]) return spec::Scopes{1} << i;
  }
  return 0;
}

// describe()'s names of the kinds' rows, by direction and kind.
constexpr const char* kLabels[2][std::size(kKinds)] = {
    {"rx.loss", "rx.burst", "rx.corrupt", "rx.dup", "rx.reorder", "rx.delay", "rx.queue", "rx.ce"},
    {"tx.loss", "tx.burst", "tx.corrupt", "tx.dup", "tx.reorder", "tx.delay", "tx.queue", "tx.ce"}};

spec::Schema<FaultConfig> make_fault_schema() {
  spec::Schema<FaultConfig> s;
  s.scope_names = {"rx", "tx", "seed"};
  s.keys.push_back(value_key<FaultConfig>(
      "seed", kFaultSeed, [](auto& f) -> auto& { return f.seed; }, read_seed, uint_text, "1",
      nullptr, "seed of the fault PRNG: the same seed makes the same decisions"));
  // One row per direction of each kind: `rx.` (or no prefix) and `tx.`.
  for (const spec::Scopes dir : {kFaultRx, kFaultTx}) {
    const bool tx = dir == kFaultTx;
    const auto side = [tx](auto& f) -> auto& {
      return tx ? f.tx : f.rx;
    };
    const auto add = [&](const char* kind, auto field, auto read, auto show, const char* def,
                         const char* doc) {
      s.keys.push_back(value_key<FaultConfig>(
          kind, dir, field, read, show, def, kLabels[tx][std::countr_zero(kind_scope(kind))], doc));
    };
    const auto prob = [&](const char* kind, auto field, const char* doc) {
      add(kind, field, read_probability, number_text, "0", doc);
    };
    // Receive loss is FaultConfig::rx_loss (it predates the split: config.h).
    prob(
        "loss", [tx](auto& f) -> auto& { return tx ? f.tx.loss : f.rx_loss; },
        "drop with probability p");
    prob(
        "burst", [=](auto& f) -> auto& { return side(f).burst; },
        "with probability p, drop the datagram and the next len - 1");
    prob(
        "corrupt", [=](auto& f) -> auto& { return side(f).corrupt; },
        "with probability p, flip `bits` random bits the ICRC covers");
    prob(
        "dup", [=](auto& f) -> auto& { return side(f).dup; },
        "with probability p, a second copy follows at once");
    prob(
        "reorder", [=](auto& f) -> auto& { return side(f).reorder; },
        "with probability p, hold back until 1..depth later datagrams have passed");
    add(
        "delay", [=](auto& f) -> auto& { return side(f).delay_ns; }, read_duration, duration_text,
        "0ns", "hold every datagram this long (plus jitter), order kept");
    if (tx) continue;  // the switch queue and CE marking act on receive only
    add(
        "queue", [](auto& f) -> auto& { return f.rx.queue_bps; }, read_rate, rate_text, "off",
        "a switch's egress queue in front of the device, drained at this rate (RED, ECN)");
    prob(
        "ce", [](auto& f) -> auto& { return f.rx.ce; },
        "with probability p, mark CE whatever the ECN field (a remarking middlebox)");
  }
  return s;
}

spec::Schema<FaultSpec> make_fault_param_schema() {
  spec::Schema<FaultSpec> s;
  s.scope_names.assign(std::begin(kKinds), std::end(kKinds));
  const auto add = [&](const char* name, const char* kind, auto field, auto read, auto show,
                       const char* def, const char* label, const char* doc) {
    s.keys.push_back(
        value_key<FaultSpec>(name, kind_scope(kind), field, read, show, def, label, doc));
  };
  const auto count = [](uint32_t max) {
    return [max](std::string_view v, uint32_t* out, std::string* why) {
      return read_count(v, max, out, why);
    };
  };
  add(
      "len", "burst", [](auto& f) -> auto& { return f.burst_len; }, count(1000), uint_text, "4",
      "burst:len", "datagrams a burst drops, 1..1000");
  add(
      "bits", "corrupt", [](auto& f) -> auto& { return f.corrupt_bits; }, count(64), uint_text, "1",
      "corrupt:bits", "bits flipped in a corrupted datagram, 1..64");
  add(
      "depth", "reorder", [](auto& f) -> auto& { return f.reorder_depth; }, count(1000), uint_text,
      "3", "reorder:depth", "a reordered datagram lets 1..depth later ones pass (at most 1 ms)");
  add(
      "jitter", "delay", [](auto& f) -> auto& { return f.jitter_ns; }, read_duration, duration_text,
      "0ns", "delay:jitter", "plus a uniform [0, jitter) on each datagram's delay");
  add(
      "buffer", "queue", [](auto& f) -> auto& { return f.queue_buffer; }, read_size, size_text,
      "1m", "queue:buffer",
      "the queue's buffer, bytes of frames: a datagram that does not fit is dropped");
  add(
      "kmin", "queue", [](auto& f) -> auto& { return f.queue_kmin; }, read_size, size_text, "5k",
      "queue:kmin", "RED: no marks up to this backlog");
  add(
      "kmax", "queue", [](auto& f) -> auto& { return f.queue_kmax; }, read_size, size_text, "200k",
      "queue:kmax", "RED: marks with probability pmax here, always above");
  add(
      "pmax", "queue", [](auto& f) -> auto& { return f.queue_pmax; }, read_probability, number_text,
      "0.01", "queue:pmax", "RED: the marking probability at kmax");
  ParamKey mark = spec::bool_key<FaultSpec>(
      "mark", kind_scope("queue"), [](auto& f) -> auto& { return f.queue_mark_dequeue; },
      "judge the backlog a datagram finds (enqueue) or leaves behind (dequeue)", "enqueue",
      "dequeue", "enqueue");
  mark.label = "queue:mark";
  s.keys.push_back(mark);
  return s;
}

}  // namespace

const spec::Schema<FaultConfig>& fault_schema() {
  static const spec::Schema<FaultConfig> s = make_fault_schema();
  return s;
}

const spec::Schema<FaultSpec>& fault_param_schema() {
  static const spec::Schema<FaultSpec> s = make_fault_param_schema();
  return s;
}

std::optional<FaultConfig> parse_faults(const std::string& text, std::string* err) {
  FaultConfig f;
  if (spec::trim(text).empty()) return f;
  // entry = [ "rx." | "tx." ] kind "=" value { ":" param "=" value }  |  "seed=" N
  std::vector<spec::Entry> entries = spec::entries(text, ',');
  std::vector<std::optional<std::string_view>> params(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    spec::Entry& e = entries[i];
    // Plain keys apply to receive, as UROCE_FAULTS always did; `seed` has no direction.
    e.name = e.key;
    e.scope = kFaultRx | kFaultSeed;
    if (e.key.starts_with("rx.") || e.key.starts_with("tx.")) {
      e.scope = e.key[0] == 't' ? kFaultTx : kFaultRx;
      if (e.key.substr(3) != "seed") e.name = e.key.substr(3);
    }
    const size_t colon = e.value.find(':');
    if (colon != std::string_view::npos) {
      params[i] = e.value.substr(colon + 1);
      e.value = spec::trim(e.value.substr(0, colon));
    }
  }
  std::string msg;
  if (!spec::apply(fault_schema(), entries, f, &msg)) {
    set_err(err, kFaultsVar, msg);
    return std::nullopt;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const spec::Entry& e = entries[i];
    if (e.name == "seed") continue;
    FaultSpec& side = e.scope == kFaultTx ? f.tx : f.rx;
    const std::string prefix = std::string(e.key).append(":");
    if (params[i] && !spec::apply(fault_param_schema(), spec::entries(*params[i], ':'), side, &msg,
                                  {.scope = kind_scope(e.name), .prefix = prefix})) {
      set_err(err, kFaultsVar, msg);
      return std::nullopt;
    }
    if (e.name == "queue" && side.queue_kmin > side.queue_kmax) {
      set_err(err, kFaultsVar, std::string(e.key) + ": kmin must not exceed kmax");
      return std::nullopt;
    }
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
    const std::string_view section = spec::trim(rest.substr(0, semi));
    if (section.empty()) {
      set_err(err, kCcVar, "empty section");
      return false;
    }
    std::string_view body = section;
    DeviceConfig* dev = nullptr;
    const size_t colon = section.find(':');
    if (colon != std::string_view::npos) {
      const std::string_view name = spec::trim(section.substr(0, colon));
      body = spec::trim(section.substr(colon + 1));
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
    std::optional<cc::CcConfig> c = cc::parse_cc(body, &e);
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

namespace {

using EnvKey = spec::Key<Environment>;

// A 0/1 switch variable.
EnvKey switch_var(const char* name, bool Environment::*field, const char* def, const char* doc) {
  return EnvKey{.name = name,
                .set =
                    [=](Environment& e, std::string_view v, std::string* why) {
                      if (v != "0" && v != "1") {
                        (*why = "'").append(v).append("' is not 0 or 1");
                        return false;
                      }
                      e.*field = v == "1";
                      return true;
                    },
                .get = [=](const Environment& e) { return std::string(e.*field ? "1" : "0"); },
                .def = def,
                .doc = doc};
}

// A variable that holds a whole spec: kept as given, parsed by `parse` (whose message is whole).
EnvKey spec_var(const char* name, std::string Environment::*field,
                bool (*parse)(Environment&, std::string_view, std::string*), const char* def,
                const char* doc) {
  return EnvKey{.name = name,
                .set =
                    [=](Environment& e, std::string_view v, std::string* why) {
                      e.*field = std::string(v);
                      return parse(e, v, why);
                    },
                .get = [=](const Environment& e) { return e.*field; },
                .def = def,
                .doc = doc};
}

// The part of a message after "VAR: " (the variable's own parsers name it too).
std::string after_var(std::string msg, std::string_view var) {
  if (msg.starts_with(var) && msg.size() > var.size() + 2) msg.erase(0, var.size() + 2);
  return msg;
}

spec::Schema<Environment> make_environment_schema() {
  spec::Schema<Environment> s;
  std::vector<EnvKey>& k = s.keys;
  k.push_back(spec_var(
      "UROCE_DEVICES", &Environment::devices,
      [](Environment& e, std::string_view v, std::string* why) {
        e.device_list = parse_devices(std::string(v), why);
        if (!e.device_list) *why = after_var(*why, kDevicesVar);
        return e.device_list.has_value();
      },
      "uroce0 on the first up, non-loopback IPv4 address (else 127.0.0.1)",
      "the devices: name=address, name=netdev or name=dpdk(key=value;…), comma-separated"));
  k.push_back(spec_var(
      "UROCE_FAULTS", &Environment::faults,
      [](Environment& e, std::string_view v, std::string* why) {
        std::optional<FaultConfig> f = parse_faults(std::string(v), why);
        if (!f) {
          *why = after_var(*why, kFaultsVar);
          return false;
        }
        e.fault_config = *f;
        return true;
      },
      "", "seeded fault injection on receive and transmit, the same for every device"));
  k.push_back(spec_var(
      "UROCE_CC", &Environment::cc,
      [](Environment&, std::string_view, std::string*) {
        return true;  // applied to the devices once they are known (load_device_config)
      },
      "none", "congestion control: [device:]algorithm,key=value,… sections separated by ';'"));
  k.push_back(spec_var(
      "UROCE_PCAP", &Environment::pcap,
      [](Environment&, std::string_view, std::string*) { return true; }, "",
      "capture file of every packet (%p the pid, %d the device, %% a %)"));
  k.push_back(EnvKey{
      .name = "UROCE_LOG",
      .set = [](Environment&, std::string_view, std::string*) { return true; },
      .get =
          [](const Environment&) {
            // In spdlog's level order; its own name for warn is "warning".
            static constexpr const char* kNames[] = {"trace", "debug",    "info", "warn",
                                                     "error", "critical", "off"};
            const size_t l = size_t(log().level());
            return std::string(l < std::size(kNames) ? kNames[l] : "?");
          },
      .def = "warn",
      .doc = "how much uroce says on stderr: trace, debug, info, warn, error, critical or off"});
  k.push_back(switch_var("UROCE_STATS", &Environment::print_stats, "0",
                         "1: print each device's counters on stderr when it closes"));
  k.push_back(
      switch_var("UROCE_EARLY_RETRANSMIT", &Environment::early_retransmit, "1",
                 "RC QPs probe for a lost tail before the ACK timeout (0: IBTA timer only)"));
  k.push_back(switch_var("UROCE_SHARE", &Environment::share, "1",
                         "0: the device's address is this process's alone (no registry, no "
                         "steering: the single-process path)"));
  k.push_back(EnvKey{
      .name = "UROCE_RNR_GRACE",
      .set =
          [](Environment& e, std::string_view v, std::string* why) {
            if (v == "0") {
              e.rnr_grace_ns = 0;
              return true;
            }
            std::string w;
            if (!read_duration(v, &e.rnr_grace_ns, &w)) {
              (*why = "'").append(v).append("' ").append(w);
              return false;
            }
            return true;
          },
      .get = [](const Environment& e) { return duration_text(e.rnr_grace_ns); },
      .def = "10ms",
      .doc = "the longest an RC message that finds no receive waits for one before the RNR NAK "
             "(at most min_rnr_timer; 0: the NAK at once)"});
  k.push_back(
      EnvKey{.name = "UROCE_GSO",
             .set =
                 [](Environment& e, std::string_view v, std::string* why) {
                   if (v != "0" && v != "1" && v != "auto") {
                     (*why = "'").append(v).append("' is not 0, 1 or auto");
                     return false;
                   }
                   e.gso = v == "1"   ? DeviceConfig::Gso::kOn
                           : v == "0" ? DeviceConfig::Gso::kOff
                                      : DeviceConfig::Gso::kAuto;
                   return true;
                 },
             .get =
                 [](const Environment& e) {
                   return std::string(e.gso == DeviceConfig::Gso::kOn    ? "1"
                                      : e.gso == DeviceConfig::Gso::kOff ? "0"
                                                                         : "auto");
                 },
             .def = "auto",
             .doc = "UDP GSO/GRO batching on the kernel-UDP port: auto (loopback only), 1 or 0"});
  k.push_back(EnvKey{
      .name = "UROCE_ICRC",
      .set =
          [](Environment& e, std::string_view v, std::string* why) {
            const std::optional<wire::IcrcRoutine> routine = wire::parse_icrc_routine(v);
            if (!routine) {
              (*why = "'").append(v).append("' is not auto, pclmul, isal or zlib");
              return false;
            }
            if (!wire::icrc_routine_available(*routine)) {
              (*why = "'")
                  .append(v)
                  .append(
                      "' is not available here: it needs a CPU with PCLMULQDQ and a libisal that "
                      "exports crc32_gzip_refl_by8_02 or crc32_gzip_refl_by8");
              return false;
            }
            e.icrc = *routine;
            return true;
          },
      .get =
          [](const Environment& e) {
            // In IcrcRoutine's order.
            static constexpr const char* kNames[] = {"auto", "pclmul", "isal", "zlib"};
            return std::string(kNames[size_t(e.icrc)]);
          },
      .def = "auto",
      .doc = "the ICRC's CRC-32 routine: auto, pclmul, isal or zlib"});
  k.push_back(
      EnvKey{.name = "UROCE_PUBLISH",
             .set = [](Environment&, std::string_view, std::string*) { return true; },
             .get =
                 [](const Environment&) {
                   return std::string(stats_shm::publishing_enabled(nullptr) ? "1" : "0");
                 },
             .def = "1",
             .doc = "publish each device's counters in /dev/shm for `uroce stats` (0: off)"});
  // Read by the preload where it acts (src/verbs/discovery.cc), once, at the first look-up.
  k.push_back(EnvKey{
      .name = "UROCE_DISCOVERY",
      .set = [](Environment&, std::string_view, std::string*) { return true; },
      .get =
          [](const Environment&) {
            const char* v = std::getenv("UROCE_DISCOVERY");
            return std::string(v && std::string_view(v) == "0" ? "0" : "1");
          },
      .def = "1",
      .doc =
          "answer /sys/class/infiniband and /dev/infiniband look-ups for uroce devices (0: off)"});
  return s;
}

}  // namespace

const spec::Schema<Environment>& environment_schema() {
  static const spec::Schema<Environment> s = make_environment_schema();
  return s;
}

namespace {

// Levenshtein distance (insertions, deletions, substitutions), for names of a few dozen letters.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> misspelt_variables(const char* const* envp) {
  constexpr std::string_view kPrefix = "UROCE_";
  std::vector<std::string> out;
  for (const char* const* e = envp; e && *e; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (name.substr(0, kPrefix.size()) != kPrefix) continue;
    std::string_view best;
    size_t best_d = SIZE_MAX;
    bool known = false;
    for (const spec::Key<Environment>& k : environment_schema().keys) {
      if (name == k.name) known = true;
      const size_t d = edit_distance(name.substr(kPrefix.size()),
                                     std::string_view(k.name).substr(kPrefix.size()));
      if (d < best_d) best_d = d, best = k.name;
    }
    // Close means one or two edits, and fewer than half the known name's own letters (UROCE_CC
    // is not what UROCE_CLI means).
    const size_t known_len = best.size() - kPrefix.size();
    if (known || best_d > 2 || 2 * best_d >= known_len) continue;
    out.push_back(
        fmt::format("{} is not a uroce variable; did you mean {}? (it is ignored)", name, best));
  }
  return out;
}

bool read_environment(Environment* env, std::string* err) {
  // Once per process: every device load reads the environment.
  static const bool warned = [] {
    for (const std::string& w : misspelt_variables(environ)) log().warn("{}", w);
    return true;
  }();
  (void)warned;
  for (const spec::Key<Environment>& k : environment_schema().keys) {
    const char* v = std::getenv(k.name);
    // An empty variable counts as unset, as shells make "VAR=" easy to leave behind.
    if (!v || !*v) continue;
    std::string why;
    if (!k.set(*env, v, &why)) {
      set_err(err, k.name, why);
      return false;
    }
  }
  return true;
}

std::optional<std::vector<DeviceConfig>> load_device_config(std::string* err) {
  Environment env;
  if (!read_environment(&env, err)) return std::nullopt;
  std::vector<DeviceConfig> out;
  if (env.device_list) {
    out = std::move(*env.device_list);
  } else {
    out.push_back(default_device_config());
  }
  if (!env.cc.empty() && !apply_cc(env.cc, out, err)) return std::nullopt;
  for (auto& d : out) {
    d.faults = env.fault_config;
    d.gso = env.gso;
    d.print_stats = env.print_stats;
    d.early_retransmit = env.early_retransmit;
    d.share = env.share;
    d.rnr_grace_ns = env.rnr_grace_ns;
    d.icrc = env.icrc;
    if (!env.pcap.empty()) d.pcap_path = expand_pcap_path(env.pcap, d.name, out.size() > 1);
  }
  return out;
}

}  // namespace uroce
