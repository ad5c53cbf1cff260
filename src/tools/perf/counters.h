// uroce's own counters of this process over a run, and its CPU time.
//
// A uroce device publishes its counters in /dev/shm/uroce.<pid>.<device> (engine/stats_shm.h),
// the files `uroce stats` reads; uroce-perf reads its own process's file with the same reader
// (stats_shm::read_file) before and after the run. Device counters (packets, drops by cause)
// are live; the per-QP totals (retransmissions, NAKs, RNR…) are a snapshot the device takes at
// most 100 ms after any activity (Device::publish). So the reading after a run waits for a
// snapshot taken after the run ended; when none comes within a while, the device has been idle
// since its latest one, which then holds everything. Any other device (rxe, an RNIC) has no such
// file: its counters are "not known".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tools/perf/results.h"

namespace uroce::perf {

struct CounterSnapshot {
  bool ok = false;
  std::string why_not;
  uint64_t snapshot_ns = 0;  // CLOCK_MONOTONIC of the QP totals' snapshot
  std::vector<std::pair<std::string, uint64_t>> values;
};

// This process's counters of `device` now; with since_ns, waits for a QP-total snapshot taken
// at or after since_ns, or until idle_s after since_ns (then the latest one).
CounterSnapshot read_own_counters(const std::string& device, uint64_t since_ns = 0,
                                  double idle_s = 0);
CounterDelta counter_delta(const CounterSnapshot& before, const CounterSnapshot& after);

// This process's CPU time so far (all threads) and the monotonic clock.
struct CpuSample {
  double user = 0, sys = 0;
  uint64_t wall_ns = 0;
};
CpuSample cpu_now();
CpuTime cpu_between(const CpuSample& a, const CpuSample& b);

}  // namespace uroce::perf
