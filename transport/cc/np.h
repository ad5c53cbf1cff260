// The notification point (NP) of one QP: which CE-marked packets are answered with a CNP.
// At most one CNP per min_time_between_cnps per QP [DCQCN §3.1 "N"; NV min_time_between_cnps],
// so a burst of marks costs the reverse path one packet per interval, and the sender's RP sees
// one congestion signal per interval whatever the marking rate.
#pragma once

#include <cstdint>

#include "transport/env.h"

namespace uroce::transport::cc {

class CnpLimiter {
 public:
  // A CE-marked request packet arrived at `now`; `interval` is min_time_between_cnps in ns.
  // Returns whether a CNP goes out for it: the first mark does, then the first one at least
  // `interval` after the last CNP (0: every mark).
  bool on_marked(Time now, Time interval) {
    ++marked_;
    if (sent_ != 0 && now - last_ < interval) {
      ++suppressed_;
      return false;
    }
    last_ = now;
    ++sent_;
    return true;
  }
  uint64_t marked() const { return marked_; }          // CE-marked packets seen
  uint64_t sent() const { return sent_; }              // CNPs it allowed
  uint64_t suppressed() const { return suppressed_; }  // marks inside an interval

 private:
  Time last_ = 0;  // when the last CNP was allowed (valid once sent_ > 0)
  uint64_t marked_ = 0, sent_ = 0, suppressed_ = 0;
};

}  // namespace uroce::transport::cc
