// The progress policy of a device: who receives — the engine thread, or an application thread
// inside its own verbs calls —, when the engine's timer must fire, and which ACKs a receive pass
// holds back for the application's next call. An RNIC receives with no thread involved; uroce
// must choose a thread, and the cheapest is the one that is about to need the result: a thread
// busy-polling a CQ (it receives in its empty polls), or a thread asleep in ibv_get_cq_event (the
// datagram wakes it, and it receives before it looks for its event: one wake-up per message, as a
// NIC's interrupt gives). The engine thread receives when no application thread is there to.
//
// Pure and deterministic: timestamped inputs in, decisions out; no clock, no lock, no fd. The
// Engine (engine.h) owns one, calls it under its policy lock and carries out what it decides
// (epoll registrations, the timerfd, the pass's hold mode), so tests drive it in virtual time
// (tests/engine/progress_test.cc) and read its decisions.
//
// States (who receives):
//   kEngine    nobody in the application is about: the engine watches the port and receives.
//   kAppPolls  an application thread polled a CQ within the handoff time: it receives in its
//              empty polls and runs what falls due; the engine sleeps behind a guard timer that
//              fires only when the application went a handoff without polling (a lapse).
//   kAppWaits  application threads sleep in ibv_get_cq_event with the port's wait fds in their
//              wait set (Engine::wait_begin): an arrival wakes one of them, which receives. The
//              engine runs timers only. (Ports without wait fds — poll mode — have no such state.)
//   kBeside    an application polls, but now and then only: it took a completion and went off to
//              spin elsewhere (on memory a WRITE will fill: ib_write_lat) while arrivals waited.
//              The engine receives on arrival beside it, until its wake-ups are mostly not needed.
// The diagram (docs/architecture.md, "The progress policy") is drawn from transition_table().
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/env.h"

namespace uroce {

// The policy's times, in nanoseconds of the engine's clock.
struct ProgressTunables {
  // How long after an application thread's last poll the engine takes receiving back.
  transport::Time handoff = 1'000'000;
  // How long a thread that took a completion may go without polling before it counts as
  // spinning elsewhere (a thread polling a CQ in a loop polls again within microseconds).
  transport::Time left = 50'000;
  // The longest a polling application's guard runs (engine.cc says why 4 ms).
  transport::Time max_guard = 4'000'000;
  // Receiving beside a polling application: the score it starts at and its ceiling.
  int beside_start = 8, beside_max = 16;
};

class Progress {
 public:
  using Time = transport::Time;
  static constexpr Time kNever = transport::kNever;

  enum class State : uint8_t { kEngine, kAppPolls, kAppWaits, kBeside };
  static constexpr size_t kStates = 4;
  static const char* name(State s);

  // What moves it between states (the trace names them).
  enum class Cause : uint8_t {
    kAppPoll,     // an application thread polled a CQ
    kAppStop,     // a polling thread said it is about to block outside uroce (armed a CQ)
    kWaitBegin,   // a thread began waiting in ibv_get_cq_event
    kWaitEnd,     // the last waiting thread came back
    kLapse,       // the engine found the polling application silent for a handoff
    kTakeover,    // the engine found arrivals left waiting by an application that went elsewhere
    kBesideDone,  // receiving beside the application turned out not to be needed
  };
  static constexpr size_t kCauses = 7;
  static const char* name(Cause c);
  struct Transition {
    State from;
    Cause cause;
    State to;
  };
  // Every transition the policy can make, in the order of the table in progress.cc.
  static const std::vector<Transition>& transition_table();
  // The table as a Mermaid state diagram: docs/architecture.md carries it (a test keeps the two
  // the same).
  static std::string diagram();

  using Tunables = ProgressTunables;

  // `app_can_wait`: the port has wait fds an application thread can sleep on (not poll mode).
  explicit Progress(bool app_can_wait, Tunables t = {}) : t_(t), app_can_wait_(app_can_wait) {}

  State state() const { return state_; }
  // Whether an application thread can sleep on the port's wait fds (not poll mode).
  bool app_can_wait() const { return app_can_wait_; }
  const Tunables& tunables() const { return t_; }
  void set_handoff(Time ns);
  void set_left(Time ns) { t_.left = ns; }

  // Decisions the Engine carries out.
  // Whether the engine watches the port's receive side (its wait fds; in poll mode, its rings).
  bool engine_receives() const { return state_ == State::kEngine || state_ == State::kBeside; }
  // When the engine's timer must fire (kNever: disarmed). Every input that returns true moved it.
  Time timer_at() const { return timer_at_; }
  // The earliest deadline the last pass left: a polling application runs it once due.
  Time work_at() const { return work_at_; }
  // Whether the timer stands guard for a polling application (rather than for work).
  bool guarded() const { return guarded_; }
  // From when a poll pushes the guard out (0: the next poll does; kNever: polls push none now —
  // the engine receives beside the application, or threads wait).
  Time push_at() const {
    if (state_ == State::kBeside || state_ == State::kAppWaits) return kNever;
    return guarded_ ? push_at_ : 0;
  }

  // ---- application threads ----
  // A CQ poll about to look for arrivals itself (Engine::poll_from_app). True: the timer moved
  // (the guard was pushed out).
  bool on_app_poll(Time now);
  // What that poll returned: a thread spinning on an empty CQ polls again at once; one that took
  // a completion may go off to do something else.
  void on_poll_result(bool found) { found_ = found; }
  // The polling application's own pass received packets (its receives count against receiving
  // beside it).
  void on_app_received() { score_beside(-1); }
  // A thread that polled is about to block outside uroce. True: wake the engine now, it
  // receives from here on.
  bool on_app_stop(Time now);
  // A thread begins / ends waiting in ibv_get_cq_event. A port without wait fds cannot wake a
  // waiter: then the wait is a stop (the engine receives; `kick` as for on_app_stop).
  struct WaitBegin {
    bool waits = false;    // the thread may sleep with the port's wait fds in its set
    bool unwatch = false;  // the engine must stop watching the port at once: the waiter receives
    bool kick = false;     // the engine must look now (poll mode: it receives)
    bool timer_moved = false;
  };
  WaitBegin on_wait_begin(Time now);
  // The thread is back in the application, which typically polls or posts next: as a poll.
  // True: the timer moved.
  bool on_wait_end(Time now);
  // A thread that polls is about to sleep on its channel's fd in its own poll loop (a
  // non-blocking ibv_get_cq_event found no event), whose set wakes it on arrivals while it has
  // the receive side (Engine::watch_port_on). It runs no timers while it sleeps: the engine's
  // timer covers the work due, and a timer wake-up is not left to it (skip_timer_wake) until it
  // polls again. True: the timer moved.
  bool on_app_sleeps();
  // An application pass ran: it left work due at `next`. True: the timer moved.
  bool on_app_pass_done(Time next, Time now);
  // An application call armed work due at `deadline` (a retransmission timer, a publish, …).
  // True: the timer moved.
  bool on_deadline(Time deadline);
  // An application pass took an RC WRITE that ends a message without immediate data
  // (`silent`), and whether the device sent anything but ACKs since the last such WRITE. Returns
  // whether the pass holds its ACKs for the application's next post (Datapath::Hold::kUntilPost):
  // only when it answered the last such WRITE with a post (see on_engine_pass).
  bool on_app_silent_write(bool sent_data) {
    replied_ = sent_data;
    return replied_;
  }

  // ---- the engine thread ----
  // The engine looks before it sleeps (top of its loop). `lapsed` in the result: the polling
  // application went a handoff without polling (counted by the engine); the engine then looks at
  // what waits without sleeping. `look_by`: the timer must fire by then (handoff's lapse).
  struct Look {
    bool lapsed = false;
    bool app_polls = false;  // an application thread polled within the handoff
    bool defer = false;      // the engine leaves receiving to that thread
  };
  Look on_engine_look(Time now);
  // Sets the timer no later than `deadline` unless a guard holds it earlier. True: it moved.
  bool look_by(Time deadline);
  // The engine woke by its timer alone while an application thread polls. True: skip the pass (the
  // polling thread receives and runs what is due); *look_again: when to look even if nobody re-arms
  // the timer (kNever: the guard covers it).
  bool skip_timer_wake(Time now, Time* look_again);
  // Poll-mode back-off: the engine sleeps until `at` unless something is due earlier.
  bool back_off_until(Time at);
  // A pass of the engine's: what it received (`received` packets, woken by arrivals: `rx_woke`,
  // a silent WRITE among them: `silent`, with `sent_data` as for on_app_silent_write). Decides
  // beside/takeover and returns whether the pass holds ACKs for the application's next post
  // (Datapath::Hold::kUntilPost), given whether some are held for one already and until when
  // they may be (`hold_limit`). *takeover: the engine began receiving beside the application.
  struct Pass {
    size_t received = 0;
    bool rx_woke = false;
    bool silent = false;
    bool sent_data = false;
    bool held_for_post = false;
    Time hold_limit = kNever;
  };
  bool on_engine_pass(Time now, const Pass& p, bool* takeover);
  // The engine's pass left work due at `next`: its timer follows it (and stops guarding).
  bool on_engine_pass_done(Time next);

  // Counters: transitions by (from, to), for the name table's diagram and for tests.
  uint64_t transitions(State from, State to) const { return moves_[size_t(from)][size_t(to)]; }
  // The last transition, and how many there were: the Engine traces each one at debug level
  // ("progress: app-polls --lapse--> engine").
  const Transition& last_transition() const { return last_; }
  uint64_t transition_count() const { return transition_count_; }

 private:
  void move(State to, Cause why);
  bool arm(Time t);  // timer_at_ := t; true when it changed
  void push_guard(Time now);
  void score_beside(int delta);
  bool polled_within(Time now, Time span) const;

  Tunables t_;
  const bool app_can_wait_;
  State state_ = State::kEngine;
  int waiters_ = 0;       // threads waiting in ibv_get_cq_event
  Time last_poll_ = 0;    // an application thread's last CQ poll (0: none, or it stopped)
  bool found_ = false;    // that poll returned completions
  bool asleep_ = false;   // the polling thread sleeps on its channel's fd (on_app_sleeps)
  int beside_score_ = 0;  // kBeside while positive
  bool replied_ = false;  // see on_app_silent_write
  bool was_app_polling_ = false;
  Look look_;  // the engine's last look, for its pass
  // The timer: when it fires (timer_at_), the work it stands for (work_at_), and the guard.
  Time timer_at_ = kNever;
  Time work_at_ = kNever;
  bool guarded_ = false;
  Time guard_span_ = 0;  // how far ahead the last push set the guard
  Time push_at_ = 0;     // when the polling thread next pushes the guard
  std::array<std::array<uint64_t, kStates>, kStates> moves_{};
  uint64_t transition_count_ = 0;
  Transition last_{State::kEngine, Cause::kAppPoll, State::kEngine};
};

}  // namespace uroce
