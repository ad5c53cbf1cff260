// Congestion-control configuration of a device: which algorithm its QPs run, its parameters under
// their mlx5 names and units, and the choices where the published algorithms are ambiguous
// (docs/congestion-control.md, "Choices"). Values are checked by validate(); parse.h builds a
// CcConfig from the UROCE_CC syntax. Owner: the device; every QP of it copies what it needs.
#pragma once

#include <cstdint>
#include <string>

#include "transport/cc/constants.h"

namespace uroce::transport::cc {

enum class Algorithm : uint8_t {
  kNone,    // no rate control: today's behaviour (the loss-adaptive window only)
  kDcqcn,   // DCQCN reaction point, driven by CNPs
  kTimely,  // TIMELY, driven by RTT samples
};
enum class Preset : uint8_t { kPaper, kCx };

// Where DCQCN's descriptions disagree or are silent, each choice is a named option.
// How alpha evolves [DCQCN §3.1 vs. NV/HPCC].
enum class AlphaUpdate : uint8_t {
  kPerCnp,    // paper: each CNP alpha = (1-g)·alpha + g; K without a CNP: alpha = (1-g)·alpha
  kPeriodic,  // ConnectX: every K, alpha = (1-g)·alpha + g·[a CNP arrived in the period]
};
// Per-CNP alpha: is the cut computed with alpha before or after this CNP's update?
enum class AlphaOrder : uint8_t {
  kCutFirst,     // paper's listing order: Rc·(1 - alpha/2) with the old alpha, then update
  kUpdateFirst,  // update alpha, then cut with the new one
};
// The fast-recovery boundary, with T / BC the timer / byte-counter events since the cut
// (counted before the stage is chosen).
enum class FrBoundary : uint8_t {
  kLe,  // fast recovery while max(T, BC) <= F: F steps ("F successive iterations", QCN)
  kLt,  // while max(T, BC) < F: F - 1 steps (ns3-rdma compares before counting)
};
// The hyper-increase step.
enum class HyperStep : uint8_t {
  kLinear,    // Rt += i·R_HAI, i = the hyper events so far in this recovery (QCN)
  kConstant,  // Rt += R_HAI each time [HPCC's firmware model]
};
// A CNP and a timer due at the same instant.
enum class Tie : uint8_t {
  kTimerFirst,  // the timer fires first, then the CNP (which restarts it)
  kCnpFirst,    // the CNP first; the timer it restarts does not fire at that instant
};

// DCQCN reaction point (RP) parameters, mlx5 names and units (sysfs roce_rp) [NV].
struct DcqcnParams {
  uint32_t rpg_time_reset = cx::kRpgTimeResetUs;    // T, µs: rate-increase timer period, >= 1
  uint64_t rpg_byte_reset = cx::kRpgByteReset;      // B, bytes per byte-counter event; 0 = off
  uint32_t rpg_threshold = cx::kRpgThreshold;       // F, events of fast recovery after a cut
  uint32_t rpg_ai_rate = cx::kRpgAiRateMbps;        // R_AI, Mb/s
  uint32_t rpg_hai_rate = cx::kRpgHaiRateMbps;      // R_HAI, Mb/s
  uint32_t rpg_min_rate = cx::kRpgMinRateMbps;      // floor, Mb/s (>= 1)
  uint32_t rpg_max_rate = cx::kRpgMaxRateMbps;      // cap, Mb/s; 0 = the line rate
  uint32_t rpg_gd = cx::kRpgGd;                     // cut factor alpha / 2^(rpg_gd - 10); 10..20
  uint32_t rpg_min_dec_fac = cx::kRpgMinDecFacPct;  // a cut keeps >= this % of Rc; 0..100
  uint32_t rate_to_set_on_first_cnp = cx::kRateOnFirstCnpMbps;  // Mb/s; 0 = cut as usual
  uint32_t dce_tcp_g = cx::kDceTcpG;        // g = (1024 - dce_tcp_g) / 1024; 0..1023
  uint32_t dce_tcp_rtt = cx::kDceTcpRttUs;  // K, µs: the alpha period, >= 1
  uint32_t rate_reduce_monitor_period = cx::kRateReduceMonitorUs;  // µs between cuts; 0 = none
  uint32_t initial_alpha_value = cx::kInitialAlpha;  // alpha at the first CNP, /1024; 0..1024
  bool clamp_tgt_rate = cx::kClampTgtRate;           // every cut sets Rt = Rc
  // Without clamp_tgt_rate, a cut sets Rt = Rc only if the rate was increased since the last
  // cut by the byte counter, or (with this flag) by the timer.
  bool clamp_tgt_rate_after_time_inc = cx::kClampTgtRateAti;

  AlphaUpdate alpha_update = AlphaUpdate::kPeriodic;
  AlphaOrder alpha_order = AlphaOrder::kCutFirst;
  FrBoundary fr_boundary = FrBoundary::kLe;
  HyperStep hyper_step = HyperStep::kConstant;
  Tie tie = Tie::kTimerFirst;

  // Derived values in the RP's units.
  double g() const { return double(kAlphaOne - dce_tcp_g) / kAlphaOne; }
  double initial_alpha() const { return double(initial_alpha_value) / kAlphaOne; }
};

// Notification point (NP) parameters (sysfs roce_np) [NV].
struct NpParams {
  bool enabled = false;  // send CNPs for CE-marked packets (default: on with DCQCN)
  uint32_t min_time_between_cnps = cx::kMinTimeBetweenCnpsUs;  // µs, per QP; 0 = every mark
  uint8_t cnp_dscp = kCnpDscp;                                 // DSCP of CNPs, 0..63
  uint8_t cnp_802p_prio = kCnpPrio;  // 802.1p priority of CNPs on a VLAN, 0..7
};

// TIMELY parameters [TIMELY]; uroce's names (TIMELY has no mlx5 equivalent).
struct TimelyParams {
  uint32_t t_low = timely::kTLowUs;          // µs: below it, additive increase
  uint32_t t_high = timely::kTHighUs;        // µs: above it, decrease by β·(1 - T_high/RTT)
  uint32_t min_rtt = timely::kMinRttUs;      // µs: gradient = EWMA(RTT diff) / min_rtt, >= 1
  uint32_t ai_rate = timely::kAiRateMbps;    // δ, Mb/s
  double beta = timely::kBeta;               // (0, 1]
  double ewma = timely::kEwma;               // (0, 1]
  uint32_t hai_thresh = timely::kHaiThresh;  // >= 1
  uint32_t hai_factor = timely::kHaiFactor;  // >= 1
  uint32_t min_rate = timely::kMinRateMbps;  // Mb/s, >= 1
  uint32_t max_rate = 0;                     // Mb/s; 0 = the line rate
};

// Bytes a paced QP may send beyond its rate after a pause (cc/pacer.h): the lateness of the
// engine's wake-ups that pacing absorbs — 64 KiB is ~50 µs (Linux's default timer slack) at
// 10 Gb/s. uroce's own parameter (`pacer_burst`).
inline constexpr uint64_t kDefaultPacerBurstBytes = 64 * 1024;

// Most bytes of packets a QP may have unacknowledged (`max_inflight`, uroce's own): a cap on the
// requester's send window in bytes of payload, on top of congestion control. About one
// bandwidth-delay product lets a lone QP fill its path while bounding what N QPs that start
// together at line rate can put into a switch queue to N of them — DCQCN's incast start-up
// overshoot (docs/congestion-control.md, "Experiments", 4). 0: no cap (the window alone,
// requester.h).
inline constexpr uint64_t kMaxInflightLimit = uint64_t{1} << 30;

struct CcConfig {
  Algorithm algorithm = Algorithm::kNone;
  Preset preset = Preset::kCx;
  DcqcnParams dcqcn;
  NpParams np;
  TimelyParams timely;
  uint64_t pacer_burst = kDefaultPacerBurstBytes;  // bytes, <= 16 MiB
  uint64_t max_inflight = 0;  // bytes of payload unacknowledged; 0 = no cap, <= 1 GiB
};

// The DCQCN parameters and NP settings of a preset (paper: [DCQCN] at 40 GbE; cx: [NV]).
DcqcnParams dcqcn_preset(Preset p);
NpParams np_preset(Preset p);
// A configuration for `algorithm` with `preset`'s values; the NP is on with DCQCN only.
CcConfig make_config(Algorithm algorithm, Preset preset = Preset::kCx);

// Checks every value against its range; on failure returns false and a message naming the
// parameter, its value and the range ("rpg_gd 9 is out of range [10, 20]").
bool validate(const CcConfig& c, std::string* err);

const char* to_string(Algorithm a);
const char* to_string(Preset p);
// (The option values' names live in parse.cc's key table, the one place that reads and writes
// them.)

}  // namespace uroce::transport::cc
