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
    Entry e = heap_.front();
    const Time d = e.h->due(e.arg, e.at);
    if (d == e.at) return e.at;
    pop();
    if (d == kNever) continue;  // stale
    // Postponed: the same event, later, ordered among that time's events as if scheduled now.
    e.at = d;
    e.order = (e.order & (uint64_t{0xff} << 56)) | seq_++;
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
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
  armed_ = at;
  if (carrier_ <= at) return;  // the carrier is early enough: due() moves it on
  ++gen_;
  carrier_ = at;
  q_.schedule(at, cls_, this, gen_);
}

Time Timer::due(uint64_t gen, Time at) {
  if (gen != gen_) return kNever;  // superseded by an earlier carrier
  if (armed_ == kNever) {          // cancelled
    carrier_ = kNever;
    return kNever;
  }
  carrier_ = std::max(at, armed_);
  return carrier_;
}

void Timer::on_event(Time now, uint64_t gen) {
  (void)gen;  // due() checked it
  carrier_ = kNever;
  armed_ = kNever;
  target_->on_event(now, arg_);
}

}  // namespace uroce::sim
