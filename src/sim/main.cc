// uroce-sim: uroce's simulator, running the transport's own code in virtual time.
//   uroce-sim rp --cnp-us T1,T2,… --duration-us D [--line-gbps 40] [--start-gbps R]
//                [--preset paper|cx] [--set key=value,…] [--csv FILE]
//   uroce-sim dumbbell --flows N --start sync|stagger --duration-ms D [--window-ms A:B] …
//   uroce-sim incast --senders N --msg-bytes S …
//   uroce-sim leafspine --leaves L --spines S --hosts-per-leaf H (--scenario NAME | --workload F) …
//   uroce-sim plot --csv FILE --x COL --y COL,… --svg FILE [--bars] [--title T] …
// with the fabric flags (--link-gbps, --delay-us, --mtu, --cc, --preset, --set, --mark, --kmin-kb,
// --kmax-kb, --pmax, --buffer-kb, --pfc, --xoff-kb, --xon-kb, --seed, --json, --csv, --pcap…).
// Subcommands and flags: docs/simulator.md; the flags' table: cli.{h,cc}. This file checks what
// depends on several flags and runs the subcommand.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/cli.h"
#include "sim/lab.h"
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

// Microseconds (a decimal, at most nanosecond precision; the flags' table keeps it in
// [0, 1e12]) to nanoseconds.
Time us_to_ns(double us) {
  return Time(std::llround(us * 1000.0));
}

int run_rp_command(const cli::RpFlags& f) {
  RpScenario s;
  std::string spec = "dcqcn,preset=" + f.preset;
  if (!f.set.empty()) spec += "," + f.set;
  std::string err;
  const std::optional<transport::cc::CcConfig> cc = transport::cc::parse_cc(spec, &err);
  if (!cc) return fail((f.set.empty() ? "--preset: " : "--preset/--set: ") + err);
  s.params = cc->dcqcn;
  s.line_bps = uint64_t(std::llround(f.line_gbps * 1e9));
  if (f.start_gbps >= 0) {  // given
    if (f.start_gbps > f.line_gbps) {
      return fail("--start-gbps must be in (0, --line-gbps], not " + num(f.start_gbps));
    }
    s.start_bps = uint64_t(std::llround(f.start_gbps * 1e9));
  }
  s.duration = us_to_ns(f.duration_us);
  for (double us : f.cnp_us) {
    const Time t = us_to_ns(us);
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

bool in_range(double v, double lo, double hi) {
  return std::isfinite(v) && v >= lo && v <= hi;
}

// Fills `o` from the fabric flags (each already checked by the flags' table) and checks what
// depends on several of them; an empty string, or the error naming the flags.
std::string fabric_options(const cli::FabricFlags& f, FabricOptions& o) {
  o.link_bps = uint64_t(std::llround(f.link_gbps * 1e9));
  if (f.fabric_gbps != 0) o.fabric_bps = uint64_t(std::llround(f.fabric_gbps * 1e9));
  o.delay = Time(std::llround(f.delay_us * 1000));
  o.mtu = f.mtu == 256    ? IBV_MTU_256
          : f.mtu == 512  ? IBV_MTU_512
          : f.mtu == 1024 ? IBV_MTU_1024
          : f.mtu == 2048 ? IBV_MTU_2048
                          : IBV_MTU_4096;
  std::string err;
  const std::optional<transport::cc::CcConfig> cc = fabric_cc(f.cc, f.preset, f.set, &err);
  if (!cc) return "--cc/--preset/--set: " + err;
  o.cc = *cc;
  o.red.enabled = f.mark != "off";
  o.red.at_dequeue = f.mark == "dequeue";
  if (f.kmin_kb > f.kmax_kb)
    return "--kmin-kb and --kmax-kb must satisfy 0 <= kmin <= kmax (KiB), not " + num(f.kmin_kb) +
           " and " + num(f.kmax_kb);
  o.red.kmin = uint64_t(std::llround(f.kmin_kb * 1024));
  o.red.kmax = uint64_t(std::llround(f.kmax_kb * 1024));
  o.red.pmax = f.pmax;
  o.buffer_bytes = uint64_t(std::llround(f.buffer_kb * 1024));
  o.buffer_mode = f.buffer_mode == "port" ? BufferMode::kPerPort : BufferMode::kShared;
  if (!f.pfc && (f.xoff_kb >= 0 || f.xon_kb >= 0)) return "--xoff-kb and --xon-kb need --pfc";
  o.pfc.enabled = f.pfc;
  if (f.pfc) {
    const double xoff = f.xoff_kb >= 0 ? f.xoff_kb : 96, xon = f.xon_kb >= 0 ? f.xon_kb : 64;
    if (xoff < 0.001 || xon >= xoff)
      return "PFC needs 0 <= --xon-kb < --xoff-kb, not " + num(xon) + " and " + num(xoff);
    o.pfc.xoff = uint64_t(std::llround(xoff * 1024));
    o.pfc.xon = uint64_t(std::llround(xon * 1024));
    if (f.quanta == 0 || f.quanta > 0xffff)
      return "--pause-quanta must be in [1, 65535], not " + std::to_string(f.quanta);
    o.pfc.quanta = uint16_t(f.quanta);
  }
  if (f.pfc_prio >= 0) {
    if (!f.pfc) return "--pfc-prio needs --pfc";
    o.pfc.classes = uint8_t(1u << f.pfc_prio);
  }
  o.dscp = uint8_t(f.dscp);
  for (std::string_view e : spec::split(f.link_mtu, ',')) {
    if (e.empty()) continue;
    const size_t eq = e.find('=');
    uint64_t mtu = 0;
    spec::read_uint(e.substr(eq + 1), 68, 65535, &mtu);  // checked by the flags' table
    o.link_mtu.emplace_back(std::string(e.substr(0, eq)), uint32_t(mtu));
  }
  o.hash = parse_ecmp_hash(f.hash).value_or(EcmpHash::kCrc32);
  o.ring = f.ring;
  o.qp_timeout = uint8_t(f.qp_timeout);
  if (f.paths != 1 && !f.sr) return "--paths needs --sr (spraying reorders: go-back-N resends it)";
  o.selective_repeat = f.sr;
  o.warmup = f.warmup;
  o.paths = uint8_t(f.paths);
  o.loss = f.loss;
  o.seed = f.seed;
  o.sample = Time(std::llround(f.sample_us * 1000));
  if (!f.pcap_link.empty() && f.pcap.empty()) return "--pcap-link needs --pcap";
  o.json = f.json;
  o.csv = f.csv;
  o.pcap = f.pcap;
  o.pcap_link = f.pcap_link;
  o.pfc_report = f.pfc_report;
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

int run_dumbbell_command(const cli::FabricFlags& fabric, const cli::DumbbellFlags& f) {
  DumbbellOptions o;
  if (std::string e = fabric_options(fabric, o.fabric); !e.empty()) return fail(e);
  o.flows = f.flows;
  o.stagger = f.start == "stagger";
  o.duration = Time(std::llround(f.duration_ms * 1e6));
  o.stagger_gap = Time(std::llround(f.stagger_us * 1000));
  if (!f.window.empty()) {
    if (!parse_window(f.window, &o.window_begin, &o.window_end) || o.window_end > o.duration)
      return fail("--window-ms must be A:B with 0 <= A < B <= --duration-ms, not '" + f.window +
                  "'");
  }
  o.msg_bytes = f.msg_bytes;
  const DumbbellResult r = run_dumbbell(o);
  if (o.fabric.json.empty()) std::fputs(to_json(o, r).c_str(), stdout);
  return 0;
}

int run_incast_command(const cli::FabricFlags& fabric, const cli::IncastFlags& f) {
  IncastOptions o;
  if (std::string e = fabric_options(fabric, o.fabric); !e.empty()) return fail(e);
  o.senders = f.senders;
  o.msg_bytes = f.msg_bytes;
  o.limit = Time(std::llround(f.limit_ms * 1e6));
  if (o.fabric.warmup && o.limit <= kWarmupLead) return fail("--warmup needs --limit-ms above 0.1");
  const IncastResult r = run_incast(o);
  if (o.fabric.json.empty()) std::fputs(to_json(o, r).c_str(), stdout);
  return r.completed ? 0 : 1;
}

int run_leafspine_command(const cli::FabricFlags& fabric, const cli::LeafSpineFlags& f) {
  LeafSpineOptions o;
  if (std::string e = fabric_options(fabric, o.fabric); !e.empty()) return fail(e);
  if (uint64_t(f.leaves) * f.hosts_per_leaf > 65536)
    return fail("--leaves × --hosts-per-leaf must be at most 65536 hosts");
  o.leaves = f.leaves;
  o.spines = f.spines;
  o.hosts_per_leaf = f.hosts_per_leaf;
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

int run_plot_command(cli::PlotFlags f) {
  std::ifstream in(f.csv);
  if (!in) return fail("--csv " + f.csv + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  std::stringstream ys(f.y);
  for (std::string c; std::getline(ys, c, ',');)
    if (!c.empty()) f.spec.y.push_back(c);
  if (f.spec.y.empty()) return fail("--y names no column");
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

int run_lab_command(const cli::LabFlags& f) {
  if (f.list) {
    if (!f.name.empty()) return fail("lab: give a NAME or --list, not both");
    std::fputs(lab_list().c_str(), stdout);
    return 0;
  }
  std::string names;
  for (const Lab& l : labs()) names += (names.empty() ? "" : ", ") + std::string(l.name);
  if (f.name.empty()) return fail("lab needs a NAME or --list (" + names + ")");
  const Lab* lab = find_lab(f.name);
  if (lab == nullptr) return fail("no lab '" + f.name + "' (" + names + ")");
  const LabResult r = lab->run(f.quick);
  const std::string svg = f.svg.empty() ? "lab-" + f.name + ".svg" : f.svg;
  std::ofstream out(svg, std::ios::binary | std::ios::trunc);
  out << r.svg;
  out.close();
  if (!out) return fail("--svg " + svg + ": cannot write");
  if (f.json == "-") {
    std::fputs(lab_json(*lab, r, f.quick).c_str(), stdout);
  } else {
    std::fputs(lab_report(*lab, r).c_str(), stdout);
    std::printf("\nplot: %s; both runs took %.2f s of wall time\n", svg.c_str(), r.wall_s);
    if (!f.json.empty()) {
      std::ofstream j(f.json, std::ios::binary | std::ios::trunc);
      j << lab_json(*lab, r, f.quick);
      j.close();
      if (!j) return fail("--json " + f.json + ": cannot write");
    }
  }
  return 0;
}

}  // namespace
}  // namespace uroce::sim

int main(int argc, char** argv) {
  using namespace uroce::sim;
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  cli::Flags f;
  std::string help, err;
  if (!cli::parse(args, &f, &help, &err)) {
    if (err.empty()) {
      std::fputs(help.c_str(), stdout);
      return args.empty() ? 2 : 0;
    }
    return fail(err);
  }
  try {
    switch (f.command) {
      case cli::kRp:
        return run_rp_command(f.rp);
      case cli::kDumbbell:
        return run_dumbbell_command(f.fabric, f.dumbbell);
      case cli::kIncast:
        return run_incast_command(f.fabric, f.incast);
      case cli::kLeafSpine:
        return run_leafspine_command(f.fabric, f.leafspine);
      case cli::kPlot:
        return run_plot_command(f.plot);
      case cli::kLab:
        return run_lab_command(f.lab);
    }
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 2;
}
