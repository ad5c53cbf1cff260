// `uroce-sim rp`: the transport's own DCQCN reaction point (transport/cc/dcqcn.h), driven with
// CNPs at given times by a sender that is always backlogged — bytes leave at the current rate
// Rc, so the byte counter fires the instant they reach B — in virtual time. One row per RP
// event (docs/simulator.md, docs/congestion-control.md).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "transport/cc/dcqcn.h"

namespace uroce::sim {

using transport::Time;

struct RpScenario {
  transport::cc::DcqcnParams params = transport::cc::dcqcn_preset(transport::cc::Preset::kPaper);
  uint64_t line_bps = 40 * transport::cc::kGbps;
  uint64_t start_bps = 0;  // 0 = the line rate
  std::vector<Time> cnps;  // CNP arrival times, non-decreasing
  Time duration = 0;       // events up to and including this time
};

// Every event of the run, CNP cuts, alpha periods, timer and byte-counter increases, in order.
std::vector<transport::cc::CcEvent> run_rp(const RpScenario& s);

// The CSV of `uroce-sim rp`: the header `t_us,event,stage,rc_gbps,rt_gbps,alpha`, then one row
// per event (t in µs to the nanosecond, rates in Gb/s to the kb/s, alpha to 1e-6).
std::string rp_csv(const std::vector<transport::cc::CcEvent>& events);

}  // namespace uroce::sim
