// uroce-perf's output: perftest's header block, address lines and result table (the same
// headings, columns, units and row layout as perftest 6.06, so scripts that parse ib_* output
// parse this too), then uroce-perf's own lines after the table's closing rule (percentiles,
// message rate, CPU time, uroce counters, --check), and the --json document.
//
// perftest's conventions kept in the table: MB/sec is 2^20 bytes per second, Gb/sec 10^9 bits;
// #iterations of a bandwidth row counts every QP's messages; latencies are in microseconds and,
// for SEND and WRITE, half the round trip; in a bidirectional run the row is the sum of both
// sides. Where uroce-perf differs (documented in docs/uroce-perf.md): t_typical is the median,
// the percentiles come from the histogram (within 0.4%), and no sample is dropped (perftest
// drops the two largest).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/perf/options.h"
#include "tools/perf/resources.h"
#include "tools/perf/results.h"
#include "tools/perf/setup.h"

namespace uroce::perf {

struct ReportContext {
  const Options* o = nullptr;
  const DeviceInfo* dev = nullptr;
  ibv_mtu mtu = IBV_MTU_1024;
  int out_reads = 1;
  bool new_api = false;
  bool client = false;
  const Peer* peer = nullptr;
};

void print_rule();
void print_waiting_banner();
void print_test_info(const ReportContext& c);
void print_dest(const ReportContext& c, const Dest& d, bool local);
void print_table_header(const ReportContext& c);
// One bandwidth row from figures in bytes/s (this side, plus the peer's when `remote`).
void print_bw_row(const ReportContext& c, const BwReport& r);
// One latency row; #iterations is the run's count (the figures come from its samples: one
// fewer, the first exchange being a warm-up).
void print_lat_row(const ReportContext& c, uint64_t size, uint64_t iters, const LatSummary& s);

// This side's figures as perftest exchanges them (in the report's units).
BwReport bw_report(const ReportContext& c, uint64_t size, const BwSummary& s);
// perftest's latency divisor: 2 for SEND and WRITE (half the round trip), 1 for READ/atomics.
double lat_divisor(const Options& o);

void print_extras(const ReportContext& c, const std::vector<SizeResult>& results,
                  const RunTotals& totals);
std::string json_report(const ReportContext& c, const std::vector<SizeResult>& results,
                        const RunTotals& totals, const std::string& status);

}  // namespace uroce::perf
