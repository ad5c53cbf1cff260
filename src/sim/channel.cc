#include "sim/channel.h"

namespace uroce::sim {

Time Channel::delay() {
  Time d = p_.delay;
  if (rng_.uniform() < p_.reorder) d += Time(rng_.uniform() * 4 * double(p_.delay));
  return d;
}

void Channel::send(Frame* f) {
  const Time now = q_.now();
  ++c_.sent;
  if (tap_ != nullptr) tap_->on_tx(*f, now);
  if (!impaired()) {
    if (drop_if && drop_if(*f)) {
      ++c_.lost;
      pool_.put(f);
      return;
    }
    q_.schedule(now + p_.delay, EventClass::kArrival, this, reinterpret_cast<uint64_t>(f));
    return;
  }
  // Always drawn, so that a given seed loses the same frames whatever the other probabilities.
  if ((drop_if && drop_if(*f)) || rng_.uniform() < p_.loss) {
    ++c_.lost;
    pool_.put(f);
    return;
  }
  q_.schedule(now + delay(), EventClass::kArrival, this, reinterpret_cast<uint64_t>(f));
  if (rng_.uniform() < p_.dup) {
    ++c_.duplicated;
    q_.schedule(now + delay(), EventClass::kArrival, this,
                reinterpret_cast<uint64_t>(pool_.clone(*f)));
  }
}

void Channel::on_event(Time now, uint64_t arg) {
  ++c_.delivered;
  dst_->on_frame(reinterpret_cast<Frame*>(arg), now);
}

}  // namespace uroce::sim
