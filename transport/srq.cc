// The shared receive queue. See srq.h.
#include "transport/srq.h"

#include <cerrno>

namespace uroce::transport {

int Srq::check_init(const SrqInit& init) {
  if (init.max_wr == 0 || init.max_wr > kMaxQpWr) return EINVAL;
  if (init.max_sge == 0 || init.max_sge > kMaxSge) return EINVAL;
  // A limit the queue can never reach could never fire (ibv_create_srq(3): srq_limit is
  // ignored at creation by some providers; uroce honours it and so checks it).
  if (init.srq_limit > init.max_wr) return EINVAL;
  return 0;
}

int Srq::post_recv(const RecvWqe& wqe) {
  if (wqe.num_sge > init_.max_sge) return EINVAL;
  return q_.post(wqe);
}

int Srq::modify(const ibv_srq_attr& attr, int mask) {
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  uint32_t max_wr = q_.capacity();
  uint32_t limit = limit_;
  if (mask & IBV_SRQ_MAX_WR) {
    if (attr.max_wr == 0 || attr.max_wr > kMaxQpWr) return EINVAL;
    max_wr = attr.max_wr;
  }
  if (mask & IBV_SRQ_LIMIT) limit = attr.srq_limit;
  if (limit > max_wr) return EINVAL;
  // Shrinking below the WQEs queued would have to drop posted work: refused (checked against
  // concurrent posts, under the queue's lock).
  if ((mask & IBV_SRQ_MAX_WR) && q_.set_capacity(max_wr) != 0) return EINVAL;
  limit_ = limit;
  return 0;
}

void Srq::query(ibv_srq_attr& attr) const {
  attr.max_wr = q_.capacity();
  attr.max_sge = init_.max_sge;
  attr.srq_limit = limit_;
}

bool Srq::take(RecvQueue& rq) {
  if (q_.empty()) return false;
  copy_used(rq.push_local(), q_.front());
  q_.pop_front();
  // IBTA 11.5.2.4: the event fires when the count drops below the armed limit, once; the limit
  // is disarmed until the consumer sets it again.
  if (limit_ != 0 && q_.size() < limit_) {
    limit_ = 0;
    if (init_.events != nullptr) init_.events->srq_limit_reached();
  }
  return true;
}

}  // namespace uroce::transport
