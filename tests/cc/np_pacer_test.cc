// transport/cc/np.h (at most one CNP per interval per QP) and transport/cc/pacer.h (a QP's
// packets at its rate, nothing while uncongested), in virtual time.
#include <gtest/gtest.h>

#include <vector>

#include "transport/cc/np.h"
#include "transport/cc/pacer.h"

namespace uroce::transport::cc {
namespace {

constexpr Time kUs = 1000;

TEST(CnpLimiter, AtMostOnePerInterval) {
  CnpLimiter np;
  const Time n = 50 * kUs;
  std::vector<Time> sent;
  for (Time t : std::vector<Time>{0, 10 * kUs, 49'999, 50 * kUs - 1, 50 * kUs, 51 * kUs, 99 * kUs,
                                  100 * kUs, 100 * kUs, 260 * kUs}) {
    if (np.on_marked(t, n)) sent.push_back(t);
  }
  EXPECT_EQ(sent, (std::vector<Time>{0, 50 * kUs, 100 * kUs, 260 * kUs}));
  EXPECT_EQ(np.marked(), 10u);
  EXPECT_EQ(np.sent(), 4u);
  EXPECT_EQ(np.suppressed(), 6u);
  // Marks arriving every microsecond for a millisecond: one CNP per interval exactly.
  CnpLimiter busy;
  int cnps = 0;
  for (Time t = 7; t < 1000 * kUs; t += kUs) cnps += busy.on_marked(t, n);
  EXPECT_EQ(cnps, 20);
  // Interval 0: every mark.
  CnpLimiter all;
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(all.on_marked(3, 0));
}

TEST(CnpLimiter, EachQpHasItsOwn) {
  CnpLimiter a, b;
  EXPECT_TRUE(a.on_marked(0, 50 * kUs));
  EXPECT_TRUE(b.on_marked(1, 50 * kUs));  // another QP is not limited by a's CNP
  EXPECT_FALSE(a.on_marked(2, 50 * kUs));
  EXPECT_FALSE(b.on_marked(3, 50 * kUs));
}

TEST(Pacer, NothingWhileNotLimiting) {
  Pacer p;
  EXPECT_FALSE(p.limiting());
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(p.may_send(0));
    p.on_sent(0, 4096);
  }
  EXPECT_EQ(p.release_time(), kNever);
  p.set_rate(1'000'000'000, false);  // a rate, but not limiting: still nothing
  EXPECT_TRUE(p.may_send(0));
  p.on_sent(0, 4096);
  EXPECT_TRUE(p.may_send(0));
}

TEST(Pacer, SpacesPacketsAtTheRate) {
  Pacer p;
  p.set_rate(1'000'000'000, true);  // 1 Gb/s: 1000 bytes every 8 µs
  Time now = 5 * kUs;
  ASSERT_TRUE(p.may_send(now));
  p.on_sent(now, 1000);
  EXPECT_FALSE(p.may_send(now));
  EXPECT_EQ(p.release_time(), 13 * kUs);
  EXPECT_FALSE(p.may_send(13 * kUs - 1));
  EXPECT_TRUE(p.may_send(13 * kUs));
  // Backlogged for 10 ms at release times: the average is the rate, to within one packet.
  uint64_t bytes = 0;
  now = p.release_time();
  const Time start = now;
  while (now < start + 10'000 * kUs) {
    ASSERT_TRUE(p.may_send(now));
    p.on_sent(now, 1234);
    bytes += 1234;
    now = p.release_time();
  }
  EXPECT_NEAR(double(bytes) * 8 / (double(now - start) / 1e9), 1e9, 1e9 * 1234 * 8 / 1e7);
}

TEST(Pacer, BurstAllowanceAfterAPause) {
  Pacer p(3000);
  p.set_rate(1'000'000'000, true);
  p.on_sent(0, 1000);
  // Idle for a millisecond: 3000 bytes of credit (not a millisecond's worth), plus the packet.
  const Time t = 1000 * kUs;
  int burst = 0;
  while (p.may_send(t)) {
    p.on_sent(t, 1000);
    ++burst;
  }
  EXPECT_EQ(burst, 4);
  EXPECT_EQ(p.release_time(), t + 8 * kUs);
}

TEST(Pacer, RateChangeAppliesToTheNextPacket) {
  Pacer p;
  p.set_rate(8'000'000'000, true);  // 1 byte per ns
  p.on_sent(0, 1000);
  EXPECT_EQ(p.release_time(), 1000u);
  p.set_rate(4'000'000'000, true);
  p.on_sent(1000, 1000);
  EXPECT_EQ(p.release_time(), 3000u);
  // Sub-nanosecond remainders carry over: 3 bytes at 3 Gb/s is 8 ns.
  Pacer q;
  q.set_rate(3'000'000'000, true);
  Time now = 0;
  for (int i = 0; i < 3000; ++i) {
    q.on_sent(now, 1);
    now = q.release_time();
  }
  EXPECT_EQ(now, 8000u);
}

}  // namespace
}  // namespace uroce::transport::cc
