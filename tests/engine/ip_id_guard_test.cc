// engine/ip_id_guard.h: which IPv4 Identifications a source sends, learnt per source.
#include "engine/ip_id_guard.h"

#include <gtest/gtest.h>

namespace uroce {
namespace {

constexpr uint32_t kUroce = 0x7f2c0502, kRxe = 0xc0000202;

void trust(IpIdGuard& g, uint32_t ip) {
  for (uint32_t i = 0; i < IpIdGuard::kTrusted; ++i)
    ASSERT_TRUE(g.accept(ip, static_cast<uint16_t>(i % 3)));  // 0, 1, 2: GSO segment numbers
}

TEST(IpIdGuard, ASourceOfSmallIdsGetsNoLargeOneThrough) {
  IpIdGuard g;
  trust(g, kUroce);
  EXPECT_FALSE(g.accept(kUroce, 0x4321));
  EXPECT_FALSE(g.accept(kUroce, IpIdGuard::kMaxSmallId + 1));
  EXPECT_TRUE(g.accept(kUroce, IpIdGuard::kMaxSmallId));
  EXPECT_TRUE(g.accept(kUroce, 0));
}

TEST(IpIdGuard, ACountingSourceIsAcceptedFromItsFirstDatagramAndThroughTheWrap) {
  IpIdGuard g;
  uint16_t id = 0xffe0;
  for (int i = 0; i < 200; ++i) EXPECT_TRUE(g.accept(kRxe, id++)) << i;  // wraps through 0 … 63
  EXPECT_TRUE(g.accept(kRxe, 0x8000));
}

TEST(IpIdGuard, ANewSourceIsLearntBeforeItIsTrusted) {
  IpIdGuard g;
  for (uint32_t i = 0; i + 1 < IpIdGuard::kTrusted; ++i) ASSERT_TRUE(g.accept(kUroce, 0));
  // Not yet trusted: a large ID makes it a counting source, for good.
  EXPECT_TRUE(g.accept(kUroce, 0x4321));
  for (uint32_t i = 0; i < 2 * IpIdGuard::kTrusted; ++i) ASSERT_TRUE(g.accept(kUroce, 0));
  EXPECT_TRUE(g.accept(kUroce, 0x1234));
}

TEST(IpIdGuard, AnotherSenderTakingTheAddressOverIsAcceptedAfterARunOfLargeIds) {
  IpIdGuard g;
  trust(g, kUroce);
  for (uint32_t i = 0; i + 1 < IpIdGuard::kSwitch; ++i)
    EXPECT_FALSE(g.accept(kUroce, static_cast<uint16_t>(0x9000 + i))) << i;
  EXPECT_TRUE(g.accept(kUroce, 0x9100));
  EXPECT_TRUE(g.accept(kUroce, 0x9101));
  EXPECT_TRUE(g.accept(kUroce, 3));
  EXPECT_TRUE(g.accept(kUroce, 0x9102));
}

// rxe's per-destination counter can start below 64: it is a small-ID source until it counts
// past 63, and then goes on a step at a time (CI saw the guard refuse its next 7 datagrams).
TEST(IpIdGuard, ACounterThatStartedSmallIsAcceptedAsItCountsOn) {
  IpIdGuard g;
  for (uint16_t id = 20; id < 400; ++id) EXPECT_TRUE(g.accept(kRxe, id)) << id;
  EXPECT_TRUE(g.accept(kRxe, 0x8000));  // counting now: anything
  // Steps a little larger (other datagrams to the same destination in between) count too.
  IpIdGuard h;
  for (uint16_t id = 0; id < 60; id = static_cast<uint16_t>(id + 3))
    ASSERT_TRUE(h.accept(kRxe, id));
  EXPECT_TRUE(h.accept(kRxe, 57 + IpIdGuard::kMaxStep));
  // From a small-ID source, only the IDs just past its last one: not far beyond.
  IpIdGuard u;
  trust(u, kUroce);  // last ID 0
  EXPECT_FALSE(u.accept(kUroce, 0x4321));
  EXPECT_FALSE(u.accept(kUroce, IpIdGuard::kMaxSmallId + 1));
}

TEST(IpIdGuard, ASmallIdBreaksTheRun) {
  IpIdGuard g;
  trust(g, kUroce);
  for (int round = 0; round < 4; ++round) {
    for (uint32_t i = 0; i + 1 < IpIdGuard::kSwitch; ++i)
      EXPECT_FALSE(g.accept(kUroce, 0x9000)) << round << " " << i;
    EXPECT_TRUE(g.accept(kUroce, 0));  // scattered escapes never add up to a takeover
  }
}

TEST(IpIdGuard, SourcesAreLearntApart) {
  IpIdGuard g;
  trust(g, kUroce);
  EXPECT_TRUE(g.accept(kRxe, 0x4321));
  EXPECT_FALSE(g.accept(kUroce, 0x4321));
  // Many sources: each is still learnt on its own or starts again (never a false refusal of a
  // source that was not trusted).
  for (uint32_t ip = 1; ip < 5000; ++ip) EXPECT_TRUE(g.accept(0x0a000000 + ip, 0x7777)) << ip;
}

}  // namespace
}  // namespace uroce
