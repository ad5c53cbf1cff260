// The latency histogram (src/tools/perf/histogram.h): bucket layout, percentiles within the
// stated error of the exact order statistic, exact min/max/mean/stdev, merging, and finite
// figures for an empty histogram (perftest prints `inf` when its clock calibration fails; this
// must never).
#include "tools/perf/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace uroce::perf {
namespace {

// The nearest-rank percentile of sorted samples, the definition the histogram approximates.
double exact_percentile(const std::vector<uint64_t>& sorted, double p) {
  if (p <= 0) return static_cast<double>(sorted.front());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]);
}

TEST(HistogramTest, BucketsTileTheWholeRangeWithoutGaps) {
  // Every bucket starts where the previous one ends, from 0 to 2^64.
  uint64_t next = 0;
  for (size_t i = 0; i < Histogram::kBuckets; ++i) {
    ASSERT_EQ(Histogram::lower_of(i), next) << "bucket " << i;
    next = Histogram::lower_of(i) + Histogram::width_of(i);
  }
  EXPECT_EQ(next, 0u);  // wrapped past UINT64_MAX: the last bucket ends at 2^64
  for (uint64_t v :
       {uint64_t{0}, uint64_t{1}, uint64_t{255}, uint64_t{256}, uint64_t{257}, uint64_t{511},
        uint64_t{512}, uint64_t{1000000}, uint64_t{1} << 40, UINT64_MAX}) {
    const size_t i = Histogram::index_of(v);
    ASSERT_LT(i, Histogram::kBuckets);
    EXPECT_GE(v, Histogram::lower_of(i)) << v;
    EXPECT_LE(v - Histogram::lower_of(i), Histogram::width_of(i) - 1) << v;
  }
}

TEST(HistogramTest, BucketWidthIsWithinOnePartInKSubOfItsValue) {
  for (size_t i = 2 * Histogram::kSub; i < Histogram::kBuckets; ++i)
    ASSERT_LE(
        static_cast<double>(Histogram::width_of(i)) / static_cast<double>(Histogram::lower_of(i)),
        1.0 / Histogram::kSub)
        << "bucket " << i;
}

TEST(HistogramTest, SmallValuesAreExact) {
  Histogram h;
  for (uint64_t v = 1; v <= 100; ++v) h.record(v);
  EXPECT_EQ(h.count(), 100u);
  EXPECT_EQ(h.min(), 1u);
  EXPECT_EQ(h.max(), 100u);
  EXPECT_DOUBLE_EQ(h.percentile(50), 50);
  EXPECT_DOUBLE_EQ(h.percentile(90), 90);
  EXPECT_DOUBLE_EQ(h.percentile(99), 99);
  EXPECT_DOUBLE_EQ(h.percentile(99.9), 100);
  EXPECT_DOUBLE_EQ(h.percentile(100), 100);
  EXPECT_DOUBLE_EQ(h.percentile(0), 1);
  EXPECT_DOUBLE_EQ(h.mean(), 50.5);
  EXPECT_NEAR(h.stdev(), std::sqrt((100.0 * 100 - 1) / 12), 1e-9);  // discrete uniform 1..100
}

TEST(HistogramTest, PercentilesAreWithinTheBucketErrorOfTheExactOnes) {
  // Latency-like data: a log-normal body around 10 us and a sparse tail up to 10 ms.
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> body(std::log(10000.0), 0.3);
  std::uniform_real_distribution<double> tail(1e5, 1e7);
  std::vector<uint64_t> samples;
  Histogram h;
  for (int i = 0; i < 100000; ++i) {
    uint64_t v = static_cast<uint64_t>(i % 500 == 0 ? tail(rng) : body(rng));
    samples.push_back(v);
    h.record(v);
  }
  std::sort(samples.begin(), samples.end());
  for (double p : {1.0, 10.0, 50.0, 90.0, 99.0, 99.9, 99.99}) {
    const double exact = exact_percentile(samples, p);
    EXPECT_NEAR(h.percentile(p), exact, exact / (2 * Histogram::kSub) + 1) << "p" << p;
  }
  EXPECT_EQ(h.min(), samples.front());
  EXPECT_EQ(h.max(), samples.back());
  double sum = 0, sq = 0;
  for (uint64_t v : samples) sum += static_cast<double>(v);
  const double mean = sum / static_cast<double>(samples.size());
  for (uint64_t v : samples)
    sq += (static_cast<double>(v) - mean) * (static_cast<double>(v) - mean);
  EXPECT_NEAR(h.mean(), mean, mean * 1e-12);
  EXPECT_NEAR(h.stdev(), std::sqrt(sq / static_cast<double>(samples.size())), 1e-6 * mean);
}

TEST(HistogramTest, PercentilesStayWithinMinAndMax) {
  Histogram h;
  h.record(1000003);  // one value, deep inside a wide bucket
  for (double p : {0.0, 50.0, 99.9, 100.0}) EXPECT_DOUBLE_EQ(h.percentile(p), 1000003) << p;
}

TEST(HistogramTest, AnEmptyHistogramReportsZerosNeverNanOrInfinity) {
  Histogram h;
  EXPECT_EQ(h.count(), 0u);
  for (double v : {static_cast<double>(h.min()), static_cast<double>(h.max()), h.mean(), h.stdev(),
                   h.percentile(50), h.percentile(99.9), h.percentile(100)}) {
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_EQ(v, 0);
  }
  EXPECT_TRUE(h.buckets().empty());
}

TEST(HistogramTest, MergingEqualsRecordingEverythingInOne) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> d(100, 50000000);
  Histogram a, b, all;
  for (int i = 0; i < 20000; ++i) {
    uint64_t v = d(rng);
    (i % 3 ? a : b).record(v);
    all.record(v);
  }
  Histogram merged;
  merged.merge(a);
  merged.merge(b);
  merged.merge(Histogram());  // an empty one changes nothing
  EXPECT_EQ(merged.count(), all.count());
  EXPECT_EQ(merged.min(), all.min());
  EXPECT_EQ(merged.max(), all.max());
  EXPECT_NEAR(merged.mean(), all.mean(), all.mean() * 1e-12);
  EXPECT_NEAR(merged.stdev(), all.stdev(), all.stdev() * 1e-9);
  for (double p : {50.0, 90.0, 99.0, 99.9}) EXPECT_EQ(merged.percentile(p), all.percentile(p));
  auto mb = merged.buckets(), ab = all.buckets();
  ASSERT_EQ(mb.size(), ab.size());
  for (size_t i = 0; i < mb.size(); ++i) EXPECT_EQ(mb[i].count, ab[i].count);
}

TEST(HistogramTest, ClearForgetsEverything) {
  Histogram h;
  h.record(5);
  h.record(5000);
  h.clear();
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.max(), 0u);
  h.record(7);
  EXPECT_EQ(h.min(), 7u);
  EXPECT_DOUBLE_EQ(h.mean(), 7);
}

}  // namespace
}  // namespace uroce::perf
