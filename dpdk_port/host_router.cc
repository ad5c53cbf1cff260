#include "dpdk_port/host_router.h"

#include <cerrno>

namespace uroce::dpdk::host {

int Router::join() {
  int best = -1;
  for (uint32_t s = 0; s < share::kSlots; ++s)
    if (!live_[s] && (best < 0 || freed_at_[s] < freed_at_[best])) best = static_cast<int>(s);
  if (best >= 0) live_[best] = true;
  return best;
}

void Router::leave(uint32_t slot) {
  if (!live(slot)) return;
  live_[slot] = false;
  freed_at_[slot] = ++freed_;
  for (auto it = claims_.begin(); it != claims_.end();)
    it = it->second.slot == slot ? claims_.erase(it) : std::next(it);
}

size_t Router::members() const {
  size_t n = 0;
  for (bool l : live_) n += l;
  return n;
}

int Router::claim(uint32_t slot, uint16_t space, uint16_t port) {
  auto [it, fresh] = claims_.try_emplace(key(space, port), Claim{slot, 0, false});
  if (!fresh && it->second.slot != slot) return EADDRINUSE;
  ++it->second.refs;
  return 0;
}

void Router::release(uint32_t slot, uint16_t space, uint16_t port) {
  auto it = claims_.find(key(space, port));
  if (it == claims_.end() || it->second.slot != slot) return;
  if (--it->second.refs == 0) claims_.erase(it);
}

void Router::listen(uint32_t slot, uint16_t space, uint16_t port, bool on) {
  auto it = claims_.find(key(space, port));
  if (it != claims_.end() && it->second.slot == slot) it->second.listening = on;
}

int Router::route(const uint8_t* data, size_t len) const {
  const share::Destination d = share::destination_of(data, len);
  int slot = -1;
  if (d.kind == share::Destination::kSlot) {
    slot = static_cast<int>(d.value);
  } else if (d.kind == share::Destination::kService) {
    auto it = claims_.find(d.value);
    if (it != claims_.end() && it->second.listening) slot = static_cast<int>(it->second.slot);
  }
  return slot >= 0 && live(static_cast<uint32_t>(slot)) ? slot : -1;
}

}  // namespace uroce::dpdk::host
