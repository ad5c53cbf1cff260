// Work completions (ibv_poll_cq(3)): how the transport builds every ibv_wc it hands a
// CompletionSink, so that each field is filled in one place. A send completion's opcode comes
// from its work request's row in the opcode table (wr_opcode.h); a receive completion takes the
// immediate data or the invalidated R_Key from the message's last packet.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "transport/send_queue.h"
#include "transport/wire/wire.h"
#include "transport/wr_opcode.h"

namespace uroce::transport {

// What every completion carries; the other fields stay zero.
inline ibv_wc make_wc(uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode op, uint32_t qpn,
                      uint32_t byte_len) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = op;
  wc.byte_len = byte_len;
  wc.qp_num = qpn;
  return wc;
}

// A WQE flushed in error (IBTA 10.3.1: every outstanding WQE of a QP entering ERR, or posted to
// one in ERR, 10.8.3.1). ibv_poll_cq(3) defines only wr_id, status, opcode and qp_num for it.
inline ibv_wc flush_wc(uint64_t wr_id, ibv_wc_opcode op, uint32_t qpn) {
  return make_wc(wr_id, IBV_WC_WR_FLUSH_ERR, op, qpn, 0);
}

// A send WQE's completion: its opcode is its row's completion opcode, byte_len its message's.
inline ibv_wc make_send_wc(const SendEntry& e, ibv_wc_status status, uint32_t qpn) {
  return make_wc(e.wqe.wr_id, status, wr_opcode_info(e.wqe.opcode).wc_opcode, qpn, e.length);
}

// A receive WQE's completion of a message from QP `src_qp` (RC and UC: the connected QP; UD: the
// DETH's). `last`, the message's last packet (or null), adds the immediate data it carried
// (IBV_WC_WITH_IMM, IBTA 9.4.3, 9.4.4) or the R_Key it invalidated (IBV_WC_WITH_INV, 9.4.1.1).
inline ibv_wc make_recv_wc(uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode op, uint32_t qpn,
                           uint32_t src_qp, uint32_t byte_len, const wire::Packet* last) {
  ibv_wc wc = make_wc(wr_id, status, op, qpn, byte_len);
  wc.src_qp = src_qp;
  if (last != nullptr && (last->info->flags & wire::kHasImm)) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = last->imm_be;
  }
  if (last != nullptr && (last->info->flags & wire::kHasIeth)) {
    wc.wc_flags |= IBV_WC_WITH_INV;
    wc.invalidated_rkey = last->ieth_rkey;
  }
  return wc;
}

}  // namespace uroce::transport
