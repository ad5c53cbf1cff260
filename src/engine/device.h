// One uroce device: its configuration, its port (a Port: kernel UDP socket by default) behind the
// receive pipeline (Datapath), its memory-key table, its dispatch (QP table, timers, multicast:
// pure logic, engine/dispatch.h) and the engine that runs them (receive, transmit, timers) on a
// thread that sleeps when idle. The verbs layer (src/verbs) is a thin ABI shell over this class.
//
// The device adds to the dispatch what the dispatch leaves out: the lock, the clock and the
// thread. Locking: one mutex per device (`lock()`) serialises the transport: every
// transport::Qp call, the key table, the dispatch, the transmit queue. Application threads take
// it to post work (and transmit directly, which saves a wake-up on the latency path); the engine
// thread takes it to process a received batch and to run timers. CQs have their own lock so
// polling never waits for the engine.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdio>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/config.h"
#include "engine/counters.h"
#include "engine/cq.h"
#include "engine/datapath.h"
#include "engine/dispatch.h"
#include "engine/engine.h"
#include "engine/key_table.h"
#include "transport/qp.h"
#include "transport/srq.h"

namespace uroce {

namespace stats_shm {
class Publisher;
}

// Identity and limits a device reports through ibv_query_device / ibv_query_port.
struct DeviceLimits {
  static constexpr uint32_t kVendorId = 0x1af4;  // uroce reports a fixed, documented vendor id
  static constexpr uint32_t kMaxQp = 16384;      // Dispatch::Limits::max_qp; QPNs are 24 bits
  static constexpr uint32_t kMaxCq = 16384;      // reported; one CQ per QP must fit
  // CQ entries: mlx5's figure (2^22 - 1). A CQ's storage grows with what it holds (engine/cq.h),
  // not with its size, and middleware sizes CQs for every peer it may have: libfabric 1.17's rxm
  // asks for (tx + rx queue) × FI_UNIVERSE_SIZE = (512 + 512) × 256 = 262144 entries.
  static constexpr uint32_t kMaxCqe = (1u << 22) - 1;
  static constexpr uint32_t kMaxMr = 65536;
  static constexpr uint32_t kMaxMw = 65536;
  static constexpr uint32_t kMaxSrq = 4096;  // per context (src/verbs/srq.cc enforces it)
  static constexpr uint32_t kMaxPd = 4096;
  static constexpr uint64_t kMaxMrSize = 1ull << 40;
  static constexpr uint32_t kMaxQpRdAtom = transport::kMaxRdAtomic;  // transport/qp.h
  static constexpr uint32_t kMaxMsgSize = 1u << 31;
  // Multicast: groups a device joins (each costs a socket) and QPs attached to one group.
  static constexpr uint32_t kMaxMcastGrp = 256;
  static constexpr uint32_t kMaxMcastQpAttach = 64;
};

class Device : private Engine::Client, private transport::EventSink {
 public:
  // Opens the port the configuration names (binds the UDP socket, …) and starts the engine
  // thread. Returns nullptr and sets *err on failure (address not local, port in use, …).
  static std::unique_ptr<Device> open(const DeviceConfig& cfg, std::string* err);
  ~Device();  // stops the engine, closes the port

  const DeviceConfig& config() const { return cfg_; }
  uint32_t ipv4() const { return cfg_.ipv4; }  // host byte order; 0 on an IPv6 device
  // The device address: IPv4-mapped for an IPv4 device, plain IPv6 for an IPv6 one.
  wire::IpAddr addr() const { return cfg_.addr(); }
  bool is_ipv6() const { return cfg_.is_ipv6(); }
  uint16_t mtu_bytes() const;  // active path MTU the port supports (1024/4096)
  uint64_t guid() const;       // derived from the address; host byte order
  // GID index 0: the RoCEv2 GID of the address, IPv4-mapped ::ffff:a.b.c.d (Annex A17.4.5.1),
  // or the IPv6 address itself on an IPv6 device.
  ibv_gid gid() const;
  // The port carries RoCE v1 too: the GID table lists gid() again at transport::kRoceV1GidIndex.
  bool roce_v1() const { return dp_ && dp_->port().caps().roce_v1; }

  std::mutex& lock() { return mu_; }

  // Protection domains and memory regions (the key table also implements
  // transport::MemoryAccess). Keys are never reused while the device lives.
  uint32_t alloc_pd();
  int dealloc_pd(uint32_t pd);  // EBUSY while MRs or QPs use it
  int reg_mr(uint32_t pd, void* addr, size_t len, int access, uint32_t* lkey, uint32_t* rkey);
  // ibv_reg_mr_iova2: SGEs and peers address the region at `iova` instead of `addr`.
  int reg_mr_iova(uint32_t pd, void* addr, size_t len, uint64_t iova, int access, uint32_t* lkey,
                  uint32_t* rkey);
  int dereg_mr(uint32_t lkey);  // EBUSY while memory windows are bound to it
  // ibv_advise_mr(3) PREFETCH (`write` false) / PREFETCH_WRITE, or PREFETCH_NO_FAULT (`populate`
  // false), of each SGE, done before it returns: 0 or EFAULT (KeyTable::prefetch_range).
  int prefetch_mr(uint32_t pd, bool write, bool populate, const ibv_sge* sges, uint32_t n);
  // ibv_rereg_mr, atomically under the device lock (see KeyTable::rereg_mr); keys are kept.
  int rereg_mr(uint32_t lkey, int flags, uint32_t pd, void* addr, size_t len, uint64_t iova,
               int access);
  // Memory windows (see KeyTable): binding and invalidation are work requests (post_send).
  int alloc_mw(uint32_t pd, ibv_mw_type type, uint32_t* handle, uint32_t* rkey);
  int dealloc_mw(uint32_t handle);
  transport::MemoryAccess& memory();

  // Queue pairs. create_qp assigns the QPN (init.qpn is ignored, except that
  // Dispatch::kGsiQpn asks for the GSI QP, EBUSY when taken) and returns the QP, owned by the
  // device until destroy_qp. All calls on a QP go through these wrappers, which take the lock,
  // read the clock, and flush transmitted packets.
  //
  // create_qp: init.qpn and init.local_ip are set by the device; when init.events is null the
  // device raises the QP's events itself on async_events(), with element.qp set to the handle
  // given by set_qp_handle (nullptr before). *err: EINVAL (unknown PD, missing CQ, bad caps),
  // ENOMEM (QP limit).
  transport::Qp* create_qp(transport::QpInit init, int* err);
  void set_qp_handle(transport::Qp* qp, ibv_qp* handle);
  int destroy_qp(transport::Qp* qp);
  int modify_qp(transport::Qp* qp, const ibv_qp_attr& attr, int mask);
  void query_qp(transport::Qp* qp, ibv_qp_attr& attr, ibv_qp_init_attr& init);
  // Posts a chain of WQEs; on error returns the errno and the index of the failed WQE.
  // post_recv takes no device lock (transport/recv_queue.h): it never waits for a receive pass.
  int post_send(transport::Qp* qp, const transport::SendWqe* wqes, size_t n, size_t* bad);
  int post_recv(transport::Qp* qp, const transport::RecvWqe* wqes, size_t n, size_t* bad);

  // Multicast (ibv_attach_mcast): a UD QP attached to the IPv4 group `group` (host order)
  // receives the datagrams sent to the group with DestQP 0xFFFFFF (the multicast QPN) whose Q_Key
  // is its own. attach: 0 (also when attached already), EINVAL (not a UD QP of this device, not a
  // multicast address), ENOMEM (DeviceLimits::kMaxMcastGrp groups or kMaxMcastQpAttach QPs in
  // the group reached), or the port's error joining the group. detach: 0, or EINVAL when not
  // attached. Destroying a QP detaches it from its groups.
  int attach_mcast(transport::Qp* qp, uint32_t group);

  // XRC (IBTA 9.4, 10.2.9.4). Domains are numbers the device hands out (the verbs layer shares
  // them between the ibv_open_xrcd calls that name one file). XRC SRQs are numbered here, from
  // the QPN space (ibv_get_srq_num; unique among the processes sharing the device), and found by
  // number when a request's XRCETH names one: add returns the SRQ's number (nonzero, 24 bits),
  // or 0 when the device has no number left (max_qp QPs and SRQs). remove drops a message in
  // progress into it at every XRC receive QP (transport::Qp::xrc_srq_gone).
  uint32_t alloc_xrcd();
  uint32_t add_xrc_srq(transport::Srq* srq);
  void remove_xrc_srq(uint32_t srqn);
  int detach_mcast(transport::Qp* qp, uint32_t group);

  // Asynchronous events (IBV_EVENT_*) for ibv_get_async_event; fd() is readable while any wait.
  AsyncEventQueue& async_events();

  // The port: its state is the port's link state (for the UDP port the link of the netdev the
  // address lives on, or always active when that cannot be watched: no netdev known, netlink
  // unavailable; a warning says so at open). On every transition the device calls each port
  // listener with
  // IBV_EVENT_PORT_ACTIVE or IBV_EVENT_PORT_ERR, from the engine thread, without the device
  // lock. Each context registers one and fans the event out to its own async queue, as every
  // open context of an RNIC sees unaffiliated events (IBTA 11.6.3.2).
  bool port_active() const;
  // The port's share when other processes use the device too (the CM's IDs and port claims);
  // nullptr when this process has it alone.
  PortShare* port_share();
  using PortListener = std::function<void(ibv_event_type)>;
  uint64_t add_port_listener(PortListener fn);
  void remove_port_listener(uint64_t id);  // no call to it is running or follows after return
  // What the port learns beside frames (PortEvent: an ICMP error for a datagram it sent), on the
  // thread that read it, without the device lock; `fn` must not block (engine/port_events.h).
  uint64_t add_port_event_listener(PortEvents::Listener fn) {
    return dp_->port_events().add_listener(std::move(fn));
  }

  const DeviceCounters& counters() const;
  // The transport counters of every QP the device has had, live and destroyed, summed.
  transport::QpCounters qp_counter_totals();
  // Writes the non-zero device and QP counters (UROCE_STATS=1 does so when the device closes).
  void print_stats(FILE* out);
  // UROCE_STATS=1: the counters on stderr, once per device — when it closes, or at exit for a
  // program that exits with its device still open (perftest on a failed run, most programs on
  // an error path: the run whose counters matter most).
  void print_stats_once();
  // At exit: removes the device's `uroce stats` file (the process may never close the device:
  // rdma_cm programs, fio's jobs).
  void withdraw_stats();

  // Receive and process what has arrived, from an application thread that polls a CQ and found
  // it empty (see Engine::poll_from_app). Returns true if anything was processed.
  bool poll_progress();
  // The polling application thread is about to block (Engine::stop_polling).
  void stop_polling();
  // ibv_req_notify_cq armed a CQ (Engine::on_arm).
  void on_arm();
  // ibv_get_cq_event on a channel of this device: the next event, or a positive errno (EAGAIN
  // when the fd is O_NONBLOCK and none is queued, EINTR when a signal ended the wait). A thread
  // that must sleep does so on the channel's fd *and* the port's wait fds (Engine::wait_begin),
  // and receives what arrives itself: the datagram that completes its work wakes it, and no
  // other thread (one wake-up per message, as an RNIC's interrupt gives).
  int get_cq_event(CompChannel& ch, void** cq_cookie);
  // `ch` goes away: the engine stops adding the port's wait fds to its set (get_cq_event).
  void forget_channel(CompChannel& ch);
  // What an application's CQ poll returned (Engine::note_poll_result).
  void note_poll_result(bool found);
  // Waits for a pass another thread is running and sends what the transmit queue holds (the
  // ACKs an application pass held back, Datapath::set_hold): at exit, nothing may stay behind.
  void flush();
  size_t qp_count();
  // How long after an application thread's last poll the engine takes receiving back
  // (Engine::set_handoff_ns): tests lengthen it so that the engine's own look cannot stand in
  // for what they check.
  void set_handoff_ns(transport::Time ns);

 private:
  // get_cq_event, before the calling thread sleeps: sends what its receive passes held.
  void send_held_before_sleep();
  explicit Device(const DeviceConfig& cfg);
  // After every application call on a QP (device lock held): send what it can send now, flush,
  // and make sure the engine wakes for the QP's next deadline or leftover work.
  void after_call(transport::Qp* qp, transport::Time now);
  // Takes the device lock for an application call that is neither a post nor a poll (ibv_alloc_pd,
  // ibv_reg_mr, ibv_create_qp, ibv_modify_qp, …) and first sends what the application's receive
  // passes held for its next call or post (Datapath::Hold): a thread that calls this is not about
  // to reply, and the ACKs would otherwise wait for the engine's next look (up to its handoff
  // time, 1 ms) or go in one burst with whatever it posts next — delaying the completion of a
  // peer that waits for it before it goes on (a set-up exchange, say, after which the receiver
  // registers memory and creates QPs). Reads the clock only when holding.
  std::unique_lock<std::mutex> app_call();

  // Engine::Client (engine thread, device lock held).
  void on_packets(std::span<const RxPacket> pkts, transport::Time now) override;
  transport::Time on_progress(transport::Time now, bool* again) override;
  void on_link_change() override;  // engine thread, no lock
  // Publishing (engine/stats_shm.h): snapshots the QP totals and the port state into the file at
  // most every kPublishInterval (device lock held). Returns when the next snapshot is due if one
  // was skipped (transport::kNever otherwise), so the engine wakes for it and the file never
  // stays stale after activity stops.
  transport::Time publish(transport::Time now, bool force = false);
  // transport::EventSink (device lock held).
  void qp_event(uint32_t qpn, ibv_event_type type) override;

  // Declaration order is destruction order reversed: the engine goes first, then the dispatch
  // (QPs), then the datapath and port they transmitted into.
  DeviceConfig cfg_;
  // The shared-memory file `uroce stats` reads; null when not publishing. Declared before
  // counters_ and the port: the counters live in its mapping, so it must outlive their writers.
  std::unique_ptr<stats_shm::Publisher> publisher_;
  size_t qp_slot_base_ = 0;  // index of the first QP-total entry
  size_t cc_slot_base_ = 0;  // index of the first ccqpNN_* entry (stats_shm::kCcQpSlots)
  static constexpr size_t kNoSlot = ~size_t{0};
  size_t nic_slot_base_ = kNoSlot;  // index of the first nic_* entry (NicInfo), if the port has one
  transport::Time next_publish_ = 0;  // earliest time of the next QP snapshot (mu_)
  // publish()'s scratch, kept between calls (mu_): the live QPs, the lowest QPNs first.
  std::vector<const transport::Qp*> publish_order_;
  std::mutex mu_;
  DeviceCounters counters_;
  std::atomic<bool> stats_printed_{false};
  KeyTable keys_;  // device lock
  AsyncEventQueue async_;
  uint16_t mtu_ = 1024;                 // IB path MTU in bytes the port carries (PortCaps::ip_mtu)
  std::unique_ptr<Datapath> dp_;        // owns the port
  std::unique_ptr<Dispatch> dispatch_;  // device lock
  // XRC SRQs by number (device lock): what XRC receive QPs look requests' SRQs up in.
  class XrcSrqTable : public transport::XrcSrqs {
   public:
    transport::Srq* find(uint32_t srqn) override {
      auto it = by_num.find(srqn);
      return it == by_num.end() ? nullptr : it->second;
    }
    std::map<uint32_t, transport::Srq*> by_num;
  } xrc_srqs_;
  uint32_t next_xrcd_ = 1;  // device lock
  // QPs a receive was posted to while messages waited for one (post_recv, without the device
  // lock); the next progress pass runs them (on_progress).
  std::mutex recv_posted_mu_;
  std::vector<uint32_t> recv_posted_;
  std::mutex port_mu_;  // port_listeners_; taken before any context's async queue
  std::map<uint64_t, PortListener> port_listeners_;
  uint64_t next_listener_ = 1;
  std::unique_ptr<Engine> engine_;
  friend class Engine;
};

}  // namespace uroce
