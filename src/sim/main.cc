// uroce-sim: uroce's simulator, running the transport's own code in virtual time.
//   uroce-sim rp --cnp-us T1,T2,… --duration-us D [--line-gbps 40] [--start-gbps R]
//                [--preset paper|cx] [--set key=value,…] [--csv FILE]
//   uroce-sim dumbbell --flows N --start sync|stagger --duration-ms D [--window-ms A:B] …
//   uroce-sim incast --senders N --msg-bytes S …
//   uroce-sim leafspine --leaves L --spines S --hosts-per-leaf H (--scenario NAME | --workload F) …
//   uroce-sim plot --csv FILE --x COL --y COL,… --svg FILE [--bars] [--title T] …
// with the fabric flags (--link-gbps, --delay-us, --mtu, --cc, --preset, --set, --mark, --kmin-kb,
// --kmax-kb, --pmax, --buffer-kb, --pfc, --xoff-kb, --xon-kb, --seed, --json, --csv, --pcap…).
// Subcommands and flags: docs/simulator.md.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/plot.h"
#include "sim/rp.h"
#include "sim/scenario.h"
#include "transport/cc/parse.h"

namespace uroce::sim {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "uroce-sim: %s\n", msg.c_str());
  return 2;
}

// Microseconds (a decimal, at most nanosecond precision) to nanoseconds.
bool us_to_ns(double us, Time* out) {
  if (!std::isfinite(us) || us < 0 || us > 1e12) return false;
  *out = Time(std::llround(us * 1000.0));
  return true;
}

struct RpFlags {
  std::vector<double> cnp_us;
  double duration_us = -1;
  double line_gbps = 40;
  double start_gbps = -1;  // default: the line rate
  std::string preset = "paper";
  std::string set;
  std::string csv = "-";
};

int run_rp_command(const RpFlags& f) {
  RpScenario s;
  std::string spec = "dcqcn,preset=" + f.preset;
  if (!f.set.empty()) spec += "," + f.set;
  std::string err;
  const std::optional<transport::cc::CcConfig> cc = transport::cc::parse_cc(spec, &err);
  if (!cc) return fail((f.set.empty() ? "--preset: " : "--preset/--set: ") + err);
  s.params = cc->dcqcn;
  if (!(f.line_gbps > 0) || f.line_gbps > 4000) {
    return fail("--line-gbps must be in (0, 4000], not " + num(f.line_gbps));
  }
  s.line_bps = uint64_t(std::llround(f.line_gbps * 1e9));
  if (f.start_gbps >= 0) {
    if (f.start_gbps == 0 || f.start_gbps > f.line_gbps) {
      return fail("--start-gbps must be in (0, --line-gbps], not " + num(f.start_gbps));
    }
    s.start_bps = uint64_t(std::llround(f.start_gbps * 1e9));
  }
  if (!us_to_ns(f.duration_us, &s.duration)) {
    return fail("--duration-us must be a non-negative number of microseconds");
  }
  for (double us : f.cnp_us) {
    Time t;
    if (!us_to_ns(us, &t)) return fail("--cnp-us " + num(us) + " is not a time");
    if (!s.cnps.empty() && t < s.cnps.back()) {
      return fail("--cnp-us times must not decrease (" + num(us) + " after " +
                  num(double(s.cnps.back()) / 1000) + ")");
    }
    if (t > s.duration) {
      return fail("--cnp-us " + num(us) + " is after --duration-us " + num(f.duration_us));
    }
    s.cnps.push_back(t);
  }
  const std::string csv = rp_csv(run_rp(s));
  FILE* out = f.csv == "-" ? stdout : std::fopen(f.csv.c_str(), "w");
  if (out == nullptr) return fail("--csv " + f.csv + ": " + std::strerror(errno));
  const bool ok = std::fwrite(csv.data(), 1, csv.size(), out) == csv.size();
  const bool closed = out == stdout ? std::fflush(out) == 0 : std::fclose(out) == 0;
  if (!ok || !closed) return fail("--csv " + f.csv + ": write failed");
  return 0;
}

// The fabric flags every topology takes, as given.
struct FabricFlags {
  double link_gbps = 40;
  double fabric_gbps = 0;  // leafspine only
  double delay_us = 1;
  uint32_t mtu = 1024;
  std::string cc = "dcqcn";
  std::string preset = "paper";
  std::string set;
  std::string mark = "dequeue";
  double kmin_kb = 5, kmax_kb = 200, pmax = 0.01;
  double buffer_kb = 0;
  std::string buffer_mode = "shared";
  bool pfc = false;
  double xoff_kb = -1, xon_kb = -1;
  uint32_t quanta = 0xffff;
  std::string hash = "crc32";
  uint32_t ring = 16;
  uint32_t qp_timeout = 14;
  uint64_t seed = 1;
  double sample_us = 0;
  std::string json, csv, pcap, pcap_link;
};

void add_fabric_flags(CLI::App* c, FabricFlags& f, bool leafspine) {
  c->add_option("--link-gbps", f.link_gbps, "host link rate, Gb/s")->capture_default_str();
  if (leafspine)
    c->add_option("--fabric-gbps", f.fabric_gbps,
                  "leaf-spine link rate, Gb/s (default: --link-gbps)");
  c->add_option("--delay-us", f.delay_us, "propagation delay of every link, µs")
      ->capture_default_str();
  c->add_option("--mtu", f.mtu, "IB path MTU, bytes: 256, 512, 1024, 2048 or 4096")
      ->capture_default_str();
  c->add_option("--cc", f.cc, "congestion control of every QP: dcqcn, timely or none")
      ->capture_default_str();
  c->add_option("--preset", f.preset, "DCQCN parameters: paper or cx")->capture_default_str();
  c->add_option("--set", f.set,
                "congestion-control overrides in the UROCE_CC syntax, e.g. rpg_ai_rate=5");
  c->add_option("--mark", f.mark, "RED marks at dequeue, at enqueue, or off")
      ->capture_default_str();
  c->add_option("--kmin-kb", f.kmin_kb, "RED Kmin, KiB")->capture_default_str();
  c->add_option("--kmax-kb", f.kmax_kb, "RED Kmax, KiB")->capture_default_str();
  c->add_option("--pmax", f.pmax, "RED marking probability at Kmax")->capture_default_str();
  c->add_option("--buffer-kb", f.buffer_kb, "switch buffer, KiB (0: unlimited)")
      ->capture_default_str();
  c->add_option("--buffer-mode", f.buffer_mode,
                "shared (one pool per switch) or port (a pool per egress port)")
      ->capture_default_str();
  c->add_flag("--pfc", f.pfc, "PFC on class 3 (data and ACKs)");
  c->add_option("--xoff-kb", f.xoff_kb, "PFC XOFF per ingress port and class, KiB (default 96)");
  c->add_option("--xon-kb", f.xon_kb, "PFC XON, KiB (default 64)");
  c->add_option("--pause-quanta", f.quanta, "PFC pause time of an XOFF, 512-bit quanta")
      ->capture_default_str();
  c->add_option("--ecmp-hash", f.hash, "ECMP hash: crc32, crc16, xor or l3")->capture_default_str();
  c->add_option("--ring", f.ring, "NIC transmit ring, frames")->capture_default_str();
  c->add_option("--qp-timeout", f.qp_timeout, "QP local ACK timeout exponent (4.096 µs · 2^t)")
      ->capture_default_str();
  c->add_option("--seed", f.seed, "seed of every random choice")->capture_default_str();
  c->add_option("--sample-us", f.sample_us,
                "CSV sampling interval, µs (default: 1/1000 of the run)");
  c->add_option("--json", f.json, "summary file ('-': stdout)");
  c->add_option("--csv", f.csv, "time-series file ('-': stdout)");
  c->add_option("--pcap", f.pcap, "capture a link into this file");
  c->add_option("--pcap-link", f.pcap_link,
                "the link to capture, e.g. s0-s1 (default: the bottleneck)");
}

bool in_range(double v, double lo, double hi) {
  return std::isfinite(v) && v >= lo && v <= hi;
}

// Checks the flags and fills `o`; an empty string, or the error naming the flag.
std::string fabric_options(const FabricFlags& f, FabricOptions& o) {
  if (!in_range(f.link_gbps, 0.001, 4000) || f.link_gbps <= 0)
    return "--link-gbps must be in (0, 4000], not " + num(f.link_gbps);
  o.link_bps = uint64_t(std::llround(f.link_gbps * 1e9));
  if (f.fabric_gbps != 0) {
    if (!in_range(f.fabric_gbps, 0.001, 4000))
      return "--fabric-gbps must be in (0, 4000], not " + num(f.fabric_gbps);
    o.fabric_bps = uint64_t(std::llround(f.fabric_gbps * 1e9));
  }
  if (!in_range(f.delay_us, 0, 1e6))
    return "--delay-us must be in [0, 1e6], not " + num(f.delay_us);
  o.delay = Time(std::llround(f.delay_us * 1000));
  switch (f.mtu) {
    case 256:
      o.mtu = IBV_MTU_256;
      break;
    case 512:
      o.mtu = IBV_MTU_512;
      break;
    case 1024:
      o.mtu = IBV_MTU_1024;
      break;
    case 2048:
      o.mtu = IBV_MTU_2048;
      break;
    case 4096:
      o.mtu = IBV_MTU_4096;
      break;
    default:
      return "--mtu must be 256, 512, 1024, 2048 or 4096, not " + std::to_string(f.mtu);
  }
  if (f.preset != "paper" && f.preset != "cx")
    return "--preset must be paper or cx, not '" + f.preset + "'";
  // The simulator wakes every QP exactly on time, so paced packets are spaced exactly
  // (pacer_burst 0) unless --set asks otherwise.
  std::string spec = f.cc + ",preset=" + f.preset;
  if (f.cc != "none" && f.set.find("pacer_burst") == std::string::npos) spec += ",pacer_burst=0";
  if (!f.set.empty()) spec += "," + f.set;
  std::string err;
  const std::optional<transport::cc::CcConfig> cc = transport::cc::parse_cc(spec, &err);
  if (!cc) return "--cc/--preset/--set: " + err;
  o.cc = *cc;
  if (f.mark == "off") {
    o.red.enabled = false;
  } else if (f.mark == "dequeue" || f.mark == "enqueue") {
    o.red.enabled = true;
    o.red.at_dequeue = f.mark == "dequeue";
  } else {
    return "--mark must be dequeue, enqueue or off, not '" + f.mark + "'";
  }
  if (!in_range(f.kmin_kb, 0, 1e6) || !in_range(f.kmax_kb, 0, 1e6) || f.kmin_kb > f.kmax_kb)
    return "--kmin-kb and --kmax-kb must satisfy 0 <= kmin <= kmax (KiB), not " + num(f.kmin_kb) +
           " and " + num(f.kmax_kb);
  o.red.kmin = uint64_t(std::llround(f.kmin_kb * 1024));
  o.red.kmax = uint64_t(std::llround(f.kmax_kb * 1024));
  if (!in_range(f.pmax, 0, 1)) return "--pmax must be in [0, 1], not " + num(f.pmax);
  o.red.pmax = f.pmax;
  if (!in_range(f.buffer_kb, 0, 1e9)) return "--buffer-kb must be >= 0, not " + num(f.buffer_kb);
  o.buffer_bytes = uint64_t(std::llround(f.buffer_kb * 1024));
  if (f.buffer_mode == "shared") {
    o.buffer_mode = BufferMode::kShared;
  } else if (f.buffer_mode == "port") {
    o.buffer_mode = BufferMode::kPerPort;
  } else {
    return "--buffer-mode must be shared or port, not '" + f.buffer_mode + "'";
  }
  if (!f.pfc && (f.xoff_kb >= 0 || f.xon_kb >= 0)) return "--xoff-kb and --xon-kb need --pfc";
  o.pfc.enabled = f.pfc;
  if (f.pfc) {
    const double xoff = f.xoff_kb >= 0 ? f.xoff_kb : 96, xon = f.xon_kb >= 0 ? f.xon_kb : 64;
    if (!in_range(xoff, 0.001, 1e9) || !in_range(xon, 0, 1e9) || xon >= xoff)
      return "PFC needs 0 <= --xon-kb < --xoff-kb, not " + num(xon) + " and " + num(xoff);
    o.pfc.xoff = uint64_t(std::llround(xoff * 1024));
    o.pfc.xon = uint64_t(std::llround(xon * 1024));
    if (f.quanta == 0 || f.quanta > 0xffff)
      return "--pause-quanta must be in [1, 65535], not " + std::to_string(f.quanta);
    o.pfc.quanta = uint16_t(f.quanta);
  }
  const std::optional<EcmpHash> h = parse_ecmp_hash(f.hash);
  if (!h) return "--ecmp-hash must be crc32, crc16, xor or l3, not '" + f.hash + "'";
  o.hash = *h;
  if (f.ring == 0 || f.ring > 65536)
    return "--ring must be in [1, 65536], not " + std::to_string(f.ring);
  o.ring = f.ring;
  if (f.qp_timeout == 0 || f.qp_timeout > 31)
    return "--qp-timeout must be in [1, 31], not " + std::to_string(f.qp_timeout);
  o.qp_timeout = uint8_t(f.qp_timeout);
  o.seed = f.seed;
  if (!in_range(f.sample_us, 0, 1e9)) return "--sample-us must be >= 0, not " + num(f.sample_us);
  o.sample = Time(std::llround(f.sample_us * 1000));
  if (!f.pcap_link.empty() && f.pcap.empty()) return "--pcap-link needs --pcap";
  o.json = f.json;
  o.csv = f.csv;
  o.pcap = f.pcap;
  o.pcap_link = f.pcap_link;
  return "";
}

// "A:B" in ms to [A, B) in ns.
bool parse_window(const std::string& s, Time* a, Time* b) {
  const size_t c = s.find(':');
  if (c == std::string::npos) return false;
  try {
    size_t n1 = 0, n2 = 0;
    const double x = std::stod(s.substr(0, c), &n1), y = std::stod(s.substr(c + 1), &n2);
    if (n1 != c || n2 != s.size() - c - 1 || !in_range(x, 0, 1e9) || !in_range(y, 0, 1e9))
      return false;
    *a = Time(std::llround(x * 1e6));
    *b = Time(std::llround(y * 1e6));
    return *a < *b;
  } catch (const std::exception&) {
    return false;
  }
}

struct DumbbellFlags {
  FabricFlags fabric;
  uint32_t flows = 2;
  std::string start = "sync";
  double stagger_us = 0;
  double duration_ms = 20;
  std::string window;
  uint64_t msg_bytes = 1 << 20;
};

int run_dumbbell_command(const DumbbellFlags& f) {
  DumbbellOptions o;
  if (std::string e = fabric_options(f.fabric, o.fabric); !e.empty()) return fail(e);
  if (f.flows == 0 || f.flows > 4096)
    return fail("--flows must be in [1, 4096], not " + std::to_string(f.flows));
  o.flows = f.flows;
  if (f.start != "sync" && f.start != "stagger")
    return fail("--start must be sync or stagger, not '" + f.start + "'");
  o.stagger = f.start == "stagger";
  if (!in_range(f.duration_ms, 0.001, 1e6))
    return fail("--duration-ms must be in (0, 1e6], not " + num(f.duration_ms));
  o.duration = Time(std::llround(f.duration_ms * 1e6));
  if (!in_range(f.stagger_us, 0, 1e9)) return fail("--stagger-us must be >= 0");
  o.stagger_gap = Time(std::llround(f.stagger_us * 1000));
  if (!f.window.empty()) {
    if (!parse_window(f.window, &o.window_begin, &o.window_end) || o.window_end > o.duration)
      return fail("--window-ms must be A:B with 0 <= A < B <= --duration-ms, not '" + f.window +
                  "'");
  }
  if (f.msg_bytes == 0 || f.msg_bytes > (uint64_t{1} << 31))
    return fail("--msg-bytes must be in [1, 2^31]");
  o.msg_bytes = f.msg_bytes;
  const DumbbellResult r = run_dumbbell(o);
  if (o.fabric.json.empty()) std::fputs(to_json(o, r).c_str(), stdout);
  return 0;
}

struct IncastFlags {
  FabricFlags fabric;
  uint32_t senders = 16;
  uint64_t msg_bytes = 1 << 20;
  double limit_ms = 1000;
};

int run_incast_command(const IncastFlags& f) {
  IncastOptions o;
  if (std::string e = fabric_options(f.fabric, o.fabric); !e.empty()) return fail(e);
  if (f.senders == 0 || f.senders > 4096)
    return fail("--senders must be in [1, 4096], not " + std::to_string(f.senders));
  o.senders = f.senders;
  if (f.msg_bytes == 0 || f.msg_bytes > (uint64_t{1} << 31))
    return fail("--msg-bytes must be in [1, 2^31]");
  o.msg_bytes = f.msg_bytes;
  if (!in_range(f.limit_ms, 0.001, 1e6)) return fail("--limit-ms must be in (0, 1e6]");
  o.limit = Time(std::llround(f.limit_ms * 1e6));
  const IncastResult r = run_incast(o);
  if (o.fabric.json.empty()) std::fputs(to_json(o, r).c_str(), stdout);
  return r.completed ? 0 : 1;
}

struct LeafSpineFlags {
  FabricFlags fabric;
  uint32_t leaves = 4, spines = 2, hosts_per_leaf = 4;
  double duration_ms = 10;
  std::string window;
  std::string scenario, workload;
  bool entropy = false;
};

int run_leafspine_command(const LeafSpineFlags& f) {
  LeafSpineOptions o;
  if (std::string e = fabric_options(f.fabric, o.fabric); !e.empty()) return fail(e);
  if (f.leaves == 0 || f.spines == 0 || f.hosts_per_leaf == 0 || f.leaves > 1024 ||
      f.spines > 1024 || f.hosts_per_leaf > 1024 || uint64_t(f.leaves) * f.hosts_per_leaf > 65536)
    return fail(
        "--leaves, --spines and --hosts-per-leaf must be in [1, 1024], at most 65536 hosts");
  o.leaves = f.leaves;
  o.spines = f.spines;
  o.hosts_per_leaf = f.hosts_per_leaf;
  if (!in_range(f.duration_ms, 0.001, 1e6))
    return fail("--duration-ms must be in (0, 1e6], not " + num(f.duration_ms));
  o.duration = Time(std::llround(f.duration_ms * 1e6));
  if (!f.window.empty()) {
    if (!parse_window(f.window, &o.window_begin, &o.window_end) || o.window_end > o.duration)
      return fail("--window-ms must be A:B with 0 <= A < B <= --duration-ms, not '" + f.window +
                  "'");
  }
  if (f.scenario.empty() == f.workload.empty())
    return fail("leafspine needs exactly one of --scenario NAME and --workload FILE");
  if (f.entropy && f.scenario != "pfc-spread")
    return fail("--entropy belongs to --scenario pfc-spread");
  std::string err;
  if (!f.scenario.empty()) {
    if (!check_leafspine_scenario(f.scenario, f.leaves, f.spines, f.hosts_per_leaf, &err))
      return fail(err);
    o.scenario = f.scenario;
    o.entropy = f.entropy;
  } else {
    std::ifstream in(f.workload);
    if (!in) return fail("--workload " + f.workload + ": " + std::strerror(errno));
    std::stringstream text;
    text << in.rdbuf();
    if (!parse_workload(text.str(), f.leaves * f.hosts_per_leaf, &o.flows, &err))
      return fail("--workload " + f.workload + ": " + err);
    if (o.flows.empty()) return fail("--workload " + f.workload + ": no flows");
  }
  const LeafSpineResult r = run_leafspine(o);
  if (o.fabric.json.empty()) std::fputs(to_json(o, r).c_str(), stdout);
  return 0;
}

struct PlotFlags {
  std::string csv, svg;
  PlotSpec spec;
  std::string y;
};

int run_plot_command(PlotFlags f) {
  std::ifstream in(f.csv);
  if (!in) return fail("--csv " + f.csv + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  std::stringstream ys(f.y);
  for (std::string c; std::getline(ys, c, ',');)
    if (!c.empty()) f.spec.y.push_back(c);
  if (f.spec.y.empty()) return fail("--y names no column");
  if (!std::isfinite(f.spec.x_scale) || f.spec.x_scale <= 0) return fail("--x-scale must be > 0");
  if (f.spec.xlabel.empty()) f.spec.xlabel = f.spec.x;
  std::string err;
  const std::string svg = plot_csv(text.str(), f.spec, &err);
  if (svg.empty()) return fail("--csv " + f.csv + ": " + err);
  std::ofstream out(f.svg, std::ios::binary | std::ios::trunc);
  out << svg;
  out.close();
  if (!out) return fail("--svg " + f.svg + ": cannot write");
  return 0;
}

}  // namespace
}  // namespace uroce::sim

int main(int argc, char** argv) {
  using namespace uroce::sim;
  CLI::App app{"uroce-sim: uroce's transport code in a virtual-time simulator"};
  app.require_subcommand(1);
  RpFlags rp;
  CLI::App* rp_cmd = app.add_subcommand(
      "rp", "drive the DCQCN reaction point with CNPs at given times; one CSV row per RP event");
  rp_cmd->add_option("--cnp-us", rp.cnp_us, "CNP arrival times, µs, comma-separated")
      ->delimiter(',');
  rp_cmd->add_option("--duration-us", rp.duration_us, "simulated time, µs")->required();
  rp_cmd->add_option("--line-gbps", rp.line_gbps, "line rate, Gb/s")->capture_default_str();
  rp_cmd->add_option("--start-gbps", rp.start_gbps, "start rate, Gb/s (default: the line rate)");
  rp_cmd->add_option("--preset", rp.preset, "DCQCN parameters: paper or cx")
      ->check(CLI::IsMember({"paper", "cx"}))
      ->capture_default_str();
  rp_cmd->add_option("--set", rp.set,
                     "parameter overrides, mlx5 names: e.g. rpg_ai_rate=5,fr_boundary=lt");
  rp_cmd->add_option("--csv", rp.csv, "output file ('-': stdout)")->capture_default_str();

  DumbbellFlags db;
  CLI::App* db_cmd = app.add_subcommand(
      "dumbbell", "N long flows from N senders through one bottleneck link to one receiver");
  db_cmd->add_option("--flows", db.flows, "senders, one flow each")->required();
  db_cmd->add_option("--start", db.start, "sync (all at 0) or stagger (one after another)")
      ->capture_default_str();
  db_cmd->add_option("--stagger-us", db.stagger_us,
                     "gap between staggered starts, µs (default: duration / (2·flows))");
  db_cmd->add_option("--duration-ms", db.duration_ms, "simulated time, ms")->required();
  db_cmd->add_option("--window-ms", db.window, "measurement window A:B, ms (default: 2nd half)");
  db_cmd->add_option("--msg-bytes", db.msg_bytes, "WRITE size of the streams, bytes")
      ->capture_default_str();
  add_fabric_flags(db_cmd, db.fabric, false);

  IncastFlags in;
  CLI::App* in_cmd =
      app.add_subcommand("incast", "N senders write one message each to one receiver at once");
  in_cmd->add_option("--senders", in.senders, "senders")->required();
  in_cmd->add_option("--msg-bytes", in.msg_bytes, "message size, bytes")->required();
  in_cmd->add_option("--limit-ms", in.limit_ms, "give up after this much simulated time, ms")
      ->capture_default_str();
  add_fabric_flags(in_cmd, in.fabric, false);

  LeafSpineFlags ls;
  CLI::App* ls_cmd = app.add_subcommand(
      "leafspine", "a two-tier leaf-spine fabric with ECMP and a workload or built-in scenario");
  ls_cmd->add_option("--leaves", ls.leaves, "leaf switches")->required();
  ls_cmd->add_option("--spines", ls.spines, "spine switches")->required();
  ls_cmd->add_option("--hosts-per-leaf", ls.hosts_per_leaf, "hosts under each leaf")->required();
  ls_cmd->add_option("--duration-ms", ls.duration_ms, "simulated time, ms")->capture_default_str();
  ls_cmd->add_option("--window-ms", ls.window, "measurement window A:B, ms (default: 2nd half)");
  ls_cmd->add_option("--scenario", ls.scenario, "built-in workload: pfc-spread or mixed");
  ls_cmd->add_option("--workload", ls.workload, "workload file (docs/simulator.md)");
  ls_cmd->add_flag("--entropy", ls.entropy,
                   "pfc-spread: spread the elephants' UDP source ports over the spines");
  add_fabric_flags(ls_cmd, ls.fabric, true);

  PlotFlags pl;
  CLI::App* pl_cmd = app.add_subcommand(
      "plot", "an SVG plot of a CSV file: time series, or grouped bars (--bars)");
  pl_cmd->add_option("--csv", pl.csv, "the CSV file (a header line, then rows)")->required();
  pl_cmd->add_option("--svg", pl.svg, "the SVG file to write")->required();
  pl_cmd->add_option("--x", pl.spec.x, "the x column (bars: their labels)")->required();
  pl_cmd->add_option("--y", pl.y, "y columns, comma-separated; '*' matches any text")->required();
  pl_cmd->add_flag("--bars", pl.spec.bars, "grouped bars instead of lines");
  pl_cmd->add_option("--title", pl.spec.title, "title");
  pl_cmd->add_option("--xlabel", pl.spec.xlabel, "x axis label (default: the column)");
  pl_cmd->add_option("--ylabel", pl.spec.ylabel, "y axis label");
  pl_cmd->add_option("--x-scale", pl.spec.x_scale, "multiply x by this (0.001: µs to ms)")
      ->capture_default_str();
  pl_cmd->add_option("--y-min", pl.spec.y_min, "the y axis starts at or below this")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (rp_cmd->parsed()) return run_rp_command(rp);
    if (db_cmd->parsed()) return run_dumbbell_command(db);
    if (in_cmd->parsed()) return run_incast_command(in);
    if (ls_cmd->parsed()) return run_leafspine_command(ls);
    if (pl_cmd->parsed()) return run_plot_command(pl);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 2;
}
