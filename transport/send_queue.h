// The send queue: posted send WQEs with their per-WQE transport state, in posting order.
//
// Ownership: qp.cc pushes (post_send) and flushes; the requester assigns PSNs and may mark a WQE
// kLocalError; the completer pops from the front when a WQE is acknowledged or failed. Entries
// are addressed by an absolute sequence number that popping does not shift, so the requester's
// cursor survives the completer's progress without either role touching the other's fields.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "transport/psn.h"
#include "transport/qp.h"
#include "transport/ring.h"
#include "transport/wr_opcode.h"

namespace uroce::transport {

// A local operation (BIND_MW, LOCAL_INV: kWrLocal in wr_opcode.h) acts on this device's key
// table only: no packet, no PSN. The requester executes one when its cursor reaches it (so after
// every earlier WQE has been sent, and, with IBV_SEND_FENCE, after every earlier READ/ATOMIC has
// completed); it then enters kInFlight with npkts == 0 at first_psn, so the completer completes it
// in order once everything before it is acknowledged (IBTA 10.8.3: work requests complete in
// order).
enum class WqeState : uint8_t {
  kQueued,      // posted; the requester has not reached it, no PSN assigned
  kInFlight,    // PSNs [first_psn, first_psn + npkts) assigned; sent, partly sent or to be resent.
                // A READ of n MTUs takes n PSNs (one per response packet) but is one request
                // packet; an ATOMIC takes one PSN.
  kLocalError,  // the requester could not execute it (bad lkey…); completes with `error` when
                // everything before it has completed (completions are in order)
};

struct SendEntry {
  SendWqe wqe;
  WqeState state = WqeState::kQueued;
  bool signaled = false;  // IBV_SEND_SIGNALED or sq_sig_all; errors complete regardless
  uint32_t length = 0;    // message bytes: inline_len or the sum of SGE lengths
  Psn first_psn;          // valid from kInFlight
  uint32_t npkts = 0;     // packets of the message, >= 1 (a zero-length SEND is one packet);
                          // 0 for an executed local operation (is_local_op)
  ibv_wc_status error = IBV_WC_SUCCESS;  // kLocalError: the status to complete with
  // Selective repeat: every packet of this RDMA WRITE goes as a WRITE ONLY with its own RETH.
  // Decided once, when its first packet leaves, so a resend from mid-message takes the form the
  // responder saw first (a WRITE ONLY where it expects a MIDDLE is an opcode sequence error).
  bool sr_split = false;

  Psn last_psn() const { return first_psn + (npkts - 1); }
  Psn end_psn() const { return first_psn + npkts; }
  // Every field but `wqe` to its initial value, for a reused slot of the queue
  // (SendQueue::push_slot). Keep in step with the fields above.
  void reset_state() {
    state = WqeState::kQueued;
    signaled = false;
    length = 0;
    first_psn = Psn{};
    npkts = 0;
    error = IBV_WC_SUCCESS;
    sr_split = false;
  }
};

class SendQueue {
 public:
  using Seq = uint64_t;  // absolute index: front() has begin(), the next push gets end()

  bool empty() const { return q_.empty(); }
  size_t size() const { return q_.size(); }
  Seq begin() const { return base_; }
  Seq end() const { return base_ + q_.size(); }
  SendEntry& at(Seq s) { return q_[static_cast<size_t>(s - base_)]; }
  const SendEntry& at(Seq s) const { return q_[static_cast<size_t>(s - base_)]; }
  SendEntry& front() { return q_.front(); }

  // A new entry at the back, its fields stale: the caller sets each one (Qp::post_send).
  SendEntry& push_slot() { return q_.push_slot(); }
  void pop_front() {
    q_.pop_front();
    ++base_;
  }
  // Drops everything (RESET, or after a flush); sequence numbers keep counting.
  void clear() {
    base_ += q_.size();
    q_.clear();
  }

 private:
  Ring<SendEntry> q_;
  Seq base_ = 0;
};

}  // namespace uroce::transport
