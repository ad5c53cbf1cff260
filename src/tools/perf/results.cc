#include "tools/perf/results.h"

#include <algorithm>

namespace uroce::perf {

BwSummary summarize_bw(uint64_t size, uint64_t first_ns, uint64_t last_ns,
                       std::vector<std::pair<uint64_t, uint32_t>> marks, bool peak) {
  BwSummary s;
  for (const auto& m : marks) s.msgs += m.second;
  s.bytes = s.msgs * size;
  if (last_ns > first_ns) s.seconds = static_cast<double>(last_ns - first_ns) / 1e9;
  if (s.seconds > 0) s.avg = static_cast<double>(s.bytes) / s.seconds;
  if (!peak || marks.empty() || s.seconds <= 0) return s;

  std::sort(marks.begin(), marks.end());
  // cum[i]: messages completed by marks[i-1] (cum[0] = 0 at first_ns).
  std::vector<uint64_t> t(marks.size() + 1), cum(marks.size() + 1);
  t[0] = first_ns;
  cum[0] = 0;
  for (size_t i = 0; i < marks.size(); ++i) {
    t[i + 1] = marks[i].first;
    cum[i + 1] = cum[i] + marks[i].second;
  }
  // Stretches of at least a tenth of the run's time: completions arrive in bursts (one ACK
  // completes many WRs), and a stretch shorter than a few bursts would measure the burst.
  const uint64_t window = std::max<uint64_t>(1, (last_ns - first_ns) / 10);
  size_t i = 0;
  for (size_t j = 1; j < t.size(); ++j) {
    if (t[j] - t[0] < window) continue;
    // The latest start that still leaves a stretch of at least `window` up to j.
    while (i + 1 < j && t[j] - t[i + 1] >= window) ++i;
    const double rate = static_cast<double>(cum[j] - cum[i]) * static_cast<double>(size) /
                        (static_cast<double>(t[j] - t[i]) / 1e9);
    s.peak = std::max(s.peak, rate);
  }
  // The whole run is one of the stretches considered: the peak is never below the average.
  s.peak = std::max(s.peak, s.avg);
  return s;
}

LatSummary summarize_lat(const Histogram& h, double seconds) {
  LatSummary s;
  s.count = h.count();
  s.min = static_cast<double>(h.min());
  s.max = static_cast<double>(h.max());
  s.mean = h.mean();
  s.stdev = h.stdev();
  s.p50 = h.percentile(50);
  s.p90 = h.percentile(90);
  s.p99 = h.percentile(99);
  s.p999 = h.percentile(99.9);
  s.seconds = seconds;
  return s;
}

}  // namespace uroce::perf
