#include "sim/switch.h"

#include <algorithm>

namespace uroce::sim {

void SwitchPort::In::on_frame(Frame* f, Time now) {
  port->sw->receive(port->index, f, now);
}

Switch::Switch(EventQueue& q, FramePool& pool, std::string name, uint32_t id, const SwitchConfig& c,
               const Window* window, uint64_t seed)
    : q_(q),
      pool_(pool),
      name_(std::move(name)),
      id_(id),
      c_(c),
      window_(window),
      rng_(Rng::stream(seed, 0x5700'0000ull + id)),
      seed32_(uint32_t(Rng::stream(seed, 0xec00'0000ull + id))) {}

uint32_t Switch::add_port(uint64_t rate_bps, std::unique_ptr<Channel> out,
                          const std::string& peer) {
  auto p = std::make_unique<SwitchPort>();
  p->sw = this;
  p->index = uint32_t(ports_.size());
  p->in.port = p.get();
  p->out = std::move(out);
  p->peer = peer;
  p->egress = std::make_unique<EgressPort>(q_, rate_bps, p->out.get(), this, p->index, window_,
                                           &rng_, c_.red);
  for (int c = 0; c < kPriorities; ++c)
    p->refresh[c] = std::make_unique<Timer>(q_, this, uint64_t(p->index) << 3 | uint64_t(c));
  ports_.push_back(std::move(p));
  return ports_.back()->index;
}

const std::vector<uint32_t>* Switch::route(uint32_t ip) const {
  auto it = routes_.find(ip);
  return it == routes_.end() ? nullptr : &it->second;
}

int64_t Switch::egress_for(const FiveTuple& t) const {
  const std::vector<uint32_t>* g = route(t.dst_ip);
  if (g == nullptr || g->empty()) return -1;
  if (g->size() == 1) return (*g)[0];
  return (*g)[ecmp_pick(ecmp_hash(c_.hash, seed32_, t), hash_offset(c_.hash, seed32_),
                        uint32_t(g->size()))];
}

void Switch::receive(uint32_t in, Frame* f, Time now) {
  SwitchPort& ip = *ports_[in];
  ++ip.c.rx_frames;
  if (f->kind == FrameKind::kPause) {
    // PAUSE is link-local: it stops this port's own transmission (802.1Qbb), never forwarded.
    ip.egress->on_pause_frame(*f);
    pool_.put(f);
    return;
  }
  if (ip.mtu != 0 && f->ip_bytes() > ip.mtu) {  // oversize: refused as it arrives
    ++ip.c.mtu_drops;
    pool_.put(f);
    return;
  }
  const int64_t e = egress_for(FiveTuple{f->src_ip, f->dst_ip, f->src_port, f->dst_port, 17});
  if (e < 0) {
    ++ip.c.no_route;
    pool_.put(f);
    return;
  }
  SwitchPort& ep = *ports_[e];
  if (ep.mtu != 0 && f->ip_bytes() > ep.mtu) {  // too long for the way out
    ++ep.c.mtu_drops;
    pool_.put(f);
    return;
  }
  const int c = f->prio & (kPriorities - 1);
  const uint64_t size = f->bytes();
  if (c_.buffer_bytes != 0) {
    const uint64_t occupancy = c_.buffer_mode == BufferMode::kShared ? used_ : ep.held_bytes;
    if (occupancy + size > c_.buffer_bytes) {
      ++ep.c.drops[c];
      pool_.put(f);
      return;
    }
  }
  used_ += size;
  peak_ = std::max(peak_, used_);
  ep.held_bytes += size;
  f->ingress = in;
  if (lossless(c)) {
    ip.ingress_bytes[c] += size;
    if (!ip.xoff[c] && ip.ingress_bytes[c] >= c_.pfc.xoff) {
      ip.xoff[c] = true;
      send_pause(in, c, c_.pfc.quanta);
    }
  }
  (void)now;
  ep.egress->enqueue(f);
}

void Switch::on_dequeue(uint32_t port, const Frame& f, Time now) {
  (void)now;
  const uint64_t size = f.bytes();
  used_ -= size;
  ports_[port]->held_bytes -= size;
  const int c = f.prio & (kPriorities - 1);
  if (!lossless(c)) return;
  SwitchPort& ip = *ports_[f.ingress];
  ip.ingress_bytes[c] -= size;
  if (ip.xoff[c] && ip.ingress_bytes[c] <= c_.pfc.xon) {
    ip.xoff[c] = false;
    send_pause(f.ingress, c, 0);
  }
}

void Switch::send_pause(uint32_t port, int prio, uint16_t quanta) {
  SwitchPort& p = *ports_[port];
  Frame* f = pool_.get();
  f->kind = FrameKind::kPause;
  f->prio = uint8_t(prio);
  f->pause_enable = uint8_t(1u << prio);
  std::fill(std::begin(f->pause_quanta), std::end(f->pause_quanta), uint16_t(0));
  f->pause_quanta[prio] = quanta;
  f->payload.clear();
  if (quanta == 0) {
    ++p.egress->pfc(prio).tx_resume;
    p.refresh[prio]->cancel();
  } else {
    ++p.egress->pfc(prio).tx_pause;
    // Refreshed at half the pause time while XOFF lasts, so the upstream never resumes early.
    p.refresh[prio]->arm(q_.now() + p.egress->tx_time(uint64_t(quanta) * 512 / 8) / 2);
  }
  p.egress->send_control(f);
}

void Switch::on_event(Time now, uint64_t arg) {
  (void)now;
  const uint32_t port = uint32_t(arg >> 3);
  const int c = int(arg & 7);
  if (ports_[port]->xoff[c]) send_pause(port, c, c_.pfc.quanta);
}

}  // namespace uroce::sim
