// The send queue: posted send WQEs with their per-WQE transport state, in posting order.
//
// Ownership: qp.cc pushes (post_send) and flushes; the requester assigns PSNs and may mark a WQE
// kLocalError; the completer pops from the front when a WQE is acknowledged or failed. Entries
// are addressed by an absolute sequence number that popping does not shift, so the requester's
// cursor survives the completer's progress without either role touching the other's fields.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>

#include "transport/psn.h"
#include "transport/qp.h"

namespace uroce::transport {

enum class WqeState : uint8_t {
  kQueued,      // posted; the requester has not reached it, no PSN assigned
  kInFlight,    // PSNs [first_psn, first_psn + npkts) assigned; sent, partly sent or to be resent
  kLocalError,  // the requester could not execute it (bad lkey…); completes with `error` when
                // everything before it has completed (completions are in order)
};

struct SendEntry {
  SendWqe wqe;
  WqeState state = WqeState::kQueued;
  bool signaled = false;  // IBV_SEND_SIGNALED or sq_sig_all; errors complete regardless
  uint32_t length = 0;    // message bytes: inline_len or the sum of SGE lengths
  Psn first_psn;          // valid from kInFlight
  uint32_t npkts = 0;     // packets of the message, >= 1 (a zero-length SEND is one packet)
  ibv_wc_status error = IBV_WC_SUCCESS;  // kLocalError: the status to complete with

  Psn last_psn() const { return first_psn + (npkts - 1); }
  Psn end_psn() const { return first_psn + npkts; }
};

class SendQueue {
 public:
  using Seq = uint64_t;  // absolute index: front() has begin(), the next push gets end()

  bool empty() const { return q_.empty(); }
  size_t size() const { return q_.size(); }
  Seq begin() const { return base_; }
  Seq end() const { return base_ + q_.size(); }
  SendEntry& at(Seq s) { return q_[s - base_]; }
  const SendEntry& at(Seq s) const { return q_[s - base_]; }
  SendEntry& front() { return q_.front(); }

  void push(const SendEntry& e) { q_.push_back(e); }
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
  std::deque<SendEntry> q_;
  Seq base_ = 0;
};

}  // namespace uroce::transport
