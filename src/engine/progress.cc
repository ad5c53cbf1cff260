// The progress policy. See progress.h; the measurements behind each rule are in
// docs/performance.md ("The engine's guard", "ib_write_lat", "8 QPs over sockets").
#include "engine/progress.h"

#include <algorithm>

namespace uroce {

const char* Progress::name(State s) {
  switch (s) {
    case State::kEngine:
      return "engine";
    case State::kAppPolls:
      return "app-polls";
    case State::kAppWaits:
      return "app-waits";
    case State::kBeside:
      return "beside";
  }
  return "?";
}

const char* Progress::name(Cause c) {
  switch (c) {
    case Cause::kAppPoll:
      return "poll";
    case Cause::kAppStop:
      return "stop";
    case Cause::kWaitBegin:
      return "wait";
    case Cause::kWaitEnd:
      return "wait-end";
    case Cause::kLapse:
      return "lapse";
    case Cause::kTakeover:
      return "takeover";
    case Cause::kBesideDone:
      return "beside-done";
  }
  return "?";
}

const std::vector<Progress::Transition>& Progress::transition_table() {
  using S = State;
  using C = Cause;
  static const std::vector<Transition> table = {
      {S::kEngine, C::kAppPoll, S::kAppPolls},    {S::kAppPolls, C::kLapse, S::kEngine},
      {S::kAppPolls, C::kAppStop, S::kEngine},    {S::kBeside, C::kAppStop, S::kEngine},
      {S::kEngine, C::kWaitBegin, S::kAppWaits},  {S::kAppPolls, C::kWaitBegin, S::kAppWaits},
      {S::kBeside, C::kWaitBegin, S::kAppWaits},  {S::kAppWaits, C::kWaitEnd, S::kAppPolls},
      {S::kEngine, C::kTakeover, S::kBeside},     {S::kAppPolls, C::kTakeover, S::kBeside},
      {S::kBeside, C::kBesideDone, S::kAppPolls},
  };
  return table;
}

std::string Progress::diagram() {
  std::string d = "stateDiagram-v2\n    [*] --> engine\n";
  for (const Transition& t : transition_table()) {
    d += "    ";
    d += name(t.from);
    d += " --> ";
    d += name(t.to);
    d += " : ";
    d += name(t.cause);
    d += "\n";
  }
  return d;
}

void Progress::move(State to, Cause why) {
  if (to == state_) return;
  ++moves_[size_t(state_)][size_t(to)];
  ++transition_count_;
  last_ = {state_, why, to};
  state_ = to;
}

void Progress::set_handoff(Time ns) {
  t_.handoff = ns;
  push_at_ = 0;  // the next poll guards the new lapse
}

bool Progress::polled_within(Time now, Time span) const {
  // It may have polled after the caller read the clock: now - last_poll_ would wrap.
  return last_poll_ != 0 && (last_poll_ >= now || now - last_poll_ < span);
}

bool Progress::arm(Time t) {
  if (t == timer_at_) return false;
  timer_at_ = t;
  return true;
}

void Progress::push_guard(Time now) {
  // Each push re-arms the timerfd, which costs what a wake-up does on a VM (hrtimer
  // reprogramming: ~14 us here, against ~1 us for a re-arm right after another): so the span
  // doubles with every push the application made in time, from the handoff up to max_guard.
  const Time cap = std::max(t_.handoff, t_.max_guard);
  guard_span_ = guarded_ ? std::min(guard_span_ * 2, cap) : t_.handoff;
  arm(now + guard_span_);
  guarded_ = true;
  // The next push is due a handoff before the guard runs out (an eighth of the span when that is
  // more; all of a span shorter than the handoff, as after set_handoff lengthened it): the guard
  // then fires only when the application went a handoff without polling, the lapse it is there
  // to catch. With an eighth alone (0.5 ms of 4 ms) it also fired between the polls of a sender
  // posting to 8 QPs over sockets, and its wake-up took that sender for gone and split its work
  // between two threads (docs/performance.md, "8 QPs over sockets").
  const Time slack = std::min(guard_span_, std::max(guard_span_ / 8, t_.handoff));
  push_at_ = now + guard_span_ - slack;
}

void Progress::score_beside(int delta) {
  // Only while receiving beside: a score of 0 stays 0 (a takeover sets beside_start).
  if (beside_score_ == 0) return;
  beside_score_ = std::clamp(beside_score_ + delta, 0, t_.beside_max);
  if (beside_score_ == 0 && state_ == State::kBeside) move(State::kAppPolls, Cause::kBesideDone);
}

bool Progress::on_app_poll(Time now) {
  last_poll_ = now;
  asleep_ = false;
  if (state_ == State::kEngine) move(State::kAppPolls, Cause::kAppPoll);
  // Now and then the timer moves to a lapse this poll sets; not while the engine receives beside
  // this application, which leaves its timers to the engine, nor for the pass of a thread woken
  // from its wait (it sleeps again; the engine's timer stands for the work due).
  if ((!guarded_ || now >= push_at_) && beside_score_ == 0 && state_ != State::kAppWaits) {
    const Time before = timer_at_;
    push_guard(now);
    return timer_at_ != before;
  }
  return false;
}

bool Progress::on_app_stop(Time now) {
  (void)now;
  const bool polled = last_poll_ != 0;
  last_poll_ = 0;
  beside_score_ = 0;
  if (state_ == State::kAppPolls || state_ == State::kBeside) move(State::kEngine, Cause::kAppStop);
  return polled;
}

Progress::WaitBegin Progress::on_wait_begin(Time now) {
  WaitBegin w;
  if (!app_can_wait_) {
    // Nothing could wake a sleeping thread on arrival (poll mode): the engine receives.
    w.kick = on_app_stop(now);
    return w;
  }
  w.waits = true;
  ++waiters_;
  w.unwatch = engine_receives();
  beside_score_ = 0;
  look_ = {};  // what the engine saw of a polling thread no longer holds
  move(State::kAppWaits, Cause::kWaitBegin);
  // A waiting thread runs no timers: the engine's timer covers the work due (a guard armed
  // later than it stays armed; it fires at worst once per guard span while the thread waits).
  if (work_at_ < timer_at_) w.timer_moved = arm(work_at_);
  return w;
}

bool Progress::on_wait_end(Time now) {
  if (!app_can_wait_) return false;
  if (waiters_ > 0) --waiters_;
  // Back in the application, which polls its CQ or posts next: as a poll from here on.
  last_poll_ = now;
  if (waiters_ == 0 && state_ == State::kAppWaits) move(State::kAppPolls, Cause::kWaitEnd);
  // Another thread still waiting: the engine's timer keeps standing for the work due.
  if (state_ == State::kAppWaits) return false;
  if (!guarded_ || now >= push_at_) {
    const Time before = timer_at_;
    push_guard(now);
    return timer_at_ != before;
  }
  return false;
}

bool Progress::on_app_sleeps() {
  // Only a thread with the receive side: otherwise the engine receives and runs what is due.
  if (state_ != State::kAppPolls) return false;
  asleep_ = true;
  return work_at_ < timer_at_ && arm(work_at_);
}

bool Progress::on_app_pass_done(Time next, Time now) {
  work_at_ = next;
  if (state_ == State::kAppWaits) {
    // A waiting thread's pass (it woke on an arrival): it runs no timers while it sleeps, so the
    // engine's timer covers what the pass left.
    return next < timer_at_ || timer_at_ <= now ? arm(next) : false;
  }
  // This thread runs it when due; the guard covers its going away.
  if (guarded_) return false;
  // Unguarded (the engine receives beside this application, which then leaves its timers to
  // it): the timer the pass just ran must not still wake the engine thread, but it must wake by
  // the handoff time. An application that stops calling uroce without saying so (ib_write_lat
  // spins on memory) leaves the receive side to the engine, which no longer watches the sockets
  // while an application polls: were its timer pushed out to a QP's ACK timeout, arrivals (and
  // held ACKs) would wait that long, and the peer's retries could run out.
  next = std::min(next, now + t_.handoff);
  if (next < timer_at_ || timer_at_ <= now) return arm(next);
  return false;
}

bool Progress::on_deadline(Time deadline) {
  if (deadline < work_at_) work_at_ = deadline;
  // While guarded, the polling application thread runs it (poll_from_app); should that thread
  // stop, the guard wakes the engine thread, whose pass runs whatever is due. A waiting thread
  // runs nothing: the engine's timer must.
  if ((!guarded_ || state_ == State::kAppWaits) && deadline < timer_at_) return arm(deadline);
  return false;
}

Progress::Look Progress::on_engine_look(Time now) {
  if (state_ == State::kAppWaits) {
    // The waiting threads receive; nobody's polls are timed.
    was_app_polling_ = false;
    look_ = {};
    return look_;
  }
  Look l;
  l.app_polls = polled_within(now, t_.handoff);
  // (An application thread that polled after this thread read the clock polls: no lapse.)
  if (!l.app_polls && (state_ == State::kAppPolls || (was_app_polling_ && last_poll_ != 0))) {
    l.lapsed = true;
    if (state_ == State::kAppPolls) move(State::kEngine, Cause::kLapse);
  }
  was_app_polling_ = l.app_polls;
  // The engine leaves receiving to the application thread that polls — unless it receives
  // beside it.
  l.defer = l.app_polls && beside_score_ == 0;
  // It looks again when the handoff would lapse (a guard set by the polling thread holds it).
  if (l.defer) look_by(last_poll_ + t_.handoff);
  look_ = l;
  return l;
}

bool Progress::look_by(Time deadline) {
  if (guarded_ || deadline >= timer_at_) return false;
  return arm(deadline);
}

bool Progress::skip_timer_wake(Time now, Time* look_again) {
  *look_again = kNever;
  // Its timer alone woke it while an application thread polls, and that thread polled a moment
  // ago: it receives, runs the due timers (the clock has passed work_at_) and guards the handoff
  // itself. A pass here would only contend with it for the receive and device locks (measured in
  // a memif ping-pong: ~1 700 wake-ups, 2 400 futex calls and 2 300 timer re-arms a second, the
  // application threads waiting for their cores 5 % of the time).
  if (!look_.defer || look_.lapsed || asleep_ || !polled_within(now, t_.left)) return false;
  // Its guard wakes the engine should it stop; without one, look when the handoff would lapse.
  if (!guarded_) *look_again = last_poll_ + t_.handoff;
  return true;
}

bool Progress::back_off_until(Time at) {
  return at < timer_at_ && arm(at);
}

bool Progress::on_engine_pass(Time now, const Pass& p, bool* takeover) {
  *takeover = false;
  // Whether the application is spinning on an empty CQ now (it will take what arrives), or took
  // a completion and has not polled for the left time (it is spinning elsewhere).
  const bool recent = last_poll_ != 0 && (last_poll_ >= now || now - last_poll_ <= t_.left);
  const bool beside = beside_score_ > 0;
  if ((look_.lapsed || look_.defer) && !beside && p.received > 0 && found_ && !recent) {
    // Packets were left waiting for an application that took a completion and went away
    // (ib_write_lat spins on the memory a WRITE fills): receive on arrival beside it.
    beside_score_ = t_.beside_start;
    *takeover = true;
    move(State::kBeside, Cause::kTakeover);
  } else if (beside && look_.app_polls && p.rx_woke) {
    // An arrival woke the engine: needed if it found packets the application was not there to
    // take; not if it found none, or the application spins on its CQ anyway.
    const bool needed = p.received > 0 && !(recent && !found_);
    score_beside(needed ? 4 : -1);
  }
  look_.lapsed = false;
  // ib_write_lat: each side spins on memory for the peer's WRITE and posts its own the moment it
  // lands. Held for the application's post (Datapath::Hold::kUntilPost), the ACK goes with that
  // WRITE and the peer, still polling, takes both in one pass of its own. Only for an application
  // that answers so: it posted since the last such WRITE came (replied_). A target that never
  // posts — ib_write_bw's, ucx_perftest put_bw's, which polls its CQ all along — never has its
  // WRITEs' ACKs held: held for a post that does not come, each waited its limit (put_bw: 225 µs
  // an operation, 44 MB/s). Held packets that waited their limit leave now.
  if (p.silent) replied_ = p.sent_data;
  return replied_ && now < p.hold_limit && (p.held_for_post || p.silent);
}

bool Progress::on_engine_pass_done(Time next) {
  work_at_ = next;
  guarded_ = false;  // a polling application guards again
  return arm(next);
}

}  // namespace uroce
