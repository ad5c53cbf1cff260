// transport/cc/timely.cc: TIMELY's response to the RTT gradient, its thresholds and its
// hyper-active increase, in virtual time.
#include "transport/cc/timely.h"

#include <gtest/gtest.h>

#include <cmath>

namespace uroce::transport::cc {
namespace {

constexpr Time kUs = 1000;
constexpr uint64_t kLine = 10 * kGbps;

TimelyParams params() {
  TimelyParams p;  // defaults: T_low 0, T_high 1 ms, minRTT 20 µs, δ 10 Mb/s, β 0.8, EWMA 0.02
  return p;
}

TEST(Timely, StartsAtLineRateAndIgnoresCnps) {
  Timely t(params(), kLine);
  EXPECT_EQ(t.rate_bps(), kLine);
  EXPECT_FALSE(t.limiting());
  EXPECT_FALSE(t.on_cnp(0));
  EXPECT_EQ(t.rate_bps(), kLine);
  EXPECT_EQ(t.next_deadline(), kNever);
}

TEST(Timely, RisingRttCutsInProportionToTheGradient) {
  Timely t(params(), kLine);
  // Samples a minRTT apart (weight 1), RTT rising 10 µs per sample.
  Time now = 0;
  t.on_rtt_sample(now, 100 * kUs);  // first: no gradient, an increase (already at line rate)
  EXPECT_EQ(t.rate_bps(), kLine);
  double expect = double(kLine), avg = 0;
  for (int i = 1; i <= 20; ++i) {
    now += 20 * kUs;
    t.on_rtt_sample(now, (100 + 10 * Time(i)) * kUs);
    avg = 0.98 * avg + 0.02 * 10000.0;  // ns
    const double grad = avg / 20000.0;
    EXPECT_NEAR(t.gradient(), grad, 1e-12) << i;
    expect *= 1 - 0.8 * grad;
    EXPECT_NEAR(double(t.rate_bps()), expect, 20.0) << i;  // integer rates: 0.5 per step
  }
  EXPECT_TRUE(t.limiting());
  // A steeper rise cuts harder than a shallow one.
  Timely steep(params(), kLine), shallow(params(), kLine);
  for (int i = 0; i < 10; ++i) {
    steep.on_rtt_sample(Time(i) * 20 * kUs, (100 + 40 * Time(i)) * kUs);
    shallow.on_rtt_sample(Time(i) * 20 * kUs, (100 + 4 * Time(i)) * kUs);
  }
  EXPECT_LT(steep.rate_bps(), shallow.rate_bps());
  EXPECT_LT(shallow.rate_bps(), kLine);
}

TEST(Timely, FallingRttIncreasesThenHyperActive) {
  TimelyParams p = params();
  Timely t(p, kLine);
  Time now = 0;
  // Get below the line rate first: one RTT above T_high.
  t.on_rtt_sample(now, 2000 * kUs);
  const double after_cut = double(kLine) * (1 - 0.8 * (1 - 1000.0 / 2000));
  EXPECT_NEAR(double(t.rate_bps()), after_cut, 1.0);
  // Falling RTTs inside [T_low, T_high]: the gradient is negative. Additive steps of δ until
  // five negative differences in a row, then 5·δ.
  uint64_t prev = t.rate_bps();
  for (int i = 1; i <= 8; ++i) {
    now += 20 * kUs;
    t.on_rtt_sample(now, (900 - 10 * Time(i)) * kUs);
    const uint64_t step = t.rate_bps() - prev;
    EXPECT_EQ(step, i < 5 ? 10 * kMbps : 50 * kMbps) << i;
    prev = t.rate_bps();
  }
  // A rise breaks the run of negative differences.
  now += 20 * kUs;
  t.on_rtt_sample(now, 1000 * kUs);
  EXPECT_LT(t.gradient(), 0.0);  // the EWMA is still negative: still an increase, but additive
  EXPECT_EQ(t.rate_bps() - prev, 10 * kMbps);
}

TEST(Timely, ThresholdsAndWeight) {
  TimelyParams p = params();
  p.t_low = 50;
  Timely t(p, kLine);
  t.on_rtt_sample(0, 5000 * kUs);  // > T_high: rate·(1 - β·(1 - 1000/5000))
  const uint64_t r1 = t.rate_bps();
  EXPECT_NEAR(double(r1), 1e10 * (1 - 0.8 * 0.8), 1.0);
  t.on_rtt_sample(20 * kUs, 30 * kUs);  // < T_low: + δ
  EXPECT_EQ(t.rate_bps(), r1 + 10 * kMbps);
  // A sample 1 µs after the last one carries 1/20 of the weight.
  t.on_rtt_sample(21 * kUs, 30 * kUs);
  EXPECT_EQ(t.rate_bps(), r1 + 10 * kMbps + 500'000);
  // Never below the floor.
  for (int i = 0; i < 100; ++i) t.on_rtt_sample(Time(100 + 20 * i) * kUs, 100'000 * kUs);
  EXPECT_EQ(t.rate_bps(), t.min_bps());
  EXPECT_EQ(t.min_bps(), 10 * kMbps);
}

}  // namespace
}  // namespace uroce::transport::cc
