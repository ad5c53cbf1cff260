// The responder: receives request packets, checks their PSN (expected / duplicate / out of
// sequence, IBTA 9.7.4.1.3 ff.), executes SENDs into receive WQEs, RDMA WRITEs and READs against
// memory regions and ATOMICs through MemoryAccess, and answers with ACKs, NAKs, READ responses
// and ATOMIC ACKs (9.7.5), in request order.
//
// Duplicate READ and ATOMIC requests are answered from the responder resources: the last
// max_dest_rd_atomic READ/ATOMIC requests executed (9.7.4.1.3.2, 9.5). A duplicate READ is
// executed again from the PSN it names (which may be mid-message); a duplicate ATOMIC is answered
// with the original value saved when it executed, never executed twice.
//
// IBTA 1.5 ATOMIC WRITE is served as Linux rxe serves it (rxe_resp.c, Linux >= 6.2): the QP must
// allow remote write and the R_Key must grant IBV_ACCESS_REMOTE_WRITE over the 8 bytes (rxe checks
// IB_ACCESS_REMOTE_WRITE for it in check_op_valid and check_rkey); the RETH's DMA length and the
// payload must both be 8 bytes and the target 8-byte aligned (else NAK invalid request, rxe's
// ERR_LENGTH / ERR_MISALIGNED_ATOMIC); the 8 bytes land with one release store
// (MemoryAccess::atomic_store); it takes a responder resource like a READ or ATOMIC and is
// answered with a zero-length RDMA READ RESPONSE ONLY carrying an ACK AETH (rxe's
// send_read_response_ack). A duplicate is answered again from its resource, never executed
// twice: executing a stale ATOMIC WRITE again could overwrite a value written after it.
// The resources are held in
// storage that grows with use up to max_dest_rd_atomic (at most kMaxRdAtomic, qp.h): a QP that
// never serves a READ or ATOMIC holds none, one that does holds 48 bytes per resource in use, so
// offering rxe's 128 costs a device of thousands of QPs nothing it does not use.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "transport/context.h"
#include "transport/events.h"
#include "transport/ring.h"
#include "wire/wire.h"

namespace uroce::transport {

// Most responses the responder queues (ACKs coalesce, so these are READ streams and ATOMIC ACKs
// plus one ACK/NAK between each): bounds what duplicate READ requests can make it queue.
inline constexpr size_t kMaxQueuedResponses = 64;

// Selective repeat (QpInit::selective_repeat): how far ahead of the expected PSN a WRITE packet
// may arrive and still be placed. The requester never has more PSNs outstanding than its send
// window (kSendWindowPkts, the same 256), so this covers everything it may send.
inline constexpr uint32_t kSrWindowPkts = 256;

class Responder {
 public:
  // The NAK causes: each maps to one AETH syndrome (IBTA Table 44).
  enum class Nak : uint8_t {
    kPsnSequenceError,   // a gap: request PSN after the expected one
    kRnr,                // no receive WQE for a SEND/WRITE_IMM (RNR NAK with min_rnr_timer)
    kInvalidRequest,     // unsupported opcode, opcode sequence, length error, misaligned
                         // ATOMIC or ATOMIC WRITE, too many READ/ATOMICs (Class B, 9.9.3.1.2)
    kRemoteAccess,       // rkey/PD/bounds/access failure of a WRITE, READ, ATOMIC or ATOMIC
                         // WRITE (Class C)
    kRemoteOperational,  // the local write of a SEND failed (bad lkey in the receive WQE)
  };
  static uint8_t syndrome(Nak nak, uint8_t min_rnr_timer);

  // Whether a NAK is outstanding for the current gap: IBTA 9.7.5.2.2: send one sequence
  // NAK per gap; after an RNR NAK the packets that follow are out of sequence and are dropped
  // silently until the requester resends the refused PSN.
  enum class NakState : uint8_t { kNone, kSeqErrSent, kRnrSent };

  // INIT→RTR: the first expected PSN is rq_psn.
  void reset(Psn rq_psn);

  // A request (opcode with kRequest) addressed to this QP in RTR/RTS/SQD.
  ResponderOutcome on_request(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq);

  // Whether a response packet waits to be sent.
  bool has_response() const { return !responses_.empty(); }
  // Whether the next response is a READ response packet (data, paced like requests).
  bool next_response_is_data() const {
    return !responses_.empty() && responses_.front().kind == Response::Kind::kRead;
  }
  // Writes the next response packet into `buf`; a READ response payload of at least
  // `gather_min` bytes (0: none) that needs no pad is left in the memory region (TxBuf::ext).
  // Returns true when the QP must enter ERR: the memory of a READ being answered went away
  // meanwhile (a NAK remote access error was written instead and nothing else is answered).
  bool write_response(const QpContext& ctx, uint32_t gather_min, TxBuf* buf);

  Psn expected_psn() const { return epsn_; }
  // A SEND or WRITE is between its FIRST and LAST packet.
  bool in_message() const { return msg_ != Msg::kNone; }
  NakState nak_state() const { return nak_state_; }
  // Responder resources held, and the bytes of storage reserved for them (tests, diagnostics).
  size_t resources_held() const { return resources_.size(); }
  size_t resource_bytes() const { return resources_.capacity() * sizeof(Resource); }

 private:
  // What a message in progress is (between FIRST and LAST): opcode sequence checks (9.7.4.1.4).
  enum class Msg : uint8_t { kNone, kSend, kWrite };

  // One queued response; they leave in order because a later ACK must not overtake the READ
  // responses before it (the requester could not complete the READ and would resend it).
  struct Response {
    // kAtomicWrite: the zero-length READ RESPONSE ONLY that answers an ATOMIC WRITE.
    enum class Kind : uint8_t { kAck, kRead, kAtomic, kAtomicWrite };
    Kind kind = Kind::kAck;
    bool replay = false;   // answers a duplicate request (not counted against max_dest_rd_atomic)
    uint8_t syndrome = 0;  // kAck: ACK or NAK syndrome
    Psn psn;           // kAck: PSN acknowledged/refused; kRead: next packet; kAtomic*: the request
    uint32_t msn = 0;  // AETH MSN when the request executed
    // kRead: the rest of the stream; va/left advance as packets leave.
    bool started = false;  // FIRST (or ONLY) already sent
    Psn last_psn;
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t left = 0;
    uint32_t pd = 0;    // kRead: the PD its memory is checked against (XRC: the SRQ's)
    uint64_t orig = 0;  // kAtomic: original remote value
  };

  // A READ, ATOMIC or ATOMIC WRITE request executed, kept to answer its duplicates.
  struct Resource {
    enum class Kind : uint8_t { kRead, kAtomic, kAtomicWrite };
    Kind kind = Kind::kRead;
    Psn first_psn, last_psn;
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t dma_len = 0;  // READ
    uint32_t pd = 0;       // READ: the PD it was checked against
    uint64_t orig = 0;     // ATOMIC: the value it returned
  };

  void ack(const QpContext& ctx);  // cumulative ACK of epsn_ - 1
  void nak(Nak nak, Psn psn, const QpContext& ctx);
  void queue_ack(uint8_t syndrome, Psn psn) { queue_ack(syndrome, psn, msn_); }
  void queue_ack(uint8_t syndrome, Psn psn, uint32_t msn);
  // Selective repeat (docs/selective-repeat.md). A request `d` PSNs ahead of the expected one:
  // an RDMA WRITE ONLY within kSrWindowPkts is placed and SACKed, anything else dropped (the
  // first of a gap draws a SACK naming only the hole).
  void sr_ahead(const wire::Packet& pkt, int32_t d, const QpContext& ctx);
  // After the expected PSN moved: steps over the PSNs placed ahead, each a whole message, and
  // ACKs the new expected PSN when it moved that way.
  void sr_catch_up(const QpContext& ctx, RecvQueue& rq, ResponderOutcome& out);
  // A SACK: sequence NAK at the expected PSN; the AETH MSN field carries `sacked` (or, with
  // nothing SACKed, the PSN before the NAK's, which no requester takes for a SACK).
  void sack(std::optional<Psn> sacked, const QpContext& ctx);
  // Copies WRITE data for the request at `psn` to `dst`, except the bytes a later request
  // placed ahead has written (later writes win, as in PSN order).
  void place(uint8_t* dst, const uint8_t* src, size_t len, Psn psn);
  // Refuses the request at `psn` with a fatal NAK: completes a SEND in progress with `recv_status`
  // and reports QpFatal.
  void fail(Nak nak, Psn psn, const QpContext& ctx, RecvQueue& rq, ResponderOutcome& out,
            ibv_wc_status recv_status = IBV_WC_REM_INV_REQ_ERR);
  void execute_send(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq,
                    ResponderOutcome& out);
  void execute_write(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq,
                     ResponderOutcome& out);
  void execute_read(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq,
                    ResponderOutcome& out);
  void execute_atomic(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq,
                      ResponderOutcome& out);
  void duplicate_read(const wire::Packet& pkt, const QpContext& ctx);
  void execute_atomic_write(const wire::Packet& pkt, const QpContext& ctx, RecvQueue& rq,
                            ResponderOutcome& out);
  // The checks every request that takes a responder resource passes first: no message in
  // progress, the QP grants `qp_access`, a resource free. False: refused (fail() was called).
  bool admit_resource_request(Psn psn, int qp_access, const QpContext& ctx, RecvQueue& rq,
                              ResponderOutcome& out);
  // A duplicate ATOMIC or ATOMIC WRITE (`kind`): answered from its resource, or dropped.
  void duplicate_single(const wire::Packet& pkt, const QpContext& ctx, Resource::Kind kind);
  // Keeps `r` as the newest responder resource, dropping the oldest beyond max_dest_rd_atomic.
  void remember(const Resource& r, const QpContext& ctx);
  // A single-packet request (ATOMIC, ATOMIC WRITE) was executed: its resource is kept to answer
  // a duplicate, the request consumed, and its response queued.
  void answer_single(const Resource& res, const QpContext& ctx);
  // The response to the ATOMIC or ATOMIC WRITE of `res`; a replay answers a duplicate of it.
  Response single_response(const Resource& res, bool replay) const;
  // Removes the front response, keeping rd_atomic_queued_ in step.
  void pop_response();
  // Completes the receive WQE at the front of `rq` and pops it.
  void complete_recv(const QpContext& ctx, RecvQueue& rq, ibv_wc_status status,
                     ibv_wc_opcode opcode, uint32_t byte_len, const wire::Packet* last);

  Psn epsn_;          // next expected request PSN
  uint32_t msn_ = 0;  // messages completed, mod 2^24 (AETH MSN, IBTA 9.7.5.1.3)
  NakState nak_state_ = NakState::kNone;
  Msg msg_ = Msg::kNone;     // kSend: the front RQ WQE is in use
  uint64_t msg_offset_ = 0;  // bytes of the current message written so far
  uint64_t write_va_ = 0;    // current WRITE: RETH of its FIRST packet, validated
  uint32_t write_rkey_ = 0;
  uint32_t write_len_ = 0;
  bool seen_request_ = false;  // for IBV_EVENT_COMM_EST
  // A duplicate SEND/WRITE has been ACKed since the expected PSN last moved (see on_request).
  bool dup_acked_ = false;
  // A ring (ring.h), not a std::deque: a deque frees and allocates a 512-byte block whenever its
  // front and back move past one, every ten ACKs even when only one ever waits.
  Ring<Response> responses_;
  // READ/ATOMIC requests executed (not replays) whose responses have not all left: checked
  // against max_dest_rd_atomic for each new one (one beyond it is NAKed invalid request, IBTA
  // 9.9.3.1.2).
  uint32_t rd_atomic_queued_ = 0;
  // The responder resources, a ring of at most max(1, max_dest_rd_atomic) entries grown on use:
  // while it grows, oldest first from index 0; once full, the oldest is at res_head_ and a new
  // one overwrites it.
  std::vector<Resource> resources_;
  size_t res_head_ = 0;

  // Selective repeat: the WRITE packets placed ahead of epsn_, a bit per PSN in (epsn_,
  // epsn_ + kSrWindowPkts) indexed by PSN modulo the window, with where each one wrote (for
  // place()). Allocated at the first packet placed ahead, so a QP without it costs a pointer.
  struct SrSlot {
    Psn psn;
    uint8_t* ptr = nullptr;
    uint32_t len = 0;
  };
  struct SrState {
    std::array<uint64_t, kSrWindowPkts / 64> bits{};
    std::array<SrSlot, kSrWindowPkts> slots{};
    uint32_t count = 0;  // bits set
    bool has(Psn p) const {
      const uint32_t i = p.value() % kSrWindowPkts;
      return ((bits[i / 64] >> (i % 64)) & 1) && slots[i].psn == p;
    }
  };
  std::unique_ptr<SrState> sr_;
};

}  // namespace uroce::transport
