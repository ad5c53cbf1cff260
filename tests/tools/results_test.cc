// The figures a run reports (src/tools/perf/results.h) and --check's data pattern
// (src/tools/perf/datapath.h).
#include "tools/perf/results.h"

#include <gtest/gtest.h>

#include <vector>

#include "tools/perf/datapath.h"

namespace uroce::perf {
namespace {

using Marks = std::vector<std::pair<uint64_t, uint32_t>>;

TEST(ResultsTest, AverageBandwidthIsBytesOverTheSpan) {
  // 100 messages of 1000 bytes, completed one per ms from t=1 ms: 1 s... 0.1 s span.
  Marks m;
  for (uint64_t i = 1; i <= 100; ++i) m.emplace_back(i * 1000000, 1);
  BwSummary s = summarize_bw(1000, 0, 100000000, m, true);
  EXPECT_EQ(s.msgs, 100u);
  EXPECT_EQ(s.bytes, 100000u);
  EXPECT_DOUBLE_EQ(s.seconds, 0.1);
  EXPECT_DOUBLE_EQ(s.avg, 1e6);
  EXPECT_DOUBLE_EQ(s.msg_rate(), 1000);
  EXPECT_NEAR(s.peak, 1e6, 1);  // a steady run peaks at its average
}

TEST(ResultsTest, PeakFindsTheFastStretchButNotASingleBurst) {
  // 50 completions spread over 90 ms, then 50 in the last 10 ms: the last tenth runs 5x the
  // average; one burst of 10 completions at one instant must not count as infinite.
  Marks m;
  for (uint64_t i = 1; i <= 50; ++i) m.emplace_back(i * 1800000, 1);
  for (uint64_t i = 1; i <= 5; ++i) m.emplace_back(90000000 + i * 2000000, 10);
  BwSummary s = summarize_bw(1000, 0, 100000000, m, true);
  EXPECT_EQ(s.msgs, 100u);
  EXPECT_DOUBLE_EQ(s.avg, 1e6);
  EXPECT_GT(s.peak, 3 * s.avg);
  EXPECT_LT(s.peak, 6 * s.avg);
}

TEST(ResultsTest, NoPeakAndEmptyRunsGiveZeros) {
  Marks m{{5, 3}};
  EXPECT_EQ(summarize_bw(64, 0, 10, m, false).peak, 0);
  BwSummary empty = summarize_bw(64, 0, 0, {}, true);
  EXPECT_EQ(empty.msgs, 0u);
  EXPECT_EQ(empty.avg, 0);
  EXPECT_EQ(empty.msg_rate(), 0);
}

TEST(ResultsTest, LatencySummaryComesFromTheHistogram) {
  Histogram h;
  for (uint64_t v = 1; v <= 1000; ++v) h.record(v * 100);
  LatSummary s = summarize_lat(h, 0.5);
  EXPECT_EQ(s.count, 1000u);
  EXPECT_EQ(s.min, 100);
  EXPECT_EQ(s.max, 100000);
  EXPECT_NEAR(s.p50, 50000, 50000 / 256.0);
  EXPECT_NEAR(s.p99, 99000, 99000 / 256.0);
  EXPECT_DOUBLE_EQ(s.rate(), 2000);
}

TEST(ResultsTest, CheckPatternCatchesEveryKindOfBadData) {
  std::vector<uint8_t> buf(10000);
  fill_pattern(buf.data(), buf.size(), true, 3);
  EXPECT_EQ(find_mismatch(buf.data(), buf.size(), true, 3), buf.size());
  for (uint64_t i : {uint64_t{0}, uint64_t{7}, uint64_t{8}, uint64_t{4095}, uint64_t{9999}}) {
    EXPECT_EQ(pattern_byte(true, 3, i), buf[i]);
    std::vector<uint8_t> bad = buf;
    bad[i] ^= 0x20;
    EXPECT_EQ(find_mismatch(bad.data(), bad.size(), true, 3), i);
  }
  // The other direction's data, another QP's, or a shifted copy are all wrong.
  EXPECT_LT(find_mismatch(buf.data(), buf.size(), false, 3), 8u);
  EXPECT_LT(find_mismatch(buf.data(), buf.size(), true, 4), 8u);
  EXPECT_LT(find_mismatch(buf.data() + 1, buf.size() - 1, true, 3), 8u);
  std::vector<uint8_t> zeros(100, 0);
  EXPECT_LT(find_mismatch(zeros.data(), zeros.size(), true, 0), 8u);
}

}  // namespace
}  // namespace uroce::perf
