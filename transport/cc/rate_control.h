// The narrow hooks between a QP's send engine and its congestion control. One RateControl per
// QP; the QP (or the simulator, src/sim/) calls the hooks with the current time and reads the
// rate it may send at. Implementations: NoRateControl (none), DcqcnRp (dcqcn.h), Timely
// (timely.h). Deterministic: no clock, nothing but the calls' arguments.
#pragma once

#include <cstdint>
#include <memory>

#include "transport/cc/params.h"
#include "transport/env.h"

namespace uroce::transport::cc {

// One reaction of the rate control, reported to an observer (the simulator's CSV rows, traces).
struct CcEvent {
  enum class Kind : uint8_t {
    kCnp,    // a CNP cut the rate (or merged into a pending cut: not reported until it happens)
    kAlpha,  // an alpha period ended (reported only to observers that ask, see set_observer)
    kTimer,  // the rate-increase timer fired
    kBytes,  // the byte counter reached B
    kRtt,    // an RTT sample moved the rate (TIMELY)
  };
  enum class Stage : uint8_t { kNone, kCut, kFastRecovery, kAdditive, kHyper };
  Time t = 0;
  Kind kind = Kind::kCnp;
  Stage stage = Stage::kNone;
  uint64_t rc_bps = 0;  // current rate after the event
  uint64_t rt_bps = 0;  // target rate after the event (TIMELY: equal to rc_bps)
  double alpha = 0.0;   // DCQCN alpha after the event (TIMELY: 0)
};
const char* to_string(CcEvent::Kind k);   // "CNP", "ALPHA", "TIMER", "BYTES", "RTT"
const char* to_string(CcEvent::Stage s);  // "CUT", "FR", "AI", "HI", ""

class CcObserver {
 public:
  virtual ~CcObserver() = default;
  virtual void on_cc_event(const CcEvent& ev) = 0;
};

class RateControl {
 public:
  virtual ~RateControl() = default;

  // A CNP for this QP arrived (BECN). Returns whether the algorithm reacts to CNPs (mlx5's
  // rp_cnp_handled vs. rp_cnp_ignored).
  virtual bool on_cnp(Time now) = 0;
  // A round-trip sample: the time from sending an AckReq packet to the ACK covering it.
  virtual void on_rtt_sample(Time now, Time rtt) = 0;
  // `bytes` of packets (IB packet bytes: BTH..ICRC) left the QP by `now`; they count before
  // any timer due at `now` itself. Only needed while wants_bytes(): the send path skips the
  // call otherwise.
  virtual void on_bytes_sent(Time now, uint64_t bytes) = 0;
  virtual bool wants_bytes() const = 0;
  // The algorithm's next timer, or kNever; on_timer(now) runs every timer due at `now`.
  virtual Time next_deadline() const = 0;
  virtual void on_timer(Time now) = 0;

  // The rate the QP may send at now, bits per second.
  virtual uint64_t rate_bps() const = 0;
  // False while the QP may send at the line rate: the pacer then does nothing (no cost on the
  // fast path while uncongested).
  virtual bool limiting() const = 0;
  // DCQCN's alpha as of `now` (0 for the others), for counters and `uroce stats`.
  virtual double alpha(Time now) const = 0;

  // Events go to `obs` (may be null). With `alpha_ticks`, DCQCN also reports every alpha period
  // as an event and a deadline (the simulator's CSV); without, alpha is kept arithmetically and
  // costs no timer. Either way alpha takes exactly the same values.
  void set_observer(CcObserver* obs, bool alpha_ticks = false) {
    observer_ = obs;
    alpha_ticks_ = obs != nullptr && alpha_ticks;
  }

 protected:
  void report(const CcEvent& ev) const {
    if (observer_ != nullptr) observer_->on_cc_event(ev);
  }
  bool observed() const { return observer_ != nullptr; }
  bool alpha_ticks() const { return alpha_ticks_; }

 private:
  CcObserver* observer_ = nullptr;
  bool alpha_ticks_ = false;
};

// `none`: never limits, ignores CNPs.
class NoRateControl final : public RateControl {
 public:
  explicit NoRateControl(uint64_t line_bps) : line_bps_(line_bps) {}
  bool on_cnp(Time) override { return false; }
  void on_rtt_sample(Time, Time) override {}
  void on_bytes_sent(Time, uint64_t) override {}
  bool wants_bytes() const override { return false; }
  Time next_deadline() const override { return kNever; }
  void on_timer(Time) override {}
  uint64_t rate_bps() const override { return line_bps_; }
  bool limiting() const override { return false; }
  double alpha(Time) const override { return 0.0; }

 private:
  uint64_t line_bps_;
};

// The rate control `c` selects for a QP whose port runs at `line_bps`.
std::unique_ptr<RateControl> make_rate_control(const CcConfig& c, uint64_t line_bps);

}  // namespace uroce::transport::cc
