// Work requests as the transport takes them: the send and receive WQEs the verbs layer hands over
// (already validated for shape), their scatter/gather entries and the limits on both.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>

#include "transport/env.h"

namespace uroce::transport {

inline constexpr uint32_t kMaxSge = 16;          // per WR, send and receive
inline constexpr uint32_t kMaxInlineData = 256;  // bytes of IBV_SEND_INLINE data per WR
inline constexpr uint32_t kMaxQpWr = 16384;      // per queue

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// A send WQE as the verbs layer hands it over, already validated for shape (opcode supported by
// the QP type, num_sge <= max, inline size <= max). Keys are resolved when the data is read, so a
// bad lkey completes with IBV_WC_LOC_PROT_ERR as on hardware.
struct SendWqe {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  unsigned send_flags = 0;  // IBV_SEND_*
  // Immediate data, network byte order; for SEND_WITH_INV and LOCAL_INV the rkey to invalidate,
  // host order.
  uint32_t imm_be = 0;
  uint64_t remote_addr = 0;  // RDMA / atomic
  uint32_t rkey = 0;
  uint64_t compare_add = 0;  // atomic
  uint64_t swap = 0;
  // XRC send QPs: the XRC SRQ at the destination (ibv_send_wr.qp_type.xrc.remote_srqn), carried
  // in every request's XRCETH.
  uint32_t xrc_srqn = 0;
  // UD address (from the AH): destination address (the AH's DGID), QPN and Q_Key. The unspecified
  // address "::" (the default) means no AH.
  wire::IpAddr ud_dst_ip{};
  uint32_t ud_remote_qpn = 0;
  uint32_t ud_remote_qkey = 0;
  uint8_t ud_traffic_class = 0;  // the AH's GRH traffic class (its DSCP bits set the packet's)
  bool ud_roce_v1 = false;       // the AH names the RoCE v1 GID (kRoceV1GidIndex)
  // IBV_WR_BIND_MW: the binding (a local operation: no packet, see send_queue.h).
  MwBind bind;
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sge{};
  // With IBV_SEND_INLINE the data is copied here at post time and `sge` is unused.
  uint32_t inline_len = 0;
  std::array<uint8_t, kMaxInlineData> inline_data{};
};

struct RecvWqe {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sge{};
};

// Copy the part of a WQE that is in use — its fields, its first num_sge SGEs and (a SendWqe) its
// first inline_len bytes — rather than the whole ~600 (270) bytes: posting copies a WQE into its
// queue, and most of one is empty SGE slots and inline-data room. The bytes past what is in use
// are left as they were; nothing reads them. Counts above the arrays' sizes are clamped (the
// caller refuses such a WQE anyway).
void copy_used(SendWqe& dst, const SendWqe& src);
void copy_used(RecvWqe& dst, const RecvWqe& src);

}  // namespace uroce::transport
