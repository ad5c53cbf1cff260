#include "dpdk_port/neighbours.h"

#include <gtest/gtest.h>

#include <vector>

namespace uroce::dpdk {
namespace {

const wire::IpAddr kIp(0x0a000002u);
const Mac kMac = {0x02, 0, 0, 0, 0, 0x22};

TEST(NeighbourTableTest, UnknownNeighbourIsRequestedOnceAndHeldPacketsReleasedInOrder) {
  NeighbourTable t;
  Mac m;
  bool req = false;
  EXPECT_EQ(t.resolve(kIp, 0, &m, &req), NeighbourTable::Lookup::kPending);
  EXPECT_TRUE(req);
  int p1, p2;
  EXPECT_TRUE(t.hold(kIp, &p1));
  EXPECT_EQ(t.resolve(kIp, 10, &m, &req), NeighbourTable::Lookup::kPending);
  EXPECT_FALSE(req);  // the request is out already
  EXPECT_TRUE(t.hold(kIp, &p2));
  std::vector<void*> released;
  t.learn(kIp, kMac, 20, /*create=*/true, &released);
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[0], &p1);
  EXPECT_EQ(released[1], &p2);
  EXPECT_EQ(t.resolve(kIp, 30, &m, &req), NeighbourTable::Lookup::kResolved);
  EXPECT_EQ(m, kMac);
  EXPECT_EQ(t.next_deadline(), kNever);
}

TEST(NeighbourTableTest, RetriesThenFailsAndDropsThenResolvesAfreshAfterTheHold) {
  NeighbourTable::Params p;
  p.retry_ns = 100;
  p.max_requests = 3;
  p.failed_hold_ns = 1000;
  NeighbourTable t(p);
  Mac m;
  bool req;
  int pkt;
  ASSERT_EQ(t.resolve(kIp, 0, &m, &req), NeighbourTable::Lookup::kPending);
  ASSERT_TRUE(t.hold(kIp, &pkt));
  std::vector<wire::IpAddr> requests;
  std::vector<void*> dropped;
  t.poll(99, &requests, &dropped);
  EXPECT_TRUE(requests.empty());  // not due yet
  EXPECT_EQ(t.next_deadline(), 100u);
  t.poll(100, &requests, &dropped);  // second request
  t.poll(200, &requests, &dropped);  // third
  EXPECT_EQ(requests, (std::vector<wire::IpAddr>{kIp, kIp}));
  EXPECT_TRUE(dropped.empty());
  t.poll(300, &requests, &dropped);  // no answer to three: failed
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0], &pkt);
  EXPECT_EQ(t.failures(), 1u);
  EXPECT_EQ(t.resolve(kIp, 400, &m, &req), NeighbourTable::Lookup::kFailed);
  EXPECT_FALSE(t.hold(kIp, &pkt));
  // After the hold the failure is forgotten: the next packet starts over.
  t.poll(1300, &requests, &dropped);
  EXPECT_EQ(t.resolve(kIp, 1300, &m, &req), NeighbourTable::Lookup::kPending);
  EXPECT_TRUE(req);
}

TEST(NeighbourTableTest, PendingQueueIsBounded) {
  NeighbourTable::Params p;
  p.max_pending = 2;
  NeighbourTable t(p);
  Mac m;
  bool req;
  int a, b, c;
  t.resolve(kIp, 0, &m, &req);
  EXPECT_TRUE(t.hold(kIp, &a));
  EXPECT_TRUE(t.hold(kIp, &b));
  EXPECT_FALSE(t.hold(kIp, &c));  // the caller drops it
}

TEST(NeighbourTableTest, StaticEntriesAreNotOverriddenAndStrangersAreNotLearned) {
  NeighbourTable t;
  t.add_static(kIp, kMac);
  std::vector<void*> released;
  const Mac other = {0x02, 0, 0, 0, 0, 0x99};
  t.learn(kIp, other, 0, true, &released);
  Mac m;
  bool req;
  ASSERT_EQ(t.resolve(kIp, 0, &m, &req), NeighbourTable::Lookup::kResolved);
  EXPECT_EQ(m, kMac);
  // An ARP request to someone else (create = false) teaches nothing about its sender.
  t.learn(wire::IpAddr(0x0a000009u), other, 0, false, &released);
  EXPECT_EQ(t.size(), 1u);
}

TEST(PauseStateTest, PausesThePrioritiesOfTheMaskForTheirQuantaAndXonResumes) {
  PauseState s;
  uint16_t q[8] = {0, 0, 0, 100, 0, 0, 0, 0};
  s.on_pause(1u << 3, q, 51.2, 1000);  // 100 quanta at 10 Gb/s: 5120 ns
  EXPECT_TRUE(s.paused(3, 1000));
  EXPECT_FALSE(s.paused(2, 1000));
  EXPECT_TRUE(s.paused(3, 6119));
  EXPECT_FALSE(s.paused(3, 6120));
  EXPECT_EQ(s.next_expiry(2000), 6120u);
  // A new PAUSE reloads the timer; zero quanta (XON) resumes at once.
  s.on_pause(1u << 3, q, 51.2, 5000);
  EXPECT_EQ(s.next_expiry(5000), 10120u);
  uint16_t xon[8] = {};
  s.on_pause(1u << 3, xon, 51.2, 6000);
  EXPECT_FALSE(s.paused(3, 6000));
  EXPECT_EQ(s.next_expiry(6000), kNever);
}

TEST(PauseStateTest, LinkPauseStopsEveryPriority) {
  PauseState s;
  uint16_t q[8];
  std::fill(std::begin(q), std::end(q), uint16_t{0xffff});
  s.on_pause(0xff, q, 5.12, 0);  // 100 Gb/s
  for (int p = 0; p < 8; ++p) EXPECT_TRUE(s.paused(p, 335'000)) << p;
  for (int p = 0; p < 8; ++p) EXPECT_FALSE(s.paused(p, 335'544)) << p;
}

}  // namespace
}  // namespace uroce::dpdk
