// uroce-sim: uroce's simulator, running the transport's own code in virtual time.
//   uroce-sim rp --cnp-us T1,T2,… --duration-us D [--line-gbps 40] [--start-gbps R]
//                [--preset paper|cx] [--set key=value,…] [--csv FILE]
// Subcommands and flags: docs/simulator.md.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "sim/rp.h"
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

}  // namespace
}  // namespace uroce::sim

int main(int argc, char** argv) {
  using uroce::sim::RpFlags;
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
  CLI11_PARSE(app, argc, argv);
  if (rp_cmd->parsed()) return uroce::sim::run_rp_command(rp);
  return 2;
}
