// transport/cc/dcqcn.cc, the DCQCN reaction point, in virtual time: the cut, alpha, the three
// increase stages, caps and floors, and each named choice (params.h).
#include "transport/cc/dcqcn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace uroce::transport::cc {
namespace {

constexpr Time kUs = 1000;
constexpr uint64_t kLine = 40 * kGbps;

struct Log : CcObserver {
  std::vector<CcEvent> ev;
  void on_cc_event(const CcEvent& e) override { ev.push_back(e); }
  std::vector<CcEvent> of(CcEvent::Kind k) const {
    std::vector<CcEvent> out;
    for (const CcEvent& e : ev) {
      if (e.kind == k) out.push_back(e);
    }
    return out;
  }
};

DcqcnParams paper() {
  return dcqcn_preset(Preset::kPaper);
}
DcqcnParams cx() {
  return dcqcn_preset(Preset::kCx);
}

TEST(Dcqcn, NothingRunsBeforeTheFirstCnp) {
  DcqcnRp rp(paper(), kLine);
  EXPECT_EQ(rp.rate_bps(), kLine);
  EXPECT_EQ(rp.target_bps(), kLine);
  EXPECT_FALSE(rp.limiting());
  EXPECT_FALSE(rp.wants_bytes());
  EXPECT_EQ(rp.next_deadline(), kNever);
  rp.on_bytes_sent(10 * kUs, 1'000'000'000);  // counted by nothing
  rp.on_timer(20 * kUs);
  EXPECT_EQ(rp.rate_bps(), kLine);
  EXPECT_DOUBLE_EQ(rp.alpha(1'000'000 * kUs), 1.0);  // alpha = 1 at start, and stays
}

TEST(Dcqcn, FirstCnpHalvesTheRate) {
  DcqcnRp rp(paper(), kLine);
  EXPECT_TRUE(rp.on_cnp(100 * kUs));
  EXPECT_EQ(rp.rate_bps(), kLine / 2);         // Rc·(1 - 1/2) with alpha = 1
  EXPECT_EQ(rp.target_bps(), kLine);           // Rt = Rc before the cut
  EXPECT_DOUBLE_EQ(rp.alpha(100 * kUs), 1.0);  // (1 - g)·1 + g
  EXPECT_TRUE(rp.limiting());
  EXPECT_TRUE(rp.wants_bytes());
  EXPECT_EQ(rp.next_deadline(), 155 * kUs);  // the rate timer starts at the CNP
  EXPECT_EQ(rp.bytes_to_byte_event(), 10'000'000u);

  // ConnectX: alpha 1023/1024 at the first CNP, so just under half is cut.
  DcqcnRp c(cx(), kLine);
  c.on_cnp(0);
  EXPECT_EQ(c.rate_bps(), uint64_t(std::llround(40e9 * (1 - 1023.0 / 1024 / 2))));
  DcqcnParams one = cx();
  one.initial_alpha_value = 1024;
  DcqcnRp c1(one, kLine);
  c1.on_cnp(0);
  EXPECT_EQ(c1.rate_bps(), kLine / 2);
}

TEST(Dcqcn, AlphaHalfLife) {
  // Paper: g = 1/256, K = 55 µs: alpha = (255/256)^n after n quiet periods; it first falls to
  // one half after 178 periods (ln 2 / -ln(255/256) = 177.1), 9.79 ms.
  DcqcnRp rp(paper(), kLine);
  rp.on_cnp(0);
  const Time k = 55 * kUs;
  EXPECT_DOUBLE_EQ(rp.alpha(k - 1), 1.0);
  EXPECT_DOUBLE_EQ(rp.alpha(k), 255.0 / 256);
  EXPECT_NEAR(rp.alpha(10 * k), std::pow(255.0 / 256, 10), 1e-15);
  EXPECT_GT(rp.alpha(177 * k), 0.5);
  EXPECT_LE(rp.alpha(178 * k), 0.5);
  // A second CNP restarts the period and pushes alpha back up: (1 - g)·a + g.
  const double a = rp.alpha(178 * k + 7);
  rp.on_cnp(178 * k + 7);
  EXPECT_DOUBLE_EQ(rp.alpha(178 * k + 7), (255.0 / 256) * a + 1.0 / 256);
  EXPECT_DOUBLE_EQ(rp.alpha(178 * k + 7 + k - 1), rp.alpha(178 * k + 7));

  // ConnectX: g = 5/1024 every 1 µs from the first CNP: half-life 142 µs.
  DcqcnRp c(cx(), kLine);
  c.on_cnp(0);
  const double a0 = 1023.0 / 1024;
  EXPECT_NEAR(c.alpha(141 * kUs) / a0, std::pow(1019.0 / 1024, 141), 1e-12);
  EXPECT_GT(c.alpha(140 * kUs), 0.5);
  EXPECT_LE(c.alpha(142 * kUs), 0.5);
}

TEST(Dcqcn, AlphaTicksAreEventsWhenObserved) {
  DcqcnRp rp(paper(), kLine);
  Log log;
  rp.set_observer(&log, /*alpha_ticks=*/true);
  rp.on_cnp(0);
  const Time k = 55 * kUs;
  for (Time t = 0; t <= 10 * k;) {
    t = rp.next_deadline();
    rp.on_timer(t);
  }
  const std::vector<CcEvent> ticks = log.of(CcEvent::Kind::kAlpha);
  ASSERT_GE(ticks.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(ticks[i].t, (i + 1) * k);
    EXPECT_NEAR(ticks[i].alpha, std::pow(255.0 / 256, double(i + 1)), 1e-15);
    EXPECT_EQ(ticks[i].stage, CcEvent::Stage::kNone);
  }
}

TEST(Dcqcn, FastRecoveryTakesFTimerSteps) {
  DcqcnParams p = paper();
  p.rpg_byte_reset = 0;  // the timer alone
  DcqcnRp rp(p, kLine);
  Log log;
  rp.set_observer(&log);
  rp.on_cnp(0);
  uint64_t rc = kLine / 2;
  for (int i = 1; i <= 5; ++i) {
    rp.on_timer(rp.next_deadline());
    rc = (kLine + rc + 1) / 2;
    EXPECT_EQ(rp.rate_bps(), rc) << i;
    EXPECT_EQ(rp.target_bps(), kLine) << i;
  }
  EXPECT_EQ(rp.rate_bps(), 39'375'000'000u);  // 40 - 20/32
  rp.on_timer(rp.next_deadline());
  const std::vector<CcEvent> timers = log.of(CcEvent::Kind::kTimer);
  ASSERT_EQ(timers.size(), 6u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(timers[i].stage, CcEvent::Stage::kFastRecovery);
    EXPECT_EQ(timers[i].t, Time(i + 1) * 55 * kUs);
  }
  EXPECT_EQ(timers[5].stage, CcEvent::Stage::kAdditive);

  // fr_boundary = lt (ns3-rdma): F - 1 steps.
  p.fr_boundary = FrBoundary::kLt;
  DcqcnRp lt(p, kLine);
  Log l2;
  lt.set_observer(&l2);
  lt.on_cnp(0);
  for (int i = 0; i < 5; ++i) lt.on_timer(lt.next_deadline());
  const std::vector<CcEvent> t2 = l2.of(CcEvent::Kind::kTimer);
  ASSERT_EQ(t2.size(), 5u);
  EXPECT_EQ(t2[3].stage, CcEvent::Stage::kFastRecovery);
  EXPECT_EQ(t2[4].stage, CcEvent::Stage::kAdditive);
}

TEST(Dcqcn, AdditiveIncreaseSlope) {
  // Start at 10 Gb/s on a 40 Gb/s line so Rt has room to grow; timer only.
  DcqcnParams p = paper();
  p.rpg_byte_reset = 0;
  DcqcnRp rp(p, kLine, 10 * kGbps);
  rp.on_cnp(1 * kUs);
  EXPECT_EQ(rp.target_bps(), 10 * kGbps);
  EXPECT_EQ(rp.rate_bps(), 5 * kGbps);
  for (int i = 0; i < 5; ++i) rp.on_timer(rp.next_deadline());  // fast recovery
  EXPECT_EQ(rp.target_bps(), 10 * kGbps);
  // Additive increase: Rt grows by R_AI = 40 Mb/s per T = 55 µs, i.e. 727 Mb/s per ms, and Rc
  // follows it at a gap that settles at R_AI.
  const Time start = rp.next_deadline();
  for (int i = 1; i <= 100; ++i) {
    const uint64_t rt = rp.target_bps();
    rp.on_timer(rp.next_deadline());
    EXPECT_EQ(rp.target_bps(), rt + 40 * kMbps) << i;
  }
  const Time end = start + 99 * 55 * kUs;
  const double slope_mbps_per_ms =
      double(rp.target_bps() - 10 * kGbps) / 1e6 / (double(end - start + 55 * kUs) / 1e6);
  EXPECT_NEAR(slope_mbps_per_ms, 40.0 / 0.055, 1e-6);
  EXPECT_NEAR(double(rp.target_bps() - rp.rate_bps()), 40e6, 2.0);
}

TEST(Dcqcn, HyperIncreaseAfterFTimerAndFByteEvents) {
  DcqcnRp rp(paper(), kLine, 10 * kGbps);
  Log log;
  rp.set_observer(&log);
  rp.on_cnp(1 * kUs);  // Rt 10, Rc 5
  const uint64_t b = 10'000'000;
  for (int i = 0; i < 5; ++i) rp.on_timer(rp.next_deadline());  // T = 1..5: fast recovery
  Time t = rp.next_deadline() - 1;
  rp.on_bytes_sent(t, 5 * b);  // BC = 1..5: max(T, BC) = 5 <= F: still fast recovery
  std::vector<CcEvent> fr = log.ev;
  ASSERT_EQ(fr.size(), 11u);
  for (size_t i = 1; i < fr.size(); ++i) EXPECT_EQ(fr[i].stage, CcEvent::Stage::kFastRecovery);
  EXPECT_EQ(rp.target_bps(), 10 * kGbps);

  rp.on_timer(rp.next_deadline());  // T = 6, BC = 5: additive
  EXPECT_EQ(log.ev.back().stage, CcEvent::Stage::kAdditive);
  EXPECT_EQ(rp.target_bps(), 10 * kGbps + 40 * kMbps);
  t = rp.next_deadline() - 1;
  rp.on_bytes_sent(t, b);  // BC = 6: min(T, BC) = 6 > F: hyper, i = 1
  EXPECT_EQ(log.ev.back().kind, CcEvent::Kind::kBytes);
  EXPECT_EQ(log.ev.back().stage, CcEvent::Stage::kHyper);
  EXPECT_EQ(rp.target_bps(), 10 * kGbps + 240 * kMbps);
  rp.on_timer(rp.next_deadline());  // T = 7: min = 6, i = 1
  EXPECT_EQ(rp.target_bps(), 10 * kGbps + 440 * kMbps);
  rp.on_bytes_sent(rp.next_deadline() - 1, b);  // BC = 7: i = 2
  EXPECT_EQ(log.ev.back().stage, CcEvent::Stage::kHyper);
  EXPECT_EQ(rp.target_bps(), 10 * kGbps + 840 * kMbps);

  // hyper_step = constant: R_HAI per hyper event.
  DcqcnParams p = paper();
  p.hyper_step = HyperStep::kConstant;
  DcqcnRp c(p, kLine, 10 * kGbps);
  c.on_cnp(1 * kUs);
  for (int i = 0; i < 6; ++i) c.on_timer(c.next_deadline());
  c.on_bytes_sent(c.next_deadline() - 1, 7 * b);  // BC 1..5 additive (T = 6), 6 and 7 hyper
  EXPECT_EQ(c.target_bps(), 10 * kGbps + 6 * 40 * kMbps + 2 * 200 * kMbps);
}

TEST(Dcqcn, ByteCounterFiresEveryBBytes) {
  DcqcnParams p = paper();
  DcqcnRp rp(p, kLine);
  Log log;
  rp.set_observer(&log);
  rp.on_cnp(0);
  rp.on_bytes_sent(1, 9'999'999);
  EXPECT_TRUE(log.of(CcEvent::Kind::kBytes).empty());
  EXPECT_EQ(rp.bytes_to_byte_event(), 1u);
  rp.on_bytes_sent(2, 1);
  ASSERT_EQ(log.of(CcEvent::Kind::kBytes).size(), 1u);
  EXPECT_EQ(log.of(CcEvent::Kind::kBytes)[0].t, 2u);
  EXPECT_EQ(rp.byte_events(), 1u);
  // A CNP resets the byte count.
  rp.on_bytes_sent(3, 5'000'000);
  rp.on_cnp(4);
  EXPECT_EQ(rp.bytes_to_byte_event(), 10'000'000u);
  EXPECT_EQ(rp.byte_events(), 0u);
}

TEST(Dcqcn, RecoversToLineRateAndStops) {
  DcqcnRp rp(paper(), kLine);
  rp.on_cnp(0);
  int events = 0;
  while (rp.next_deadline() != kNever && events < 1000) {
    rp.on_timer(rp.next_deadline());
    ++events;
  }
  EXPECT_LT(events, 100);
  EXPECT_EQ(rp.rate_bps(), kLine);
  EXPECT_EQ(rp.target_bps(), kLine);
  EXPECT_FALSE(rp.limiting());
  EXPECT_FALSE(rp.wants_bytes());
  EXPECT_FALSE(rp.active());
  // Alpha still decays while nothing runs, and the next CNP uses the decayed value.
  const Time later = 100'000 * kUs;
  const double a = rp.alpha(later);
  EXPECT_LT(a, 0.2);
  rp.on_cnp(later);
  EXPECT_EQ(rp.rate_bps(), uint64_t(std::llround(40e9 * (1 - a / 2))));
}

TEST(Dcqcn, FloorAndCap) {
  DcqcnRp rp(paper(), kLine);
  for (int i = 0; i < 200; ++i) rp.on_cnp(Time(i) * 50 * kUs);  // a CNP every N
  EXPECT_EQ(rp.rate_bps(), 100 * kMbps);                        // rpg_min_rate
  DcqcnParams p = paper();
  p.rpg_max_rate = 25'000;  // 25 Gb/s on a 40 Gb/s line
  DcqcnRp capped(p, kLine);
  EXPECT_EQ(capped.rate_bps(), 25 * kGbps);
  EXPECT_TRUE(capped.limiting());  // below the line rate: the pacer enforces the cap
  capped.on_cnp(0);
  EXPECT_EQ(capped.rate_bps(), 12'500 * kMbps);
  while (capped.next_deadline() != kNever) capped.on_timer(capped.next_deadline());
  EXPECT_EQ(capped.rate_bps(), 25 * kGbps);
  // rpg_min_dec_fac bounds one cut.
  DcqcnParams m = paper();
  m.rpg_gd = 10;           // cut = alpha: the whole rate...
  m.rpg_min_dec_fac = 30;  // ...but at most down to 30 %
  DcqcnRp md(m, kLine);
  md.on_cnp(0);
  EXPECT_EQ(md.rate_bps(), 12 * kGbps);
}

TEST(Dcqcn, MonitorPeriodMergesCnpsIntoOneCut) {
  DcqcnRp rp(cx(), kLine);  // rate_reduce_monitor_period 4 µs
  Log log;
  rp.set_observer(&log);
  rp.on_cnp(10 * kUs);
  const uint64_t after_first = rp.rate_bps();
  rp.on_cnp(11 * kUs);
  rp.on_cnp(13 * kUs);
  EXPECT_EQ(rp.rate_bps(), after_first);
  EXPECT_TRUE(rp.cut_pending());
  EXPECT_EQ(rp.next_deadline(), 14 * kUs);
  rp.on_timer(14 * kUs);
  EXPECT_LT(rp.rate_bps(), after_first);
  EXPECT_EQ(rp.cnps(), 3u);
  EXPECT_EQ(rp.cuts(), 2u);
  const std::vector<CcEvent> cuts = log.of(CcEvent::Kind::kCnp);
  ASSERT_EQ(cuts.size(), 2u);
  EXPECT_EQ(cuts[1].t, 14 * kUs);
  // Without a monitor period each CNP cuts at once.
  DcqcnRp pp(paper(), kLine);
  pp.on_cnp(0);
  pp.on_cnp(1);
  EXPECT_EQ(pp.cuts(), 2u);
}

TEST(Dcqcn, TargetRateClamping) {
  // ConnectX (clamp_tgt_rate 0): a second cut with no increase in between keeps Rt.
  DcqcnRp rp(cx(), kLine);
  rp.on_cnp(0);
  rp.on_cnp(10 * kUs);
  EXPECT_EQ(rp.target_bps(), kLine);
  // After a timer increase (clamp_tgt_rate_after_time_inc 1) the next cut lowers Rt to Rc.
  rp.on_timer(rp.next_deadline());
  const uint64_t rc = rp.rate_bps();
  rp.on_cnp(rp.next_deadline() - 1);
  EXPECT_EQ(rp.target_bps(), rc);
  // clamp_tgt_rate 1 lowers Rt on every cut.
  DcqcnParams p = cx();
  p.clamp_tgt_rate = true;
  DcqcnRp c(p, kLine);
  c.on_cnp(0);
  const uint64_t rc1 = c.rate_bps();
  c.on_cnp(10 * kUs);
  EXPECT_EQ(c.target_bps(), rc1);
  // Timer increases that do not count (clamp_tgt_rate_after_time_inc 0) leave Rt alone.
  p.clamp_tgt_rate = false;
  p.clamp_tgt_rate_after_time_inc = false;
  DcqcnRp n(p, kLine);
  n.on_cnp(0);
  n.on_timer(n.next_deadline());
  n.on_cnp(n.next_deadline() - 1);
  EXPECT_EQ(n.target_bps(), kLine);
}

TEST(Dcqcn, RateOnFirstCnp) {
  DcqcnParams p = cx();
  p.rate_to_set_on_first_cnp = 1000;
  DcqcnRp rp(p, kLine);
  rp.on_cnp(0);
  EXPECT_EQ(rp.rate_bps(), 1 * kGbps);
  EXPECT_EQ(rp.target_bps(), 1 * kGbps);
}

TEST(Dcqcn, TieBetweenCnpAndTimer) {
  DcqcnParams p = paper();
  p.rpg_byte_reset = 0;
  for (Tie tie : {Tie::kTimerFirst, Tie::kCnpFirst}) {
    p.tie = tie;
    DcqcnRp rp(p, kLine);
    Log log;
    rp.set_observer(&log);
    rp.on_cnp(0);
    const Time t = rp.next_deadline();  // the rate timer, 55 µs
    rp.on_cnp(t);
    rp.on_timer(t);
    const std::vector<CcEvent> timers = log.of(CcEvent::Kind::kTimer);
    if (tie == Tie::kTimerFirst) {
      ASSERT_EQ(timers.size(), 1u);  // the timer fired, then the CNP cut
      EXPECT_EQ(log.ev.back().kind, CcEvent::Kind::kCnp);
      EXPECT_EQ(rp.target_bps(), 30 * kGbps);
    } else {
      EXPECT_TRUE(timers.empty());  // the CNP restarted it
      EXPECT_EQ(rp.target_bps(), 20 * kGbps);
    }
    EXPECT_EQ(rp.next_deadline(), t + 55 * kUs);
  }
}

TEST(Dcqcn, AlphaOrderOption) {
  // With alpha below 1, cutting before or after the update differs.
  DcqcnParams p = paper();
  p.initial_alpha_value = 512;  // 0.5
  const double g = 1.0 / 256;
  DcqcnRp cut_first(p, kLine);
  cut_first.on_cnp(0);
  EXPECT_EQ(cut_first.rate_bps(), 30 * kGbps);
  EXPECT_DOUBLE_EQ(cut_first.alpha(0), (1 - g) * 0.5 + g);
  p.alpha_order = AlphaOrder::kUpdateFirst;
  DcqcnRp update_first(p, kLine);
  update_first.on_cnp(0);
  EXPECT_EQ(update_first.rate_bps(), uint64_t(std::llround(40e9 * (1 - ((1 - g) * 0.5 + g) / 2))));
}

TEST(Dcqcn, PeriodicAlphaCountsPeriodsWithACnp) {
  DcqcnParams p = cx();
  p.dce_tcp_rtt = 10;  // K = 10 µs
  p.rate_reduce_monitor_period = 0;
  DcqcnRp rp(p, kLine);
  rp.on_cnp(0);
  const double g = 5.0 / 1024, a0 = 1023.0 / 1024;
  rp.on_cnp(5 * kUs);                       // in period [0, 10)
  rp.on_cnp(7 * kUs);                       // same period: still one
  EXPECT_DOUBLE_EQ(rp.alpha(9 * kUs), a0);  // nothing until the period ends
  EXPECT_DOUBLE_EQ(rp.alpha(10 * kUs), (1 - g) * a0 + g);
  EXPECT_DOUBLE_EQ(rp.alpha(20 * kUs), (1 - g) * ((1 - g) * a0 + g));
}

// Keeping alpha arithmetically (no timer) and ticking it as events give the same run.
TEST(Dcqcn, LazyAlphaEqualsTickedAlpha) {
  for (Preset preset : {Preset::kPaper, Preset::kCx}) {
    for (Tie tie : {Tie::kTimerFirst, Tie::kCnpFirst}) {
      DcqcnParams p = dcqcn_preset(preset);
      p.tie = tie;
      p.dce_tcp_rtt = 5;
      DcqcnRp lazy(p, kLine), ticked(p, kLine);
      Log log_l, log_t;
      lazy.set_observer(&log_l, false);
      ticked.set_observer(&log_t, true);
      std::mt19937_64 rng(3);
      Time t = 0;
      for (int i = 0; i < 400; ++i) {
        t += rng() % 3 == 0 ? 5 * kUs * (1 + rng() % 4) : rng() % (200 * kUs);
        for (DcqcnRp* rp : {&lazy, &ticked}) {
          while (rp->next_deadline() < t) rp->on_timer(rp->next_deadline());
          rp->on_bytes_sent(t, rng() % 20000);
          rp->on_cnp(t);
        }
        ASSERT_EQ(lazy.rate_bps(), ticked.rate_bps()) << i;
        ASSERT_EQ(lazy.target_bps(), ticked.target_bps()) << i;
        ASSERT_DOUBLE_EQ(lazy.alpha(t), ticked.alpha(t)) << i;
      }
      // Every non-alpha event is the same in both.
      std::vector<CcEvent> a, b;
      for (const CcEvent& e : log_l.ev) {
        if (e.kind != CcEvent::Kind::kAlpha) a.push_back(e);
      }
      for (const CcEvent& e : log_t.ev) {
        if (e.kind != CcEvent::Kind::kAlpha) b.push_back(e);
      }
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].t, b[i].t);
        EXPECT_EQ(a[i].rc_bps, b[i].rc_bps);
        EXPECT_DOUBLE_EQ(a[i].alpha, b[i].alpha);
      }
      EXPECT_FALSE(log_t.of(CcEvent::Kind::kAlpha).empty());
      EXPECT_TRUE(log_l.of(CcEvent::Kind::kAlpha).empty());
    }
  }
}

TEST(Dcqcn, InvariantsUnderRandomEvents) {
  std::mt19937_64 rng(11);
  for (Preset preset : {Preset::kPaper, Preset::kCx}) {
    DcqcnRp rp(dcqcn_preset(preset), kLine);
    Time t = 0;
    for (int i = 0; i < 20000; ++i) {
      t += rng() % (30 * kUs);
      switch (rng() % 3) {
        case 0:
          rp.on_cnp(t);
          break;
        case 1:
          rp.on_bytes_sent(t, rng() % 100000);
          break;
        default:
          if (rp.next_deadline() != kNever) t = std::max(t, rp.next_deadline());
          rp.on_timer(t);
      }
      ASSERT_GE(rp.rate_bps(), rp.min_bps());
      ASSERT_LE(rp.rate_bps(), rp.target_bps());
      ASSERT_LE(rp.target_bps(), rp.max_bps());
      ASSERT_GE(rp.alpha(t), 0.0);
      ASSERT_LE(rp.alpha(t), 1.0);
      ASSERT_EQ(rp.limiting(), rp.rate_bps() < kLine);
    }
  }
}

}  // namespace
}  // namespace uroce::transport::cc
