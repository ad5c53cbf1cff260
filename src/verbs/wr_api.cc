// The ibv_wr_* send interface of struct ibv_qp_ex (ibv_wr_post(3)), which perftest uses by
// default: ibv_wr_start opens a batch, each ibv_wr_<op> starts a WR from qpx->wr_id and
// qpx->wr_flags, the setters fill its data, and ibv_wr_complete posts the batch. The setters
// return nothing, so a bad WR is remembered and reported by ibv_wr_complete, which then posts
// none of the batch.
#include <cerrno>
#include <cstring>
#include <new>

#include "objects.h"
#include "provider.h"
#include "transport/wr_opcode.h"

namespace uroce::verbs {
namespace {

constexpr unsigned kWrFlags =
    IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;

void fail(VQp* qp, int err) {
  if (!qp->batch_err) qp->batch_err = err;
}

// Starts a WR of the batch; nullptr (and the batch fails) when it cannot be held.
transport::SendWqe* begin(ibv_qp_ex* qpx, ibv_wr_opcode op) {
  VQp* qp = to_v(qpx);
  if (qpx->wr_flags & ~kWrFlags) fail(qp, EINVAL);
  try {
    qp->batch.emplace_back();
  } catch (const std::bad_alloc&) {
    fail(qp, ENOMEM);
    return nullptr;
  }
  transport::SendWqe& w = qp->batch.back();
  w.wr_id = qpx->wr_id;
  w.opcode = op;
  // IBV_SEND_INLINE means nothing here: data is inline iff set with ibv_wr_set_inline_data*.
  w.send_flags = qpx->wr_flags & ~static_cast<unsigned>(IBV_SEND_INLINE);
  return &w;
}

// The WR the setters apply to: the last one started.
transport::SendWqe* current(ibv_qp_ex* qpx) {
  VQp* qp = to_v(qpx);
  if (qp->batch.empty()) {
    fail(qp, EINVAL);
    return nullptr;
  }
  return &qp->batch.back();
}

void wr_start(ibv_qp_ex* qpx) {
  VQp* qp = to_v(qpx);
  qp->batch.clear();
  qp->batch_err = 0;
}

int wr_complete(ibv_qp_ex* qpx) {
  VQp* qp = to_v(qpx);
  int err = qp->batch_err;
  if (!err && !qp->batch.empty()) {
    size_t bad = 0;
    err = qp->ctx->dev->post_send(qp->tqp, qp->batch.data(), qp->batch.size(), &bad);
  }
  qp->batch.clear();
  qp->batch_err = 0;
  return err;
}

void wr_abort(ibv_qp_ex* qpx) {
  VQp* qp = to_v(qpx);
  qp->batch.clear();
  qp->batch_err = 0;
}

void wr_send(ibv_qp_ex* qpx) {
  begin(qpx, IBV_WR_SEND);
}

void wr_send_imm(ibv_qp_ex* qpx, __be32 imm) {
  if (auto* w = begin(qpx, IBV_WR_SEND_WITH_IMM)) w->imm_be = imm;
}

void wr_send_inv(ibv_qp_ex* qpx, uint32_t rkey) {
  if (auto* w = begin(qpx, IBV_WR_SEND_WITH_INV)) w->imm_be = rkey;
}

void wr_local_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  if (auto* w = begin(qpx, IBV_WR_LOCAL_INV)) w->imm_be = invalidate_rkey;  // host order
}

void wr_bind_mw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  VQp* qp = to_v(qpx);
  auto* w = begin(qpx, IBV_WR_BIND_MW);
  if (!w) return;
  if (!info || (w->send_flags & IBV_SEND_SOLICITED)) return fail(qp, EINVAL);
  if (int rc = mw_bind_wqe(qp->ctx, mw, rkey, *info, *w)) fail(qp, rc);
}

// Starts a WR of the batch that names remote memory (RDMA and atomics).
transport::SendWqe* begin_remote(ibv_qp_ex* qpx, ibv_wr_opcode op, uint32_t rkey, uint64_t addr) {
  transport::SendWqe* w = begin(qpx, op);
  if (w) {
    w->rkey = rkey;
    w->remote_addr = addr;
  }
  return w;
}

void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) {
  begin_remote(qpx, IBV_WR_RDMA_WRITE, rkey, addr);
}

void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, __be32 imm) {
  if (auto* w = begin_remote(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr)) w->imm_be = imm;
}

void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr) {
  begin_remote(qpx, IBV_WR_RDMA_READ, rkey, addr);
}

void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, uint64_t compare,
                       uint64_t swap) {
  if (auto* w = begin_remote(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr)) {
    w->compare_add = compare;
    w->swap = swap;
  }
}

void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, uint64_t add) {
  if (auto* w = begin_remote(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr)) w->compare_add = add;
}

// IBTA 1.5 ATOMIC WRITE: `value` points at the 8 bytes to place (ibv_wr_post(3)). They are
// copied into the WR now, as rdma-core's rxe copies them into its WQE, and travel as its inline
// data whatever the QP's max_inline_data (transport/qp.cc); no setter follows.
void wr_atomic_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t addr, const void* value) {
  auto* w = begin_remote(qpx, IBV_WR_ATOMIC_WRITE, rkey, addr);
  if (!w) return;
  if (!value) return fail(to_v(qpx), EINVAL);
  std::memcpy(w->inline_data.data(), value, 8);
  w->inline_len = 8;
  w->num_sge = 0;
  w->send_flags |= IBV_SEND_INLINE;
}

void wr_set_sge_list(ibv_qp_ex* qpx, size_t n, const ibv_sge* list) {
  VQp* qp = to_v(qpx);
  auto* w = current(qpx);
  if (!w) return;
  if (n > qp->cap.max_send_sge || (n && !list)) return fail(qp, EINVAL);
  for (size_t i = 0; i < n; ++i)
    w->sge[i] = transport::Sge{list[i].addr, list[i].length, list[i].lkey};
  w->num_sge = static_cast<uint32_t>(n);
  w->inline_len = 0;
  w->send_flags &= ~static_cast<unsigned>(IBV_SEND_INLINE);
}

void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge sge{addr, length, lkey};
  wr_set_sge_list(qpx, 1, &sge);
}

void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t n, const ibv_data_buf* bufs) {
  VQp* qp = to_v(qpx);
  auto* w = current(qpx);
  if (!w) return;
  if (n && !bufs) return fail(qp, EINVAL);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += bufs[i].length;
  if (total > qp->cap.max_inline_data) return fail(qp, EINVAL);
  size_t off = 0;
  for (size_t i = 0; i < n; ++i) {
    if (bufs[i].length) std::memcpy(w->inline_data.data() + off, bufs[i].addr, bufs[i].length);
    off += bufs[i].length;
  }
  w->inline_len = static_cast<uint32_t>(off);
  w->num_sge = 0;
  w->send_flags |= IBV_SEND_INLINE;
}

void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) {
  ibv_data_buf buf{addr, length};
  wr_set_inline_data_list(qpx, 1, &buf);
}

}  // namespace

void wr_set_xrc_srqn(ibv_qp_ex* qpx, uint32_t remote_srqn) {
  if (auto* w = current(qpx)) w->xrc_srqn = remote_srqn;
}

int check_send_ops(uint64_t flags, ibv_qp_type type) {
  uint64_t known = 0;
  for (const transport::WrOpcodeInfo& op : transport::wr_table::kRows) {
    known |= op.qp_ex_flag;
    if ((flags & op.qp_ex_flag) && !op.supported) return EOPNOTSUPP;
    // XRC carries RC's operations but ATOMIC WRITE (transport/wr_opcode.h).
    if ((flags & op.qp_ex_flag) && type == IBV_QPT_XRC_SEND && !op.allowed_on(type))
      return EOPNOTSUPP;
  }
  return (flags & ~known) ? EOPNOTSUPP : 0;
}

void init_send_ops(VQp* qp, uint64_t flags) {
  ibv_qp_ex& x = qp->qpx;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  // Only the operations asked for (and accepted by check_send_ops) get an entry, as in rdma-core.
  if (flags & IBV_QP_EX_WITH_SEND) x.wr_send = wr_send;
  if (flags & IBV_QP_EX_WITH_SEND_WITH_IMM) x.wr_send_imm = wr_send_imm;
  if (flags & IBV_QP_EX_WITH_SEND_WITH_INV) x.wr_send_inv = wr_send_inv;
  if (flags & IBV_QP_EX_WITH_LOCAL_INV) x.wr_local_inv = wr_local_inv;
  if (flags & IBV_QP_EX_WITH_BIND_MW) x.wr_bind_mw = wr_bind_mw;
  if (flags & IBV_QP_EX_WITH_RDMA_WRITE) x.wr_rdma_write = wr_rdma_write;
  if (flags & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) x.wr_rdma_write_imm = wr_rdma_write_imm;
  if (flags & IBV_QP_EX_WITH_RDMA_READ) x.wr_rdma_read = wr_rdma_read;
  if (flags & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP) x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  if (flags & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  if (flags & IBV_QP_EX_WITH_ATOMIC_WRITE) x.wr_atomic_write = wr_atomic_write;
  qp->send_ops = true;
}

}  // namespace uroce::verbs
