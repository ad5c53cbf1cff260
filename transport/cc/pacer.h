// The per-QP pacer of the send engine: releases a QP's packets at the rate its congestion
// control allows. Time comes in as a parameter; nothing here reads a clock.
//
// Model: a virtual finishing time. `next_` is when the QP's last packet would have finished at
// the paced rate; a packet may leave when next_ <= now, and moves next_ on by its transmission
// time at the current rate. A QP that was idle does not bank unlimited credit: next_ is never
// allowed to lag `now` by more than the burst allowance, so after a pause a QP sends at most
// `burst_bytes` beyond its rate — that much plus one packet back to back (the allowance absorbs
// the lateness of the caller's wake-ups; 0 spaces every packet exactly, which the simulator and
// the unit tests use).
//
// While the rate control does not limit (limiting() false, the uncongested case), may_send() is
// one predictable branch on a bool and on_sent() returns at once: no cost on the fast path.
#pragma once

#include <algorithm>
#include <cstdint>

#include "transport/env.h"

namespace uroce::transport::cc {

// The bytes a packet of `ib_bytes` (BTH..pad) takes on an untagged Ethernet link, as the pacer
// and DCQCN's byte counter count it: the IB packet, the ICRC (4), UDP (8), IPv4 (20), the
// Ethernet header (14) and FCS (4). Rates are then rates on the wire, as a NIC's are.
inline constexpr uint64_t frame_bytes(uint64_t ib_bytes) {
  return ib_bytes + 4 + 8 + 20 + 14 + 4;
}

class Pacer {
 public:
  explicit Pacer(uint64_t burst_bytes = 0) : burst_bytes_(burst_bytes) {}

  // The rate control's verdict after any of its hooks ran: pace at `bps` when `limiting`.
  void set_rate(uint64_t bps, bool limiting) {
    limiting_ = limiting && bps != 0;
    rate_bps_ = bps;
  }
  bool limiting() const { return limiting_; }
  uint64_t rate_bps() const { return rate_bps_; }

  bool may_send(Time now) const { return !limiting_ || next_ <= now; }
  // When the next packet may leave (kNever while not limiting; may be in the past).
  Time release_time() const { return limiting_ ? next_ : kNever; }

  // A packet of `bytes` left at `now`.
  void on_sent(Time now, uint64_t bytes) {
    if (!limiting_) return;
    const Time slack = tx_ns(burst_bytes_);
    const Time floor = now > slack ? now - slack : 0;
    // bytes·8·10^9 fits easily in 64 bits for any packet; the remainder carries over so that
    // rounding never drifts the average rate.
    const uint64_t bit_ns = bytes * 8 * 1'000'000'000ull + rem_;
    next_ = std::max(next_, floor) + bit_ns / rate_bps_;
    rem_ = bit_ns % rate_bps_;
  }

 private:
  Time tx_ns(uint64_t bytes) const {
    return rate_bps_ == 0 ? 0 : bytes * 8 * 1'000'000'000ull / rate_bps_;
  }

  uint64_t burst_bytes_;   // credit a QP may bank while below its rate, bytes
  bool limiting_ = false;  // pacing on
  uint64_t rate_bps_ = 0;  // paced rate, bits/s (meaningful while limiting_)
  Time next_ = 0;          // virtual finishing time of the last packet, ns
  uint64_t rem_ = 0;       // sub-nanosecond remainder of next_, in bit·ns (< rate_bps_)
};

}  // namespace uroce::transport::cc
