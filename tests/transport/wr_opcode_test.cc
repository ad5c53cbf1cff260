// The work-request opcode table (transport/wr_opcode.h) against the wire opcode table
// (transport/wire/wire.cc) and what ibv_post_send(3) says of each operation, and what derives from
// the rows in the transport: the wire opcodes of every packet position on every QP type that
// carries the operation, the per-WQE questions (is_read_or_atomic, is_atomic, is_local_op,
// wc_opcode_for) and unreliable_wqe_ok.
#include "transport/wr_opcode.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "transport/unreliable_qp.h"

namespace uroce::transport {
namespace {

constexpr ibv_qp_type kQpTypes[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_XRC_SEND};

wire::Service service_of(ibv_qp_type t) {
  return t == IBV_QPT_RC         ? wire::Service::kRc
         : t == IBV_QPT_UC       ? wire::Service::kUc
         : t == IBV_QPT_XRC_SEND ? wire::Service::kXrc
                                 : wire::Service::kUd;
}

std::string name_of(size_t i) {
  const char* n = wr_table::kRows[i].name;
  return n ? n : "opcode " + std::to_string(i);
}

// Every packet of every supported operation on every QP type that carries it has a valid wire
// opcode of that service, for that position, carrying exactly the headers the row says.
TEST(WrOpcodeTest, EveryPacketOfACarriedOperationHasTheWireOpcodeTheRowImplies) {
  int checked = 0;
  for (size_t i = 0; i < wr_table::kSize; ++i) {
    const WrOpcodeInfo& w = wr_table::kRows[i];
    if (!w.supported || (w.flags & kWrLocal)) continue;
    for (ibv_qp_type t : kQpTypes) {
      if (!w.allowed_on(t)) continue;
      struct Position {
        bool first, last;
        uint32_t flag;
      };
      // UD messages are one packet (IBTA 9.8.4); READ, the ATOMICs and ATOMIC WRITE one request
      // packet.
      const bool one = t == IBV_QPT_UD || (w.flags & kWrRespResource);
      const Position all[] = {{true, true, wire::kOnly},
                              {true, false, wire::kFirst},
                              {false, false, wire::kMiddle},
                              {false, true, wire::kLast}};
      for (const Position& p : all) {
        if (one && !(p.first && p.last)) continue;
        const std::string where = name_of(i) + " on QP type " + std::to_string(t) +
                                  (p.first ? " first" : "") + (p.last ? " last" : "");
        const wire::Opcode op = wire_opcode(w, service_of(t), p.first, p.last);
        const wire::OpcodeInfo& info = wire::opcode_info(op);
        ASSERT_NE(info.name, nullptr) << where;
        EXPECT_EQ(wire::service_of(static_cast<uint8_t>(op)), service_of(t)) << where;
        EXPECT_TRUE(info.flags & wire::kRequest) << where;
        const uint32_t f = info.flags;
        if (!(w.flags & kWrRespResource)) {
          EXPECT_EQ(f & (wire::kFirst | wire::kMiddle | wire::kLast), p.flag) << where;
        }
        // The operation itself.
        EXPECT_EQ((f & wire::kSend) != 0, w.wc_opcode == IBV_WC_SEND) << where;
        EXPECT_EQ((f & wire::kWrite) != 0, w.wc_opcode == IBV_WC_RDMA_WRITE) << where;
        EXPECT_EQ((f & wire::kRead) != 0, w.wc_opcode == IBV_WC_RDMA_READ) << where;
        EXPECT_EQ((f & wire::kAtomic) != 0, (w.flags & kWrAtomic) != 0) << where;
        EXPECT_EQ((f & (wire::kRead | wire::kAtomic)) != 0, (w.flags & kWrReadOrAtomic) != 0)
            << where;
        EXPECT_EQ((f & wire::kAtomicWrite) != 0, w.wc_opcode == IBV_WC_ATOMIC_WRITE) << where;
        EXPECT_EQ((f & (wire::kRead | wire::kAtomic | wire::kAtomicWrite)) != 0,
                  (w.flags & kWrRespResource) != 0)
            << where;
        // Its headers: the immediate and the IETH in the last packet, the RETH in the first
        // (a WRITE) or the only one (a READ), the AtomicETH in an atomic's one packet.
        EXPECT_EQ((f & wire::kHasImm) != 0, p.last && (w.flags & kWrImm)) << where;
        EXPECT_EQ((f & wire::kHasIeth) != 0, p.last && (w.flags & kWrInvalidate)) << where;
        EXPECT_EQ((f & wire::kHasReth) != 0, p.first && (w.flags & kWrRdma)) << where;
        EXPECT_EQ((f & wire::kHasAtomicEth) != 0, (w.flags & kWrAtomic) != 0) << where;
        EXPECT_EQ((f & wire::kHasDeth) != 0, t == IBV_QPT_UD) << where;
        // Every XRC request names the XRC SRQ (IBTA 9.3.9), right after BTH.
        EXPECT_EQ((f & wire::kHasXrceth) != 0, t == IBV_QPT_XRC_SEND) << where;
        if (t == IBV_QPT_XRC_SEND) {
          EXPECT_EQ(info.xrceth_off, wire::kBthBytes) << where;
        }
        // Data of its own (what IBV_SEND_INLINE may carry) is what a SEND or WRITE sends.
        if (w.flags & kWrInline) {
          EXPECT_TRUE(f & wire::kHasPayload) << where;
        }
        ++checked;
      }
    }
  }
  // SEND and SEND_WITH_IMM on RC and UC (4 positions) and UD (1); the two WRITEs on RC and UC;
  // SEND_WITH_INV on RC; READ, the two ATOMICs and ATOMIC WRITE, one packet each. XRC again
  // all of RC's but ATOMIC WRITE: 3 SENDs and 2 WRITEs × 4 positions, READ and 2 ATOMICs.
  EXPECT_EQ(checked, 2 * 9 + 2 * 8 + 4 + 4 + 5 * 4 + 3);
}

TEST(WrOpcodeTest, RowsAgreeWithIbvPostSend) {
  std::set<uint64_t> qp_ex_flags;
  for (size_t i = 0; i < wr_table::kSize; ++i) {
    const WrOpcodeInfo& w = wr_table::kRows[i];
    const std::string where = name_of(i);
    EXPECT_EQ(w.supported, (w.flags & (kWrOnRc | kWrOnUc | kWrOnUd)) != 0) << where;
    // Every operation of a UD, UC or XRC QP is one of RC's too (IBTA Table 38).
    if (w.flags & (kWrOnUc | kWrOnUd | kWrOnXrc)) {
      EXPECT_TRUE(w.flags & kWrOnRc) << where;
    }
    // XRC carries every RC operation but the IBTA 1.5 ATOMIC WRITE.
    if (w.flags & kWrOnRc) {
      EXPECT_EQ((w.flags & kWrOnXrc) != 0, i != IBV_WR_ATOMIC_WRITE) << where;
    }
    // Not implemented: no flags at all, so nothing derived claims anything of it.
    if (!w.supported) {
      EXPECT_EQ(w.flags, 0u) << where;
    }
    // Local operations and READ/ATOMIC are RC only; local ones carry no data. So is ATOMIC
    // WRITE, whose 8 bytes may be inline.
    if (w.flags & (kWrLocal | kWrReadOrAtomic)) {
      EXPECT_EQ(w.flags & (kWrOnUc | kWrOnUd), 0u) << where;
      EXPECT_FALSE(w.flags & kWrInline) << where;
    }
    if (w.flags & kWrRespResource) {
      EXPECT_EQ(w.flags & (kWrOnUc | kWrOnUd), 0u) << where;
    }
    // One IBV_QP_EX_WITH_* flag per operation that has one.
    if (w.qp_ex_flag != 0) {
      EXPECT_TRUE(qp_ex_flags.insert(w.qp_ex_flag).second) << where;
    }
    if (w.supported) {
      EXPECT_NE(w.qp_ex_flag, 0u) << where << ": ibv_create_qp_ex must be able to ask for it";
    }
  }
  // The names sit at their own values.
  EXPECT_STREQ(wr_opcode_info(IBV_WR_RDMA_WRITE).name, "IBV_WR_RDMA_WRITE");
  EXPECT_STREQ(wr_opcode_info(IBV_WR_SEND_WITH_INV).name, "IBV_WR_SEND_WITH_INV");
  EXPECT_STREQ(wr_opcode_info(IBV_WR_ATOMIC_WRITE).name, "IBV_WR_ATOMIC_WRITE");
  EXPECT_EQ(wr_opcode_info(IBV_WR_ATOMIC_WRITE).qp_ex_flag, uint64_t{IBV_QP_EX_WITH_ATOMIC_WRITE});
  // ibv_poll_cq(3)'s completion opcodes.
  EXPECT_EQ(wc_opcode_for(IBV_WR_SEND_WITH_IMM), IBV_WC_SEND);
  EXPECT_EQ(wc_opcode_for(IBV_WR_SEND_WITH_INV), IBV_WC_SEND);
  EXPECT_EQ(wc_opcode_for(IBV_WR_RDMA_WRITE_WITH_IMM), IBV_WC_RDMA_WRITE);
  EXPECT_EQ(wc_opcode_for(IBV_WR_RDMA_READ), IBV_WC_RDMA_READ);
  EXPECT_EQ(wc_opcode_for(IBV_WR_ATOMIC_CMP_AND_SWP), IBV_WC_COMP_SWAP);
  EXPECT_EQ(wc_opcode_for(IBV_WR_ATOMIC_FETCH_AND_ADD), IBV_WC_FETCH_ADD);
  EXPECT_EQ(wc_opcode_for(IBV_WR_LOCAL_INV), IBV_WC_LOCAL_INV);
  EXPECT_EQ(wc_opcode_for(IBV_WR_BIND_MW), IBV_WC_BIND_MW);
  EXPECT_EQ(wc_opcode_for(IBV_WR_ATOMIC_WRITE), IBV_WC_ATOMIC_WRITE);
  EXPECT_TRUE(wr_opcode_info(IBV_WR_ATOMIC_WRITE).supported);
  EXPECT_TRUE(wr_opcode_info(IBV_WR_ATOMIC_WRITE).allowed_on(IBV_QPT_RC));
  EXPECT_FALSE(wr_opcode_info(IBV_WR_ATOMIC_WRITE).allowed_on(IBV_QPT_UC));
  EXPECT_FALSE(wr_opcode_info(IBV_WR_ATOMIC_WRITE).allowed_on(IBV_QPT_UD));
  // Values rdma-core leaves undefined are not supported. (Beyond the enum's range, 0..15, a value
  // cannot even be held as an ibv_wr_opcode; the verbs layer refuses it as the int it is.)
  for (int v : {12, 13, 14}) {
    const WrOpcodeInfo& w = wr_opcode_info(static_cast<ibv_wr_opcode>(v));
    EXPECT_FALSE(w.supported) << v;
    EXPECT_EQ(w.name, nullptr) << v;
  }
}

// The questions the roles ask per WQE, and the UD/UC posting check, are the rows' flags.
TEST(WrOpcodeTest, DerivedQuestionsFollowTheRows) {
  for (size_t i = 0; i < wr_table::kSize; ++i) {
    const auto op = static_cast<ibv_wr_opcode>(i);
    const WrOpcodeInfo& w = wr_opcode_info(op);
    const std::string where = name_of(i);
    EXPECT_EQ(is_read_or_atomic(op), (w.flags & kWrReadOrAtomic) != 0) << where;
    EXPECT_EQ(is_atomic(op), (w.flags & kWrAtomic) != 0) << where;
    EXPECT_EQ(uses_resp_resource(op), (w.flags & kWrRespResource) != 0) << where;
    EXPECT_EQ(is_local_op(op), (w.flags & kWrLocal) != 0) << where;
    EXPECT_EQ(wc_opcode_for(op), w.wc_opcode) << where;
    SendWqe wqe;
    wqe.opcode = op;
    wqe.ud_dst_ip = wire::IpAddr(0x0a000001u);
    EXPECT_EQ(unreliable_wqe_ok(IBV_QPT_UC, wqe), (w.flags & kWrOnUc) != 0) << where;
    EXPECT_EQ(unreliable_wqe_ok(IBV_QPT_UD, wqe), (w.flags & kWrOnUd) != 0) << where;
    EXPECT_FALSE(unreliable_wqe_ok(IBV_QPT_RC, wqe)) << where << ": RC never asks";
    wqe.ud_dst_ip = {};
    EXPECT_FALSE(unreliable_wqe_ok(IBV_QPT_UD, wqe)) << where << ": no destination";
  }
  // What the roles were written against: UD carries the SENDs, UC adds the WRITEs.
  EXPECT_TRUE(wr_opcode_info(IBV_WR_SEND_WITH_IMM).allowed_on(IBV_QPT_UD));
  EXPECT_TRUE(wr_opcode_info(IBV_WR_RDMA_WRITE_WITH_IMM).allowed_on(IBV_QPT_UC));
  EXPECT_FALSE(wr_opcode_info(IBV_WR_RDMA_WRITE).allowed_on(IBV_QPT_UD));
  EXPECT_FALSE(wr_opcode_info(IBV_WR_RDMA_READ).allowed_on(IBV_QPT_UC));
  EXPECT_TRUE(wr_opcode_info(IBV_WR_SEND).allowed_on(IBV_QPT_XRC_SEND));
  EXPECT_TRUE(wr_opcode_info(IBV_WR_ATOMIC_FETCH_AND_ADD).allowed_on(IBV_QPT_XRC_SEND));
  EXPECT_FALSE(wr_opcode_info(IBV_WR_ATOMIC_WRITE).allowed_on(IBV_QPT_XRC_SEND));
  EXPECT_FALSE(wr_opcode_info(IBV_WR_SEND).allowed_on(IBV_QPT_XRC_RECV));
}

}  // namespace
}  // namespace uroce::transport
