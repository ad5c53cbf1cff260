// src/sim/event_queue.{h,cc}, rng.h, frame.h, channel.{h,cc}: the simulator's discrete-event
// core — event order and tie-breaking, timers, seeded draws, link channels.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
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
  t.arm(300);  // later: the entry at 200 is moved to 300 when it surfaces
  q.run_until(kNever);
  EXPECT_EQ(log.seen.back().first, 300u);
  EXPECT_EQ(q.events_run(), 2u);  // the move did not count
  t.arm(400);
  t.cancel();
  q.run_until(kNever);
  EXPECT_EQ(log.seen.size(), 2u);
  EXPECT_EQ(t.armed(), kNever);
}

// A deadline that keeps moving later (an ACK timer restarted by every ACK) keeps one queue
// entry: postponing pushes nothing, the entry is moved once, when it surfaces.
TEST(Timer, PostponingKeepsOneQueueEntry) {
  EventQueue q;
  Log log;
  Timer t(q, &log, 1);
  for (Time at = 1000; at < 11000; ++at) t.arm(at);
  EXPECT_EQ(q.pending(), 1u);
  EXPECT_EQ(q.next_time(), 10999u);  // the entry at 1000 surfaced and moved
  EXPECT_EQ(q.pending(), 1u);
  q.run_until(kNever);
  ASSERT_EQ(log.seen.size(), 1u);
  EXPECT_EQ(log.seen[0].first, 10999u);
  // Cancelled and re-armed later than the old entry: still that one entry, moved.
  t.arm(20000);
  t.cancel();
  t.arm(30000);
  EXPECT_EQ(q.pending(), 1u);
  t.arm(25000);  // earlier again, but not earlier than the entry (20000): still the one entry
  EXPECT_EQ(q.pending(), 1u);
  // Brought forward past the entry: a new one; the old goes stale and is dropped unseen.
  t.arm(15000);
  EXPECT_EQ(q.pending(), 2u);
  q.run_until(kNever);
  EXPECT_EQ(log.seen.size(), 2u);
  EXPECT_EQ(log.seen.back().first, 15000u);
  EXPECT_EQ(q.pending(), 0u);
  EXPECT_EQ(q.events_run(), 2u);
}

// A postponed timer is ordered among the events of its new time as if it had been scheduled
// when its entry surfaced (at its old time): after what was scheduled for that time before,
// before what is scheduled later. A function of the run alone, so reruns are identical.
TEST(Timer, APostponedTimerRunsAsIfScheduledWhenItSurfaced) {
  EventQueue q;
  Log log;
  Timer t(q, &log, 1);
  struct Later : EventHandler {  // at time 15 schedules tag 3 for time 20
    EventQueue* q;
    Log* log;
    void on_event(Time, uint64_t) override { q->schedule(20, EventClass::kTimer, log, 3); }
  } later;
  later.q = &q;
  later.log = &log;
  t.arm(10);
  q.schedule(20, EventClass::kTimer, &log, 2);  // before the entry at 10 surfaces
  q.schedule(15, EventClass::kTimer, &later);
  t.arm(20);  // postponed: the entry at 10 moves to 20 when it surfaces
  q.run_until(kNever);
  const std::vector<std::pair<Time, uint64_t>> want = {{20, 2}, {20, 1}, {20, 3}};
  EXPECT_EQ(log.seen, want);
}

// Timers armed, postponed, brought forward, re-armed at once and cancelled at random by the
// events themselves, checked against the plain meaning of a timer (fires once at the last
// time it was armed for, unless cancelled; never early, never late, never twice), and two
// runs of one seed must fire the same timers at the same times in the same order.
TEST(Timer, RandomArmingMatchesTheModelAndRerunsAreIdentical) {
  constexpr int kTimers = 16;
  struct Driver : EventHandler {
    EventQueue q;
    Rng rng;
    std::vector<std::unique_ptr<Timer>> timers;
    std::vector<Time> model;  // when each timer should fire; kNever: not armed
    std::vector<std::pair<Time, uint64_t>> fired;
    int budget = 20000;  // fires that may re-arm; then the run drains
    explicit Driver(uint64_t seed) : rng(seed), model(kTimers, kNever) {
      for (int i = 0; i < kTimers; ++i) timers.push_back(std::make_unique<Timer>(q, this, i));
    }
    void touch(int j, Time now) {
      const Time at = now + rng.next() % 64;  // small: many ties
      switch (rng.next() % 5) {
        case 0:
        case 1:
          timers[j]->arm(at);
          model[j] = at;
          break;
        case 2:
          timers[j]->arm_by(at);
          model[j] = std::min(model[j], at);
          break;
        case 3:
          timers[j]->cancel();
          model[j] = kNever;
          break;
        default:  // plain events interleaved with the timers' entries
          q.schedule(at, EventClass(rng.next() % 3), this, kTimers);
      }
    }
    void on_event(Time now, uint64_t arg) override {
      fired.emplace_back(now, arg);
      if (arg < kTimers) {
        EXPECT_EQ(model[arg], now) << "timer " << arg;
        model[arg] = kNever;
      }
      for (int j = 0; j < kTimers; ++j) {
        EXPECT_GE(model[j], now) << "timer " << j << " missed";
        EXPECT_EQ(timers[j]->armed(), model[j]) << "timer " << j;
      }
      if (budget-- <= 0) return;
      for (int k = int(rng.next() % 3); k >= 0; --k) touch(int(rng.next() % kTimers), now);
      if (arg == kTimers + 1)  // the heartbeat: the run goes on while there is budget
        q.schedule(now + 1 + rng.next() % 64, EventClass::kTimer, this, kTimers + 1);
    }
  };
  auto run = [](uint64_t seed) {
    Driver d(seed);
    for (int j = 0; j < kTimers; ++j) d.touch(j, 0);
    d.q.schedule(0, EventClass::kTimer, &d, kTimers + 1);
    d.q.run_until(kNever);
    for (int j = 0; j < kTimers; ++j) EXPECT_EQ(d.model[j], kNever) << "timer " << j;
    EXPECT_EQ(d.q.pending(), 0u);
    EXPECT_GT(d.fired.size(), 20000u);
    return d.fired;
  };
  const auto a = run(7);
  EXPECT_EQ(a, run(7));
  EXPECT_NE(a, run(8));
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
