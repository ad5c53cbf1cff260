// The requester: turns send WQEs into request packets. Segmentation by path MTU into
// FIRST/MIDDLE/LAST/ONLY, PSN assignment, AckReq, the send window, and go-back-N retransmission
// from a PSN on the completer's request (IBTA 9.7.4.1 requester side). RDMA READ and ATOMIC
// requests are limited to max_rd_atomic outstanding and honour IBV_SEND_FENCE (IBTA 9.4.4,
// 10.8.3.3); a READ resent from the middle of its response stream is a new READ REQUEST for the
// part still missing (9.7.4.1.3.2: the duplicate READ carries the adjusted VA, length and PSN).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>

#include "transport/cc/pacer.h"
#include "transport/context.h"
#include "transport/dma.h"
#include "transport/events.h"
#include "transport/multipath.h"
#include "transport/send_queue.h"

namespace uroce::transport {

// Most PSNs the requester keeps unacknowledged (the send window). Bounds the responder's work per
// retransmission and the memory the completer's bookkeeping needs; 2^23 would be the protocol
// limit (IBTA 9.7.4.1.3: at most half the PSN space outstanding).
inline constexpr uint32_t kSendWindowPkts = 256;
// AckReq at least every this many packets so the window advances inside long messages; the last
// packet of every message also asks, and so do the packet that fills the window (when half an
// interval or more has passed since the last ask: requester.cc) and the packet at half of a
// window smaller than 2 * kAckReqIntervalPkts (IBTA 9.7.2: the requester decides when to ask;
// the responder must answer AckReq).
inline constexpr uint32_t kAckReqIntervalPkts = 32;
// The floor of the loss-adaptive window (SendWindowCtl). Go-back-N makes a loss cost up to a
// window of resent packets, which argues for a small floor; what argues against it is the ACK
// timer: a loss episode ends in a timeout when the one NAK of a gap or the first resent packet
// is lost (the responder then stays silent, IBTA 9.7.4.1.3.3), and a timeout costs far more than
// resent packets (perftest's default is 67 ms; at 1 GB/s that is ~16k packets of 4 KiB). Fewer
// packets in flight leave fewer later packets to reveal such a loss. Measured on the virtual-time
// mixed SEND/WRITE/READ workload at 5% loss (send_window_test.cc, two seeds), floor 8 / 16 / 32:
// resent 6.0k-6.8k / 10.3k-10.9k / 19.7k-20.1k packets (fixed 256 window: 107k-110k), ACK
// timeouts 63-77 / 57-60 / 29-32; on the real stack (tests/stress at 5% loss) floor 8 took up to
// 1.7-2x the wall time of the fixed window, floor 32 about the same. 32 keeps most of the saving
// (bulk transfers resend ~10x less than with 256) without trading it for timeouts. It is also
// two AckReq intervals (kAckReqIntervalPkts), so a full floor window still asks twice.
inline constexpr uint32_t kMinSendWindowPkts = 32;

// The loss-adaptive limit on PSNs in flight, AIMD in the manner of TCP Reno's congestion window
// (RFC 5681) but in packets: it starts at kSendWindowPkts; a sequence NAK (or an implicit NAK for
// a lost READ/ATOMIC response, or an early-retransmit probe) halves it — under selective repeat a
// SACKed hole and a probe do not (Requester::on_sack says why) — an ACK timeout collapses it
// to kMinSendWindowPkts and remembers half the old limit as the slow-start threshold; acknowledged
// PSNs grow it by one per PSN below the threshold (doubling per round trip) and by one per window's
// worth above it. It never leaves [kMinSendWindowPkts, kSendWindowPkts]. It changes only how far
// the requester runs ahead of the oldest unacknowledged PSN: PSNs, packets and ACK handling are as
// without it. Why: the responder discards everything behind a gap (IBTA 9.7.4.1.3.3, 9.7.5.2.2), so
// each loss costs the packets in flight behind it; with a fixed 256-packet window that was 13
// resent packets per original at 5% loss (docs/performance.md).
class SendWindowCtl {
 public:
  enum class Loss : uint8_t { kSequenceNak, kTimeout };
  uint32_t limit() const { return limit_; }
  // `pkts` PSNs newly acknowledged (READ response packets count: they hold PSNs of the window).
  void on_acked(uint32_t pkts);
  // Returns true when the limit went down (false when already at the floor).
  bool on_loss(Loss why);

 private:
  uint32_t limit_ = kSendWindowPkts;     // PSNs the requester may have unacknowledged
  uint32_t ssthresh_ = kSendWindowPkts;  // below it, growth is one per acknowledged PSN
  uint32_t credit_ = 0;                  // PSNs acknowledged towards the next +1 above ssthresh_
};

class Requester {
 public:
  enum class State : uint8_t {
    kIdle,          // nothing to send (cursor at the end of the queue)
    kSending,       // packets ready under the window
    kWindowFull,    // window().limit() PSNs unacknowledged
    kRnrWait,       // an RNR NAK asked to wait until not_before_
    kBlocked,       // the cursor's WQE is kLocalError or SQD stops new WQEs
    kRdAtomicWait,  // the cursor's new WQE is a READ/ATOMIC and max_rd_atomic are outstanding,
                    // or it is fenced (IBV_SEND_FENCE) and a READ/ATOMIC is outstanding
    kSprayWait,     // multipath: the cursor's new packet keeps slot 0 and sprayed packets before
                    // it are not yet acknowledged (pump() says why)
  };

  // RTR→RTS: the first PSN the requester uses is sq_psn.
  void reset(Psn sq_psn);

  // Events from the completer.
  void on_acked(const AckedThrough& ev, const SendQueue& sq);
  // `sr`: the QP uses selective repeat (a timeout or probe then resends one packet).
  void on_retransmit(const RetransmitFrom& ev, const SendQueue& sq, bool sr = false);
  // Selective repeat: a SACK (events.h), at `now`. Records the SACKed PSN and opens a loss
  // episode.
  void on_sack(const Sacked& ev, Time now = 0);
  // A round-trip sample (the completer's): the smallest sets the reorder window.
  void on_rtt_sample(Time rtt) {
    if (min_rtt_ == 0 || rtt < min_rtt_) min_rtt_ = rtt;
  }
  // Selective repeat's reorder window: a hole is resent only this long after a SACK first
  // showed it (RACK's reo_wnd, RFC 8985 6.2: a quarter of the minimum round trip), so a packet
  // merely overtaken is not taken for lost. 0 before the first sample.
  Time reorder_window() const { return min_rtt_ / 4; }
  // Selective repeat: READ responses [from, to) are missing while later ones were placed: a READ
  // request for just those goes before anything else (pump).
  void on_read_hole(const ReadHole& ev) { rd_hole_ = ev; }
  // Multipath: a CNP came from UDP source port `port` (PathSet::marked). True when a path moved.
  bool path_marked(uint16_t port) { return paths_.on() && paths_.marked(port); }

  // Sends what the window, the RNR timer, the QP's pacer (congestion control) and the port
  // allow. `may_start` is false in SQD: WQEs already started finish, new ones wait (IBTA 10.3.1
  // SQ drain).
  RequesterOutcome pump(Time now, const QpContext& ctx, SendQueue& sq, PacketSink& tx,
                        bool may_start, cc::Pacer& pacer);

  // Whether pump() has nothing to do: every WQE posted has been sent, no RNR wait is to end and
  // no window cut is to be reported. A QP pumps after every packet it receives and every post,
  // several times a round trip with nothing to send; Qp::pump skips the call then.
  bool idle(const SendQueue& sq) const {
    return cursor_seq_ >= sq.end() && not_before_ == 0 && cuts_unreported_ == 0 &&
           !selective_resend_pending() && !sr_waiting_;
  }
  // Selective repeat: PSNs below the highest SACKed one are still to be looked at for a resend
  // (pump() sends the holes among them first, before anything new).
  bool selective_resend_pending() const {
    return holes_pending() || sr_probe_.has_value() || rd_hole_.has_value();
  }
  // What pump() would do now, ignoring the port; kRnrWait while the RNR timer runs.
  State state(Time now, const QpContext& ctx, const SendQueue& sq, bool may_start) const;
  // The RNR timer's expiry while it runs, or the end of the reorder window a hole waits out,
  // else kNever.
  Time wake_time() const {
    const Time rnr = not_before_ ? not_before_ : kNever;
    return sr_waiting_ ? std::min(rnr, sr_wait_until_) : rnr;
  }

  // PSNs the requester may have unacknowledged: the loss-adaptive window, capped by
  // CcConfig::max_inflight (in packets of the path MTU) when that is set.
  uint32_t limit(const QpContext& ctx) const;
  Psn next_psn() const { return next_new_psn_; }  // what the next new WQE will start at
  Psn sent_end() const { return sent_end_; }
  const SendWindowCtl& window() const { return window_; }

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
  Segment segment(const QpContext& ctx, const SendEntry& e, Psn psn) const;
  // Executes a local operation (is_local_op) at the cursor through MemoryAccess: true and
  // kInFlight with no PSN on success, false and kLocalError otherwise.
  bool execute_local(const QpContext& ctx, SendEntry& e);
  // Writes the cursor's packet (headers, payload from `pieces` or the inline data, pad) to `buf`;
  // a payload of one piece of at least `gather_min` bytes (0: none) that needs no pad is left
  // where it lies (TxBuf::ext). Returns whether it asks for an ACK.
  bool write_packet(const QpContext& ctx, const SendEntry& e, Psn psn, const Segment& seg,
                    const MemPieces& pieces, uint32_t npieces, uint32_t gather_min, TxBuf* buf);
  // Transmits the packet of `e` at `psn`: payload resolved, paced, a buffer taken. kSent, or why
  // not (a local error has marked `e` kLocalError).
  enum class Tx : uint8_t { kSent, kLocalError, kPaced, kPortFull };
  // Inlined into pump(), the path of every packet; selective_resend() is the other caller.
  [[gnu::always_inline]] Tx transmit(Time now, const QpContext& ctx, SendEntry& e, Psn psn,
                                     PacketSink& tx, cc::Pacer& pacer, RequesterOutcome& out,
                                     bool& ack_req);
  // Selective repeat: resends the holes below the highest SACKed PSN (pump's first step).
  void selective_resend(Time now, const QpContext& ctx, SendQueue& sq, PacketSink& tx,
                        cc::Pacer& pacer, RequesterOutcome& out);
  bool holes_pending() const {
    // Multipath: a scan is due when a SACK, an ACK or a probe brought news (sr_rescan_).
    if (paths_.on()) return sr_rescan_ && unacked_ < sr_high_ && unacked_ < cursor_psn_;
    const Psn lo = std::max(sr_next_, unacked_);
    return !sr_waiting_ && lo < sr_high_ && lo < cursor_psn_;
  }
  // Multipath: selective_resend's form for a QP that sprays (PathSet says which holes are lost).
  void spray_resend(Time now, const QpContext& ctx, SendQueue& sq, PacketSink& tx, cc::Pacer& pacer,
                    RequesterOutcome& out);
  // Multipath: the cursor's packet would be sprayed (an RDMA WRITE the responder may place ahead).
  bool sprays(const QpContext& ctx, const SendEntry& e) const {
    return paths_.on() && ctx.sr() && ctx.service == wire::Service::kRc &&
           e.wqe.opcode == IBV_WR_RDMA_WRITE && !inv_pending_;
  }
  bool sacked(Psn p) const {
    const uint32_t d = psn_span(unacked_, p);
    if (p < unacked_ || d >= kSrSackBits) return false;
    const uint32_t i = p.value() % kSrSackBits;
    return (sr_sacked_[i / 64] >> (i % 64)) & 1;
  }
  void clear_sacked(Psn from, Psn to);
  // Moves the cursor to the WQE holding `psn` (an in-flight PSN), or to the end.
  void seek(Psn psn, const SendQueue& sq);

  SendQueue::Seq cursor_seq_ = 0;  // WQE of the next packet to (re)transmit
  Psn cursor_psn_;                 // PSN of that packet; == next_new_psn_ at a kQueued WQE
  Psn next_new_psn_;               // first PSN of the next WQE to start
  Psn sent_end_;                   // one past the highest PSN ever transmitted
  Psn unacked_;                    // oldest PSN not known acknowledged (from AckedThrough)
  Time not_before_ = 0;            // RNR wait: no transmission before this time; 0 = none
  uint32_t since_ack_req_ = 0;     // packets sent since the last one with AckReq
  bool ack_req_next_ = false;      // the next packet asks for an ACK (first of a resend)
  // Selective repeat: a SEND with invalidate is in flight, ending before inv_end_ (the latest
  // one); no WRITE is marked placeable ahead until it is acknowledged (write_packet).
  bool inv_pending_ = false;
  Psn inv_end_;
  SendWindowCtl window_;  // how far cursor_psn_ may run ahead of unacked_
  // Window cuts not yet added to QpCounters::send_window_cuts (on_retransmit has no context;
  // the next pump() adds them).
  uint32_t cuts_unreported_ = 0;

  // Selective repeat (QpInit::selective_repeat). sr_sacked_: a bit per PSN in [unacked_,
  // unacked_ + kSrSackBits), indexed by PSN modulo its size, set when a SACK named it. sr_high_:
  // one past the highest SACKed PSN. sr_next_: where selective_resend() resumes, so a hole is
  // resent once per episode (a resend lost again falls to the probe or the ACK timer, which
  // rewind to unacked_). sr_episode_end_: a loss episode lasts until unacked_ reaches it; the
  // window is cut once per episode, as TCP's SACK recovery does (RFC 6675).
  static constexpr uint32_t kSrSackBits = 1024;
  std::array<uint64_t, kSrSackBits / 64> sr_sacked_{};
  bool sr_marks_ = false;  // some bit of sr_sacked_ may be set
  Psn sr_high_, sr_next_, sr_episode_end_;
  bool sr_episode_ = false;
  // The last selective resend: sent_end_ when it went (a PSN at or after it was first sent
  // later), and whether one went since the holes were last rearmed (on_sack).
  Psn sr_resend_mark_;
  bool sr_resent_ = false;
  // A timeout or probe under selective repeat resends one packet, the last one sent that no SACK
  // covers, as TCP's tail loss probe does (RFC 8985 7.3): the responder answers it with an ACK
  // (it had everything before) or a SACK (it names the holes), where a rewind would resend the
  // whole unacknowledged tail. pump() sends it after the holes.
  std::optional<Psn> sr_probe_;
  bool sr_probed_ = false;  // a probe went since the last ACK progress
  // A sequence NAK (a gap the responder reports once) came since the last ACK progress.
  bool nak_since_progress_ = false;

  // The reorder window (reorder_window()): when each hole was first shown by a SACK. sr_high_
  // only grows, and holes are revealed in PSN order, so a ring of (sr_high_ after a SACK moved
  // it, the time) answers "when was PSN p revealed" for the holes ahead of sr_next_: the first
  // entry above p. Only a SACK that skips PSNs reveals holes (one that names sr_high_ itself
  // moves it by one and reveals none), so a stream of in-order SACKs adds no entries. Full, the
  // newest entry takes the new threshold and time (its holes then count as revealed later than
  // they were: they wait a little longer, never less). sr_waiting_: selective_resend() stopped
  // at a hole whose window ends at sr_wait_until_ (wake_time()).
  struct Reveal {
    Psn high;
    Time at = 0;
  };
  static constexpr uint32_t kReveals = 64;
  std::array<Reveal, kReveals> reveals_{};
  uint32_t reveal_head_ = 0, reveal_count_ = 0;
  bool sr_waiting_ = false;
  Time sr_wait_until_ = 0;
  Time min_rtt_ = 0;
  // When PSN p (a hole at or after sr_next_) was revealed, or 0 when it is not known.
  Time revealed_at(Psn p);

  // Multipath spraying (QpInit::paths > 1, with selective repeat; transport/multipath.h). Set up
  // by the first pump() that finds selective repeat agreed. sr_rescan_: a SACK, ACK or probe
  // came since spray_resend() last looked at every hole. spray_end_: one past the last PSN
  // sprayed; a new packet that keeps slot 0 waits until it is acknowledged (kSprayWait).
  PathSet paths_;
  bool sr_rescan_ = false;
  Psn spray_end_;
  // Selective repeat: a READ hole to ask for (on_read_hole), and while its request is written,
  // the PSN where the request's length stops (write_packet).
  std::optional<ReadHole> rd_hole_;
  std::optional<Psn> rd_hole_end_;
  // Sends the READ request for rd_hole_ (pump's first step).
  void send_read_hole(Time now, const QpContext& ctx, SendQueue& sq, PacketSink& tx,
                      cc::Pacer& pacer, RequesterOutcome& out);
  // The in-flight WQE holding `psn`, or sq.end().
  SendQueue::Seq find(const SendQueue& sq, Psn psn) const;
};

}  // namespace uroce::transport
