// The simulator's discrete-event core: one virtual clock and a queue of events, nothing else.
// Deterministic by construction: events run in the order (time, class, sequence number), where
// the sequence number counts schedule() calls, so two runs that schedule the same events in the
// same order run them in the same order — bit-identical reruns, whatever the heap's internals.
//
// Classes break ties between events due at the same nanosecond by what they stand for
// (EventClass): a frame that arrives at time t is seen before a timer due at t fires, and
// samplers observe the instant after both. Within a class, first scheduled runs first.
//
// Handlers are plain objects (a link direction, an egress port, a host); an event carries the
// handler and one 64-bit argument (a frame pointer, a generation number), so scheduling never
// allocates beyond the heap's own vector. Time never goes backwards: an event scheduled in the
// past runs at the current time.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/env.h"

namespace uroce::sim {

using transport::kNever;
using transport::Time;

inline constexpr Time kUs = 1000;        // ns per µs
inline constexpr Time kMs = 1000 * kUs;  // ns per ms

// Tie-breaking between events due at the same instant (smaller first).
enum class EventClass : uint8_t {
  kArrival = 0,  // a frame reaches the end of a link
  kTimer = 1,    // a wake-up: serialisation done, a host's deadline, a PAUSE expiring, a workload
  kSample = 2,   // observers: time-series samples, window edges
};

class EventHandler {
 public:
  virtual ~EventHandler() = default;
  virtual void on_event(Time now, uint64_t arg) = 0;
  // When the event scheduled for `at` with `arg` should really run, asked as it reaches the
  // front of the queue: `at` (run it), a later time (the queue moves it there without running
  // it: a deadline that was postponed, see Timer), or kNever (stale: dropped). Neither a move
  // nor a drop counts as a step.
  virtual Time due(uint64_t arg, Time at) {
    (void)arg;
    return at;
  }
};

class EventQueue {
 public:
  Time now() const { return now_; }
  // Runs h->on_event(max(at, now()), arg) in (time, class, order of scheduling) order.
  void schedule(Time at, EventClass cls, EventHandler* h, uint64_t arg = 0);
  // The time of the earliest live event (dropping stale ones on the way); kNever when none.
  Time next_time();
  // Runs the earliest live event if it is due no later than `limit`; false when none is.
  bool step(Time limit = kNever);
  // Runs events until none is due by `limit`; the clock then stays at the last event's time.
  void run_until(Time limit);

  size_t pending() const { return heap_.size(); }  // including stale events not yet dropped
  uint64_t events_run() const { return run_; }     // live events run so far

 private:
  struct Entry {
    Time at;
    uint64_t order;  // class << 56 | sequence number
    EventHandler* h;
    uint64_t arg;
    bool operator>(const Entry& o) const { return at != o.at ? at > o.at : order > o.order; }
  };
  void pop();

  std::vector<Entry> heap_;  // min-heap on (at, order)
  Time now_ = 0;
  uint64_t seq_ = 0;  // schedule() calls so far (< 2^56: centuries at a billion per second)
  uint64_t run_ = 0;
};

// One pending wake-up of a handler at a time: arm() moves it (earlier or later), cancel() drops
// it. The queue holds a "carrier" entry no later than the wake-up: postponing the wake-up
// pushes nothing (the carrier is moved when it surfaces, EventHandler::due), bringing it
// forward pushes a new carrier and leaves the old one stale (dropped unseen when it surfaces).
// So a deadline that keeps moving later — an ACK timer restarted by every ACK — costs no heap
// entries.
class Timer final : public EventHandler {
 public:
  Timer(EventQueue& q, EventHandler* target, uint64_t target_arg = 0,
        EventClass cls = EventClass::kTimer)
      : q_(q), target_(target), arg_(target_arg), cls_(cls) {}
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Fires the target at `at` (clamped to now) instead of any earlier arming.
  void arm(Time at);
  // Arms at `at` unless already armed no later than that.
  void arm_by(Time at) {
    if (at < armed_) arm(at);
  }
  void cancel() { armed_ = kNever; }
  Time armed() const { return armed_; }  // kNever when not armed

  void on_event(Time now, uint64_t gen) override;
  Time due(uint64_t gen, Time at) override;

 private:
  EventQueue& q_;
  EventHandler* target_;
  uint64_t arg_;
  EventClass cls_;
  uint64_t gen_ = 0;       // the carrier's generation (older entries are stale)
  Time carrier_ = kNever;  // when the carrier is queued; kNever: none
  Time armed_ = kNever;    // when the wake-up fires (>= carrier_); kNever: not armed
};

}  // namespace uroce::sim
