// src/sim/event_queue.{h,cc}, rng.h, frame.h, channel.{h,cc}: the simulator's discrete-event
// core — event order and tie-breaking, timers, seeded draws, link channels.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "sim/channel.h"
#include "sim/event_queue.h"
#include "sim/frame.h"
#include "sim/rng.h"

namespace uroce::sim {
namespace {

// Records (time, tag) of every event it gets.
struct Log : EventHandler {
  std::vector<std::pair<Time, uint64_t>> seen;
  void on_event(Time now, uint64_t arg) override { seen.emplace_back(now, arg); }
};

TEST(EventQueue, RunsByTimeThenClassThenSchedulingOrder) {
  EventQueue q;
  Log log;
  q.schedule(20, EventClass::kTimer, &log, 1);
  q.schedule(10, EventClass::kSample, &log, 2);
  q.schedule(10, EventClass::kTimer, &log, 3);
  q.schedule(10, EventClass::kArrival, &log, 4);
  q.schedule(10, EventClass::kTimer, &log, 5);
  q.schedule(5, EventClass::kSample, &log, 6);
  q.run_until(kNever);
  const std::vector<std::pair<Time, uint64_t>> want = {{5, 6},  {10, 4}, {10, 3},
                                                       {10, 5}, {10, 2}, {20, 1}};
  EXPECT_EQ(log.seen, want);
  EXPECT_EQ(q.events_run(), 6u);
  EXPECT_EQ(q.now(), 20u);
}

TEST(EventQueue, ThePastRunsNowAndTheClockNeverGoesBack) {
  EventQueue q;
  Log log;
  q.schedule(100, EventClass::kTimer, &log, 1);
  ASSERT_TRUE(q.step());
  q.schedule(50, EventClass::kTimer, &log, 2);  // in the past: runs at 100
  ASSERT_TRUE(q.step());
  EXPECT_EQ(log.seen.back(), std::make_pair(Time(100), uint64_t(2)));
  EXPECT_FALSE(q.step());
}

TEST(EventQueue, StepStopsAtTheLimit) {
  EventQueue q;
  Log log;
  q.schedule(10, EventClass::kTimer, &log);
  q.schedule(30, EventClass::kTimer, &log);
  q.run_until(20);
  EXPECT_EQ(log.seen.size(), 1u);
  EXPECT_EQ(q.now(), 10u);
  EXPECT_EQ(q.next_time(), 30u);
}

TEST(Timer, RearmingSupersedesAndCancelDrops) {
  EventQueue q;
  Log log;
  Timer t(q, &log, 7);
  t.arm(100);
  t.arm(50);     // earlier: the entry at 100 goes stale
  t.arm_by(80);  // already armed by 50: nothing
  q.run_until(kNever);
  ASSERT_EQ(log.seen.size(), 1u);
  EXPECT_EQ(log.seen[0], std::make_pair(Time(50), uint64_t(7)));
  EXPECT_EQ(q.events_run(), 1u);  // the stale entry did not count
  t.arm(200);
  t.arm(300);  // later: the entry at 200 goes stale
  q.run_until(kNever);
  EXPECT_EQ(log.seen.back().first, 300u);
  t.arm(400);
  t.cancel();
  q.run_until(kNever);
  EXPECT_EQ(log.seen.size(), 2u);
  EXPECT_EQ(t.armed(), kNever);
}

// Two identical runs schedule identical events: the same sequence, whatever the heap does with
// hundreds of ties.
TEST(EventQueue, RerunsAreIdentical) {
  auto run = [] {
    EventQueue q;
    Log log;
    Rng rng(42);
    for (int i = 0; i < 500; ++i)
      q.schedule(rng.next() % 50, EventClass(rng.next() % 3), &log, uint64_t(i));
    q.run_until(kNever);
    return log.seen;
  };
  EXPECT_EQ(run(), run());
}

TEST(Rng, UniformIsLibstdcxxsUniformRealDistribution) {
  // The harness used std::uniform_real_distribution<double>(0, 1) with mt19937_64; Rng must
  // draw the same numbers so that the transport tests' seeded losses stayed the same.
  std::mt19937_64 ref(12345);
  std::uniform_real_distribution<double> u(0, 1);
  Rng r(12345);
  for (int i = 0; i < 100000; ++i) ASSERT_EQ(r.uniform(), u(ref)) << i;
}

TEST(Rng, StreamsDifferAndRepeat) {
  EXPECT_NE(Rng::stream(1, 0), Rng::stream(1, 1));
  EXPECT_NE(Rng::stream(1, 0), Rng::stream(2, 0));
  EXPECT_EQ(Rng::stream(9, 3), Rng::stream(9, 3));
  Rng r(1);
  EXPECT_FALSE(r.chance(0));
  EXPECT_TRUE(r.chance(1));
}

TEST(Frame, BytesOnTheWire) {
  Frame f;
  f.payload.resize(1024 + 12 + 16 + 4);  // a 1 KiB WRITE: BTH, RETH, payload, ICRC
  EXPECT_EQ(f.bytes(), 1056u + 28 + 18);
  EXPECT_EQ(f.wire_bytes(), f.bytes() + 20);
  f.payload.resize(16);  // shorter than Ethernet's minimum
  EXPECT_EQ(f.bytes(), 64u);
  Frame p;
  p.kind = FrameKind::kPause;
  EXPECT_EQ(p.bytes(), 64u);
}

struct Collect : FrameSink {
  FramePool* pool = nullptr;
  std::vector<std::pair<Time, uint16_t>> got;  // (arrival, src_port as a tag)
  void on_frame(Frame* f, Time now) override {
    got.emplace_back(now, f->src_port);
    pool->put(f);
  }
};

TEST(Channel, DeliversAfterThePropagationDelayInOrder) {
  EventQueue q;
  FramePool pool;
  Rng rng(1);
  Collect c;
  c.pool = &pool;
  Channel ch(q, pool, rng, ChannelParams{.delay = 1000}, &c);
  for (uint16_t i = 0; i < 3; ++i) {
    Frame* f = pool.get();
    f->src_port = i;
    ch.send(f);
  }
  q.run_until(kNever);
  const std::vector<std::pair<Time, uint16_t>> want = {{1000, 0}, {1000, 1}, {1000, 2}};
  EXPECT_EQ(c.got, want);
  EXPECT_EQ(ch.counters().delivered, 3u);
  EXPECT_EQ(pool.in_use(), 0u);
}

TEST(Channel, ImpairmentsAreSeededAndCounted) {
  auto run = [](uint64_t seed) {
    EventQueue q;
    FramePool pool;
    Rng rng(seed);
    Collect c;
    c.pool = &pool;
    Channel ch(q, pool, rng, ChannelParams{.delay = 1000, .loss = 0.1, .dup = 0.1, .reorder = 0.2},
               &c);
    for (uint16_t i = 0; i < 1000; ++i) {
      Frame* f = pool.get();
      f->src_port = i;
      ch.send(f);
    }
    q.run_until(kNever);
    EXPECT_EQ(ch.counters().sent, 1000u);
    EXPECT_EQ(ch.counters().delivered, 1000 - ch.counters().lost + ch.counters().duplicated);
    EXPECT_NEAR(double(ch.counters().lost), 100, 40);
    EXPECT_NEAR(double(ch.counters().duplicated), 90, 40);
    bool reordered = false;
    for (size_t i = 1; i < c.got.size(); ++i) reordered |= c.got[i].second < c.got[i - 1].second;
    EXPECT_TRUE(reordered);
    for (auto [t, tag] : c.got) {
      EXPECT_GE(t, 1000u);
      EXPECT_LE(t, 5000u);  // a detour is at most four delays
    }
    return c.got;
  };
  EXPECT_EQ(run(3), run(3));
  EXPECT_NE(run(3), run(4));
}

TEST(Channel, DropIfComesFirst) {
  EventQueue q;
  FramePool pool;
  Rng rng(1);
  Collect c;
  c.pool = &pool;
  Channel ch(q, pool, rng, ChannelParams{.delay = 10}, &c);
  ch.drop_if = [](const Frame& f) { return f.src_port == 1; };
  for (uint16_t i = 0; i < 3; ++i) {
    Frame* f = pool.get();
    f->src_port = i;
    ch.send(f);
  }
  q.run_until(kNever);
  ASSERT_EQ(c.got.size(), 2u);
  EXPECT_EQ(ch.counters().lost, 1u);
}

}  // namespace
}  // namespace uroce::sim
