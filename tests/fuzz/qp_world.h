// The QPs the receive-path and modify_qp fuzzers aim at: one engine Dispatch (src/engine/
// dispatch.h, the code the engine runs) over a fake MemoryAccess (tests/transport/harness.h), with
// a QP in every state and situation a packet can find one in — RESET, INIT, RTR, RTS, SQD and ERR;
// an RC requester with READs, atomics, a WRITE and a SEND outstanding; one waiting out an RNR NAK;
// one on a shared receive queue; UC and UD — each with receive WQEs posted; an XRC send QP and an
// XRC receive QP whose domain has an XRC SRQ (another domain has one too). Nothing here reads a
// clock: time is the harness's `now`.
//
// Registered memory sits at a fixed address (kMemBase), so the virtual addresses that seeds put in
// RETHs and AtomicETHs stay valid from run to run.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/dispatch.h"
#include "fuzz_util.h"
#include "harness.h"
#include "transport/srq.h"

namespace uroce::fuzz {

// A transmitter with a port's ring: kBuffers buffers, handed out until the ring (or the budget an
// application action sets) runs dry, taken back by tx_flush. It keeps no copy of what was sent.
class RingSink : public Transmitter {
 public:
  static constexpr size_t kBuffers = 32;
  RingSink();
  transport::TxBuf* tx_alloc() override;
  void tx_commit(transport::TxBuf* buf) override;
  size_t tx_flush(transport::Time now) override;
  int64_t budget = -1;  // buffers tx_alloc may still hand out; -1 = no limit but the ring's

 private:
  std::vector<transport::TxBuf*> free_;  // of the process's one ring (one RingSink at a time)
  size_t committed_ = 0;
};

class QpWorld {
 public:
  enum Role : uint8_t {
    kRcReset,
    kRcInit,
    kRcRtr,
    kRcRts,
    kRcReads,  // RTS; READ (3 packets' worth), CMP_SWAP, FETCH_ADD, WRITE, SEND outstanding
    kRcRnr,    // RTS; its SEND was answered by an RNR NAK: waiting to retry
    kRcSqd,
    kRcErr,
    kRcSrq,  // RTS on a shared receive queue
    kUcRts,
    kUdRts,
    kXrcSend,  // RTS, an XRC send QP
    kXrcRecv,  // RTS, an XRC receive QP of domain kXrcd
    kRcSr,     // RTS with selective repeat (QpInit::selective_repeat); a 2-packet WRITE and a
               // SEND outstanding (PSNs kSqPsn..+2): its responder places WRITE ONLYs ahead
    kRoles
  };
  // The XRC SRQs: kXrcSrq in the receive QP's domain (with receive WQEs), kForeignSrq in another.
  static constexpr uint32_t kXrcd = 5;
  static constexpr uint32_t kXrcSrq = 0x300, kForeignSrq = 0x301;
  static constexpr uint32_t kLocalIp = 0x0a000001;
  static constexpr uint32_t kPeerIp = 0x0a000002;
  static constexpr uint32_t kForeignIp = 0x0a000009;
  static constexpr uint32_t kSqPsn = 0x1000;  // every QP's first send PSN
  static constexpr uint32_t kRqPsn = 0x5000;  // every QP's expected PSN
  static constexpr uint32_t kQkey = 0x11111111;
  static constexpr uint32_t kPd = 7;
  static constexpr uint32_t kPathMtu = 1024;
  // The registered memory: kRwBytes at kMemBase (local write, remote read/write/atomic, key
  // key_rw()), then kRoBytes (local write, remote read only, key key_ro()).
  static constexpr uint64_t kMemBase = 0x500000000000ull;  // clear of ASan's allocator (0x6000…)
  static constexpr size_t kRwBytes = 65536, kRoBytes = 4096;
  // Then an on-demand (ODP) region of kOdpPages pages, every right granted, whose second page is
  // inaccessible (PROT_NONE) and whose third is read-only: the transport must answer an access
  // there with a NAK or an error completion (TableMemory's fault-in), never touch it.
  static constexpr uint64_t kOdpBase = kMemBase + kRwBytes + kRoBytes;
  static constexpr size_t kPage = 4096, kOdpPages = 4;
  // FakeMemory numbers its keys from 0x100 in registration order.
  static constexpr uint32_t kKeyRw = 0x100, kKeyRo = 0x101, kKeyOdp = 0x102;
  // The READ kRcReads has outstanding, and the PSNs of its requests: READ kSqPsn..+2,
  // CMP_SWAP +3, FETCH_ADD +4, WRITE +5..+6, SEND +7.
  static constexpr uint32_t kReadBytes = 3000;

  static uint32_t qpn(int role) { return 0x100 + uint32_t(role); }
  static uint32_t peer_qpn(int role) { return 0x200 + uint32_t(role); }

  // Builds every QP in its situation at time 0, sending into `tx`. When `sink` is given (it is
  // `tx`), application actions may limit its buffers.
  QpWorld(Transmitter& tx, RingSink* sink);
  ~QpWorld();
  QpWorld(const QpWorld&) = delete;
  QpWorld& operator=(const QpWorld&) = delete;

  Dispatch& dispatch() { return dispatch_; }
  transport::Qp* qp(int role) { return role < kRoles ? qps_[role] : nullptr; }
  transport::Time now = 0;

  // Parses an IB packet (BTH .. pad, no ICRC) and hands it to the dispatch as if from `src_ip`.
  void deliver(std::span<const uint8_t> ib, uint32_t src_ip, uint8_t ecn);
  // Runs the dispatch's timers and pumps at `now`.
  void progress();
  // Moves time forward through every deadline, a bounded number of times (an RNR retry count
  // of 7 retries for ever).
  void settle();
  // An application call read from `r`: post a receive or a send, move a QP to a state with the
  // attributes ibv_modify_qp(3) lists for the transition, destroy a QP, post to the SRQ, or
  // limit the transmit buffers.
  void app_action(uint8_t op, Reader& r);
  // Drops recorded completions, events and captured packets, checking that every completion
  // names one of our QPs and a status libibverbs defines.
  void check_and_clear();

  // Moves `role`'s QP to `state` with the masks of a well-formed ibv_modify_qp. The error.
  int move(int role, ibv_qp_state state);

  // A seed record (the format deliver_record() reads) holding a packet for `role`.
  static void packet_record(Writer& w, int role, const wire::Packet& headers,
                            std::span<const uint8_t> payload = {}, uint8_t flags = 0);
  // One record of the receive-path input: a packet (to a role: its DestQP is rewritten to that
  // QP's), a clock step, or an application action. See fuzz_rx.cc.
  void record(Reader& r);

 private:
  transport::QpInit init_for(int role);
  void connect(int role);

  transport::test::FakeMemory mem_;
  RingSink* sink_;
  DeviceCounters counters_;
  transport::test::CqRecorder scq_, rcq_;
  transport::test::EventRecorder events_;
  std::unique_ptr<transport::Srq> srq_;
  struct XrcTable : transport::XrcSrqs {
    transport::Srq* find(uint32_t srqn) override {
      return srqn == kXrcSrq ? mine.get() : srqn == kForeignSrq ? foreign.get() : nullptr;
    }
    std::unique_ptr<transport::Srq> mine, foreign;
  } xrc_;
  Dispatch dispatch_;
  transport::Qp* qps_[kRoles] = {};
  uint64_t next_wr_id_ = 1;
};

// The registered memory (mapped once per process at QpWorld::kMemBase), reset to a pattern.
uint8_t* fuzz_memory();

}  // namespace uroce::fuzz
