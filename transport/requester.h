// The requester: turns send WQEs into request packets. Segmentation by path MTU into
// FIRST/MIDDLE/LAST/ONLY, PSN assignment, AckReq, the send window, and go-back-N retransmission
// from a PSN on the completer's request (IBTA 9.7.4.1 requester side). RDMA READ and ATOMIC
// requests are limited to max_rd_atomic outstanding and honour IBV_SEND_FENCE (IBTA 9.4.4,
// 10.8.3.3); a READ resent from the middle of its response stream is a new READ REQUEST for the
// part still missing (9.7.4.1.3.2: the duplicate READ carries the adjusted VA, length and PSN).
#pragma once

#include <cstdint>

#include "transport/context.h"
#include "transport/dma.h"
#include "transport/events.h"
#include "transport/send_queue.h"

namespace uroce::transport {

// Most PSNs the requester keeps unacknowledged (the send window). Bounds the responder's work per
// retransmission and the memory the completer's bookkeeping needs; 2^23 would be the protocol
// limit (IBTA 9.7.4.1.3: at most half the PSN space outstanding).
inline constexpr uint32_t kSendWindowPkts = 256;
// AckReq at least every this many packets so the window advances inside long messages; the last
// packet of every message and the packet that fills the window also ask (IBTA 9.7.2: the
// requester decides when to ask; the responder must answer AckReq).
inline constexpr uint32_t kAckReqIntervalPkts = 32;

// ibv_wr_opcode → the wire opcodes of its packets by position. Segmentation and header building
// read only this table and the wire opcode table. READ and the ATOMICs are one request packet
// (all four positions name it).
struct WrOpcodeInfo {
  bool supported = false;
  wire::Opcode first, middle, last, only;
};
const WrOpcodeInfo& wr_opcode_info(ibv_wr_opcode op);

class Requester {
 public:
  enum class State : uint8_t {
    kIdle,          // nothing to send (cursor at the end of the queue)
    kSending,       // packets ready under the window
    kWindowFull,    // kSendWindowPkts unacknowledged
    kRnrWait,       // an RNR NAK asked to wait until not_before_
    kBlocked,       // the cursor's WQE is kLocalError or SQD stops new WQEs
    kRdAtomicWait,  // the cursor's new WQE is a READ/ATOMIC and max_rd_atomic are outstanding,
                    // or it is fenced (IBV_SEND_FENCE) and a READ/ATOMIC is outstanding
  };

  // RTR→RTS: the first PSN the requester uses is sq_psn.
  void reset(Psn sq_psn);

  // Events from the completer.
  void on_acked(const AckedThrough& ev, const SendQueue& sq);
  void on_retransmit(const RetransmitFrom& ev, const SendQueue& sq);

  // Sends what the window, the RNR timer and the port allow. `may_start` is false in SQD: WQEs
  // already started finish, new ones wait (IBTA 10.3.1 SQ drain).
  RequesterOutcome pump(Time now, const QpContext& ctx, SendQueue& sq, PacketSink& tx,
                        bool may_start);

  // What pump() would do now, ignoring the port; kRnrWait while the RNR timer runs.
  State state(Time now, const QpContext& ctx, const SendQueue& sq, bool may_start) const;
  // The RNR timer's expiry while it runs, else kNever.
  Time wake_time() const { return not_before_ ? not_before_ : kNever; }

  Psn next_psn() const { return next_new_psn_; }  // what the next new WQE will start at
  Psn sent_end() const { return sent_end_; }

 private:
  // The cursor's packet within its WQE: index, message offset and payload bytes (0 for READ
  // and ATOMIC requests, whose offset says where the READ resumes).
  struct Segment {
    uint32_t index = 0;
    uint64_t offset = 0;
    uint32_t len = 0;
  };
  // READ/ATOMIC WQEs started and not yet completed (the completer pops completed WQEs). Only
  // asked when the cursor is at a new WQE, so everything before the cursor is in flight.
  uint32_t rd_atomic_in_flight(const SendQueue& sq) const;
  Segment segment(const QpContext& ctx, const SendEntry& e) const;
  // Executes a local operation (is_local_op) at the cursor through MemoryAccess: true and
  // kInFlight with no PSN on success, false and kLocalError otherwise.
  bool execute_local(const QpContext& ctx, SendEntry& e);
  // Writes the cursor's packet (headers, payload from `pieces` or the inline data, pad) to `buf`.
  void write_packet(const QpContext& ctx, const SendEntry& e, const Segment& seg,
                    const MemPieces& pieces, uint32_t npieces, TxBuf* buf);
  // Moves the cursor to the WQE holding `psn` (an in-flight PSN), or to the end.
  void seek(Psn psn, const SendQueue& sq);

  SendQueue::Seq cursor_seq_ = 0;  // WQE of the next packet to (re)transmit
  Psn cursor_psn_;                 // PSN of that packet; == next_new_psn_ at a kQueued WQE
  Psn next_new_psn_;               // first PSN of the next WQE to start
  Psn sent_end_;                   // one past the highest PSN ever transmitted
  Psn unacked_;                    // oldest PSN not known acknowledged (from AckedThrough)
  Time not_before_ = 0;            // RNR wait: no transmission before this time; 0 = none
  uint32_t since_ack_req_ = 0;     // packets sent since the last one with AckReq
};

}  // namespace uroce::transport
