#include "engine/ip_id_guard.h"

namespace uroce {

bool IpIdGuard::accept(uint32_t src_ip, uint16_t id) {
  // Fibonacci hashing: addresses of one subnet differ in their low bits.
  Slot& s = slots_[(src_ip * 2654435761u) >> 24 & (kSlots - 1)];
  if (s.ip != src_ip) s = Slot{src_ip};
  const uint16_t step = static_cast<uint16_t>(id - s.last);  // modulo 2^16
  if (id <= kMaxSmallId) {
    s.large_run = 0;
    if (s.small < kTrusted) ++s.small;
  } else if (!s.counting) {
    // A counter that started small (rxe's per-destination counter can) steps just past the
    // last ID it sent; a corrupted datagram lands anywhere in the range.
    if (s.small >= kTrusted && (step == 0 || step > kMaxStep) && ++s.large_run < kSwitch)
      return false;
    s.counting = true;
    s.large_run = 0;
  }
  s.last = id;
  return true;
}

}  // namespace uroce
