#include "sim/event_queue.h"

#include <algorithm>
#include <functional>

namespace uroce::sim {

void EventQueue::schedule(Time at, EventClass cls, EventHandler* h, uint64_t arg) {
  heap_.push_back(Entry{std::max(at, now_), uint64_t(cls) << 56 | seq_++, h, arg});
  std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
}

void EventQueue::pop() {
  std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
  heap_.pop_back();
}

Time EventQueue::next_time() {
  while (!heap_.empty()) {
    const Entry& e = heap_.front();
    if (e.h->live(e.arg)) return e.at;
    pop();
  }
  return kNever;
}

bool EventQueue::step(Time limit) {
  const Time t = next_time();
  if (t == kNever || t > limit) return false;
  const Entry e = heap_.front();
  pop();
  now_ = e.at;
  ++run_;
  e.h->on_event(now_, e.arg);
  return true;
}

void EventQueue::run_until(Time limit) {
  while (step(limit)) {
  }
}

void Timer::arm(Time at) {
  at = std::max(at, q_.now());
  if (at == armed_) return;
  ++gen_;
  armed_ = at;
  q_.schedule(at, cls_, this, gen_);
}

void Timer::on_event(Time now, uint64_t gen) {
  (void)gen;  // live() checked it
  armed_ = kNever;
  target_->on_event(now, arg_);
}

}  // namespace uroce::sim
