// Presets and range checks of the congestion-control parameters (params.h).
#include "transport/cc/params.h"

namespace uroce::transport::cc {

DcqcnParams dcqcn_preset(Preset p) {
  DcqcnParams d;  // the defaults are ConnectX's [NV]
  if (p == Preset::kCx) {
    // How the firmware evolves alpha and steps hyper increase is not documented; HPCC's model
    // of it is periodic and constant.
    d.alpha_update = AlphaUpdate::kPeriodic;
    d.hyper_step = HyperStep::kConstant;
    return d;
  }
  d.rpg_time_reset = paper::kRateTimerUs;
  d.rpg_byte_reset = paper::kByteCounter;
  d.rpg_threshold = paper::kThreshold;
  d.rpg_ai_rate = paper::kAiRateMbps;
  d.rpg_hai_rate = paper::kHaiRateMbps;
  d.rpg_min_rate = paper::kMinRateMbps;
  d.rpg_max_rate = 0;
  d.rpg_gd = 11;          // Rc·(1 - alpha/2)
  d.rpg_min_dec_fac = 0;  // the paper bounds a cut only through alpha <= 1
  d.rate_to_set_on_first_cnp = 0;
  d.dce_tcp_g = paper::kG;
  d.dce_tcp_rtt = paper::kAlphaPeriodUs;
  d.rate_reduce_monitor_period = 0;  // every CNP cuts; the NP already spaces them by N
  d.initial_alpha_value = paper::kInitialAlpha;
  d.clamp_tgt_rate = true;  // "Rt = Rc" on every CNP
  d.clamp_tgt_rate_after_time_inc = true;
  d.alpha_update = AlphaUpdate::kPerCnp;
  d.alpha_order = AlphaOrder::kCutFirst;
  d.fr_boundary = FrBoundary::kLe;
  d.hyper_step = HyperStep::kLinear;
  d.tie = Tie::kTimerFirst;
  return d;
}

NpParams np_preset(Preset p) {
  NpParams n;
  n.min_time_between_cnps = p == Preset::kPaper ? paper::kCnpIntervalUs : cx::kMinTimeBetweenCnpsUs;
  return n;
}

CcConfig make_config(Algorithm algorithm, Preset preset) {
  CcConfig c;
  c.algorithm = algorithm;
  c.preset = preset;
  c.dcqcn = dcqcn_preset(preset);
  c.np = np_preset(preset);
  c.np.enabled = algorithm == Algorithm::kDcqcn;
  return c;
}

namespace {

bool in_range(const char* name, uint64_t v, uint64_t lo, uint64_t hi, std::string* err) {
  if (v >= lo && v <= hi) return true;
  if (err) {
    *err = std::string(name) + " " + std::to_string(v) + " is out of range [" + std::to_string(lo) +
           ", " + std::to_string(hi) + "]";
  }
  return false;
}

bool in_unit(const char* name, double v, std::string* err) {
  if (v > 0.0 && v <= 1.0) return true;
  if (err) *err = std::string(name) + " " + std::to_string(v) + " is out of range (0, 1]";
  return false;
}

// Rates are Mb/s in 32 bits (as in mlx5); 4'000'000 Mb/s = 4 Tb/s leaves room above any port.
constexpr uint64_t kMaxRateMbps = 4'000'000;
// Periods in µs; 2^31 µs is ~36 minutes, far beyond any useful value and safe in nanoseconds.
constexpr uint64_t kMaxPeriodUs = uint64_t{1} << 31;

}  // namespace

bool validate(const CcConfig& c, std::string* err) {
  const DcqcnParams& d = c.dcqcn;
  const bool dcqcn_ok =
      in_range("rpg_time_reset", d.rpg_time_reset, 1, kMaxPeriodUs, err) &&
      in_range("rpg_byte_reset", d.rpg_byte_reset, 0, uint64_t{1} << 40, err) &&
      in_range("rpg_threshold", d.rpg_threshold, 1, 1024, err) &&
      in_range("rpg_ai_rate", d.rpg_ai_rate, 1, kMaxRateMbps, err) &&
      in_range("rpg_hai_rate", d.rpg_hai_rate, 1, kMaxRateMbps, err) &&
      in_range("rpg_min_rate", d.rpg_min_rate, 1, kMaxRateMbps, err) &&
      in_range("rpg_max_rate", d.rpg_max_rate, 0, kMaxRateMbps, err) &&
      in_range("rpg_gd", d.rpg_gd, 10, 20, err) &&
      in_range("rpg_min_dec_fac", d.rpg_min_dec_fac, 0, 100, err) &&
      in_range("rate_to_set_on_first_cnp", d.rate_to_set_on_first_cnp, 0, kMaxRateMbps, err) &&
      in_range("dce_tcp_g", d.dce_tcp_g, 0, kAlphaOne - 1, err) &&
      in_range("dce_tcp_rtt", d.dce_tcp_rtt, 1, kMaxPeriodUs, err) &&
      in_range("rate_reduce_monitor_period", d.rate_reduce_monitor_period, 0, kMaxPeriodUs, err) &&
      in_range("initial_alpha_value", d.initial_alpha_value, 0, kAlphaOne, err);
  if (!dcqcn_ok) return false;
  if (d.rpg_max_rate != 0 && d.rpg_max_rate < d.rpg_min_rate) {
    if (err) {
      *err = "rpg_max_rate " + std::to_string(d.rpg_max_rate) + " is below rpg_min_rate " +
             std::to_string(d.rpg_min_rate);
    }
    return false;
  }
  const NpParams& n = c.np;
  if (!in_range("min_time_between_cnps", n.min_time_between_cnps, 0, kMaxPeriodUs, err) ||
      !in_range("cnp_dscp", n.cnp_dscp, 0, 63, err) ||
      !in_range("cnp_802p_prio", n.cnp_802p_prio, 0, 7, err)) {
    return false;
  }
  if (!in_range("pacer_burst", c.pacer_burst, 0, uint64_t{16} << 20, err)) return false;
  if (!in_range("max_inflight", c.max_inflight, 0, kMaxInflightLimit, err)) return false;
  const TimelyParams& t = c.timely;
  if (!in_range("timely_t_low", t.t_low, 0, kMaxPeriodUs, err) ||
      !in_range("timely_t_high", t.t_high, 1, kMaxPeriodUs, err) ||
      !in_range("timely_min_rtt", t.min_rtt, 1, kMaxPeriodUs, err) ||
      !in_range("timely_ai_rate", t.ai_rate, 1, kMaxRateMbps, err) ||
      !in_unit("timely_beta", t.beta, err) || !in_unit("timely_ewma", t.ewma, err) ||
      !in_range("timely_hai_thresh", t.hai_thresh, 1, 1024, err) ||
      !in_range("timely_hai_factor", t.hai_factor, 1, 1024, err) ||
      !in_range("timely_min_rate", t.min_rate, 1, kMaxRateMbps, err) ||
      !in_range("timely_max_rate", t.max_rate, 0, kMaxRateMbps, err)) {
    return false;
  }
  if (t.t_low >= t.t_high) {
    if (err) {
      *err = "timely_t_low " + std::to_string(t.t_low) + " must be below timely_t_high " +
             std::to_string(t.t_high);
    }
    return false;
  }
  if (t.max_rate != 0 && t.max_rate < t.min_rate) {
    if (err) {
      *err = "timely_max_rate " + std::to_string(t.max_rate) + " is below timely_min_rate " +
             std::to_string(t.min_rate);
    }
    return false;
  }
  return true;
}

const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kNone:
      return "none";
    case Algorithm::kDcqcn:
      return "dcqcn";
    case Algorithm::kTimely:
      return "timely";
  }
  return "?";
}
const char* to_string(Preset p) {
  return p == Preset::kPaper ? "paper" : "cx";
}

}  // namespace uroce::transport::cc
