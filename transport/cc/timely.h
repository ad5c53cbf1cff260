// TIMELY [TIMELY]: rate control from the gradient of the round-trip time, per QP.
//
// On each RTT sample (the completer's: an AckReq packet's send to the ACK that covers it):
//   diff      = rtt - prev_rtt;  neg = diff < 0 ? neg + 1 : 0
//   avg_diff  = (1 - ewma)·avg_diff + ewma·diff;  gradient = avg_diff / min_rtt
//   w         = min((now - last_update) / min_rtt, 1)   (the authors' revision: an update's
//               weight grows with the time it covers, so a burst of ACKs is not a burst of steps)
//   rtt < T_low                 rate += w·δ                          (stage AI)
//   rtt > T_high                rate *= 1 - w·β·(1 - T_high / rtt)   (stage CUT)
//   gradient <= 0               rate += w·N·δ, N = hai_factor after hai_thresh negative
//                               gradients in a row, else 1           (stage HI / AI)
//   otherwise                   rate *= 1 - w·β·gradient             (stage CUT)
//   rate within [min rate, max rate].
// The paper applies no weight to the gradient decrease; uroce applies w to every branch so that
// the rate moves per unit of time (docs/congestion-control.md). CNPs are ignored.
#pragma once

#include "transport/cc/rate_control.h"

namespace uroce::transport::cc {

class Timely final : public RateControl {
 public:
  Timely(const TimelyParams& p, uint64_t line_bps);

  bool on_cnp(Time) override { return false; }
  void on_rtt_sample(Time now, Time rtt) override;
  void on_bytes_sent(Time, uint64_t) override {}
  bool wants_bytes() const override { return false; }
  Time next_deadline() const override { return kNever; }
  void on_timer(Time) override {}
  uint64_t rate_bps() const override { return rate_; }
  // Below the line rate, the pacer holds the QP to its rate (a max rate below the line rate
  // included).
  bool limiting() const override { return rate_ < line_; }
  double alpha(Time) const override { return 0.0; }

  double gradient() const { return gradient_; }  // of the last sample
  uint64_t max_bps() const { return max_; }
  uint64_t min_bps() const { return min_; }

 private:
  const TimelyParams p_;
  uint64_t line_, max_, min_;
  double ai_bps_;
  Time t_low_, t_high_, min_rtt_;
  uint64_t rate_;           // bits/s
  bool have_prev_ = false;  // a first sample has been seen
  Time prev_rtt_ = 0;       // ns
  Time last_update_ = 0;    // time of the previous sample
  double avg_diff_ = 0.0;   // ns, EWMA of successive RTT differences
  double gradient_ = 0.0;
  uint32_t neg_run_ = 0;  // consecutive samples with a negative RTT difference
};

}  // namespace uroce::transport::cc
