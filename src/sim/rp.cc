// `uroce-sim rp`: see rp.h.
#include "sim/rp.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>

namespace uroce::sim {
namespace {

using transport::kNever;
using transport::cc::CcEvent;

struct Recorder : transport::cc::CcObserver {
  std::vector<CcEvent> events;
  void on_cc_event(const CcEvent& e) override { events.push_back(e); }
};

}  // namespace

std::vector<CcEvent> run_rp(const RpScenario& s) {
  transport::cc::DcqcnRp rp(s.params, s.line_bps, s.start_bps, 0);
  Recorder rec;
  rp.set_observer(&rec, /*alpha_ticks=*/true);
  Time now = 0;
  // Bytes the backlogged sender has sent at Rc but not yet handed to the RP: a fraction of a
  // byte carries over from one event to the next.
  double pending = 0.0;
  size_t next_cnp = 0;
  for (;;) {
    const Time t_cnp = next_cnp < s.cnps.size() ? s.cnps[next_cnp] : kNever;
    Time t_bytes = kNever;
    if (rp.wants_bytes()) {
      // The first nanosecond at which the bytes sent reach the byte counter's B.
      const double need = double(rp.bytes_to_byte_event()) - pending;
      const double ns = need <= 0 ? 0.0 : std::ceil(need * 8e9 / double(rp.rate_bps()));
      t_bytes = now + std::max<Time>(need <= 0 ? 0 : 1, Time(ns));
    }
    const Time t = std::min<Time>({t_cnp, rp.next_deadline(), t_bytes});
    if (t == kNever || t > s.duration) break;
    pending += double(rp.rate_bps()) * double(t - now) / 8e9;
    now = t;
    const double whole = std::floor(pending);
    pending -= whole;
    if (whole > 0) rp.on_bytes_sent(now, uint64_t(whole));
    // A CNP and timers due at the same instant: the RP orders them by its tie rule.
    while (next_cnp < s.cnps.size() && s.cnps[next_cnp] == now) {
      rp.on_cnp(now);
      ++next_cnp;
    }
    if (rp.next_deadline() <= now) rp.on_timer(now);
  }
  return rec.events;
}

std::string rp_csv(const std::vector<CcEvent>& events) {
  std::string out = "t_us,event,stage,rc_gbps,rt_gbps,alpha\n";
  char line[160];
  for (const CcEvent& e : events) {
    std::snprintf(line, sizeof line, "%" PRIu64 ".%03" PRIu64 ",%s,%s,%.6f,%.6f,%.6f\n", e.t / 1000,
                  e.t % 1000, transport::cc::to_string(e.kind), transport::cc::to_string(e.stage),
                  double(e.rc_bps) / 1e9, double(e.rt_bps) / 1e9, e.alpha);
    out += line;
  }
  return out;
}

}  // namespace uroce::sim
