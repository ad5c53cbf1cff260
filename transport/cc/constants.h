// Every number congestion control starts from, in one place, with its unit and its source. The
// presets (params.h) are built from these; docs/congestion-control.md explains each one.
//
// Sources:
//   [DCQCN]  Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015
//            (§3.1 the algorithm, §4 / Table 1 the parameters chosen for 40 GbE).
//   [ns3]    The DCQCN author's ns-3 simulator (ns3-rdma), sample configuration: R_HAI and the
//            minimum rate, which the paper does not give.
//   [NV]     NVIDIA, "DCQCN Parameters" (ConnectX-4 and later; MLNX_OFED sysfs names under
//            /sys/class/net/<if>/ecn/roce_rp and roce_np): units, ranges and firmware defaults.
//   [HPCC]   The HPCC authors' ns-3 model of the ConnectX firmware (rdma-hw.cc, "Mellanox's
//            version of DCQCN"): periodic alpha, once-per-period cuts, the constant hyper step.
//   [TIMELY] Mittal et al., "TIMELY: RTT-based Congestion Control for the Datacenter", SIGCOMM
//            2015 (Algorithm 1), with the authors' published revision of the algorithm (the
//            per-update weight min(Δt / minRTT, 1) and the recommended parameters).
#pragma once

#include <cstdint>

namespace uroce::transport::cc {

// Units used throughout transport/cc: rates in bits per second (uint64), times in nanoseconds
// (transport::Time), byte counts in bytes. The mlx5 names keep their own units at the
// configuration surface (Mb/s, µs, 1/1024 fixed point) and are converted once, in params.h.
inline constexpr uint64_t kMbps = 1'000'000;      // bits per second in one Mb/s
inline constexpr uint64_t kGbps = 1'000'000'000;  // bits per second in one Gb/s
inline constexpr uint64_t kUsNs = 1'000;          // nanoseconds in one µs
inline constexpr uint32_t kAlphaOne = 1024;       // alpha 1.0 in mlx5's 10-bit fixed point [NV]

// ---- DCQCN as the paper states it, 40 GbE [DCQCN §4, Table 1] -----------------------------------
namespace paper {
inline constexpr uint32_t kG = 1020;  // dce_tcp_g encoding of g = 1/256: (1024 - 1020) / 1024
inline constexpr uint32_t kAlphaPeriodUs = 55;        // K: alpha decays after K without a CNP
inline constexpr uint32_t kRateTimerUs = 55;          // T: rate-increase timer period
inline constexpr uint64_t kByteCounter = 10'000'000;  // B = 10 MB (10^7 bytes) per increase event
inline constexpr uint32_t kThreshold = 5;             // F: fast-recovery events after a cut
inline constexpr uint32_t kAiRateMbps = 40;           // R_AI
inline constexpr uint32_t kHaiRateMbps = 200;  // R_HAI: not in the paper; [ns3] sample config
inline constexpr uint32_t kMinRateMbps = 100;  // not in the paper; the simulators' floor [ns3]
inline constexpr uint32_t kInitialAlpha = kAlphaOne;  // alpha = 1 at start [DCQCN §3.1]
inline constexpr uint32_t kCnpIntervalUs = 50;  // N: the NP sends at most one CNP per N per QP
}  // namespace paper

// ---- ConnectX firmware defaults [NV] (ConnectX-4 and later) ------------------------------------
namespace cx {
inline constexpr uint32_t kRpgTimeResetUs = 300;      // rpg_time_reset (T)
inline constexpr uint64_t kRpgByteReset = 32767;      // rpg_byte_reset (B), bytes
inline constexpr uint32_t kRpgThreshold = 1;          // rpg_threshold (F)
inline constexpr uint32_t kRpgAiRateMbps = 5;         // rpg_ai_rate
inline constexpr uint32_t kRpgHaiRateMbps = 50;       // rpg_hai_rate
inline constexpr uint32_t kRpgMinRateMbps = 1;        // rpg_min_rate
inline constexpr uint32_t kRpgMaxRateMbps = 0;        // rpg_max_rate, 0 = the port's speed
inline constexpr uint32_t kRpgGd = 11;                // rpg_gd: cut = alpha / 2^(gd - 10) = alpha/2
inline constexpr uint32_t kRpgMinDecFacPct = 50;      // rpg_min_dec_fac: a cut keeps >= 50 % of Rc
inline constexpr uint32_t kRateOnFirstCnpMbps = 0;    // rate_to_set_on_first_cnp, 0 = cut normally
inline constexpr uint32_t kDceTcpG = 1019;            // dce_tcp_g: g = (1024 - 1019) / 1024
inline constexpr uint32_t kDceTcpRttUs = 1;           // dce_tcp_rtt: the alpha update period
inline constexpr uint32_t kRateReduceMonitorUs = 4;   // rate_reduce_monitor_period
inline constexpr uint32_t kInitialAlpha = 1023;       // initial_alpha_value (1/1024)
inline constexpr bool kClampTgtRate = false;          // clamp_tgt_rate
inline constexpr bool kClampTgtRateAti = true;        // clamp_tgt_rate_after_time_inc
inline constexpr uint32_t kMinTimeBetweenCnpsUs = 4;  // min_time_between_cnps (NP)
}  // namespace cx

// ---- CNPs (NP), both presets [NV]; Annex A17.9.3 leaves the class of service to the network ----
inline constexpr uint8_t kCnpDscp = 48;  // cnp_dscp (RFC 2474 DSCP; CS6)
inline constexpr uint8_t kCnpPrio = 6;   // cnp_802p_prio (802.1p PCP on a VLAN)

// ---- TIMELY [TIMELY Algorithm 1 and the authors' revision] -------------------------------------
namespace timely {
inline constexpr uint32_t kTLowUs = 0;        // T_low: 0 with per-packet pacing (revision)
inline constexpr uint32_t kTHighUs = 1000;    // T_high: 1 ms (revision; the paper used 500 µs)
inline constexpr uint32_t kMinRttUs = 20;     // minRTT: normalises the gradient (paper)
inline constexpr uint32_t kAiRateMbps = 10;   // δ, additive step (10 Mb/s at 10 Gb/s)
inline constexpr double kBeta = 0.8;          // β, multiplicative decrease factor
inline constexpr double kEwma = 0.02;         // α, EWMA weight of new RTT differences (revision)
inline constexpr uint32_t kHaiThresh = 5;     // consecutive negative gradients before HAI
inline constexpr uint32_t kHaiFactor = 5;     // N: hyper-active increase multiplies δ by N
inline constexpr uint32_t kMinRateMbps = 10;  // floor (the revision leaves it "optional")
}  // namespace timely

}  // namespace uroce::transport::cc
