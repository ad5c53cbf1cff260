#include "engine/ip_id_guard.h"

namespace uroce {

bool IpIdGuard::accept(uint32_t src_ip, uint16_t id) {
  // Fibonacci hashing: addresses of one subnet differ in their low bits.
  Slot& s = slots_[(src_ip * 2654435761u) >> 24 & (kSlots - 1)];
  if (s.ip != src_ip) s = Slot{src_ip};
  if (id <= kMaxSmallId) {
    s.large_run = 0;
    if (s.small < kTrusted) ++s.small;
    return true;
  }
  if (s.counting) return true;
  if (s.small < kTrusted || ++s.large_run >= kSwitch) {
    s.counting = true;
    s.large_run = 0;
    return true;
  }
  return false;
}

}  // namespace uroce
