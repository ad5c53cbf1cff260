// uroce-sim's flags, one row each (cli.h), in docs/simulator.md's order.
#include "sim/cli.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "sim/ecmp.h"

namespace uroce::sim::cli {
namespace {

using Key = spec::Key<Flags>;

std::string num_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

bool read_double(std::string_view v, double* out) {
  double x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size() || !std::isfinite(x)) return false;
  *out = x;
  return true;
}

// A decimal in [lo, hi] (or (lo, hi] with `open`), into the double `F` maps the flags to.
template <typename F>
Key decimal(const char* name, spec::Scopes scopes, F field, double lo, double hi, bool open,
            const char* def, const char* doc) {
  return Key{.name = name,
             .scopes = scopes,
             .set =
                 [=](Flags& f, std::string_view v, std::string* why) {
                   double x = 0;
                   if (!read_double(v, &x)) {
                     *why = "is not a number";
                     return false;
                   }
                   if (x > hi || x < lo || (open && x == lo)) {
                     (*why = "is not in ")
                         .append(open ? "(" : "[")
                         .append(num_text(lo))
                         .append(", ")
                         .append(num_text(hi))
                         .append("]");
                     return false;
                   }
                   field(f) = x;
                   return true;
                 },
             .def = def,
             .doc = doc};
}

// An unsigned integer in [lo, hi].
template <typename F>
Key integer(const char* name, spec::Scopes scopes, F field, uint64_t lo, uint64_t hi,
            const char* def, const char* doc) {
  return Key{.name = name,
             .scopes = scopes,
             .set =
                 [=](Flags& f, std::string_view v, std::string* why) {
                   uint64_t x = 0;
                   if (!spec::read_uint(v, 0, ~uint64_t{0}, &x)) {
                     *why = "is not an unsigned integer";
                     return false;
                   }
                   if (x < lo || x > hi) {
                     (*why = "is not in [")
                         .append(std::to_string(lo))
                         .append(", ")
                         .append(std::to_string(hi))
                         .append("]");
                     return false;
                   }
                   field(f) = static_cast<std::remove_reference_t<decltype(field(f))>>(x);
                   return true;
                 },
             .def = def,
             .doc = doc};
}

// A name from `names` ("a, b or c" in the message), or any text when `names` is empty.
template <typename F>
Key text(const char* name, spec::Scopes scopes, F field, std::vector<const char*> names,
         const char* def, const char* doc) {
  return Key{.name = name,
             .scopes = scopes,
             .set =
                 [=](Flags& f, std::string_view v, std::string* why) {
                   bool ok = names.empty();
                   std::string list;
                   for (size_t i = 0; i < names.size(); ++i) {
                     ok = ok || v == names[i];
                     if (i) list += i + 1 == names.size() ? " or " : ", ";
                     list += names[i];
                   }
                   if (!ok) {
                     (*why = "is not ").append(list);
                     return false;
                   }
                   field(f) = std::string(v);
                   return true;
                 },
             .def = def,
             .doc = doc};
}

// A switch: no value.
template <typename F>
Key flag(const char* name, spec::Scopes scopes, F field, const char* doc) {
  return Key{.name = name,
             .scopes = scopes,
             .set =
                 [=](Flags& f, std::string_view, std::string*) {
                   field(f) = true;
                   return true;
                 },
             .doc = doc,
             .is_switch = true};
}

Key required(Key k) {
  k.required = true;
  return k;
}

spec::Schema<Flags> make_schema() {
  spec::Schema<Flags> s;
  s.scope_names = {"rp", "dumbbell", "incast", "leafspine", "plot", "lab"};
  std::vector<Key>& k = s.keys;
#define FIELD(path)        \
  [](Flags & f) -> auto& { \
    return f.path;         \
  }
  // rp: the DCQCN reaction point alone.
  k.push_back(Key{.name = "cnp-us",
                  .scopes = kRp,
                  .set =
                      [](Flags& f, std::string_view v, std::string* why) {
                        for (std::string_view t : spec::split(v, ',')) {
                          double us = 0;
                          if (!read_double(t, &us) || us < 0 || us > 1e12) {
                            (*why = "has '").append(t).append("', which is not a time in µs");
                            return false;
                          }
                          f.rp.cnp_us.push_back(us);
                        }
                        return true;
                      },
                  .doc = "CNP arrival times, µs, comma-separated (repeatable)",
                  .repeatable = true});
  k.push_back(required(decimal("duration-us", kRp, FIELD(rp.duration_us), 0, 1e12, false, "",
                               "simulated time, µs")));
  k.push_back(
      decimal("line-gbps", kRp, FIELD(rp.line_gbps), 0, 4000, true, "40", "line rate, Gb/s"));
  k.push_back(decimal("start-gbps", kRp, FIELD(rp.start_gbps), 0, 4000, true, "",
                      "start rate, Gb/s (default: the line rate)"));
  k.push_back(text("preset", kRp, FIELD(rp.preset), {"paper", "cx"}, "paper",
                   "DCQCN parameters: paper or cx"));
  k.push_back(text("set", kRp, FIELD(rp.set), {}, "",
                   "parameter overrides, mlx5 names: e.g. rpg_ai_rate=5,fr_boundary=lt"));
  k.push_back(text("csv", kRp, FIELD(rp.csv), {}, "-", "output file ('-': stdout)"));
  // dumbbell.
  k.push_back(required(
      integer("flows", kDumbbell, FIELD(dumbbell.flows), 1, 4096, "", "senders, one flow each")));
  k.push_back(text("start", kDumbbell, FIELD(dumbbell.start), {"sync", "stagger"}, "sync",
                   "sync (all at 0) or stagger (one after another)"));
  k.push_back(decimal("stagger-us", kDumbbell, FIELD(dumbbell.stagger_us), 0, 1e9, false, "",
                      "gap between staggered starts, µs (default: duration / (2·flows))"));
  k.push_back(required(decimal("duration-ms", kDumbbell, FIELD(dumbbell.duration_ms), 0.001, 1e6,
                               false, "", "simulated time, ms")));
  k.push_back(text("window-ms", kDumbbell, FIELD(dumbbell.window), {}, "",
                   "measurement window A:B, ms (default: 2nd half)"));
  k.push_back(integer("msg-bytes", kDumbbell, FIELD(dumbbell.msg_bytes), 1, uint64_t{1} << 31,
                      "1048576", "WRITE size of the streams, bytes"));
  // incast.
  k.push_back(required(integer("senders", kIncast, FIELD(incast.senders), 1, 4096, "", "senders")));
  k.push_back(required(integer("msg-bytes", kIncast, FIELD(incast.msg_bytes), 1, uint64_t{1} << 31,
                               "", "message size, bytes")));
  k.push_back(decimal("limit-ms", kIncast, FIELD(incast.limit_ms), 0.001, 1e6, false, "1000",
                      "give up after this much simulated time, ms"));
  // leafspine.
  k.push_back(required(
      integer("leaves", kLeafSpine, FIELD(leafspine.leaves), 1, 1024, "", "leaf switches")));
  k.push_back(required(
      integer("spines", kLeafSpine, FIELD(leafspine.spines), 1, 1024, "", "spine switches")));
  k.push_back(required(integer("hosts-per-leaf", kLeafSpine, FIELD(leafspine.hosts_per_leaf), 1,
                               1024, "", "hosts under each leaf")));
  k.push_back(decimal("duration-ms", kLeafSpine, FIELD(leafspine.duration_ms), 0.001, 1e6, false,
                      "10", "simulated time, ms"));
  k.push_back(text("window-ms", kLeafSpine, FIELD(leafspine.window), {}, "",
                   "measurement window A:B, ms (default: 2nd half)"));
  k.push_back(text("scenario", kLeafSpine, FIELD(leafspine.scenario), {"pfc-spread", "mixed"}, "",
                   "built-in workload: pfc-spread or mixed"));
  k.push_back(text("workload", kLeafSpine, FIELD(leafspine.workload), {}, "",
                   "workload file (docs/simulator.md)"));
  k.push_back(flag("entropy", kLeafSpine, FIELD(leafspine.entropy),
                   "pfc-spread: spread the elephants' UDP source ports over the spines"));
  // The fabric flags of every topology.
  k.push_back(decimal("link-gbps", kFabric, FIELD(fabric.link_gbps), 0, 4000, true, "40",
                      "host link rate, Gb/s"));
  k.push_back(decimal("fabric-gbps", kLeafSpine, FIELD(fabric.fabric_gbps), 0, 4000, true, "",
                      "leaf-spine link rate, Gb/s (default: --link-gbps)"));
  k.push_back(decimal("delay-us", kFabric, FIELD(fabric.delay_us), 0, 1e6, false, "1",
                      "propagation delay of every link, µs"));
  k.push_back(Key{.name = "mtu",
                  .scopes = kFabric,
                  .set =
                      [](Flags& f, std::string_view v, std::string* why) {
                        for (const uint32_t m : {256u, 512u, 1024u, 2048u, 4096u}) {
                          if (v == std::to_string(m)) {
                            f.fabric.mtu = m;
                            return true;
                          }
                        }
                        *why = "is not 256, 512, 1024, 2048 or 4096";
                        return false;
                      },
                  .def = "1024",
                  .doc = "IB path MTU, bytes: 256, 512, 1024, 2048 or 4096"});
  k.push_back(text("cc", kFabric, FIELD(fabric.cc), {"dcqcn", "timely", "none"}, "dcqcn",
                   "congestion control of every QP: dcqcn, timely or none"));
  k.push_back(text("preset", kFabric, FIELD(fabric.preset), {"paper", "cx"}, "paper",
                   "DCQCN parameters: paper or cx"));
  k.push_back(text("set", kFabric, FIELD(fabric.set), {}, "",
                   "congestion-control overrides in the UROCE_CC syntax, e.g. rpg_ai_rate=5"));
  k.push_back(text("mark", kFabric, FIELD(fabric.mark), {"dequeue", "enqueue", "off"}, "dequeue",
                   "RED marks at dequeue, at enqueue, or off"));
  k.push_back(
      decimal("kmin-kb", kFabric, FIELD(fabric.kmin_kb), 0, 1e6, false, "5", "RED Kmin, KiB"));
  k.push_back(
      decimal("kmax-kb", kFabric, FIELD(fabric.kmax_kb), 0, 1e6, false, "200", "RED Kmax, KiB"));
  k.push_back(decimal("pmax", kFabric, FIELD(fabric.pmax), 0, 1, false, "0.01",
                      "RED marking probability at Kmax"));
  k.push_back(decimal("buffer-kb", kFabric, FIELD(fabric.buffer_kb), 0, 1e9, false, "0",
                      "switch buffer, KiB (0: unlimited)"));
  k.push_back(text("buffer-mode", kFabric, FIELD(fabric.buffer_mode), {"shared", "port"}, "shared",
                   "shared (one pool per switch) or port (a pool per egress port)"));
  k.push_back(flag("pfc", kFabric, FIELD(fabric.pfc), "PFC on class 3 (data and ACKs)"));
  k.push_back(decimal("xoff-kb", kFabric, FIELD(fabric.xoff_kb), 0, 1e9, false, "",
                      "PFC XOFF per ingress port and class, KiB (default 96)"));
  k.push_back(decimal("xon-kb", kFabric, FIELD(fabric.xon_kb), 0, 1e9, false, "",
                      "PFC XON, KiB (default 64)"));
  k.push_back(integer("pfc-prio", kFabric, FIELD(fabric.pfc_prio), 0, 7, "",
                      "the lossless priority (traffic class) PFC acts on (default 3)"));
  k.push_back(integer("pause-quanta", kFabric, FIELD(fabric.quanta), 0, ~uint32_t{0}, "65535",
                      "PFC pause time of an XOFF, 512-bit quanta"));
  k.push_back(Key{.name = "ecmp-hash",
                  .scopes = kFabric,
                  .set =
                      [](Flags& f, std::string_view v, std::string* why) {
                        if (!parse_ecmp_hash(std::string(v))) {
                          *why = "is not crc32, crc16, xor or l3";
                          return false;
                        }
                        f.fabric.hash = std::string(v);
                        return true;
                      },
                  .def = "crc32",
                  .doc = "ECMP hash: crc32, crc16, xor or l3"});
  k.push_back(integer("dscp", kFabric, FIELD(fabric.dscp), 0, 63, "26",
                      "DSCP of the hosts' data and ACKs; its class selector (DSCP >> 3) is "
                      "their priority"));
  k.push_back(Key{.name = "link-mtu",
                  .scopes = kFabric,
                  .set =
                      [](Flags& f, std::string_view v, std::string* why) {
                        for (std::string_view e : spec::split(v, ',')) {
                          const size_t eq = e.find('=');
                          uint64_t mtu = 0;
                          if (eq == std::string_view::npos || eq == 0 ||
                              !spec::read_uint(e.substr(eq + 1), 68, 65535, &mtu)) {
                            (*why = "has '").append(e).append("', not LINK=BYTES (68..65535)");
                            return false;
                          }
                        }
                        f.fabric.link_mtu = std::string(v);
                        return true;
                      },
                  .doc = "IP MTU of links: LINK=BYTES,… (e.g. leaf0-spine1=1500); others: none"});
  k.push_back(
      integer("ring", kFabric, FIELD(fabric.ring), 1, 65536, "16", "NIC transmit ring, frames"));
  k.push_back(integer("qp-timeout", kFabric, FIELD(fabric.qp_timeout), 1, 31, "14",
                      "QP local ACK timeout exponent (4.096 µs · 2^t)"));
  k.push_back(flag("sr", kFabric, FIELD(fabric.sr),
                   "selective repeat on every QP (default: go-back-N, as RNICs)"));
  k.push_back(flag("warmup", kFabric, FIELD(fabric.warmup),
                   "warm connections: 64 bytes at 0, every flow's messages 100 µs later"));
  k.push_back(integer("paths", kFabric, FIELD(fabric.paths), 1, 64, "1",
                      "UDP source ports (paths) each QP sprays over, 1..64 (needs --sr)"));
  k.push_back(decimal("loss", kFabric, FIELD(fabric.loss), 0, 1, false, "0",
                      "probability each frame a switch sends to a host is lost (seeded)"));
  k.push_back(integer("seed", kFabric, FIELD(fabric.seed), 0, ~uint64_t{0}, "1",
                      "seed of every random choice"));
  k.push_back(decimal("sample-us", kFabric, FIELD(fabric.sample_us), 0, 1e9, false, "",
                      "CSV sampling interval, µs (default: 1/1000 of the run)"));
  k.push_back(text("json", kFabric, FIELD(fabric.json), {}, "", "summary file ('-': stdout)"));
  k.push_back(text("csv", kFabric, FIELD(fabric.csv), {}, "", "time-series file ('-': stdout)"));
  k.push_back(text("pfc-report", kFabric, FIELD(fabric.pfc_report), {}, "",
                   "PFC counters per port and priority, as a switch shows them ('-': stdout)"));
  k.push_back(text("pcap", kFabric, FIELD(fabric.pcap), {}, "", "capture a link into this file"));
  k.push_back(text("pcap-link", kFabric, FIELD(fabric.pcap_link), {}, "",
                   "the link to capture, e.g. s0-s1 (default: the bottleneck)"));
  // plot.
  k.push_back(required(
      text("csv", kPlot, FIELD(plot.csv), {}, "", "the CSV file (a header line, then rows)")));
  k.push_back(required(text("svg", kPlot, FIELD(plot.svg), {}, "", "the SVG file to write")));
  k.push_back(
      required(text("x", kPlot, FIELD(plot.spec.x), {}, "", "the x column (bars: their labels)")));
  k.push_back(required(
      text("y", kPlot, FIELD(plot.y), {}, "", "y columns, comma-separated; '*' matches any text")));
  k.push_back(flag("bars", kPlot, FIELD(plot.spec.bars), "grouped bars instead of lines"));
  k.push_back(text("title", kPlot, FIELD(plot.spec.title), {}, "", "title"));
  k.push_back(
      text("xlabel", kPlot, FIELD(plot.spec.xlabel), {}, "", "x axis label (default: the column)"));
  k.push_back(text("ylabel", kPlot, FIELD(plot.spec.ylabel), {}, "", "y axis label"));
  k.push_back(decimal("x-scale", kPlot, FIELD(plot.spec.x_scale), 0, 1e300, true, "1",
                      "multiply x by this (0.001: µs to ms)"));
  k.push_back(decimal("y-min", kPlot, FIELD(plot.spec.y_min), -1e300, 1e300, false, "0",
                      "the y axis starts at or below this"));
  // lab.
  k.push_back(flag("list", kLab, FIELD(lab.list), "list the labs"));
  k.push_back(flag("quick", kLab, FIELD(lab.quick),
                   "the smaller variant the CI runs (same failure, less simulated time)"));
  k.push_back(text("svg", kLab, FIELD(lab.svg), {}, "", "the plot's file (default: lab-NAME.svg)"));
  k.push_back(text("json", kLab, FIELD(lab.json), {}, "",
                   "both runs' numbers as JSON ('-': stdout, instead of the report)"));
#undef FIELD
  return s;
}

}  // namespace

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> c = {
      {"rp", kRp,
       "drive the DCQCN reaction point with CNPs at given times; one CSV row per RP event"},
      {"dumbbell", kDumbbell,
       "N long flows from N senders through one bottleneck link to one receiver"},
      {"incast", kIncast, "N senders write one message each to one receiver at once"},
      {"leafspine", kLeafSpine,
       "a two-tier leaf-spine fabric with ECMP and a workload or built-in scenario"},
      {"plot", kPlot, "an SVG plot of a CSV file: time series, or grouped bars (--bars)"},
      {"lab", kLab,
       "a classic RoCE failure, broken and fixed, side by side: uroce-sim lab NAME | --list"},
  };
  return c;
}

const spec::Schema<Flags>& schema() {
  static const spec::Schema<Flags> s = make_schema();
  return s;
}

bool parse(const std::vector<std::string_view>& args, Flags* flags, std::string* help,
           std::string* err) {
  const auto overview = [] {
    std::string h =
        "uroce-sim: uroce's transport code in a virtual-time simulator\n"
        "usage: uroce-sim SUBCOMMAND [--flag value …]; uroce-sim SUBCOMMAND --help\n";
    for (const Subcommand& c : subcommands()) {
      h.append("  ").append(c.name).append(std::string(11 - std::string_view(c.name).size(), ' '));
      h.append(c.doc).append("\n");
    }
    return h;
  };
  err->clear();
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    *help = overview();
    return false;
  }
  const Subcommand* cmd = nullptr;
  for (const Subcommand& c : subcommands()) {
    if (args[0] == c.name) cmd = &c;
  }
  if (cmd == nullptr) {
    std::string names;
    for (size_t i = 0; i < subcommands().size(); ++i) {
      if (i) names += i + 1 == subcommands().size() ? " or " : ", ";
      names += subcommands()[i].name;
    }
    (*err = "unknown subcommand '").append(args[0]).append("' (").append(names).append(")");
    return false;
  }
  std::vector<std::string_view> rest(args.begin() + 1, args.end());
  if (cmd->command == kLab && !rest.empty() && !rest[0].starts_with("-")) {
    flags->lab.name = std::string(rest[0]);
    rest.erase(rest.begin());
  }
  for (std::string_view a : rest) {
    if (a == "--help" || a == "-h") {
      *help =
          std::string("uroce-sim ").append(cmd->name).append(": ").append(cmd->doc).append("\n");
      help->append(spec::usage(schema(), cmd->command));
      return false;
    }
  }
  flags->command = cmd->command;
  std::vector<spec::Entry> entries;
  return spec::entries_from_args(schema(), rest, &entries, err) &&
         spec::apply(schema(), entries, *flags, err,
                     {.scope = cmd->command, .prefix = "--", .set_defaults = true});
}

}  // namespace uroce::sim::cli
