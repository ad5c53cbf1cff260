// DCQCN reaction point. See dcqcn.h for the algorithm and docs/congestion-control.md for the
// choices.
#include "transport/cc/dcqcn.h"

#include <algorithm>
#include <cmath>

namespace uroce::transport::cc {
namespace {

// Alpha below this is 0 (dcqcn.h): 2^-20.
constexpr double kAlphaFloor = 1.0 / (1u << 20);

}  // namespace

DcqcnRp::DcqcnRp(const DcqcnParams& p, uint64_t line_bps, uint64_t start_bps, Time now)
    : p_(p),
      line_(line_bps),
      max_(p.rpg_max_rate != 0 ? std::min(line_bps, uint64_t{p.rpg_max_rate} * kMbps) : line_bps),
      min_(std::min(uint64_t{p.rpg_min_rate} * kMbps, max_)),
      ai_(uint64_t{p.rpg_ai_rate} * kMbps),
      hai_(uint64_t{p.rpg_hai_rate} * kMbps),
      first_cnp_rate_(uint64_t{p.rate_to_set_on_first_cnp} * kMbps),
      rate_period_(Time{p.rpg_time_reset} * kUsNs),
      alpha_period_(Time{p.dce_tcp_rtt} * kUsNs),
      monitor_period_(Time{p.rate_reduce_monitor_period} * kUsNs),
      byte_reset_(p.rpg_byte_reset),
      g_(p.g()),
      // rpg_gd is log2 of the divisor of alpha in mlx5's 10-bit fixed point [NV]: the cut is
      // alpha·2^(10 - gd) of the rate, alpha/2 at the default 11.
      cut_scale_(std::ldexp(1.0, 10 - int(p.rpg_gd))),
      keep_(p.rpg_min_dec_fac / 100.0) {
  rc_ = rt_ = bound(start_bps == 0 ? max_ : start_bps);
  alpha_.value = p_.initial_alpha();
  if (rc_ < max_) {
    // Started below the max rate: probe upwards as after a cut (dcqcn.h).
    active_ = true;
    rate_deadline_ = now + rate_period_;
  }
}

void DcqcnRp::tick(Alpha& a) const {
  a.value = p_.alpha_update == AlphaUpdate::kPeriodic ? (1.0 - g_) * a.value + (a.cnp ? g_ : 0.0)
                                                      : (1.0 - g_) * a.value;
  a.cnp = false;
  if (a.value < kAlphaFloor) a.value = 0.0;
}

void DcqcnRp::catch_up(Alpha& a, Time now, bool at_now) const {
  if (!a.started || now <= a.epoch) return;
  // Period ends epoch + k·K, k >= 1, before now (or at now).
  const Time span = now - a.epoch;
  uint64_t n = at_now ? span / alpha_period_ : (span - 1) / alpha_period_;
  const uint64_t total = n;
  // Once alpha is 0 with no CNP pending nothing changes: stop multiplying.
  while (n > 0 && !(a.value == 0.0 && !a.cnp)) {
    tick(a);
    --n;
  }
  a.epoch += total * alpha_period_;
}

Time DcqcnRp::alpha_tick_deadline() const {
  if (!alpha_ticks() || !alpha_.started || (alpha_.value == 0.0 && !alpha_.cnp)) return kNever;
  return alpha_.epoch + alpha_period_;
}

Time DcqcnRp::next_deadline() const {
  return std::min({rate_deadline_, cut_deadline_, alpha_tick_deadline()});
}

double DcqcnRp::alpha(Time now) const {
  Alpha a = alpha_;
  catch_up(a, now, true);
  return a.value;
}

uint64_t DcqcnRp::bytes_to_byte_event() const {
  return wants_bytes() ? byte_reset_ - byte_acc_ : UINT64_MAX;
}

void DcqcnRp::emit(Time t, CcEvent::Kind k, CcEvent::Stage s) const {
  if (!observed()) return;
  report(CcEvent{t, k, s, rc_, rt_, alpha(t)});
}

void DcqcnRp::run_due(Time now, bool at_now) {
  auto due = [&](Time d) { return d != kNever && (d < now || (at_now && d == now)); };
  const bool cnp_first = p_.tie == Tie::kCnpFirst;
  for (;;) {
    const Time a = alpha_tick_deadline();
    const Time r = rate_deadline_, c = cut_deadline_;
    const Time first = std::min({a, r, c});
    if (!due(first)) break;
    // Timers due at one instant: a merged CNP's cut is a CNP and follows the tie rule; the
    // alpha period ends before the rate timer (which does not read alpha).
    if (c == first && cnp_first) {
      cut(c);
    } else if (a == first) {
      tick(alpha_);
      alpha_.epoch = a;
      emit(a, CcEvent::Kind::kAlpha, CcEvent::Stage::kNone);
    } else if (r == first) {
      rate_deadline_ = r + rate_period_;
      increase(r, CcEvent::Kind::kTimer);
    } else {
      cut(c);
    }
  }
  // Without ticks, alpha is brought up to the same point arithmetically (a cut brought it up to
  // its own time already, in the same order).
  if (!alpha_ticks()) catch_up(alpha_, now, at_now);
}

bool DcqcnRp::on_cnp(Time now) {
  ++cnps_;
  const bool timer_first = p_.tie == Tie::kTimerFirst;
  // Timers due before the CNP (and, timer_first, at its instant) run first.
  run_due(now, timer_first);
  if (!seen_cnp_) {
    // The first CNP of the QP's life: alpha starts [NV initial_alpha_value; DCQCN "alpha = 1"],
    // its periods start, and the rate is cut (or set, rate_to_set_on_first_cnp).
    seen_cnp_ = true;
    alpha_.started = true;
    alpha_.epoch = now;
    alpha_.cnp = false;
    alpha_.value = p_.initial_alpha();
    cut(now);
    return true;
  }
  if (p_.alpha_update == AlphaUpdate::kPeriodic) alpha_.cnp = true;
  if (monitor_period_ != 0 && now < last_cut_ + monitor_period_) {
    // rate_reduce_monitor_period [NV]: one cut per period; this CNP's cut waits for its end.
    cut_deadline_ = last_cut_ + monitor_period_;
    return true;
  }
  cut(now);
  return true;
}

void DcqcnRp::cut(Time now) {
  catch_up(alpha_, now, p_.tie == Tie::kTimerFirst);
  const bool per_cnp = p_.alpha_update == AlphaUpdate::kPerCnp;
  if (per_cnp && p_.alpha_order == AlphaOrder::kUpdateFirst) {
    alpha_.value = (1.0 - g_) * alpha_.value + g_;
  }
  const bool first = cuts_ == 0;
  // Rt = Rc [DCQCN]; ConnectX lowers the target only when the rate rose since the last cut,
  // so that consecutive cuts do not drag it down with them [NV clamp_tgt_rate*].
  if (first || p_.clamp_tgt_rate || bc_ > 0 || (p_.clamp_tgt_rate_after_time_inc && t_ > 0)) {
    rt_ = rc_;
  }
  if (first && first_cnp_rate_ != 0) {
    rc_ = rt_ = bound(first_cnp_rate_);
  } else {
    const double f = std::min(1.0, alpha_.value * cut_scale_);
    const double cut = double(rc_) * (1.0 - f);
    const double floor = double(rc_) * keep_;
    rc_ = bound(uint64_t(std::llround(std::max(cut, floor))));
  }
  if (per_cnp && p_.alpha_order == AlphaOrder::kCutFirst) {
    alpha_.value = (1.0 - g_) * alpha_.value + g_;
  }
  if (per_cnp) {
    // "alpha decays after K without a CNP": the period restarts at each CNP.
    alpha_.epoch = now;
  }
  t_ = bc_ = 0;
  byte_acc_ = 0;
  rate_deadline_ = now + rate_period_;
  cut_deadline_ = kNever;
  last_cut_ = now;
  active_ = true;
  ++cuts_;
  emit(now, CcEvent::Kind::kCnp, CcEvent::Stage::kCut);
}

void DcqcnRp::increase(Time now, CcEvent::Kind why) {
  if (why == CcEvent::Kind::kTimer) {
    ++t_;
  } else {
    ++bc_;
  }
  const uint32_t hi = std::max(t_, bc_), lo = std::min(t_, bc_), f = p_.rpg_threshold;
  const bool le = p_.fr_boundary == FrBoundary::kLe;
  CcEvent::Stage stage;
  if (le ? hi <= f : hi < f) {
    stage = CcEvent::Stage::kFastRecovery;
  } else if (le ? lo > f : lo >= f) {
    stage = CcEvent::Stage::kHyper;
    const uint64_t i = le ? lo - f : lo - f + 1;
    const uint64_t steps = p_.hyper_step == HyperStep::kLinear ? i : 1;
    const uint64_t room = max_ - rt_;
    rt_ = steps > room / hai_ ? max_ : std::min(max_, rt_ + steps * hai_);
  } else {
    stage = CcEvent::Stage::kAdditive;
    rt_ = std::min(max_, rt_ + ai_);
  }
  // Round up: the gap to Rt halves and closes instead of stalling one bit short of it.
  rc_ = bound((rt_ + rc_ + 1) / 2);
  emit(now, why, stage);
  if (rc_ == max_ && rt_ == max_) {
    // Recovered: nothing left to increase; limiting() is false and the timers stop.
    active_ = false;
    rate_deadline_ = kNever;
    byte_acc_ = 0;
  }
}

void DcqcnRp::on_bytes_sent(Time now, uint64_t bytes) {
  // Bytes sent up to `now` count before whatever falls due at `now` itself (on_timer / on_cnp
  // at the same instant come after, in the tie rule's order).
  run_due(now, false);
  if (!wants_bytes()) return;
  byte_acc_ += bytes;
  while (active_ && byte_acc_ >= byte_reset_) {
    byte_acc_ -= byte_reset_;
    increase(now, CcEvent::Kind::kBytes);
  }
  if (!active_) byte_acc_ = 0;
}

void DcqcnRp::on_timer(Time now) {
  run_due(now, true);
}

}  // namespace uroce::transport::cc
