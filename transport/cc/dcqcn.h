// The DCQCN reaction point (RP) of one QP [DCQCN §3.1; NV for the ConnectX parameters], in
// virtual time. docs/congestion-control.md walks through it; the ambiguities are DcqcnParams
// options (params.h).
//
//   state      Rc (current rate), Rt (target rate), alpha; T / BC: timer / byte-counter events
//              since the last cut. Before the first CNP: Rc = Rt = the start rate (the line rate
//              unless given), no timer runs, nothing is counted.
//   CNP        (at most one cut per rate_reduce_monitor_period; a CNP inside it merges into one
//              cut at the period's end) Rt = Rc (see clamp_tgt_rate), Rc = Rc·(1 - alpha·2^(10-gd))
//              — alpha/2 with gd 11 — bounded by rpg_min_dec_fac and rpg_min_rate; T = BC = 0;
//              the byte count and the rate timer restart. Per-CNP alpha: alpha = (1-g)·alpha + g
//              before or after the cut (alpha_order), and the alpha period restarts.
//   alpha      per_cnp: each period K that ends without a CNP, alpha = (1-g)·alpha;
//              periodic: every K from the first CNP, alpha = (1-g)·alpha + g·[CNP in the period].
//   increase   rate timer (period T): T += 1; byte counter (every B bytes sent): BC += 1; then
//              fast recovery (Rc = (Rt+Rc)/2) while max(T, BC) <= F (or < F, fr_boundary),
//              hyper increase (Rt += i·R_HAI or R_HAI, hyper_step; i = min(T, BC) - F, or
//              - F + 1 with lt) once min(T, BC) > F (>= F),
//              additive (Rt += R_AI) between; each then Rc = (Rt + Rc)/2. Rt, Rc <= max rate,
//              Rc >= min rate.
//   recovered  when Rc = Rt = max rate after an increase, the timers and the byte counter stop
//              (and limiting() is false unless the max rate is below the line rate, which the
//              pacer then enforces); alpha keeps decaying (arithmetically, no timer) until the
//              next CNP.
// Rates are integers in bits per second: averages round up, so Rc reaches the max rate exactly.
// Alpha below 2^-20 (a thousandth of mlx5's 1/1024 resolution) is taken as 0, which bounds the
// work of a catch-up after a long quiet spell (~14k multiplications at the smallest g).
#pragma once

#include <cstdint>

#include "transport/cc/rate_control.h"

namespace uroce::transport::cc {

class DcqcnRp final : public RateControl {
 public:
  // `line_bps`: the port's rate. `start_bps` (0 = the max rate): Rc = Rt at start; below the
  // max rate the increase machinery runs from `now` on as after a cut, so the QP probes upwards.
  DcqcnRp(const DcqcnParams& p, uint64_t line_bps, uint64_t start_bps = 0, Time now = 0);

  bool on_cnp(Time now) override;
  void on_rtt_sample(Time, Time) override {}
  void on_bytes_sent(Time now, uint64_t bytes) override;
  bool wants_bytes() const override { return active_ && byte_reset_ != 0; }
  Time next_deadline() const override;
  void on_timer(Time now) override;
  uint64_t rate_bps() const override { return rc_; }
  // Below the line rate, the pacer holds the QP to its rate (a max rate below the line rate
  // included).
  bool limiting() const override { return rc_ < line_; }
  double alpha(Time now) const override;

  // Inspection (tests, the simulator, counters).
  uint64_t target_bps() const { return rt_; }
  uint64_t max_bps() const { return max_; }
  uint64_t min_bps() const { return min_; }
  uint32_t timer_events() const { return t_; }  // T since the last cut
  uint32_t byte_events() const { return bc_; }  // BC since the last cut
  bool active() const { return active_; }       // increase timer and byte counter running
  bool cut_pending() const { return cut_deadline_ != kNever; }
  // Bytes still to send before the byte counter fires (UINT64_MAX while it does not count).
  uint64_t bytes_to_byte_event() const;
  uint64_t cnps() const { return cnps_; }  // CNPs received
  uint64_t cuts() const { return cuts_; }  // rate reductions (CNPs merged in a period: one)

 private:
  struct Alpha {
    double value = 0.0;
    Time epoch = 0;        // start of the current alpha period
    bool cnp = false;      // periodic: a CNP arrived in the current period
    bool started = false;  // periods run (per_cnp: since the first CNP; periodic: likewise)
  };
  // Applies the alpha periods that end before `now` (and at `now` when `at_now`).
  void catch_up(Alpha& a, Time now, bool at_now) const;
  // One alpha period end.
  void tick(Alpha& a) const;
  // Runs every timer due before `now`, or at `now` too when `at_now`, in time order.
  void run_due(Time now, bool at_now);
  Time alpha_tick_deadline() const;
  void cut(Time now);
  void increase(Time now, CcEvent::Kind why);
  void emit(Time t, CcEvent::Kind k, CcEvent::Stage s) const;
  uint64_t bound(uint64_t r) const { return r < min_ ? min_ : (r > max_ ? max_ : r); }

  const DcqcnParams p_;
  // Converted parameters (bits/s, ns).
  uint64_t line_, max_, min_, ai_, hai_, first_cnp_rate_;
  Time rate_period_, alpha_period_, monitor_period_;
  uint64_t byte_reset_;
  double g_, cut_scale_, keep_;

  uint64_t rc_, rt_;  // bits/s; min_ <= rc_ <= rt_ <= max_
  Alpha alpha_;
  bool seen_cnp_ = false;        // the first CNP has come
  bool active_ = false;          // rate timer and byte counter run (after a cut, until recovered)
  Time rate_deadline_ = kNever;  // next rate-increase timer expiry
  Time cut_deadline_ = kNever;   // a merged CNP's cut, at the end of the monitor period
  Time last_cut_ = 0;
  uint32_t t_ = 0, bc_ = 0;  // T and BC since the last cut
  uint64_t byte_acc_ = 0;    // bytes towards the next byte-counter event, < byte_reset_
  uint64_t cnps_ = 0, cuts_ = 0;
};

}  // namespace uroce::transport::cc
