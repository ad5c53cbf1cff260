// RED's marking curve as DCQCN's congestion point uses it on a switch egress queue (DCQCN §2,
// after Floyd and Jacobson's RED): nothing up to Kmin, then a probability rising linearly to
// Pmax at Kmax, and every packet above Kmax. One definition for the two queues that mark: fault
// injection's switch queue in front of a device (engine/faults.cc, UROCE_FAULTS rx.queue) and
// the simulated fabric's egress ports (sim/egress.cc).
#pragma once

#include <cstdint>

namespace uroce {

// The probability of marking a packet that sees `queue` bytes queued (Kmin, Kmax in bytes,
// Kmin <= Kmax; Pmax in [0, 1]).
inline double red_probability(uint64_t queue, uint64_t kmin, uint64_t kmax, double pmax) {
  if (queue > kmax) return 1.0;
  if (queue <= kmin) return 0.0;
  return pmax * double(queue - kmin) / double(kmax - kmin);
}

}  // namespace uroce
