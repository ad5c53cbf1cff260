// The work-request opcode table: one row per ibv_wr_opcode, the single place that says what each
// operation is — the QP types that carry it, what a work request of it holds (inline data,
// immediate data, an R_Key to invalidate, a remote address, atomic operands), whether it is a
// local operation, its completion opcode, its IBV_QP_EX_WITH_* flag and the wire opcodes of its
// packets. Everything that used to decide these by a switch over the opcode derives from the
// rows: the requester's segmentation (RC, UC, UD), posting checks, completion opcodes, the verbs
// layer's WR conversion, ibv_create_qp_ex's send_ops_flags and ibv_query_device's capabilities,
// and uroce-perf's send-ops flags. As in Linux rxe's rxe_opcode[] (and our own wire opcode
// table, wire/wire.cc): one row per thing, the rest derived.
//
// Header only and constexpr: the requester reads a row for every packet, and uroce-perf (a plain
// verbs program) uses the rows without linking the transport.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "transport/wire/wire.h"

namespace uroce::transport {

// What a work request of an opcode is and holds. Bit flags of WrOpcodeInfo::flags. Rows of
// operations uroce does not implement have none.
enum WrFlag : uint32_t {
  // The QP types that may post it (ibv_post_send(3); IBTA Table 38: UD carries SEND only, UC
  // SEND and RDMA WRITE, RC everything). An opcode is supported iff some QP type carries it.
  kWrOnRc = 1u << 0,
  kWrOnUc = 1u << 1,
  kWrOnUd = 1u << 2,
  // IBV_SEND_INLINE is accepted: the WR sends data of its own (ibv_post_send(3): "valid only
  // for Send and RDMA Write").
  kWrInline = 1u << 3,
  kWrImm = 1u << 4,         // ibv_send_wr.imm_data travels in the last packet (9.4.3, 9.4.4)
  kWrInvalidate = 1u << 5,  // ibv_send_wr.invalidate_rkey: the R_Key to invalidate (10.6.7.2)
  kWrRdma = 1u << 6,        // ibv_send_wr.wr.rdma: remote_addr and rkey
  kWrAtomic = 1u << 7,      // ibv_send_wr.wr.atomic; the original value lands in one 8-byte SGE
  // Answered with data (READ responses, the atomic ACK): the responder serves it from its
  // limited resources (max_rd_atomic / max_dest_rd_atomic, IBTA 9.5; kWrRespResource), a later
  // ACK cannot complete it, and its completion writes local memory.
  kWrReadOrAtomic = 1u << 8,
  // Acts on this device's key table only: no packet, no PSN (send_queue.h).
  kWrLocal = 1u << 9,
  // Takes one of the responder's resources (max_dest_rd_atomic) until it is answered, so at most
  // max_rd_atomic such requests are outstanding and a fenced WQE waits for them (IBTA 9.5,
  // 10.8.3.3). Every READ and ATOMIC; also the IBTA 1.5 ATOMIC WRITE, which Linux rxe's responder
  // serves from a responder resource (rxe_resp.c check_resource, rxe_prepare_res) and answers
  // with a response of its own, yet whose completion writes nothing locally and which a later
  // ACK may complete (rxe_comp.c), so it is not kWrReadOrAtomic.
  kWrRespResource = 1u << 10,
  // An XRC send (initiator) QP carries it (IBTA 9.4: XRC has RC's operations; ibv_post_send(3)
  // names the XRC SRQ in qp_type.xrc.remote_srqn). Not the IBTA 1.5 ATOMIC WRITE, which is
  // defined for RC (and RD) only, as Linux rxe and ConnectX carry it.
  kWrOnXrc = 1u << 11,
};

struct WrOpcodeInfo {
  const char* name = nullptr;  // "IBV_WR_SEND"; nullptr for values rdma-core does not define
  uint32_t flags = 0;          // WrFlag bits
  bool supported = false;      // carried by some QP type (derived from flags by the table)
  ibv_wc_opcode wc_opcode = IBV_WC_SEND;  // the completion's opcode (ibv_poll_cq(3))
  uint64_t qp_ex_flag = 0;                // IBV_QP_EX_WITH_* (ibv_create_qp_ex(3)); 0: none
  // The wire opcodes of its packets by position in the message (IBTA Table 38), as RC numbers
  // them; UC and UD number the same operation alike in the low five bits (wire_opcode()). READ
  // and the ATOMICs are one request packet: all four positions name it. Meaningful only for
  // supported rows that are not local operations.
  wire::Opcode first{}, middle{}, last{}, only{};

  bool allowed_on(ibv_qp_type type) const {
    switch (type) {
      case IBV_QPT_RC:
        return flags & kWrOnRc;
      case IBV_QPT_UC:
        return flags & kWrOnUc;
      case IBV_QPT_UD:
        return flags & kWrOnUd;
      case IBV_QPT_XRC_SEND:
        return flags & kWrOnXrc;
      default:
        return false;
    }
  }
};

namespace wr_table {

using wire::Opcode;

constexpr WrOpcodeInfo row(const char* name, uint32_t flags, ibv_wc_opcode wc, uint64_t qp_ex,
                           Opcode first = {}, Opcode middle = {}, Opcode last = {},
                           Opcode only = {}) {
  const bool supported = (flags & (kWrOnRc | kWrOnUc | kWrOnUd)) != 0;
  return WrOpcodeInfo{name, flags, supported, wc, qp_ex, first, middle, last, only};
}

// The values of enum ibv_wr_opcode run from 0 to IBV_WR_ATOMIC_WRITE (15), with a gap.
inline constexpr size_t kSize = 16;

constexpr std::array<WrOpcodeInfo, kSize> make() {
  constexpr uint32_t kAll = kWrOnRc | kWrOnUc | kWrOnUd | kWrOnXrc;
  constexpr uint32_t kRcUc = kWrOnRc | kWrOnUc | kWrOnXrc;  // and XRC, which has all of RC's
  constexpr uint32_t kRc = kWrOnRc | kWrOnXrc;
  std::array<WrOpcodeInfo, kSize> t{};
  // RETH travels in the first packet of a WRITE, its immediate in the last (9.4.3, 9.4.4).
  t[IBV_WR_RDMA_WRITE] = row("IBV_WR_RDMA_WRITE", kRcUc | kWrInline | kWrRdma, IBV_WC_RDMA_WRITE,
                             IBV_QP_EX_WITH_RDMA_WRITE, Opcode::kRcWriteFirst,
                             Opcode::kRcWriteMiddle, Opcode::kRcWriteLast, Opcode::kRcWriteOnly);
  t[IBV_WR_RDMA_WRITE_WITH_IMM] =
      row("IBV_WR_RDMA_WRITE_WITH_IMM", kRcUc | kWrInline | kWrRdma | kWrImm, IBV_WC_RDMA_WRITE,
          IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, Opcode::kRcWriteFirst, Opcode::kRcWriteMiddle,
          Opcode::kRcWriteLastImm, Opcode::kRcWriteOnlyImm);
  // A SEND's immediate travels in its LAST/ONLY packet only (9.4.3).
  t[IBV_WR_SEND] =
      row("IBV_WR_SEND", kAll | kWrInline, IBV_WC_SEND, IBV_QP_EX_WITH_SEND, Opcode::kRcSendFirst,
          Opcode::kRcSendMiddle, Opcode::kRcSendLast, Opcode::kRcSendOnly);
  t[IBV_WR_SEND_WITH_IMM] = row(
      "IBV_WR_SEND_WITH_IMM", kAll | kWrInline | kWrImm, IBV_WC_SEND, IBV_QP_EX_WITH_SEND_WITH_IMM,
      Opcode::kRcSendFirst, Opcode::kRcSendMiddle, Opcode::kRcSendLastImm, Opcode::kRcSendOnlyImm);
  constexpr uint32_t kRdAtomic = kWrReadOrAtomic | kWrRespResource;
  t[IBV_WR_RDMA_READ] = row("IBV_WR_RDMA_READ", kRc | kWrRdma | kRdAtomic, IBV_WC_RDMA_READ,
                            IBV_QP_EX_WITH_RDMA_READ, Opcode::kRcReadRequest,
                            Opcode::kRcReadRequest, Opcode::kRcReadRequest, Opcode::kRcReadRequest);
  t[IBV_WR_ATOMIC_CMP_AND_SWP] =
      row("IBV_WR_ATOMIC_CMP_AND_SWP", kRc | kWrAtomic | kRdAtomic, IBV_WC_COMP_SWAP,
          IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, Opcode::kRcCompareSwap, Opcode::kRcCompareSwap,
          Opcode::kRcCompareSwap, Opcode::kRcCompareSwap);
  t[IBV_WR_ATOMIC_FETCH_AND_ADD] =
      row("IBV_WR_ATOMIC_FETCH_AND_ADD", kRc | kWrAtomic | kRdAtomic, IBV_WC_FETCH_ADD,
          IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, Opcode::kRcFetchAdd, Opcode::kRcFetchAdd,
          Opcode::kRcFetchAdd, Opcode::kRcFetchAdd);
  // Memory windows and invalidation act on the key table (IBTA 10.6.7): RC and XRC QPs here.
  t[IBV_WR_LOCAL_INV] = row("IBV_WR_LOCAL_INV", kRc | kWrLocal | kWrInvalidate, IBV_WC_LOCAL_INV,
                            IBV_QP_EX_WITH_LOCAL_INV);
  t[IBV_WR_BIND_MW] = row("IBV_WR_BIND_MW", kRc | kWrLocal, IBV_WC_BIND_MW, IBV_QP_EX_WITH_BIND_MW);
  // SEND with invalidate: the IETH travels in its LAST/ONLY packet (9.4.1.1). The verbs layer
  // has refused IBV_SEND_INLINE on it from the start (ibv_post_send(3) names Send and RDMA Write;
  // ibv_wr_set_inline_data on ibv_wr_send_inv is taken).
  t[IBV_WR_SEND_WITH_INV] = row(
      "IBV_WR_SEND_WITH_INV", kRc | kWrInvalidate, IBV_WC_SEND, IBV_QP_EX_WITH_SEND_WITH_INV,
      Opcode::kRcSendFirst, Opcode::kRcSendMiddle, Opcode::kRcSendLastInv, Opcode::kRcSendOnlyInv);
  // IBTA 1.5 ATOMIC WRITE, RC only (as rxe's rxe_wr_opcode_info): one request packet with a RETH
  // (ibv_send_wr.wr.rdma names the target) and the 8 bytes to place, taken from the WR's data —
  // its SGEs or inline data, 8 bytes in all; ibv_wr_atomic_write passes them by pointer and the
  // verbs layer carries them inline (wr_api.cc). The responder answers it like a READ of no data.
  t[IBV_WR_ATOMIC_WRITE] =
      row("IBV_WR_ATOMIC_WRITE", kWrOnRc | kWrRdma | kWrInline | kWrRespResource,
          IBV_WC_ATOMIC_WRITE, IBV_QP_EX_WITH_ATOMIC_WRITE, Opcode::kRcAtomicWrite,
          Opcode::kRcAtomicWrite, Opcode::kRcAtomicWrite, Opcode::kRcAtomicWrite);
  // Not implemented: TSO is for raw packet QPs, the driver opcode for vendor extensions.
  t[IBV_WR_TSO] = row("IBV_WR_TSO", 0, IBV_WC_TSO, IBV_QP_EX_WITH_TSO);
  t[IBV_WR_DRIVER1] = row("IBV_WR_DRIVER1", 0, IBV_WC_DRIVER1, 0);
  return t;
}

inline constexpr std::array<WrOpcodeInfo, kSize> kRows = make();
static_assert((kSize & (kSize - 1)) == 0, "wr_opcode_info masks the value into the table");

// The opcodes whose rows have `flag`, one bit per opcode: a per-WQE question is then a shift of
// a constant, as cheap as the comparisons it replaces.
constexpr uint32_t ops_with(uint32_t flag) {
  uint32_t m = 0;
  for (size_t i = 0; i < kSize; ++i)
    if (kRows[i].flags & flag) m |= 1u << i;
  return m;
}

// Every row's flags hang together (tests/transport/wr_opcode_test.cc checks the rest against the
// wire opcode table).
constexpr bool consistent() {
  for (const WrOpcodeInfo& i : kRows) {
    if ((i.flags & kWrAtomic) && !(i.flags & kWrReadOrAtomic)) return false;
    if ((i.flags & kWrReadOrAtomic) && !(i.flags & kWrRespResource)) return false;
    if ((i.flags & kWrLocal) && (i.flags & (kWrInline | kWrImm | kWrRdma | kWrAtomic)))
      return false;
    if ((i.flags & kWrReadOrAtomic) && (i.flags & kWrInline)) return false;
  }
  return true;
}
static_assert(consistent());

}  // namespace wr_table

// The row of `op`. Every value an ibv_wr_opcode can hold (0..15) has one; the mask only keeps a
// corrupt value inside the table (the verbs layer refuses an int outside the enum before it is
// ever held as one).
constexpr const WrOpcodeInfo& wr_opcode_info(ibv_wr_opcode op) {
  return wr_table::kRows[static_cast<size_t>(op) & (wr_table::kSize - 1)];
}

// The wire opcode of a packet of a message of `w` on a QP of service `s`, by its position in the
// message: FIRST, MIDDLE, LAST or ONLY (IBTA 9.4). RC, UC and UD number an operation alike in
// the low five bits and put the service in the top three (IBTA Table 38), so the rows hold RC's.
constexpr wire::Opcode wire_opcode(const WrOpcodeInfo& w, wire::Service s, bool first, bool last) {
  const wire::Opcode rc = first ? (last ? w.only : w.first) : (last ? w.last : w.middle);
  return static_cast<wire::Opcode>(static_cast<uint8_t>(rc) | static_cast<uint8_t>(s) << 5);
}

// Named questions over the rows, for the roles that ask them per WQE.
template <uint32_t kFlag>
constexpr bool wr_opcode_has(ibv_wr_opcode op) {
  constexpr uint32_t kOps = wr_table::ops_with(kFlag);
  return (kOps >> (static_cast<uint32_t>(op) & (wr_table::kSize - 1))) & 1;
}
inline bool is_read_or_atomic(ibv_wr_opcode op) {
  return wr_opcode_has<kWrReadOrAtomic>(op);
}
inline bool is_atomic(ibv_wr_opcode op) {
  return wr_opcode_has<kWrAtomic>(op);
}
// Outstanding against max_rd_atomic: READ, the ATOMICs and ATOMIC WRITE (kWrRespResource).
inline bool uses_resp_resource(ibv_wr_opcode op) {
  return wr_opcode_has<kWrRespResource>(op);
}
inline bool is_local_op(ibv_wr_opcode op) {
  return wr_opcode_has<kWrLocal>(op);
}
// The completion opcode of a send WQE (ibv_poll_cq(3)).
inline ibv_wc_opcode wc_opcode_for(ibv_wr_opcode op) {
  return wr_opcode_info(op).wc_opcode;
}

}  // namespace uroce::transport
