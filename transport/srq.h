// A shared receive queue (IBTA 10.2.9): one queue of receive WQEs that several RC QPs of a
// device consume from. A QP created with an SRQ has no receive queue of its own to post to;
// when a request that consumes a receive WQE starts (SEND FIRST/ONLY, RDMA WRITE LAST/ONLY with
// immediate), the QP takes the oldest WQE of the SRQ into its private queue and the responder
// works on it from there, so a multi-packet SEND keeps its WQE while other QPs take the next ones.
//
// The SRQ limit (IBTA 11.5.2.4, ibv_modify_srq(3)): when armed (srq_limit > 0) and a take leaves
// fewer WQEs than the limit, the SRQ raises IBV_EVENT_SRQ_LIMIT_REACHED once and disarms itself
// (srq_limit reads 0 again); ibv_modify_srq with IBV_SRQ_LIMIT re-arms it.
//
// Thread safety: post_recv may run on any thread, without the device lock (the queue's posting
// side, recv_queue.h). Every other call is serialised by the device lock (src/engine/device.h),
// as the transport is: the SRQ is shared by QPs of one device.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "transport/qp.h"
#include "wire/wire.h"

namespace uroce::transport {

// Where an SRQ reports IBV_EVENT_SRQ_LIMIT_REACHED (called with the device lock held).
class SrqEventSink {
 public:
  virtual ~SrqEventSink() = default;
  virtual void srq_limit_reached() = 0;
};

struct SrqInit {
  uint32_t max_wr = 0;             // capacity, 1..kMaxQpWr
  uint32_t max_sge = 0;            // per WQE, 1..kMaxSge
  uint32_t srq_limit = 0;          // 0 = not armed
  SrqEventSink* events = nullptr;  // may be null
  // XRC SRQs (IBTA 10.2.9.4, ibv_create_srq_ex(3) with IBV_SRQT_XRC): the XRC domain (nonzero),
  // the PD the messages it receives are checked against, and the CQ they complete into. The
  // XRC receive QPs of the domain take from it when a request's XRCETH names its number.
  uint32_t xrcd = 0;
  uint32_t pd = 0;
  CompletionSink* cq = nullptr;
};

class Srq {
 public:
  // The caller validates init (check_init) first.
  explicit Srq(const SrqInit& init) : init_(init), limit_(init.srq_limit), q_(init.max_wr) {}
  Srq(const Srq&) = delete;
  Srq& operator=(const Srq&) = delete;

  // 0, or EINVAL for a capacity/SGE count outside the limits or a limit above max_wr.
  static int check_init(const SrqInit& init);

  // ibv_post_srq_recv: EINVAL when the WQE has more SGEs than max_sge, ENOMEM when full. Any
  // thread, no device lock.
  int post_recv(const RecvWqe& wqe);

  // ibv_modify_srq: IBV_SRQ_MAX_WR resizes (never below the WQEs queued now, so none is lost),
  // IBV_SRQ_LIMIT arms the limit (0 disarms). The resulting limit must not exceed max_wr.
  // 0 or EINVAL; nothing changes on error.
  int modify(const ibv_srq_attr& attr, int mask);
  void query(ibv_srq_attr& attr) const;

  // Moves the oldest WQE to the back of `rq` (a QP's private queue) and fires the limit event
  // when due. False when the SRQ is empty.
  bool take(RecvQueue& rq);

  size_t size() const { return q_.size(); }
  uint32_t max_wr() const { return q_.capacity(); }
  uint32_t max_sge() const { return init_.max_sge; }
  uint32_t limit() const { return limit_; }
  uint32_t xrcd() const { return init_.xrcd; }
  uint32_t pd() const { return init_.pd; }
  CompletionSink* cq() const { return init_.cq; }

 private:
  SrqInit init_;        // as created; the capacity (max_wr) lives in q_, which resizes change
  uint32_t limit_ = 0;  // armed limit; 0 when disarmed (also after the event fired)
  RecvQueue q_;         // oldest first
};

// Where an XRC receive QP finds the XRC SRQ a request names (its XRCETH's XRCSRQ field): the
// device's table of XRC SRQs. Called with the device lock held.
class XrcSrqs {
 public:
  virtual ~XrcSrqs() = default;
  virtual Srq* find(uint32_t srqn) = 0;  // nullptr: no such XRC SRQ
};

// True when `pkt`, a request at the responder's expected PSN, is the packet at which the message
// takes its receive WQE: SEND FIRST/ONLY, or the LAST/ONLY packet of an RDMA WRITE with immediate
// (IBTA 9.4.4). A QP with an SRQ takes one from the SRQ then, if its private queue is empty.
inline bool takes_recv_wqe(const wire::Packet& pkt) {
  if (pkt.info == nullptr) return false;
  const uint32_t f = pkt.info->flags;
  if (!(f & wire::kConsumesRecv)) return false;
  if (f & wire::kSend) return (f & wire::kFirst) != 0;
  return (f & wire::kLast) != 0;
}

}  // namespace uroce::transport
