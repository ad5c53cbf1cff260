// What a run found, per message size and for the whole run, on this side and (when the peer is
// uroce-perf) on the peer's: the figures report.cc prints, --json writes and --plot draws.
// Everything here is plain data in SI units (bytes, seconds, nanoseconds); perftest's units
// (MB/s as 2^20 B/s, Gb/s as 10^9 bit/s, microseconds, the halved round trip) are applied only
// when printing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tools/perf/histogram.h"
#include "tools/perf/setup.h"

namespace uroce::perf {

// One direction of a bandwidth run.
struct BwSummary {
  uint64_t msgs = 0;
  uint64_t bytes = 0;
  double seconds = 0;  // first post (or receive) to last completion (or receive)
  double avg = 0;      // bytes per second
  double peak = 0;     // bytes per second; 0 with -N or too few completions
  double msg_rate() const { return seconds > 0 ? static_cast<double>(msgs) / seconds : 0; }
};

// From completion marks (time in ns, messages completed then). The peak is the best rate over
// any stretch of at least a tenth of the run's time, taking for each end the shortest such
// stretch: perftest's "best window" idea without its O(n^2) search, and robust against the
// bursts in which completions arrive. It is never below the average.
BwSummary summarize_bw(uint64_t size, uint64_t first_ns, uint64_t last_ns,
                       std::vector<std::pair<uint64_t, uint32_t>> marks, bool peak);

// A latency histogram's figures, in ns (round trips).
struct LatSummary {
  uint64_t count = 0;
  double min = 0, max = 0, mean = 0, stdev = 0;
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0;
  double seconds = 0;  // the run's span
  double rate() const { return seconds > 0 ? static_cast<double>(count) / seconds : 0; }
};
LatSummary summarize_lat(const Histogram& h, double seconds);

// --check's verdict on what one side verified.
struct CheckSummary {
  bool done = false;  // this side verified something in this run
  uint64_t bytes = 0;
  uint64_t failures = 0;
  std::string first;  // the first failure
  bool ok() const { return failures == 0; }
};

struct SizeResult {
  uint64_t size = 0;
  uint64_t iters = 0;  // per QP (with -D: what the initiators managed)
  // This side.
  BwSummary tx, rx;   // initiating / SEND-receiving parts (bandwidth)
  uint64_t lost = 0;  // SENDs the peer says it sent that never arrived (UC/UD)
  Histogram hist;     // latency round trips
  LatSummary lat;
  CheckSummary check;
  // The peer (uroce-perf): its figures for the same run.
  bool have_remote = false;
  BwSummary remote_tx, remote_rx;
  uint64_t remote_lost = 0;
  LatSummary remote_lat;
  CheckSummary remote_check;
  // A perftest peer's bandwidth report (bidirectional runs, and a passive server's view).
  std::optional<BwReport> perftest_report;
};

// CPU time of one process over the run (getrusage RUSAGE_SELF: every thread, uroce's engine
// thread included when the device is uroce).
struct CpuTime {
  bool known = false;
  double user = 0, sys = 0, wall = 0;  // seconds
  double total() const { return user + sys; }
};

// uroce's counters of one side over the run (after minus before), in the file's order.
struct CounterDelta {
  bool known = false;
  std::string why_not;  // when !known: why there are none
  std::vector<std::pair<std::string, uint64_t>> values;
};

struct RunTotals {
  CpuTime cpu, remote_cpu;
  CounterDelta counters, remote_counters;
  bool remote_known = false;  // the peer is uroce-perf and told its side
  std::string peer_version;
};

}  // namespace uroce::perf
