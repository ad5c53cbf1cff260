// Measurements the fabric takes as it runs, exactly rather than by sampling: a measurement window
// (the interval results are reported over), and the time-weighted distribution of a queue's
// occupancy within it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sim/event_queue.h"

namespace uroce::sim {

// The interval [begin, end) over which a run reports utilisation, goodput and queue statistics.
struct Window {
  Time begin = 0;
  Time end = kNever;
  // The part of [a, b) inside the window, ns.
  Time overlap(Time a, Time b) const {
    const Time lo = std::max(a, begin), hi = std::min(b, end);
    return hi > lo ? hi - lo : 0;
  }
  Time length() const { return end - begin; }
};

// How long a queue held each occupancy, inside a window: the time-weighted mean, percentiles
// and maximum of its length in bytes. Every change of the length is reported (change()), so the
// statistics are exact, not sampled. Occupancy is binned by 1 KiB for the percentiles.
class QueueStats {
 public:
  static constexpr uint64_t kBin = 1024;
  explicit QueueStats(const Window* w) : w_(w) {}

  // The queue holds `bytes` from `now` on.
  void change(Time now, uint64_t bytes) {
    account(now);
    bytes_ = bytes;
    if (now >= w_->begin && now < w_->end) max_ = std::max(max_, bytes);
  }
  // Closes the accounting at `now` (the end of the run).
  void finish(Time now) { account(now); }

  double mean_bytes() const { return total_ns_ ? area_ / double(total_ns_) : 0.0; }
  uint64_t max_bytes() const { return max_; }
  // The smallest occupancy (to the 1 KiB bin's upper edge) the queue stayed at or below for
  // fraction q of the window.
  uint64_t percentile_bytes(double q) const {
    if (total_ns_ == 0) return 0;
    const double want = q * double(total_ns_);
    double acc = 0;
    for (size_t i = 0; i < hist_.size(); ++i) {
      acc += double(hist_[i]);
      if (acc >= want) return std::min<uint64_t>((i + 1) * kBin, max_);
    }
    return max_;
  }

 private:
  void account(Time now) {
    const Time dt = w_->overlap(last_, now);
    if (dt > 0) {
      area_ += double(bytes_) * double(dt);
      total_ns_ += dt;
      const size_t bin = bytes_ / kBin;
      if (bin >= hist_.size()) hist_.resize(bin + 1, 0);
      hist_[bin] += dt;
      if (last_ < w_->begin) max_ = std::max(max_, bytes_);  // the level the window opened at
    }
    last_ = std::max(last_, now);
  }

  const Window* w_;
  Time last_ = 0;           // when bytes_ took its value
  uint64_t bytes_ = 0;      // current occupancy
  double area_ = 0;         // byte·ns inside the window
  Time total_ns_ = 0;       // ns accounted inside the window
  uint64_t max_ = 0;        // largest occupancy inside the window
  std::vector<Time> hist_;  // ns spent in each 1 KiB bin
};

}  // namespace uroce::sim
