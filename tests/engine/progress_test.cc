// src/engine/progress.{h,cc}: the progress policy in virtual time — who receives, when the
// engine's timer fires, when the engine takes the receive side back, receiving beside an
// application that spins elsewhere, and which ACKs a pass holds. No thread, no clock, no sleep:
// inputs with their times in, the decisions read back.
#include "engine/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

namespace uroce {
namespace {

using S = Progress::State;
using Time = transport::Time;
constexpr Time kUs = 1'000, kMs = 1'000'000;
constexpr Time kT0 = 1'000 * kMs;  // an arbitrary start: 0 means "never polled"

TEST(Progress, NamesAreDistinctAndTheTableUsesOnlyThem) {
  std::set<std::string> states, causes;
  for (size_t i = 0; i < Progress::kStates; ++i) states.insert(Progress::name(S(i)));
  for (size_t i = 0; i < Progress::kCauses; ++i) causes.insert(Progress::name(Progress::Cause(i)));
  EXPECT_EQ(states.size(), Progress::kStates);
  EXPECT_EQ(causes.size(), Progress::kCauses);
  EXPECT_EQ(states.count("?"), 0u);
  std::set<std::tuple<int, int, int>> rows;
  for (const auto& t : Progress::transition_table()) {
    EXPECT_NE(t.from, t.to);
    rows.insert({int(t.from), int(t.cause), int(t.to)});
  }
  EXPECT_EQ(rows.size(), Progress::transition_table().size()) << "a row is listed twice";
}

TEST(Progress, APollingApplicationReceivesAndTheEngineSleepsBehindItsGuard) {
  Progress p(/*app_can_wait=*/true);
  EXPECT_EQ(p.state(), S::kEngine);
  EXPECT_TRUE(p.engine_receives());
  EXPECT_EQ(p.timer_at(), Progress::kNever);

  EXPECT_TRUE(p.on_app_poll(kT0)) << "the first poll arms the guard";
  EXPECT_EQ(p.state(), S::kAppPolls);
  EXPECT_FALSE(p.engine_receives());
  EXPECT_TRUE(p.guarded());
  EXPECT_EQ(p.timer_at(), kT0 + p.tunables().handoff);

  // Polls every 10 us for 50 ms: the guard is pushed out now and then, each push doubling its
  // span up to max_guard, and it is never due while the application polls within the handoff.
  int pushes = 0;
  Time last = kT0;
  for (Time t = kT0 + 10 * kUs; t < kT0 + 50 * kMs; t += 10 * kUs) {
    ASSERT_GT(p.timer_at(), t) << "the guard fired while the application polled";
    ASSERT_GE(p.timer_at(), last + p.tunables().handoff - 10 * kUs);
    if (p.on_app_poll(t)) ++pushes;
    last = t;
    ASSERT_LE(p.timer_at(), t + p.tunables().max_guard);
  }
  // 1 + 2 + 4 ms spans, then 4 ms each: a push every ~3 ms, not one per poll.
  EXPECT_GE(pushes, 10);
  EXPECT_LE(pushes, 25);
  // Nobody looked: the engine slept the whole time.
  EXPECT_EQ(p.state(), S::kAppPolls);
}

TEST(Progress, TheEngineTakesTheReceiveSideBackWhenTheHandoffLapses) {
  Progress p(true);
  p.on_app_poll(kT0);
  Progress::Look l = p.on_engine_look(kT0 + 100 * kUs);
  EXPECT_TRUE(l.app_polls);
  EXPECT_TRUE(l.defer);
  EXPECT_FALSE(l.lapsed);
  l = p.on_engine_look(kT0 + p.tunables().handoff);
  EXPECT_TRUE(l.lapsed);
  EXPECT_FALSE(l.defer);
  EXPECT_EQ(p.state(), S::kEngine);
  EXPECT_TRUE(p.engine_receives());
  EXPECT_EQ(p.transitions(S::kAppPolls, S::kEngine), 1u);
  EXPECT_EQ(p.last_transition().cause, Progress::Cause::kLapse);
  // Counted once: the next look is no lapse.
  EXPECT_FALSE(p.on_engine_look(kT0 + 3 * kMs).lapsed);
}

TEST(Progress, AThreadThatStopsPollingHandsTheReceiveSideBackAtOnce) {
  Progress p(true);
  EXPECT_FALSE(p.on_app_stop(kT0)) << "nothing to hand back";
  p.on_app_poll(kT0);
  EXPECT_TRUE(p.on_app_stop(kT0 + kUs)) << "the engine must be woken";
  EXPECT_EQ(p.state(), S::kEngine);
  EXPECT_TRUE(p.engine_receives());
  EXPECT_FALSE(p.on_app_stop(kT0 + 2 * kUs));
  EXPECT_FALSE(p.on_engine_look(kT0 + 2 * kMs).lapsed) << "a stop is no lapse";
}

TEST(Progress, AWaitingThreadReceivesAndTheEngineRunsTimersOnly) {
  Progress p(true);
  p.on_deadline(kT0 + 5 * kMs);  // a retransmission timer
  EXPECT_EQ(p.timer_at(), kT0 + 5 * kMs);
  const Progress::WaitBegin w = p.on_wait_begin(kT0);
  EXPECT_TRUE(w.waits);
  EXPECT_TRUE(w.unwatch) << "the engine was receiving: it must stop at once";
  EXPECT_FALSE(w.kick);
  EXPECT_EQ(p.state(), S::kAppWaits);
  EXPECT_FALSE(p.engine_receives());
  EXPECT_EQ(p.timer_at(), kT0 + 5 * kMs) << "the engine still runs the timer";
  // A long wait is no lapse, and the engine never takes the receive side.
  for (Time t = kT0 + kMs; t < kT0 + 100 * kMs; t += 7 * kMs) {
    const Progress::Look l = p.on_engine_look(t);
    EXPECT_FALSE(l.lapsed);
    EXPECT_FALSE(l.defer);
    EXPECT_FALSE(p.engine_receives());
  }
  // The engine's timer fired and its pass ran the work; nothing is left.
  EXPECT_TRUE(p.on_engine_pass_done(Progress::kNever));
  // A post from another thread arms a deadline: the engine's timer covers it (the waiter runs
  // none).
  EXPECT_TRUE(p.on_deadline(kT0 + 101 * kMs));
  EXPECT_EQ(p.timer_at(), kT0 + 101 * kMs);
  // The waiter woke on an arrival and received: its pass left work for later, on the timer.
  EXPECT_TRUE(p.on_app_pass_done(kT0 + 110 * kMs, kT0 + 102 * kMs) ||
              p.timer_at() <= kT0 + 110 * kMs);
  EXPECT_LE(p.timer_at(), kT0 + 110 * kMs);
  // Back in the application: as a poll from here on.
  p.on_wait_end(kT0 + 103 * kMs);
  EXPECT_EQ(p.state(), S::kAppPolls);
  EXPECT_FALSE(p.engine_receives());
  EXPECT_TRUE(p.guarded());
  EXPECT_EQ(p.transitions(S::kEngine, S::kAppWaits), 1u);
  EXPECT_EQ(p.transitions(S::kAppWaits, S::kAppPolls), 1u);
  // The next wait from a polling application: the engine was not receiving.
  EXPECT_FALSE(p.on_wait_begin(kT0 + 104 * kMs).unwatch);
}

TEST(Progress, TwoWaitersBothMustReturnBeforeTheWaitEnds) {
  Progress p(true);
  p.on_wait_begin(kT0);
  p.on_wait_begin(kT0 + kUs);
  p.on_wait_end(kT0 + 2 * kUs);
  EXPECT_EQ(p.state(), S::kAppWaits);
  p.on_wait_end(kT0 + 3 * kUs);
  EXPECT_EQ(p.state(), S::kAppPolls);
}

TEST(Progress, WithoutWaitFdsAWaitIsAStop) {
  // Poll mode: nothing can wake a sleeping thread on arrival; the engine receives.
  Progress p(/*app_can_wait=*/false);
  p.on_app_poll(kT0);
  const Progress::WaitBegin w = p.on_wait_begin(kT0 + kUs);
  EXPECT_FALSE(w.waits);
  EXPECT_TRUE(w.kick);
  EXPECT_EQ(p.state(), S::kEngine);
  EXPECT_TRUE(p.engine_receives());
  EXPECT_FALSE(p.on_wait_end(kT0 + 2 * kUs));
  EXPECT_EQ(p.state(), S::kEngine);
}

TEST(Progress, ArrivalsLeftByAnApplicationThatWentElsewhereMakeTheEngineReceiveBesideIt) {
  // ib_write_lat: the application polls its send CQ, takes the completion, then spins on memory.
  Progress p(true);
  p.on_app_poll(kT0);
  p.on_poll_result(/*found=*/true);
  p.on_engine_look(kT0 + 200 * kUs);  // within the handoff: the engine defers
  Progress::Pass pass;
  pass.received = 1;
  bool takeover = false;
  p.on_engine_pass(kT0 + 200 * kUs, pass, &takeover);
  EXPECT_TRUE(takeover);
  EXPECT_EQ(p.state(), S::kBeside);
  EXPECT_TRUE(p.engine_receives());
  // Its polls now neither push the guard nor stop the engine receiving.
  p.on_engine_pass_done(kT0 + 10 * kMs);
  EXPECT_FALSE(p.on_app_poll(kT0 + 300 * kUs));
  EXPECT_TRUE(p.engine_receives());

  // Then it spins on its CQ again (found nothing) and receives for itself: the engine's wake-ups
  // are not needed, and it goes back to leaving the receive side to the application.
  p.on_poll_result(false);
  int passes = 0;
  for (Time t = kT0 + 400 * kUs; p.state() == S::kBeside && passes < 40; t += 10 * kUs) {
    p.on_app_poll(t);
    p.on_engine_look(t);
    Progress::Pass woke;
    woke.rx_woke = true;  // woken by an arrival the application took first
    p.on_engine_pass(t, woke, &takeover);
    EXPECT_FALSE(takeover);
    ++passes;
  }
  EXPECT_EQ(p.state(), S::kAppPolls);
  EXPECT_EQ(passes, p.tunables().beside_start) << "each needless wake-up scores -1";
  EXPECT_EQ(p.last_transition().cause, Progress::Cause::kBesideDone);
}

TEST(Progress, AnApplicationSpinningOnItsCqIsNoReasonToReceiveBesideIt) {
  Progress p(true);
  p.on_app_poll(kT0);
  p.on_poll_result(false);  // its CQ was empty: it polls again at once
  p.on_engine_look(kT0 + 10 * kUs);
  Progress::Pass pass;
  pass.received = 3;
  bool takeover = true;
  p.on_engine_pass(kT0 + 10 * kUs, pass, &takeover);
  EXPECT_FALSE(takeover);
  EXPECT_EQ(p.state(), S::kAppPolls);
}

TEST(Progress, ATimerWakeIsLeftToTheApplicationThatPolledAMomentAgo) {
  Progress p(true);
  p.on_app_poll(kT0);
  p.on_engine_look(kT0 + 5 * kUs);
  Time again = 0;
  EXPECT_TRUE(p.skip_timer_wake(kT0 + 10 * kUs, &again));
  EXPECT_EQ(again, Progress::kNever) << "the guard covers its going away";
  // Not if it has not polled for the left time: the engine runs the pass.
  EXPECT_FALSE(p.skip_timer_wake(kT0 + 10 * kUs + p.tunables().left, &again));
  // Without a guard (the engine's pass took the timer for work), it looks again by the lapse.
  p.on_engine_pass_done(kT0 + 20 * kMs);
  EXPECT_FALSE(p.guarded());
  EXPECT_TRUE(p.skip_timer_wake(kT0 + 20 * kUs, &again));
  EXPECT_EQ(again, kT0 + p.tunables().handoff);
}

// A program that polls its channel's fd in its own loop: its ibv_get_cq_event receives, and when
// it finds no event it sleeps in its poll(), where it runs no timers. The engine's timer then
// covers the work due, and the wake-up it brings is not left to the sleeping thread; once the
// thread polls again, it runs what falls due itself.
TEST(Progress, AThreadAsleepOnItsChannelLeavesTheWorkDueToTheEngine) {
  Progress p(true);
  p.on_app_poll(kT0);  // its get's pass
  const Time guard = p.timer_at();
  p.on_deadline(kT0 + 300 * kUs);  // its post armed a timer: the guard covers it (it polls)
  EXPECT_EQ(p.timer_at(), guard);
  EXPECT_TRUE(p.on_app_sleeps()) << "no event: it sleeps, and the timer must fire for the work";
  EXPECT_EQ(p.timer_at(), kT0 + 300 * kUs);
  EXPECT_EQ(p.state(), S::kAppPolls) << "it keeps the receive side: arrivals wake it";
  EXPECT_FALSE(p.engine_receives());
  p.on_engine_look(kT0 + 300 * kUs);
  Time again = 0;
  EXPECT_FALSE(p.skip_timer_wake(kT0 + 300 * kUs, &again)) << "asleep: the engine runs it";
  // Woken by an arrival, it polls again: a timer wake a moment later is its own to run.
  p.on_app_poll(kT0 + 400 * kUs);
  p.on_engine_look(kT0 + 405 * kUs);
  EXPECT_TRUE(p.skip_timer_wake(kT0 + 410 * kUs, &again));
  // Only a thread with the receive side sleeps so: with the engine receiving, nothing changes.
  Progress q(true);
  q.on_deadline(kT0 + kMs);
  EXPECT_FALSE(q.on_app_sleeps());
  EXPECT_EQ(q.state(), S::kEngine);
}

TEST(Progress, DeadlinesMoveTheTimerUnlessAPollingThreadGuardsIt) {
  Progress p(true);
  EXPECT_TRUE(p.on_deadline(kT0 + 3 * kMs));
  EXPECT_EQ(p.timer_at(), kT0 + 3 * kMs);
  EXPECT_FALSE(p.on_deadline(kT0 + 4 * kMs)) << "later than what is armed";
  EXPECT_EQ(p.work_at(), kT0 + 3 * kMs);
  p.on_app_poll(kT0);  // guards: timer at the handoff's lapse
  EXPECT_EQ(p.timer_at(), kT0 + p.tunables().handoff);
  EXPECT_FALSE(p.on_deadline(kT0 + 100 * kUs)) << "the polling thread runs it when due";
  EXPECT_EQ(p.work_at(), kT0 + 100 * kUs);
  EXPECT_EQ(p.timer_at(), kT0 + p.tunables().handoff);
  // An application pass that leaves work while guarded leaves the timer alone too.
  EXPECT_FALSE(p.on_app_pass_done(kT0 + 200 * kUs, kT0 + 150 * kUs));
  EXPECT_EQ(p.work_at(), kT0 + 200 * kUs);
  // The engine's own pass takes the timer back for work.
  EXPECT_TRUE(p.on_engine_pass_done(kT0 + 200 * kUs));
  EXPECT_FALSE(p.guarded());
  EXPECT_EQ(p.timer_at(), kT0 + 200 * kUs);
}

TEST(Progress, TheAckOfASilentWriteWaitsForAPostOnlyFromAnApplicationThatAnswers) {
  Progress p(true);
  bool takeover;
  Progress::Pass write;
  write.received = 1;
  write.silent = true;
  write.hold_limit = Progress::kNever;
  // Nobody polled, nothing answered the last WRITE: the ACK leaves at once.
  EXPECT_FALSE(p.on_engine_pass(kT0, write, &takeover));
  // The application polled a moment ago but answered no WRITE (ucx_perftest put_bw's target
  // polls all along and never posts): not held either.
  p.on_app_poll(kT0 + kMs);
  p.on_engine_look(kT0 + kMs + 10 * kUs);
  EXPECT_FALSE(p.on_engine_pass(kT0 + kMs + 10 * kUs, write, &takeover));
  EXPECT_FALSE(p.on_app_silent_write(false));  // its own passes do not hold for a post either
  // It answered the last WRITE (sent data since): held for its post, also when it has gone
  // quiet for longer than the handoff (ib_write_lat -s 256K).
  write.sent_data = true;
  EXPECT_TRUE(p.on_engine_pass(kT0 + kMs + 20 * kUs, write, &takeover));
  EXPECT_TRUE(p.on_app_silent_write(true));
  p.on_engine_look(kT0 + 10 * kMs);
  EXPECT_TRUE(p.on_engine_pass(kT0 + 10 * kMs, write, &takeover));
  // Past the hold's limit: sent.
  write.hold_limit = kT0 + 10 * kMs;
  EXPECT_FALSE(p.on_engine_pass(kT0 + 10 * kMs, write, &takeover));
  // A pass without a silent WRITE keeps ACKs held for a post while the application is about.
  Progress::Pass other;
  other.held_for_post = true;
  other.hold_limit = Progress::kNever;
  EXPECT_TRUE(p.on_engine_pass(kT0 + 11 * kMs, other, &takeover));
  other.held_for_post = false;
  EXPECT_FALSE(p.on_engine_pass(kT0 + 11 * kMs, other, &takeover));
}

TEST(Progress, RandomInputsOnlyMakeTransitionsOfTheTable) {
  std::set<std::tuple<int, int, int>> table;
  for (const auto& t : Progress::transition_table())
    table.insert({int(t.from), int(t.cause), int(t.to)});
  for (unsigned seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    Progress p(/*app_can_wait=*/seed % 4 != 0);
    Time now = kT0;
    uint64_t seen = 0, waits = 0;
    for (int step = 0; step < 5000; ++step) {
      now += std::uniform_int_distribution<Time>(0, 300 * kUs)(rng);
      bool takeover;
      switch (rng() % 9) {
        case 0:
          p.on_app_poll(now);
          p.on_poll_result(rng() % 2);
          break;
        case 1:
          p.on_app_stop(now);
          break;
        case 2:
          if (p.on_wait_begin(now).waits) ++waits;
          break;
        case 3:
          if (waits > 0) {
            --waits;
            p.on_wait_end(now);
          }
          break;
        case 4:
          p.on_engine_look(now);
          break;
        case 5: {
          Progress::Pass pass;
          pass.received = rng() % 3;
          pass.rx_woke = rng() % 2;
          pass.silent = rng() % 4 == 0;
          p.on_engine_pass(now, pass, &takeover);
          p.on_engine_pass_done(now + std::uniform_int_distribution<Time>(1, 5 * kMs)(rng));
          break;
        }
        case 6:
          p.on_app_received();
          p.on_app_pass_done(now + kMs, now);
          break;
        case 7:
          p.on_deadline(now + std::uniform_int_distribution<Time>(1, 10 * kMs)(rng));
          break;
        case 8: {
          Time again;
          p.skip_timer_wake(now, &again);
          break;
        }
      }
      if (p.transition_count() != seen) {
        ASSERT_EQ(p.transition_count(), seen + 1);
        seen = p.transition_count();
        const Progress::Transition& t = p.last_transition();
        ASSERT_TRUE(table.count({int(t.from), int(t.cause), int(t.to)}))
            << Progress::name(t.from) << " --" << Progress::name(t.cause) << "--> "
            << Progress::name(t.to) << " is not in the table (seed " << seed << ")";
      }
      // Invariants: who receives follows the state; a waiting thread's timers are the engine's.
      ASSERT_EQ(p.engine_receives(), p.state() == S::kEngine || p.state() == S::kBeside);
      if (p.state() == S::kAppWaits) {
        ASSERT_LE(p.timer_at(), std::max(p.work_at(), now));
      }
      ASSERT_EQ(p.state() == S::kAppWaits, waits > 0);
    }
    uint64_t sum = 0;
    for (size_t a = 0; a < Progress::kStates; ++a)
      for (size_t b = 0; b < Progress::kStates; ++b) sum += p.transitions(S(a), S(b));
    EXPECT_EQ(sum, p.transition_count());
  }
}

// docs/architecture.md carries the diagram between two markers; after a change of the table,
// paste what this test prints there.
TEST(Progress, DiagramInTheDocsIsTheTables) {
  const std::string path = std::string(UROCE_SOURCE_DIR) + "/docs/architecture.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin =
      "<!-- progress-diagram: generated from src/engine/progress.cc -->\n```mermaid\n";
  const size_t b = doc.find(begin);
  ASSERT_NE(b, std::string::npos) << "marker missing in " << path << "; it should read:\n"
                                  << begin << Progress::diagram() << "```";
  const size_t from = b + begin.size();
  const size_t e = doc.find("```\n", from);
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(from, e - from), Progress::diagram())
      << "docs/architecture.md's diagram is not the table's; it should read:\n"
      << begin << Progress::diagram() << "```";
}

}  // namespace
}  // namespace uroce
