#include "sim/egress.h"

#include <algorithm>

#include "util/red.h"

namespace uroce::sim {

EgressPort::EgressPort(EventQueue& q, uint64_t rate_bps, Channel* out, EgressOwner* owner,
                       uint32_t index, const Window* window, Rng* rng, const RedConfig& red)
    : q_(q),
      rate_bps_(rate_bps),
      out_(out),
      owner_(owner),
      index_(index),
      window_(window),
      rng_(rng),
      red_(red),
      qstats_(window) {
  for (int c = 0; c < kPriorities; ++c)
    pause_timer_[c] = std::make_unique<Timer>(q, this, uint64_t(c));
}

Time EgressPort::tx_time(uint64_t wire_bytes) const {
  return Time((static_cast<unsigned __int128>(wire_bytes) * 8'000'000'000u + rate_bps_ - 1) /
              rate_bps_);
}

void EgressPort::mark(Frame& f, uint64_t queue_bytes) {
  const uint8_t ecn = f.tos & 3;
  if (ecn != transport::kEcnEct0 && ecn != transport::kEcnEct1) return;  // ECN-capable only
  const double p = red_probability(queue_bytes, red_.kmin, red_.kmax, red_.pmax);
  if (p >= 1.0 || (p > 0 && rng_->uniform() < p)) {
    f.tos = uint8_t(f.tos | transport::kEcnCe);
    ++c_.marked;
  }
}

void EgressPort::enqueue(Frame* f) {
  const int c = f->prio & (kPriorities - 1);
  if (red_.enabled && !red_.at_dequeue) mark(*f, bytes_[c]);
  queue_[c].push_back(f);
  bytes_[c] += f->bytes();
  total_bytes_ += f->bytes();
  ++frames_;
  qstats_.change(q_.now(), total_bytes_);
  try_send(q_.now());
}

void EgressPort::send_control(Frame* pause) {
  control_.push_back(pause);
  try_send(q_.now());
}

void EgressPort::try_send(Time now) {
  if (on_wire_ != nullptr) return;
  Frame* f = nullptr;
  bool from_queue = false;
  if (!control_.empty()) {
    f = control_.front();
    control_.pop_front();
  } else {
    for (int c = kPriorities - 1; c >= 0 && f == nullptr; --c) {
      if (queue_[c].empty() || paused_[c]) continue;
      f = queue_[c].front();
      queue_[c].pop_front();
      bytes_[c] -= f->bytes();
      total_bytes_ -= f->bytes();
      --frames_;
      qstats_.change(now, total_bytes_);
      if (red_.enabled && red_.at_dequeue) mark(*f, bytes_[c]);
      from_queue = true;
    }
  }
  if (f == nullptr) return;
  on_wire_ = f;
  const Time dur = tx_time(f->wire_bytes());
  ++c_.frames;
  c_.bytes += f->bytes();
  c_.busy_ns += dur;
  c_.window_busy_ns += window_->overlap(now, now + dur);
  q_.schedule(now + dur, EventClass::kTimer, this, kTxDone);
  // Last: the owner may send a PAUSE from here (an XON as its buffer drains), which must find
  // the port busy rather than start a second frame.
  if (from_queue) owner_->on_dequeue(index_, *f, now);
}

void EgressPort::on_pause_frame(const Frame& pause) {
  const Time now = q_.now();
  for (int c = 0; c < kPriorities; ++c) {
    if (!(pause.pause_enable & (1u << c))) continue;
    const uint16_t quanta = pause.pause_quanta[c];
    if (quanta == 0) {
      ++c_.pfc[c].rx_resume;
      paused_until_[c] = now;
      resume(c, now);
      continue;
    }
    ++c_.pfc[c].rx_pause;
    // 802.1Qbb: a quantum is 512 bit times at the link's speed.
    paused_until_[c] = now + tx_time(uint64_t(quanta) * 512 / 8);
    if (!paused_[c]) {
      paused_[c] = true;
      pause_start_[c] = now;
    }
    pause_timer_[c]->arm(paused_until_[c]);
  }
  try_send(now);
}

void EgressPort::resume(int c, Time now) {
  pause_timer_[c]->cancel();
  if (!paused_[c]) return;
  paused_[c] = false;
  c_.pfc[c].pause_ns += now - pause_start_[c];
  try_send(now);
}

void EgressPort::on_event(Time now, uint64_t arg) {
  if (arg == kTxDone) {
    Frame* f = on_wire_;
    on_wire_ = nullptr;
    out_->send(f);
    try_send(now);
    return;
  }
  const int c = int(arg);
  if (now >= paused_until_[c]) resume(c, now);
}

void EgressPort::finish(Time now) {
  for (int c = 0; c < kPriorities; ++c) {
    if (paused_[c]) {
      c_.pfc[c].pause_ns += now - pause_start_[c];
      pause_start_[c] = now;
    }
  }
  qstats_.finish(now);
}

}  // namespace uroce::sim
