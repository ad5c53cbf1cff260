// src/sim/rp.cc, the `uroce-sim rp` driver: a backlogged sender feeding the transport's DCQCN
// reaction point, the byte counter firing the instant B bytes have left at Rc, and the CSV.
#include "sim/rp.h"

#include <gtest/gtest.h>

namespace uroce::sim {
namespace {

using transport::cc::CcEvent;
using transport::cc::kGbps;
constexpr Time kUs = 1000;

std::vector<CcEvent> without_alpha(const std::vector<CcEvent>& ev) {
  std::vector<CcEvent> out;
  for (const CcEvent& e : ev) {
    if (e.kind != CcEvent::Kind::kAlpha) out.push_back(e);
  }
  return out;
}

TEST(SimRp, NothingWithoutCnps) {
  RpScenario s;
  s.duration = 10'000 * kUs;
  EXPECT_TRUE(run_rp(s).empty());
}

TEST(SimRp, ByteCounterFiresTheInstantBBytesHaveLeft) {
  RpScenario s;
  s.params.rpg_time_reset = 1'000'000;  // 1 s: only the byte counter acts in this run
  s.cnps = {0};
  s.duration = 9'000 * kUs;
  const std::vector<CcEvent> ev = without_alpha(run_rp(s));
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev[0].kind, CcEvent::Kind::kCnp);
  EXPECT_EQ(ev[0].rc_bps, 20 * kGbps);
  // 10^7 bytes at 20 Gb/s take exactly 4 ms.
  EXPECT_EQ(ev[1].kind, CcEvent::Kind::kBytes);
  EXPECT_EQ(ev[1].stage, CcEvent::Stage::kFastRecovery);
  EXPECT_EQ(ev[1].t, 4'000 * kUs);
  EXPECT_EQ(ev[1].rc_bps, 30 * kGbps);
  // The next 10^7 bytes at 30 Gb/s: 2.666667 ms, to the next whole nanosecond.
  EXPECT_EQ(ev[2].kind, CcEvent::Kind::kBytes);
  EXPECT_EQ(ev[2].t, 4'000 * kUs + 2'666'667);
  EXPECT_EQ(ev[2].rc_bps, 35 * kGbps);
}

TEST(SimRp, StartBelowLineRateProbesUpwards) {
  RpScenario s;
  s.params.rpg_byte_reset = 0;
  s.start_bps = 10 * kGbps;
  s.duration = 20 * 55 * kUs;
  const std::vector<CcEvent> ev = without_alpha(run_rp(s));
  ASSERT_EQ(ev.size(), 20u);
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].kind, CcEvent::Kind::kTimer);
    EXPECT_EQ(ev[i].t, (i + 1) * 55 * kUs);
  }
  // Fast recovery towards Rt = the start rate changes nothing; then Rt climbs by R_AI.
  EXPECT_EQ(ev[4].stage, CcEvent::Stage::kFastRecovery);
  EXPECT_EQ(ev[4].rc_bps, 10 * kGbps);
  EXPECT_EQ(ev[5].stage, CcEvent::Stage::kAdditive);
  EXPECT_EQ(ev[19].rt_bps, 10 * kGbps + 15 * 40'000'000ull);
}

TEST(SimRp, CsvRows) {
  RpScenario s;
  s.cnps = {100 * kUs};
  s.duration = 160 * kUs;
  EXPECT_EQ(rp_csv(run_rp(s)),
            "t_us,event,stage,rc_gbps,rt_gbps,alpha\n"
            "100.000,CNP,CUT,20.000000,40.000000,1.000000\n"
            "155.000,ALPHA,,20.000000,40.000000,0.996094\n"
            "155.000,TIMER,FR,30.000000,40.000000,0.996094\n");
}

}  // namespace
}  // namespace uroce::sim
