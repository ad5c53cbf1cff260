#include "transport/multipath.h"

#include <algorithm>

namespace uroce::transport {

void PathSet::reset(uint32_t qpn, uint16_t base_port, uint32_t paths) {
  if (paths <= 1) {
    st_.reset();
    return;
  }
  st_ = std::make_unique<State>();
  st_->n = std::min(paths, kMaxPaths);
  st_->qpn = qpn;
  st_->slot[0].port = base_port;
  for (uint32_t i = 1; i < st_->n; ++i) st_->slot[i].port = draw_port();
}

uint16_t PathSet::draw_port() {
  // Like src_port_for_qpn (context.h): a multiplicative hash of the QPN and the entropy value's
  // number, top two bits set so the port stays in the dynamic range 0xC000..0xFFFF as rxe and
  // NICs keep it. Distinct numbers give ports an ECMP hash treats as unrelated flows.
  const uint32_t h =
      ((st_->qpn & 0xffffff) ^ (++st_->entropy << 24) ^ (st_->entropy >> 8)) * 2654435761u;
  return static_cast<uint16_t>(0xC000 | ((h >> 18) & 0x3fff));
}

uint16_t PathSet::send(Psn psn, bool spray, uint32_t span) {
  State& s = *st_;
  uint32_t i = 0;
  if (spray) {
    i = s.next;
    s.next = s.next + 1 == s.n ? 0 : s.next + 1;
  }
  if (++s.tsn == 0) ++s.tsn;  // 0 means "nothing delivered"; a wrap after 2^32 packets is benign
  const Sent rec{.tsn = s.tsn, .slot = uint8_t(i), .gen = s.slot[i].gen};
  span = std::min(span, kRing);
  for (uint32_t k = 0; k < span; ++k) s.sent[(psn + k).value() % kRing] = rec;
  return s.slot[i].port;
}

void PathSet::delivered(Psn psn) {
  State& s = *st_;
  const Sent& r = s.sent[psn.value() % kRing];
  if (r.tsn == 0) return;
  s.max_delivered = std::max(s.max_delivered, r.tsn);
  Slot& sl = s.slot[r.slot];
  if (uint8_t(sl.gen - r.gen) < kGens) {
    uint32_t& m = sl.mark[r.gen % kGens];
    m = std::max(m, r.tsn);
  }
}

bool PathSet::lost(Psn psn) const {
  const State& s = *st_;
  const Sent& r = s.sent[psn.value() % kRing];
  if (r.tsn == 0 || r.tsn <= s.expired) return true;  // no record (overwritten), or a stall
  return seen_behind(r);
}

bool PathSet::seen_behind(const Sent& r) const {
  const Slot& sl = st_->slot[r.slot];
  if (uint8_t(sl.gen - r.gen) >= kGens) return true;  // a route long replaced: it had its chance
  return sl.mark[r.gen % kGens] > r.tsn;
}

void PathSet::replace(Slot& sl) {
  ++sl.gen;
  sl.current() = 0;
  sl.port = draw_port();
}

bool PathSet::rotate(Psn psn) {
  State& s = *st_;
  const Sent& r = s.sent[psn.value() % kRing];
  // On the route's own evidence (a later packet of it arrived), or after a stall (expire_all)
  // when other routes delivered packets sent after it: a route that delivers nothing at all (a
  // failed link) shows no evidence of its own, and a stall whose every route is silent blames
  // none. A route already replaced is not replaced again.
  if (r.tsn == 0 || r.gen != s.slot[r.slot].gen) return false;
  if (!seen_behind(r) && !(r.tsn <= s.expired && r.tsn < s.max_delivered)) return false;
  replace(s.slot[r.slot]);
  return true;
}

bool PathSet::marked(uint16_t port) {
  State& s = *st_;
  for (uint32_t i = 0; i < s.n; ++i) {
    Slot& sl = s.slot[i];
    if (sl.port != port) continue;
    if (sl.gen != 0 && sl.current() == 0) return false;  // its new route is not tried yet
    replace(sl);
    return true;
  }
  return false;  // a route already replaced, or not ours
}

void PathSet::expire_all() {
  st_->expired = st_->tsn;
}

}  // namespace uroce::transport
