// What the UD and UC roles (ud.h, uc.h) share: their outcome type and how a send WQE completes
// once its packets are out (IBTA 9.8.3/9.8.4: no acknowledgement, so a WQE completes when sent).
#pragma once

#include <infiniband/verbs.h>

#include "transport/cc/pacer.h"
#include "transport/context.h"
#include "transport/send_queue.h"
#include "transport/wc.h"

namespace uroce::transport {

struct UnreliableOutcome {
  // A send WQE completed in error: the QP must enter SQE (IBTA 10.3.1, Send Queue Error: UC
  // and UD QPs do not go to ERR for a local send error) and flush the rest of its send queue.
  bool send_error = false;
  bool blocked_by_port = false;  // tx_alloc() returned nullptr
  uint64_t frame_bytes = 0;  // sent, on the wire (cc::frame_bytes): the rate control's byte count
};

// Hands a filled buffer to the port and accounts for it at the QP's pacer and in `out`'s byte
// count (the rate control's byte counter): what every UD/UC packet does as it leaves.
inline void commit_paced(PacketSink& tx, TxBuf* buf, cc::Pacer& pacer, Time now,
                         UnreliableOutcome& out) {
  const uint64_t frame = cc::frame_bytes(buf->len);
  tx.tx_commit(buf);
  pacer.on_sent(now, frame);
  out.frame_bytes += frame;
}

// The buffer for a UD/UC QP's next packet, or nullptr when it must wait: for the QP's rate (its
// pacer's release time wakes it) or for the port's ring (out.blocked_by_port).
inline TxBuf* alloc_paced(PacketSink& tx, cc::Pacer& pacer, Time now, UnreliableOutcome& out) {
  if (!pacer.may_send(now)) return nullptr;
  TxBuf* buf = tx.tx_alloc();
  if (buf == nullptr) out.blocked_by_port = true;
  return buf;
}

// Completes the send WQE at the front of `sq` with `status` (successes only when signaled) and
// pops it.
inline void complete_front_send(const QpContext& ctx, SendQueue& sq, ibv_wc_status status) {
  const SendEntry& e = sq.front();
  if (e.signaled || status != IBV_WC_SUCCESS)
    ctx.init.send_cq->push(make_send_wc(e, status, ctx.init.qpn));
  sq.pop_front();
}

// The send WQE at the front of `sq` failed (a bad length, memory the QP cannot read): it
// completes with `status`, and `out` tells the QP to enter SQE. Returns `out`.
inline UnreliableOutcome fail_front_send(const QpContext& ctx, SendQueue& sq, ibv_wc_status status,
                                         UnreliableOutcome& out) {
  complete_front_send(ctx, sq, status);
  out.send_error = true;
  return out;
}

}  // namespace uroce::transport
