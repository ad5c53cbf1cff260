// The dispatch of one device: its QP table, the timers and pump list that decide which QP runs
// when, and multicast membership — the part of a device that is pure logic. It owns no thread,
// no lock and no clock: every call takes the current time, so the engine (src/engine/device.cc,
// under the device lock, on CLOCK_MONOTONIC) and a virtual-time driver (the transport tests'
// link, the fabric simulator) run the same code.
//
// Timers and pumping: after every call on a QP the dispatch records the QP's next_deadline() in
// a min-heap and, if wants_pump(), lists it for pumping; progress() runs the due timers and pumps
// the listed QPs, so its cost follows what happened, not the number of QPs. The transport
// contract this relies on: a QP's deadline and wants_pump() change only during calls on it —
// so a caller that calls a QP directly (not through after_call / receive) must call touch().
#pragma once

#include <cerrno>
#include <cstdint>
#include <array>
#include <map>
#include <set>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "engine/counters.h"
#include "engine/rx_packet.h"
#include "transport/qp.h"

namespace uroce {

// Where a dispatch's QPs send: the transport's PacketSink, a flush that hands queued packets to
// the wire, and multicast membership of the port underneath.
class Transmitter : public transport::PacketSink {
 public:
  // Sends what was committed; returns how many packets left (0: nothing could be sent).
  virtual size_t tx_flush(transport::Time now) = 0;
  virtual int join_group(uint32_t group) {
    (void)group;
    return EOPNOTSUPP;
  }
  virtual void leave_group(uint32_t group) { (void)group; }
};

class Dispatch {
 public:
  struct Limits {
    uint32_t max_qp = 4096;
    // Multicast: groups a device joins and QPs attached to one group.
    uint32_t max_mcast_grp = 256;
    uint32_t max_mcast_qp_attach = 64;
  };
  // The DestQP every multicast packet carries (IBTA 10.5.2.2: the multicast QPN, 0xFFFFFF).
  static constexpr uint32_t kMulticastQpn = 0xffffff;
  // The general services interface QP (IBTA 3.5.2.4.1; CM MADs travel on it).
  static constexpr uint32_t kGsiQpn = 1;

  // `counters` receives rx_unknown_qp; all three must outlive the dispatch.
  Dispatch(Transmitter& tx, transport::MemoryAccess& mem, DeviceCounters& counters, Limits limits);
  ~Dispatch();
  Dispatch(const Dispatch&) = delete;
  Dispatch& operator=(const Dispatch&) = delete;

  // The QPNs create_qp hands out: base + (n mod count), n counting on from *cursor (atomically;
  // a shared device's counter lives in shared memory and outlives the process: PortShare) or from
  // a counter of the dispatch's own when cursor is null. count is a power of two.
  struct QpnSpace {
    uint32_t base = 0;
    uint32_t count = 1u << 24;
    uint32_t* cursor = nullptr;
  };
  void set_qpn_space(QpnSpace s) { space_ = s; }

  // Creates a QP. init.qpn == 0 assigns the next free QPN (QpnSpace) from 2 (0 and 1 are the
  // special QPs); any other value asks for exactly that QPN (the GSI QP, kGsiQpn; a virtual-time
  // driver that names its QPs). nullptr and *err: ENOMEM (QP limit, or out of memory), EBUSY (the
  // QPN is taken), EINVAL (not a QPN, or the transport refused the capabilities).
  transport::Qp* create_qp(transport::QpInit init, int* err);
  // 0, or EINVAL when `qp` is not a QP of this dispatch. Detaches it from its groups; its
  // counters join the totals of destroyed QPs. *pd (if given) gets the PD it was created in.
  int destroy_qp(transport::Qp* qp, uint32_t* pd = nullptr);
  transport::Qp* find(uint32_t qpn);
  // A number from the QPN space that no QP will have until release_number: what XRC SRQs are
  // numbered with, so that their numbers are unique on a device shared by processes as QPNs are
  // (a request naming another process's SRQ finds none here, never one of ours). 0 when the
  // space is exhausted.
  uint32_t reserve_number();
  void release_number(uint32_t n) { reserved_.erase(n); }
  // An opaque value kept with a QP (the device keeps its ibv_qp handle there for async events).
  void set_cookie(transport::Qp* qp, void* cookie);
  void* cookie(uint32_t qpn) const;
  size_t qp_count() const { return qps_.size(); }
  template <typename F>
  void for_each_qp(F&& f) const {
    qps_.for_each([&](uint32_t, const QpEntry& e) { f(*e.qp); });
  }

  // Multicast (ibv_attach_mcast): a UD QP attached to the IPv4 group `group` (host order)
  // receives the datagrams sent to the group with DestQP kMulticastQpn. attach: 0 (also when
  // attached already), EINVAL (not a UD QP of this dispatch, not a multicast address), ENOMEM
  // (max_mcast_grp groups or max_mcast_qp_attach QPs in the group reached), or the port's error
  // joining the group. detach: 0, or EINVAL when not attached.
  int attach_mcast(transport::Qp* qp, uint32_t group);
  int detach_mcast(transport::Qp* qp, uint32_t group);

  // Hands received packets to their QPs (by BTH DestQP; group datagrams to every attached QP).
  // Packets for no QP are counted in rx_unknown_qp.
  void receive(std::span<const RxPacket> pkts, transport::Time now);
  // Runs due timers and pumps QPs that want to send, flushing between rounds. Returns the
  // earliest future deadline (kNever when none) and sets *again when more work is ready right
  // now (a QP still wants to pump after kPumpRounds rounds), so the caller loops without
  // sleeping instead of holding its lock for ever.
  transport::Time progress(transport::Time now, bool* again);
  // After an application call on `qp`: sends what it can send now, flushes, and records its
  // deadline. Returns that deadline; *more is set when it still wants to pump (the transmit ring
  // filled) so the caller schedules a progress pass.
  transport::Time after_call(transport::Qp* qp, transport::Time now, bool* more);
  // Records a QP's deadline and pump wish after a call made on it directly.
  void touch(transport::Qp* qp);
  // The earliest QP deadline; kNever when none.
  transport::Time next_deadline();

  // The transport counters of every QP, live and destroyed, summed.
  transport::QpCounters counter_totals() const;

  static constexpr int kPumpRounds = 8;

 private:
  struct QpEntry {
    std::unique_ptr<transport::Qp> qp;
    uint32_t pd = 0;
    void* cookie = nullptr;
    // The QP's next_deadline() as of the last call on it; kNever when none.
    transport::Time armed = transport::kNever;
    bool in_pump_list = false;  // listed in pump_list_
    size_t live_index = 0;      // its place in QpTable::live_
  };
  // A timer: (deadline, QPN). Entries whose deadline no longer equals the QP's `armed` are stale
  // and skipped when they surface (lazy deletion).
  using Timer = std::pair<transport::Time, uint32_t>;

  // QPs by QPN: a two-level table indexed by the QPN's bits (QPNs are 24 bits and handed out
  // in order, so they fill a few leaves), found with two loads instead of hashing — a
  // packet looks its QP up several times on its way through (receive, timers, pumping) — and a
  // list of the live QPNs for the rare walks over all of them.
  class QpTable {
   public:
    QpEntry* find(uint32_t qpn) {
      const auto& leaf = leaves_[(qpn >> kLeafBits) & (kLeaves - 1)];
      return leaf ? (*leaf)[qpn & (kLeafSize - 1)].get() : nullptr;
    }
    const QpEntry* find(uint32_t qpn) const { return const_cast<QpTable*>(this)->find(qpn); }
    bool contains(uint32_t qpn) const { return find(qpn) != nullptr; }
    // Adds the QP (qpn < 2^24, not present). Throws std::bad_alloc.
    QpEntry& emplace(uint32_t qpn, QpEntry e);
    void erase(uint32_t qpn);  // present
    size_t size() const { return live_.size(); }
    template <typename F>  // f(qpn, entry)
    void for_each(F&& f) const {
      for (uint32_t q : live_) f(q, *const_cast<QpTable*>(this)->find(q));
    }

   private:
    static constexpr uint32_t kLeafBits = 12, kLeafSize = 1u << kLeafBits;
    static constexpr uint32_t kLeaves = 1u << (24 - kLeafBits);
    using Leaf = std::array<std::unique_ptr<QpEntry>, kLeafSize>;
    std::array<std::unique_ptr<Leaf>, kLeaves> leaves_;
    std::vector<uint32_t> live_;  // the QPNs present, in no particular order
  };

  uint32_t alloc_qpn();
  void track(uint32_t qpn, QpEntry& e);
  void detach_all_mcast(uint32_t qpn);

  Transmitter& tx_;
  transport::MemoryAccess& mem_;
  DeviceCounters& counters_;
  Limits limits_;
  QpTable qps_;
  // Multicast group (host order) → QPNs attached to it; the port is a member while non-empty.
  std::map<uint32_t, std::vector<uint32_t>> mcast_;
  std::vector<Timer> timers_;        // min-heap on deadline (std::greater)
  std::vector<uint32_t> pump_list_;  // QPNs whose wants_pump() was true after their last call
  std::vector<uint32_t> due_scratch_, pump_scratch_;  // progress()'s, kept for their capacity
  transport::QpCounters retired_;                     // of destroyed QPs
  QpnSpace space_;
  uint32_t next_qpn_ = 0x11;     // the counter when space_.cursor is null
  std::set<uint32_t> reserved_;  // reserve_number()'s, kept from alloc_qpn
};

}  // namespace uroce
