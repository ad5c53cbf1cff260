// TIMELY rate control. See timely.h.
#include "transport/cc/timely.h"

#include <algorithm>
#include <cmath>

namespace uroce::transport::cc {

Timely::Timely(const TimelyParams& p, uint64_t line_bps)
    : p_(p),
      line_(line_bps),
      max_(p.max_rate != 0 ? std::min(line_bps, uint64_t{p.max_rate} * kMbps) : line_bps),
      min_(std::min(uint64_t{p.min_rate} * kMbps, max_)),
      ai_bps_(double(p.ai_rate) * double(kMbps)),
      t_low_(Time{p.t_low} * kUsNs),
      t_high_(Time{p.t_high} * kUsNs),
      min_rtt_(Time{p.min_rtt} * kUsNs),
      rate_(max_) {}

void Timely::on_rtt_sample(Time now, Time rtt) {
  // The first sample has no predecessor: its difference is 0 and it carries full weight.
  const double diff = have_prev_ ? double(rtt) - double(prev_rtt_) : 0.0;
  const double w = have_prev_
                       ? std::min(1.0, double(now - std::min(now, last_update_)) / double(min_rtt_))
                       : 1.0;
  have_prev_ = true;
  neg_run_ = diff < 0 ? neg_run_ + 1 : 0;
  avg_diff_ = (1.0 - p_.ewma) * avg_diff_ + p_.ewma * diff;
  gradient_ = avg_diff_ / double(min_rtt_);
  prev_rtt_ = rtt;
  last_update_ = now;

  double r = double(rate_);
  CcEvent::Stage stage;
  if (rtt < t_low_) {
    r += w * ai_bps_;
    stage = CcEvent::Stage::kAdditive;
  } else if (rtt > t_high_) {
    r *= 1.0 - w * p_.beta * (1.0 - double(t_high_) / double(rtt));
    stage = CcEvent::Stage::kCut;
  } else if (gradient_ <= 0.0) {
    const bool hai = neg_run_ >= p_.hai_thresh;
    r += w * (hai ? double(p_.hai_factor) : 1.0) * ai_bps_;
    stage = hai ? CcEvent::Stage::kHyper : CcEvent::Stage::kAdditive;
  } else {
    r *= std::max(0.0, 1.0 - w * p_.beta * gradient_);
    stage = CcEvent::Stage::kCut;
  }
  r = std::clamp(r, double(min_), double(max_));
  rate_ = uint64_t(std::llround(r));
  if (observed()) report(CcEvent{now, CcEvent::Kind::kRtt, stage, rate_, rate_, 0.0});
}

}  // namespace uroce::transport::cc
