// What the scenarios' files share (scenario.h is the interface): the set-up every topology
// starts from and the run itself (scenario.cc), used by the dumbbell and the incast (scenario.cc)
// and the leaf-spine (scenario_leafspine.cc); and the collection of a run's results — the
// window's snapshots, the CSV time series, RunResult (scenario_collect.cc). The summaries' JSON:
// scenario_json.cc. Internal to the scenarios.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sim/scenario.h"

namespace uroce::sim::scenario_detail {

using NK = NodeRef::Kind;

// --- set-up and run (scenario.cc) ----------------------------------------------------------------

// A host's and a switch's configuration from the fabric flags.
HostConfig host_config(const FabricOptions& o);
SwitchConfig switch_config(const FabricOptions& o);
// The link MTUs the options ask for, by link name.
void apply_link_mtus(Fabric& f, const FabricOptions& o);
// The measurement window: [begin, end) of a run of `duration`, kNever meaning the second half.
void set_window(Fabric& f, Time duration, Time begin, Time end);
// The CSV sampling interval: --sample, or a thousandth of the run.
Time sample_interval(const FabricOptions& o, Time duration);
// `prefix` and then `i` ("h3", "leaf0"): a node's or a flow's name. Appended, never built as
// "h" + std::to_string(i): GCC 12 at -O3 takes that concatenation's inlined copy for an overlap
// (-Wrestrict, a false positive that -Werror turns into an error).
std::string numbered(const char* prefix, uint64_t i);
// Writes `text` to `path` ("-": stdout; "": nowhere).
void write_file(const std::string& path, const std::string& text);

class Sampler;
// Runs `f` to `until` — or until every flow is done, with `stop_when_done`, when the window
// ends with the run — with the time series (`sampler`, given its per-flow series here), the
// capture the options ask for (of `capture_link` unless --pcap-link names one) and the
// window's snapshots; its results and series.
RunResult run_fabric(Fabric& f, Sampler& sampler, const FabricOptions& o,
                     const std::string& capture_link, Time until, bool stop_when_done = false);

// Writes what the options ask for: the time series (--csv) and the summary (--json).
template <typename Options, typename Result>
void write_outputs(const Options& o, const Result& r) {
  write_file(o.fabric.csv, r.run.series);
  if (!o.fabric.pfc_report.empty()) write_file(o.fabric.pfc_report, pfc_report(o.fabric, r.run));
  if (!o.fabric.json.empty()) write_file(o.fabric.json, to_json(o, r));
}

// --- a run's results (scenario_collect.cc) -----------------------------------------------------

// Counters summed over the fabric at one instant (the window's edges).
struct Snapshot {
  std::vector<uint64_t> goodput;  // per flow
  uint64_t drops = 0, mtu_drops = 0, marks = 0, cnps = 0, pause = 0, resume = 0;
  Time pause_ns = 0;
  uint64_t retransmitted = 0, timeouts = 0, probes = 0;
  uint64_t lost = 0;  // by the links' random loss
  uint64_t sr_ooo = 0, sr_sacks = 0, sr_resends = 0;
  uint64_t mp_sprayed = 0, mp_rotations = 0, mp_ecn_rotations = 0;
  std::vector<PortReport> ports;
};
Snapshot snapshot(const Fabric& f);

// Takes a snapshot at a given time (the window's start), as an observer.
class SnapshotAt final : public EventHandler {
 public:
  SnapshotAt(Fabric& f, Time at);
  void on_event(Time, uint64_t) override;
  const Snapshot& get() const { return snap_; }
  bool taken() const { return taken_; }

 private:
  Fabric& f_;
  Snapshot snap_;
  bool taken_ = false;
};

// The CSV time series: one row per sampling interval, one column per series.
class Sampler final : public EventHandler {
 public:
  Sampler(Fabric& f, Time interval, Time end) : f_(f), interval_(interval), end_(end) {}
  void add(std::string name, std::function<double(Time)> get);
  // Per-flow series: goodput over the last interval, DCQCN's rate and alpha.
  void add_flows();
  void start();
  void on_event(Time now, uint64_t) override;
  std::string csv() const;

 private:
  uint64_t snapshot_pauses() const;

  Fabric& f_;
  Time interval_, end_;
  std::vector<std::string> names_;
  std::vector<std::function<double(Time)>> get_;
  std::vector<std::vector<double>> rows_;
};

// Everything a run reports, from the fabric's counters and the window's snapshots.
RunResult collect(Fabric& f, const Snapshot& begin, double wall_s);

}  // namespace uroce::sim::scenario_detail
