#include "engine/dispatch.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <new>
#include <stdexcept>

namespace uroce {

Dispatch::Dispatch(Transmitter& tx, transport::MemoryAccess& mem, DeviceCounters& counters,
                   Limits limits)
    : tx_(tx), mem_(mem), counters_(counters), limits_(limits) {}

Dispatch::~Dispatch() = default;

Dispatch::QpEntry& Dispatch::QpTable::emplace(uint32_t qpn, QpEntry e) {
  auto& leaf = leaves_[(qpn >> kLeafBits) & (kLeaves - 1)];
  if (!leaf) leaf = std::make_unique<Leaf>();
  live_.reserve(live_.size() + 1);  // so that nothing below can throw once the entry is in
  auto& slot = (*leaf)[qpn & (kLeafSize - 1)];
  e.live_index = live_.size();
  slot = std::make_unique<QpEntry>(std::move(e));
  live_.push_back(qpn);
  return *slot;
}

void Dispatch::QpTable::erase(uint32_t qpn) {
  auto& slot = (*leaves_[(qpn >> kLeafBits) & (kLeaves - 1)])[qpn & (kLeafSize - 1)];
  // The last live QPN takes the erased one's place in live_.
  const size_t i = slot->live_index;
  live_[i] = live_.back();
  find(live_[i])->live_index = i;
  live_.pop_back();
  // Leaves stay allocated (32 KiB each): QPNs are handed out in order and come back there.
  slot.reset();
}

uint32_t Dispatch::alloc_qpn() {
  // QPNs are 24 bits; skip 0 and 1 (special QPs), the multicast QPN and any still in use after a
  // wrap. create_qp checked that fewer than max_qp (<= count) are in use, so one is free.
  for (;;) {
    const uint32_t n =
        space_.cursor ? std::atomic_ref<uint32_t>(*space_.cursor).fetch_add(1) : next_qpn_++;
    const uint32_t q = (space_.base + (n & (space_.count - 1))) & wire::kQpnMask;
    if (q >= 2 && q != kMulticastQpn && !qps_.contains(q) && !reserved_.contains(q)) return q;
  }
}

uint32_t Dispatch::reserve_number() {
  if (qps_.size() + reserved_.size() >= limits_.max_qp) return 0;
  const uint32_t n = alloc_qpn();
  reserved_.insert(n);
  return n;
}

transport::Qp* Dispatch::create_qp(transport::QpInit init, int* err) {
  int dummy;
  if (!err) err = &dummy;
  if (qps_.size() >= limits_.max_qp) {
    *err = ENOMEM;
    return nullptr;
  }
  if (init.qpn == 0) {
    init.qpn = alloc_qpn();
  } else if (init.qpn > wire::kQpnMask || init.qpn == kMulticastQpn) {
    *err = EINVAL;
    return nullptr;
  } else if (qps_.contains(init.qpn)) {
    *err = EBUSY;
    return nullptr;
  }
  try {
    QpEntry e;
    e.qp = std::make_unique<transport::Qp>(init, tx_, mem_);
    e.pd = init.pd;
    transport::Qp* qp = e.qp.get();
    qps_.emplace(init.qpn, std::move(e));
    *err = 0;
    return qp;
  } catch (const std::bad_alloc&) {
    *err = ENOMEM;
  } catch (const std::exception&) {
    *err = EINVAL;  // the transport refused the capabilities
  }
  return nullptr;
}

int Dispatch::destroy_qp(transport::Qp* qp, uint32_t* pd) {
  QpEntry* e = qps_.find(qp->qpn());
  if (!e || e->qp.get() != qp) return EINVAL;
  if (pd) *pd = e->pd;
  retired_ += qp->counters();
  detach_all_mcast(qp->qpn());
  qps_.erase(qp->qpn());
  return 0;
}

transport::Qp* Dispatch::find(uint32_t qpn) {
  QpEntry* e = qps_.find(qpn);
  return e ? e->qp.get() : nullptr;
}

void Dispatch::set_cookie(transport::Qp* qp, void* cookie) {
  QpEntry* e = qps_.find(qp->qpn());
  if (e && e->qp.get() == qp) e->cookie = cookie;
}

void* Dispatch::cookie(uint32_t qpn) const {
  const QpEntry* e = qps_.find(qpn);
  return e ? e->cookie : nullptr;
}

int Dispatch::attach_mcast(transport::Qp* qp, uint32_t group) {
  const QpEntry* e = qps_.find(qp->qpn());
  // Only UD QPs take part in multicast (IBTA 10.5.2.2); 224.0.0.0/4 is IPv4's multicast range.
  if (!e || e->qp.get() != qp || qp->type() != IBV_QPT_UD || (group >> 28) != 0xe) return EINVAL;
  auto g = mcast_.find(group);
  if (g == mcast_.end()) {
    if (mcast_.size() >= limits_.max_mcast_grp) return ENOMEM;
    g = mcast_.emplace(group, std::vector<uint32_t>{}).first;
  }
  std::vector<uint32_t>& members = g->second;
  if (std::find(members.begin(), members.end(), qp->qpn()) != members.end()) return 0;
  if (members.size() >= limits_.max_mcast_qp_attach) return ENOMEM;
  if (members.empty()) {
    if (int e = tx_.join_group(group); e != 0) {
      mcast_.erase(g);
      return e;
    }
  }
  members.push_back(qp->qpn());
  return 0;
}

int Dispatch::detach_mcast(transport::Qp* qp, uint32_t group) {
  auto it = mcast_.find(group);
  if (it == mcast_.end()) return EINVAL;
  auto m = std::find(it->second.begin(), it->second.end(), qp->qpn());
  if (m == it->second.end()) return EINVAL;
  it->second.erase(m);
  if (it->second.empty()) {
    tx_.leave_group(group);
    mcast_.erase(it);
  }
  return 0;
}

void Dispatch::detach_all_mcast(uint32_t qpn) {
  for (auto it = mcast_.begin(); it != mcast_.end();) {
    std::erase(it->second, qpn);
    if (it->second.empty()) {
      tx_.leave_group(it->first);
      it = mcast_.erase(it);
    } else {
      ++it;
    }
  }
}

void Dispatch::track(uint32_t qpn, QpEntry& e) {
  if (!e.in_pump_list && e.qp->wants_pump()) {
    e.in_pump_list = true;
    pump_list_.push_back(qpn);
  }
  transport::Time d = e.qp->next_deadline();
  if (d == e.armed) return;
  e.armed = d;
  if (d == transport::kNever) return;  // the old heap entry goes stale
  timers_.emplace_back(d, qpn);
  std::push_heap(timers_.begin(), timers_.end(), std::greater<>());
  // Deadlines that move before they fire (ACK coalescing, retransmission restarts) leave stale
  // entries behind; rebuild from the live deadlines when they dominate the heap.
  if (timers_.size() > 4 * qps_.size() + 64) {
    timers_.clear();
    qps_.for_each([this](uint32_t q, const QpEntry& x) {
      if (x.armed != transport::kNever) timers_.emplace_back(x.armed, q);
    });
    std::make_heap(timers_.begin(), timers_.end(), std::greater<>());
  }
}

void Dispatch::touch(transport::Qp* qp) {
  QpEntry* e = qps_.find(qp->qpn());
  if (e && e->qp.get() == qp) track(qp->qpn(), *e);
}

transport::Time Dispatch::next_deadline() {
  while (!timers_.empty()) {
    auto [d, qpn] = timers_.front();
    const QpEntry* e = qps_.find(qpn);
    if (e && e->armed == d) return d;
    std::pop_heap(timers_.begin(), timers_.end(), std::greater<>());
    timers_.pop_back();
  }
  return transport::kNever;
}

transport::Time Dispatch::after_call(transport::Qp* qp, transport::Time now, bool* more) {
  if (qp->wants_pump()) qp->pump(now);
  tx_.tx_flush(now);
  *more = false;
  QpEntry* e = qps_.find(qp->qpn());
  if (!e) return transport::kNever;
  track(qp->qpn(), *e);
  *more = e->in_pump_list;
  return e->armed;
}

void Dispatch::receive(std::span<const RxPacket> pkts, transport::Time now) {
  // A run of packets for one QP — a burst of a message's packets, a reply and the ACK beside it —
  // is pumped and tracked once, after its last packet: a QP's deadline and pump wish change only
  // during calls on it (the contract above), nothing reads them between two packets of the run,
  // and one pump answers the run with one ACK and sends what its ACKs let through in one go.
  QpEntry* run = nullptr;
  bool run_pump = false;
  const auto end_run = [&] {
    if (!run) return;
    if (run_pump) run->qp->pump(now);
    track(run->qp->qpn(), *run);
    run = nullptr;
    run_pump = false;
  };
  for (const RxPacket& p : pkts) {
    // A datagram sent to a group goes to every QP attached to it, and must name the multicast
    // QPN; that QPN sent to a unicast address names no QP.
    // (Groups are IPv4 ones, 224.0.0.0/4, kept as host-order addresses.)
    const uint32_t dst4 = p.info.dst_ip.v4();
    const bool to_group = p.info.dst_ip.is_v4() && (dst4 >> 28) == 0xe;
    if (to_group || p.pkt.bth.dest_qp == kMulticastQpn) {
      end_run();
      auto g = to_group && p.pkt.bth.dest_qp == kMulticastQpn ? mcast_.find(dst4) : mcast_.end();
      if (g == mcast_.end()) {
        counters_.rx_unknown_qp.add();
        continue;
      }
      // Each attached QP checks the Q_Key (and its state) itself, counting what it drops.
      for (uint32_t qpn : g->second) {
        QpEntry& e = *qps_.find(qpn);  // destroy_qp detaches first
        e.qp->receive(p.pkt, p.info, now);
        track(qpn, e);
      }
      continue;
    }
    QpEntry* e = qps_.find(p.pkt.bth.dest_qp);
    if (!e) {
      counters_.rx_unknown_qp.add();
      continue;
    }
    if (e != run) end_run();
    run_pump |= e->qp->receive_deferring_pump(p.pkt, p.info, now);
    run = e;
  }
  end_run();
}

transport::Time Dispatch::progress(transport::Time now, bool* again) {
  // Due timers, earliest first; each QP at most once per pass, so a QP whose deadline stays in
  // the past cannot hold the caller for ever (the engine then bounds its wake-up rate).
  std::vector<uint32_t>& due = due_scratch_;
  due.clear();
  for (transport::Time d = next_deadline(); d <= now; d = next_deadline()) {
    uint32_t qpn = timers_.front().second;
    std::pop_heap(timers_.begin(), timers_.end(), std::greater<>());
    timers_.pop_back();
    qps_.find(qpn)->armed = transport::kNever;  // next_deadline() checked it exists
    due.push_back(qpn);
  }
  for (uint32_t qpn : due) {
    QpEntry& e = *qps_.find(qpn);
    e.qp->on_timer(now);
    track(qpn, e);
  }
  // Pump in rounds: a round stops when the transmit ring fills, the flush frees it, the next round
  // continues. Stop when nothing wants to send or a round sent nothing (a rate-limited QP waits
  // for its deadline, not for a spinning engine); after kPumpRounds yield to other threads.
  std::vector<uint32_t>& list = pump_scratch_;
  for (int round = 0; round < kPumpRounds && !pump_list_.empty(); ++round) {
    list.swap(pump_list_);
    pump_list_.clear();
    // Each pass starts one QP further into the list than the last (and the list keeps the order
    // of pumping), so QPs that compete for a transmit ring with room for few packets take turns,
    // round robin, as a NIC's QP scheduler serves them; starting at the same QP every time would
    // let it take every freed buffer.
    const size_t first = round == 0 && list.size() > 1 ? 1 : 0;
    for (size_t k = 0; k < list.size(); ++k) {
      const uint32_t qpn = list[(first + k) % list.size()];
      QpEntry* e = qps_.find(qpn);
      if (!e) continue;  // destroyed since it was listed
      e->in_pump_list = false;
      if (e->qp->wants_pump()) e->qp->pump(now);
      track(qpn, *e);
    }
    list.clear();
    if (tx_.tx_flush(now) == 0) break;
    if (round == kPumpRounds - 1 && !pump_list_.empty()) *again = true;
  }
  return next_deadline();
}

transport::QpCounters Dispatch::counter_totals() const {
  transport::QpCounters sum = retired_;
  qps_.for_each([&sum](uint32_t, const QpEntry& e) { sum += e.qp->counters(); });
  return sum;
}

}  // namespace uroce
