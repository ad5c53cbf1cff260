// The receive queue's two sides. See recv_queue.h.
#include "transport/recv_queue.h"

#include <cerrno>

#include "transport/wc.h"

namespace uroce::transport {

namespace {
// IBTA 10.3.1 (Error state): a receive WQE of a QP in ERR completes "flushed in error".
ibv_wc recv_flush_wc(uint64_t wr_id, uint32_t qpn) {
  return flush_wc(wr_id, IBV_WC_RECV, qpn);
}
}  // namespace

int RecvQueue::post(const RecvWqe& wqe) {
  std::lock_guard<std::mutex> g(mu_);
  switch (gate_) {
    case Gate::kClosed:
      return EINVAL;
    case Gate::kFlush:
      // Posting to a QP in ERR is allowed and completes at once, flushed (IBTA 10.8.3.1). Under
      // mu_, so it follows the flush of what was queued before (flush()).
      if (flush_to_ != nullptr) flush_to_->push(recv_flush_wc(wqe.wr_id, qpn_));
      return 0;
    case Gate::kOpen:
      break;
  }
  if (outstanding_.load(std::memory_order_acquire) >= capacity_.load(std::memory_order_relaxed))
    return ENOMEM;
  copy_used(inbox_.push_slot(), wqe);
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  // Release: the consumer that sees the count sees the WQE (it takes mu_ anyway to move it).
  posted_.store(inbox_.size(), std::memory_order_release);
  return 0;
}

bool RecvQueue::refill() {
  std::lock_guard<std::mutex> g(mu_);
  if (inbox_.empty()) return false;
  // The ring is empty here (empty() calls this only then): swapping hands over every posted WQE
  // in one move, and the inbox keeps the ring's old buffer for the next posts, so neither side
  // allocates once both reached their working depth.
  std::swap(inbox_, ring_);
  inbox_.clear();
  posted_.store(0, std::memory_order_relaxed);
  return true;
}

int RecvQueue::set_capacity(uint32_t capacity) {
  std::lock_guard<std::mutex> g(mu_);
  if (capacity < outstanding_.load(std::memory_order_acquire)) return EINVAL;
  capacity_.store(capacity, std::memory_order_relaxed);
  return 0;
}

void RecvQueue::open() {
  std::lock_guard<std::mutex> g(mu_);
  gate_ = Gate::kOpen;
}

void RecvQueue::reset() {
  std::lock_guard<std::mutex> g(mu_);
  gate_ = Gate::kClosed;
  inbox_.clear();
  ring_.clear();
  posted_.store(0, std::memory_order_relaxed);
  outstanding_.store(0, std::memory_order_relaxed);
}

void RecvQueue::flush(CompletionSink* cq) {
  std::lock_guard<std::mutex> g(mu_);
  gate_ = Gate::kFlush;
  for (const RecvWqe& w : ring_) cq->push(recv_flush_wc(w.wr_id, qpn_));
  for (const RecvWqe& w : inbox_) cq->push(recv_flush_wc(w.wr_id, qpn_));
  ring_.clear();
  inbox_.clear();
  posted_.store(0, std::memory_order_relaxed);
  outstanding_.store(0, std::memory_order_relaxed);
}

RecvQueue::Gate RecvQueue::gate() const {
  std::lock_guard<std::mutex> g(mu_);
  return gate_;
}

}  // namespace uroce::transport
