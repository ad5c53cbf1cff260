// uroce-perf's latency histogram: every sample a latency test takes goes in here, in nanoseconds
// read from CLOCK_MONOTONIC, and every figure the reports print (percentiles, min, max, mean,
// standard deviation) comes out of it.
//
// Why not perftest's way: perftest keeps raw cycle counts and converts them with a CPU frequency
// it calibrates at start-up; on a loaded VM that calibration fails and the report reads `inf`.
// A monotonic clock needs no calibration, and a histogram has a fixed size, so a duration run
// (-D) or many threads merge into one without keeping every sample.
//
// Buckets are log-linear (the HdrHistogram layout): values below 2 * kSub (256 ns) have a bucket
// each; above, every power of two [2^k, 2^(k+1)) is split into kSub equal buckets. A bucket's
// width is therefore at most 1/kSub (0.78%) of its lower bound, and a percentile, reported as the
// middle of its bucket, is within 0.4% of the exact order statistic. min, max, count, mean and
// variance are kept exactly beside the buckets (variance by Welford's method, merged with Chan's
// formula), so they carry no bucket error at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace uroce::perf {

class Histogram {
 public:
  static constexpr unsigned kSubBits = 7;
  static constexpr uint64_t kSub = uint64_t{1} << kSubBits;  // buckets per power of two
  // Buckets for every uint64_t: 2 * kSub exact ones, then kSub for each power of two from
  // 2^(kSubBits + 1) up to 2^63.
  static constexpr size_t kBuckets = (65 - kSubBits) * kSub;

  Histogram();

  void record(uint64_t ns);
  // Adds every sample of `other` (e.g. another thread's), as if each had been recorded here.
  void merge(const Histogram& other);
  void clear();

  uint64_t count() const { return count_; }
  // All of these are 0 for an empty histogram: never NaN, never infinite.
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? mean_ : 0; }
  // Population standard deviation (the n divisor), exact.
  double stdev() const;
  // The nearest-rank p-th percentile (0 <= p <= 100): the smallest recorded value v such that at
  // least p% of the samples are <= v, within the bucket error above. 0 gives min(), 100 gives
  // max() exactly; the result always lies within [min(), max()].
  double percentile(double p) const;

  // Non-empty buckets in ascending order, for plots and --json: [lower, upper) in ns and count.
  struct Bucket {
    uint64_t lower, upper, count;
  };
  std::vector<Bucket> buckets() const;

  // The bucket a value falls in and the range a bucket covers (exposed for the unit test).
  static size_t index_of(uint64_t ns);
  static uint64_t lower_of(size_t index);
  static uint64_t width_of(size_t index);

 private:
  std::vector<uint64_t> counts_;  // kBuckets entries
  uint64_t count_ = 0;
  uint64_t min_ = UINT64_MAX, max_ = 0;
  double mean_ = 0, m2_ = 0;  // Welford: running mean and sum of squared deviations
};

}  // namespace uroce::perf
