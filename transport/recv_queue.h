// A receive queue — a QP's or an SRQ's: the receive WQEs posted and not yet consumed, oldest
// first, with a posting side that never waits for the device.
//
// On an RNIC ibv_post_recv writes a WQE into a ring and rings a doorbell; the NIC never makes it
// wait. Here the consumer of receive WQEs — the responder, UD/UC receive, an SRQ handing WQEs to
// its QPs, the flush of a QP entering ERR — runs under the device lock, which a receive pass of
// the engine holds for a whole burst of packets (up to hundreds). A post that took that lock
// waited for the burst, the queue ran dry meanwhile, and the responder answered the next SEND
// with an RNR NAK although the application was reposting as fast as it could (fio's rdma engine
// connects with rnr_retry_count 0: 14 runs of 15 failed with "RNR retry counter exceeded").
//
// So the queue has two sides:
//  - posting (post(), any thread): takes only this queue's own small lock, for the time it takes
//    to copy one WQE in;
//  - consuming (everything else, one thread at a time: the device lock serialises it): a private
//    ring the consumer works on without any lock, refilled from what was posted meanwhile when it
//    runs dry (empty()). A WQE posted in the middle of a receive pass therefore serves the very
//    next message of that pass, and an RNR NAK (or a UD/UC drop for want of a buffer) means the
//    application really had nothing posted.
//
// The QP's state decides what a post does (ibv_post_recv(3), IBTA 10.8.3.1); the QP sets it here,
// under this queue's lock, so a post never reads the QP's state (which only the device lock
// guards):
//  - kClosed (RESET): EINVAL;
//  - kOpen (INIT, RTR, RTS, SQD, SQE): queued; ENOMEM when capacity() WQEs are outstanding;
//  - kFlush (ERR): the WQE completes at once with IBV_WC_WR_FLUSH_ERR. flush() completes the queued
//    ones the same way in the same critical section, so completions stay in posting order.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "transport/env.h"
#include "transport/ring.h"
#include "transport/wqe.h"

namespace uroce::transport {

class RecvQueue {
 public:
  enum class Gate : uint8_t { kClosed, kOpen, kFlush };

  // A queue open for posting, holding at most `capacity` WQEs. `flush_to` and `qpn` name where a
  // post completes while the gate is kFlush (the QP's receive CQ, a thread-safe sink; null for an
  // SRQ, which never flushes).
  explicit RecvQueue(uint32_t capacity = kMaxQpWr, CompletionSink* flush_to = nullptr,
                     uint32_t qpn = 0, Gate gate = Gate::kOpen)
      : capacity_(capacity), flush_to_(flush_to), qpn_(qpn), gate_(gate) {}
  RecvQueue(const RecvQueue&) = delete;
  RecvQueue& operator=(const RecvQueue&) = delete;

  // ---- posting side: any thread, without the device lock ----
  // 0, EINVAL (kClosed), ENOMEM (full). The caller has checked the WQE's shape (SGE count).
  int post(const RecvWqe& wqe);

  // ---- consuming side: one thread at a time (the device lock) ----
  // Whether no WQE is left; first moves into the private ring what was posted since it last ran
  // dry. Cost when WQEs are queued: one comparison; when the ring is empty, one atomic load.
  bool empty() {
    if (!ring_.empty()) return false;
    return posted_.load(std::memory_order_acquire) == 0 || !refill();
  }
  // The oldest WQE; only after empty() returned false. The reference stays valid until pop_front():
  // the ring is refilled (and may grow) only while empty.
  RecvWqe& front() { return ring_.front(); }
  // Consumes the oldest WQE. The room it took is free for a post from here on — before the
  // completion that reports it is queued, so an application that reposts on seeing that
  // completion never finds the queue full.
  void pop_front() {
    ring_.pop_front();
    outstanding_.fetch_sub(1, std::memory_order_release);
  }
  // Appends a WQE on the consuming side (an SRQ moving its oldest WQE to the QP that takes it),
  // whatever the gate and capacity say.
  RecvWqe& push_local() {
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    return ring_.push_slot();
  }
  // The i-th WQE of the private ring (i < ring_size()): what the consumer has taken in, for tests.
  const RecvWqe& operator[](size_t i) const { return ring_[i]; }
  size_t ring_size() const { return ring_.size(); }

  // WQEs posted and not consumed (either side). Any thread; a snapshot.
  size_t size() const { return outstanding_.load(std::memory_order_acquire); }
  uint32_t capacity() const { return capacity_.load(std::memory_order_relaxed); }
  // Resizes (an SRQ's IBV_SRQ_MAX_WR): EINVAL below the WQEs outstanding now, which stay.
  int set_capacity(uint32_t capacity);

  // State changes, from the QP's state machine (device lock). open(): posts are queued (INIT).
  // reset(): everything queued goes without completions and posts are refused (RESET). flush():
  // every queued WQE completes into `cq` with IBV_WC_WR_FLUSH_ERR, in order, and so do later posts,
  // at once, into the queue's flush_to (ERR).
  void open();
  void reset();
  void flush(CompletionSink* cq);
  Gate gate() const;

 private:
  // Moves the posted WQEs into the (empty) private ring; false when there were none.
  bool refill();

  // The posting side. mu_ guards inbox_ and gate_; posted_ mirrors inbox_.size() for the
  // consumer's lock-free look (written under mu_).
  mutable std::mutex mu_;
  Ring<RecvWqe> inbox_;
  std::atomic<size_t> posted_{0};
  // WQEs posted and not yet consumed, inbox and ring together: a post compares it with the
  // capacity (under mu_, so posts never overshoot); pop_front frees room without the lock.
  std::atomic<size_t> outstanding_{0};
  std::atomic<uint32_t> capacity_;
  CompletionSink* const flush_to_;
  const uint32_t qpn_;
  Gate gate_;

  // The consuming side: no lock of its own.
  Ring<RecvWqe> ring_;
};

}  // namespace uroce::transport
