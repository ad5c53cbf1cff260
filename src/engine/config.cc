// The configuration uroce reads from the environment: the table of the UROCE_* variables (each
// with its default and one-line doc, read by the parser every spec shares, transport/spec/spec.h),
// the check for misspelt names, UROCE_CC's per-device sections (transport/cc/parse.h) and
// UROCE_PCAP's file names, and load_device_config, which puts them together. The specs have
// files of their own: UROCE_DEVICES config_devices.cc, UROCE_FAULTS config_faults.cc, the values
// keys take config_values.cc. Every malformed value is reported with the variable and the
// offending token; nothing here throws or aborts on bad input.
#include "engine/config.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "engine/config_values.h"
#include "engine/stats_shm.h"
#include "transport/cc/parse.h"
#include "transport/multipath.h"
#include "util/log.h"

namespace uroce {

using config_values::duration_text;
using config_values::kCcVar;
using config_values::kDevicesVar;
using config_values::kFaultsVar;
using config_values::read_count;
using config_values::read_duration;
using config_values::set_err;

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

transport::cc::CcConfig default_cc() {
  transport::cc::CcConfig c = transport::cc::make_config(transport::cc::Algorithm::kNone);
  c.np.enabled = true;
  return c;
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
  for (DeviceConfig& d : devices) d.cc = all ? *all : default_cc();
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
      "none,np=1", "congestion control: [device:]algorithm,key=value,… sections separated by ';'"));
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
  k.push_back(switch_var("UROCE_SR", &Environment::selective_repeat, "1",
                         "0: RC QPs never use selective repeat (1: with every peer that shows it "
                         "speaks it, go-back-N with others)"));
  k.push_back(EnvKey{
      .name = "UROCE_PATHS",
      .set =
          [](Environment& e, std::string_view v, std::string* why) {
            uint32_t n = 0;
            std::string w;
            if (!read_count(v, transport::kMaxPaths, &n, &w)) {
              (*why = "'").append(v).append("' ").append(w);
              return false;
            }
            e.paths = static_cast<uint8_t>(n);
            return true;
          },
      .get = [](const Environment& e) { return std::to_string(e.paths); },
      .def = "1",
      .doc = "RC QPs spray RDMA WRITE packets over this many UDP source ports (ECMP paths) to a "
             "peer that speaks selective repeat (1: one port per QP)"});
  k.push_back(switch_var("UROCE_ACK_RIDERS", &Environment::ack_riders, "1",
                         "0: every RC ACK is a packet of its own (1: an ACK rides on a request "
                         "of its QP leaving with it, to a peer that takes riders)"));
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
    d.selective_repeat = env.selective_repeat;
    d.ack_riders = env.ack_riders;
    d.paths = env.paths;
    d.share = env.share;
    d.rnr_grace_ns = env.rnr_grace_ns;
    d.icrc = env.icrc;
    if (!env.pcap.empty()) d.pcap_path = expand_pcap_path(env.pcap, d.name, out.size() > 1);
  }
  return out;
}

}  // namespace uroce
