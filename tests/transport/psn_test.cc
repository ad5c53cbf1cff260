// transport/psn.h: 24-bit PSN arithmetic across the 0xFFFFFF → 0 wrap.
#include "transport/psn.h"

#include <gtest/gtest.h>

namespace uroce::transport {
namespace {

TEST(Psn, MasksTo24Bits) {
  EXPECT_EQ(Psn(0x1234567).value(), 0x234567u);
  EXPECT_EQ(Psn(0xffffffff).value(), 0xffffffu);
}

TEST(Psn, AddWrapsAtTwoToThe24) {
  EXPECT_EQ((Psn(0xffffff) + 1).value(), 0u);
  EXPECT_EQ((Psn(0xfffffe) + 5).value(), 3u);
  Psn p(0xffffff);
  ++p;
  EXPECT_EQ(p.value(), 0u);
  EXPECT_EQ((Psn(2) - 3).value(), 0xffffffu);
}

TEST(Psn, DistanceIsSignedAndWrapSafe) {
  EXPECT_EQ(Psn(0) - Psn(0xffffff), 1);
  EXPECT_EQ(Psn(0xffffff) - Psn(0), -1);
  EXPECT_EQ(Psn(5) - Psn(0xfffffb), 10);
  EXPECT_EQ(Psn(100) - Psn(40), 60);
  // Half the space apart is the boundary: 2^23 - 1 ahead is "later", 2^23 reads as "earlier".
  EXPECT_EQ(Psn(0x7fffff) - Psn(0), 0x7fffff);
  EXPECT_EQ(Psn(0x800000) - Psn(0), -0x800000);
}

TEST(Psn, OrderingAcrossTheWrap) {
  EXPECT_LT(Psn(0xfffff0), Psn(0x10));
  EXPECT_GT(Psn(0x10), Psn(0xfffff0));
  EXPECT_LE(Psn(0xffffff), Psn(0xffffff));
  EXPECT_GE(Psn(0), Psn(0xffffff));
  EXPECT_FALSE(Psn(0) < Psn(0xffffff));
  EXPECT_EQ(psn_span(Psn(0xfffffe), Psn(2)), 4u);
}

}  // namespace
}  // namespace uroce::transport
