// Test harness for the transport core: fake memory over real buffers, a packet sink that
// captures, completion/event recorders, QP set-up helpers, and a virtual-time link between two
// QPs with seeded loss, duplication and reordering. Each node's QP lives in a Dispatch
// (src/engine/dispatch.h), the engine's own QP table and timer/pump scheduling, so the link runs
// the code the engine runs; the wire between the nodes and the clock are the fabric simulator's
// (src/sim: event queue, channels). Nothing here reads a clock.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <span>
#include <vector>

#include "engine/dispatch.h"
#include "sim/channel.h"
#include "sim/event_queue.h"
#include "sim/frame.h"
#include "sim/rng.h"
#include "transport/memory_table.h"
#include "transport/qp.h"

namespace uroce::transport::test {

// MemoryAccess over registered host buffers, checked by the engine's own rules
// (transport::MemoryTable: key, PD, bounds, access, windows); keys are handed out in order from
// 0x100 (lkey == rkey), and nothing here allocates a window.
class FakeMemory : public TableMemory {
 public:
  uint32_t reg(uint32_t pd, void* addr, size_t len, int access);
  void dereg(uint32_t key) { table_.remove_region(key); }

 private:
  uint32_t next_key_ = 0x100;
};

// Captures every committed packet. `budget` limits how many buffers tx_alloc() hands out before
// it returns nullptr (backpressure); -1 = unlimited. tx_flush() sends nothing (the packets stay
// in `sent`) and reports how many were committed since the last flush. After gather_from()
// the sink takes payloads by reference (TxBuf::ext), as a memif port does: each packet in
// `sent` is whole all the same (ext_len 0), its `ext` left recording where its payload lay
// (nullptr: it was copied in).
class CaptureSink : public Transmitter {
 public:
  TxBuf* tx_alloc() override;
  void tx_commit(TxBuf* buf) override;
  size_t tx_flush(Time) override;
  // Takes payloads of `bytes` and more by reference (0: none).
  void gather_from(uint32_t bytes) { set_tx_gather_min(bytes); }
  std::deque<TxBuf> sent;
  int64_t budget = -1;
  uint64_t gathered = 0;  // packets committed with their payload by reference

 private:
  TxBuf scratch_;
  size_t unflushed_ = 0;
};

class CqRecorder : public CompletionSink {
 public:
  void push(const ibv_wc& wc) override { wcs.push_back(wc); }
  // Completions pushed with the solicited flag record it here (in their order).
  void push(const ibv_wc& wc, bool is_solicited) override {
    solicited.push_back(is_solicited);
    push(wc);
  }
  std::vector<ibv_wc> wcs;
  std::vector<bool> solicited;
};

class EventRecorder : public EventSink {
 public:
  void qp_event(uint32_t, ibv_event_type type) override { events.push_back(type); }
  std::vector<ibv_event_type> events;
};

// Parses a captured packet (the Packet's payload points into `buf`).
wire::Packet parsed(const TxBuf& buf);

struct PathParams {
  ibv_mtu mtu = IBV_MTU_1024;
  uint8_t timeout = 14;  // 4.096 us * 2^14 = 67 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;  // 10 us
  // qp_access_flags (what remote peers may do through this QP).
  int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  uint8_t rd_atomic = 1;      // max_rd_atomic and max_dest_rd_atomic
  uint8_t traffic_class = 0;  // ah_attr.grh.traffic_class (its DSCP bits set the packets')
  uint8_t static_rate = 0;    // ah_attr.static_rate (an ibv_rate; 0: none)
  uint32_t rate_limit = 0;    // IBV_QP_RATE_LIMIT entering RTS, kbit/s (0: not given)
};

// One QP with its memory, sink and CQs, in a dispatch of its own.
struct Node {
  Node(uint32_t qpn, uint32_t ip, bool sq_sig_all = true);
  // Rebuilds the QP from `init` (after a test changed it), over *memory, still in RESET.
  void rebuild();
  // RESET → INIT → RTR → RTS towards (remote_ip, remote_qpn).
  void connect(uint32_t remote_ip, uint32_t remote_qpn, uint32_t sq_psn, uint32_t rq_psn,
               const PathParams& p = {});
  // Registers a buffer of `len` bytes (filled with `fill`) and returns its key.
  uint32_t buffer(std::vector<uint8_t>& storage, size_t len, uint8_t fill = 0);

  uint32_t ip;
  uint32_t pd = 7;
  FakeMemory mem;
  // The memory the QP reaches (mem unless a test points it elsewhere, then rebuild()s).
  MemoryAccess* memory = &mem;
  CaptureSink sink;
  CqRecorder scq, rcq;
  EventRecorder events;
  QpInit init;
  DeviceCounters counters;
  Dispatch dispatch;
  Qp* qp = nullptr;  // owned by dispatch

 private:
  // Forwards to *memory, so that the dispatch's memory can be swapped under it.
  struct MemoryRef : MemoryAccess {
    explicit MemoryRef(Node& n) : n(n) {}
    MemRef resolve_local(uint32_t k, uint32_t pd, uint64_t a, uint64_t l, int x) override {
      return n.memory->resolve_local(k, pd, a, l, x);
    }
    MemRef resolve_remote(uint32_t k, uint32_t pd, uint64_t a, uint64_t l, int x) override {
      return n.memory->resolve_remote(k, pd, a, l, x);
    }
    uint64_t atomic_fetch_add(uint8_t* p, uint64_t add) override {
      return n.memory->atomic_fetch_add(p, add);
    }
    uint64_t atomic_cmp_swap(uint8_t* p, uint64_t c, uint64_t s) override {
      return n.memory->atomic_cmp_swap(p, c, s);
    }
    void atomic_store(uint8_t* p, uint64_t v) override { n.memory->atomic_store(p, v); }
    MemStatus bind_mw(const MwBind& b, uint32_t pd) override { return n.memory->bind_mw(b, pd); }
    MemStatus invalidate(uint32_t rkey, uint32_t pd) override {
      return n.memory->invalidate(rkey, pd);
    }
    Node& n;
  };
  MemoryRef memory_ref_{*this};

 public:
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
};

ibv_ah_attr ah_for(uint32_t ip);
SendWqe send_wqe(uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey,
                 ibv_wr_opcode op = IBV_WR_SEND);
RecvWqe recv_wqe(uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey);
// RDMA WRITE/READ of `len` bytes between local [laddr) and remote [raddr) under rkey.
SendWqe rdma_wqe(uint64_t wr_id, ibv_wr_opcode op, uint64_t laddr, uint32_t len, uint32_t lkey,
                 uint64_t raddr, uint32_t rkey);
// ATOMIC on the 8 bytes at raddr; the original value lands at laddr.
SendWqe atomic_wqe(uint64_t wr_id, ibv_wr_opcode op, uint64_t laddr, uint32_t lkey, uint64_t raddr,
                   uint32_t rkey, uint64_t compare_add, uint64_t swap = 0);

struct LinkParams {
  double loss = 0, dup = 0, reorder = 0;
  Time latency = 2'000;  // ns, one way
  uint64_t seed = 1;
};

// Two nodes joined by a lossy link in virtual time: the fabric simulator's smallest case
// (src/sim). Its clock and event order are the simulator's EventQueue, each direction is a
// sim::Channel (propagation delay, seeded loss, duplication and reordering, one Rng for both
// directions), with infinite rate. Packets a node commits are picked up after each event and
// handed to the channel; each node's next QP deadline is a Timer. After every event both nodes'
// dispatches run their due timers and pumps, as an engine pass does (the tests call QPs
// directly, so the link also touch()es each QP before choosing the next event).
class Link {
 public:
  // `start`: the link's clock starts there (a link that takes over nodes another link drove).
  Link(Node& a, Node& b, LinkParams p = {}, Time start = 0);
  // Returns true to drop this packet (sent by node `from`, 0 = a, 1 = b); applied before the
  // random loss.
  std::function<bool(int from, const wire::Packet&)> drop_if;
  // Extra one-way delay of a packet by its sender and UDP source port: paths of different
  // lengths (multipath tests). Each path stays FIFO, as one ECMP route is. kNever: the packet
  // is lost (a dead route; counted in `lost`). Null: none.
  std::function<Time(int from, uint16_t src_port)> path_delay;
  // Extra one-way delay of one packet, by its sender and contents (a packet overtaken by those
  // behind it: reordering within a path). Null: none.
  std::function<Time(int from, const wire::Packet&)> delay_if;
  // Marks a packet CE (ECN 11) by its sender and UDP source port, as a congested switch on its
  // path would. Null: none.
  std::function<bool(int from, uint16_t src_port)> ce_if;

  // Runs events until done() or no event remains before `limit`. Returns done().
  bool run_until(const std::function<bool()>& done, Time limit);
  // Runs until nothing is in flight and no deadline is due before `limit`.
  void run_idle(Time limit) {
    run_until([] { return false; }, limit);
  }

  Time now = 0;
  uint64_t delivered = 0, lost = 0, duplicated = 0, parse_errors = 0;
  uint64_t path_lost = 0;  // of `lost`: by path_delay

 private:
  // Node `idx`'s end of the link: parses what arrives and hands it to the node's dispatch.
  struct End : sim::FrameSink, sim::EventHandler {
    Link* link = nullptr;
    int idx = 0;
    void on_frame(sim::Frame* f, Time now) override;
    void on_event(Time, uint64_t) override {}  // a deadline: step() runs the progress
  };
  // Holds frames for their path's extra delay, then hands them to the channel towards node idx.
  struct Detour : sim::EventHandler {
    Link* link = nullptr;
    int idx = 0;
    void on_event(Time, uint64_t arg) override {
      link->to_[idx]->send(reinterpret_cast<sim::Frame*>(arg));
    }
  };
  void collect();
  bool step(Time limit);

  Node* nodes_[2];
  sim::EventQueue q_;
  sim::FramePool pool_;
  sim::Rng rng_;
  End ends_[2];
  Detour detours_[2];
  std::unique_ptr<sim::Channel> to_[2];  // to_[i]: towards node i
  std::unique_ptr<sim::Timer> wake_[2];  // node i's next QP deadline
  uint64_t steps_ = 0;
  static constexpr uint64_t kMaxSteps = 20'000'000;  // a QP that never settles fails, not hangs
};

}  // namespace uroce::transport::test

namespace uroce::transport::test {

// A crafted packet to feed into Qp::receive(): owns its bytes.
struct Crafted {
  TxBuf buf;
  wire::Packet pkt;  // parsed view of buf
};
// Builds an RC packet with opcode `op` to `dest_qpn` (payload for opcodes that carry one).
std::unique_ptr<Crafted> craft(wire::Opcode op, uint32_t dest_qpn, uint32_t psn, bool ack_req,
                               std::span<const uint8_t> payload = {}, uint32_t imm_be = 0);
// Builds a packet from filled-in headers (bth.pad is set from the payload).
std::unique_ptr<Crafted> craft_headers(wire::Packet headers, std::span<const uint8_t> payload = {});
std::unique_ptr<Crafted> craft_ack(uint32_t dest_qpn, uint32_t psn, uint8_t syndrome,
                                   uint32_t msn = 0);
inline uint8_t ack_syndrome() {
  return wire::aeth_syndrome(wire::AethType::kAck, wire::kAethCreditInvalid);
}
inline uint8_t nak_syndrome(wire::NakCode c) {
  return wire::aeth_syndrome(wire::AethType::kNak, uint8_t(c));
}
inline uint8_t rnr_syndrome(uint8_t timer) {
  return wire::aeth_syndrome(wire::AethType::kRnrNak, timer);
}
// Delivers a crafted packet to `n` as if from `src_ip`.
void deliver(Node& n, const Crafted& c, uint32_t src_ip, Time now);
// Takes and parses every packet `n` sent so far.
std::vector<std::unique_ptr<Crafted>> drain(Node& n);

// Makes `n` a UC QP (rebuilt) and brings it RESET → INIT → RTR → RTS towards (remote_ip,
// remote_qpn) with the UC attribute masks (ibv_modify_qp(3)), REMOTE_WRITE allowed.
void connect_uc(Node& n, uint32_t remote_ip, uint32_t remote_qpn, uint32_t sq_psn, uint32_t rq_psn);

}  // namespace uroce::transport::test
