// `uroce-sim lab NAME`: the classic RoCE failures, each run twice on the simulated fabric with
// uroce's own transport — broken, then with the fix — and shown side by side the way an
// engineer looks at a fabric: switch-style per-port, per-priority PFC counters, queue depths,
// ECN marks, drops, retransmissions, flow completion times, and one SVG plot of the two runs.
// Every number is the run's own (RunResult, scenario.h); nothing is modelled for the lab.
// docs/labs/ has one page per lab; docs/labs/README.md the index.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/scenario.h"

namespace uroce::sim {

// One run of a lab: its configuration in a line, what it measured, and the lab's own numbers
// beyond RunResult's (a victim flow's goodput, an incast's ideal completion time…).
struct LabRun {
  std::string setup;
  RunResult run;
  std::vector<std::pair<std::string, double>> extra;  // key, value (keys: lab_metrics())
};

struct LabResult {
  LabRun before, after;
  std::string svg;    // the plot: one series of each run over time
  double wall_s = 0;  // both runs, this machine
};

struct Lab {
  const char* name;
  const char* title;  // the failure, one line
  const char* look;   // what to look at, one line
  const char* fix;    // the fix, one line
  // The metrics (keys of lab_metrics()) shown first, the lab's headline.
  std::vector<const char*> headline;
  // Runs both cases; `quick` is the smaller variant the CI runs (same failure, less time).
  LabResult (*run)(bool quick);
};

// Every lab, in docs/labs/README.md's order.
const std::vector<Lab>& labs();
const Lab* find_lab(std::string_view name);
// `uroce-sim lab --list`.
std::string lab_list();

// One metric of a run: a stable key (the JSON's), a label, its value.
struct LabMetric {
  std::string key, label;
  double value = 0;
};
// Every metric of `r`, headline or not: totals, per-priority PFC and drops, the extras.
std::vector<LabMetric> lab_metrics(const LabRun& r);

// What `uroce-sim lab NAME` prints: the lab, the headline before/after, the per-port PFC table
// (`show interface … priority-flow-control`), queues, ECN marks and drops per port, the flows.
std::string lab_report(const Lab& lab, const LabResult& r);
// The same numbers as JSON: {"lab", "quick", "wall_s", "before": {key: value…}, "after": …},
// each side with its "setup", "ports" and "flows" too.
std::string lab_json(const Lab& lab, const LabResult& r, bool quick);

}  // namespace uroce::sim
