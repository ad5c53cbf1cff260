// How the transport builds its work completions (transport/wc.h): a send completion's opcode is
// its work request's row's (wr_opcode.h) and its byte_len the message's; a flushed one carries
// nothing but wr_id, status, opcode and QP; a receive completion takes its immediate data or
// invalidated R_Key from the message's last packet, as that packet's opcode says.
#include "transport/wc.h"

#include <gtest/gtest.h>

namespace uroce::transport {
namespace {

TEST(WcTest, SendCompletionsTakeTheirOpcodeFromTheRow) {
  for (const WrOpcodeInfo& row : wr_table::kRows) {
    if (!row.supported) continue;
    SendEntry e;
    e.wqe.wr_id = 0x1234;
    e.wqe.opcode = static_cast<ibv_wr_opcode>(&row - wr_table::kRows.data());
    e.length = 777;
    const ibv_wc wc = make_send_wc(e, IBV_WC_REM_ACCESS_ERR, 0x42);
    EXPECT_EQ(wc.opcode, row.wc_opcode) << row.name;
    EXPECT_EQ(wc.wr_id, 0x1234u);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
    EXPECT_EQ(wc.qp_num, 0x42u);
    EXPECT_EQ(wc.byte_len, 777u);
    EXPECT_EQ(wc.wc_flags, 0u);
    EXPECT_EQ(wc.src_qp, 0u);
  }
}

TEST(WcTest, FlushedCompletionsCarryOnlyWhatIbvPollCqDefines) {
  const ibv_wc wc = flush_wc(9, IBV_WC_RECV, 0x17);
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.qp_num, 0x17u);
  EXPECT_EQ(wc.byte_len, 0u);
  EXPECT_EQ(wc.wc_flags, 0u);
  EXPECT_EQ(wc.src_qp, 0u);
  EXPECT_EQ(wc.imm_data, 0u);
  EXPECT_EQ(wc.vendor_err, 0u);
}

TEST(WcTest, ReceiveCompletionsTakeImmediateOrInvalidateFromTheLastPacket) {
  wire::Packet imm;
  imm.info = &wire::opcode_info(wire::Opcode::kRcSendLastImm);
  imm.imm_be = 0xabcdef01;
  ibv_wc wc = make_recv_wc(5, IBV_WC_SUCCESS, IBV_WC_RECV, 0x20, 0x30, 100, &imm);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.qp_num, 0x20u);
  EXPECT_EQ(wc.src_qp, 0x30u);
  EXPECT_EQ(wc.byte_len, 100u);
  EXPECT_EQ(wc.wc_flags, unsigned{IBV_WC_WITH_IMM});
  EXPECT_EQ(wc.imm_data, 0xabcdef01u);

  wire::Packet inv;
  inv.info = &wire::opcode_info(wire::Opcode::kRcSendOnlyInv);
  inv.ieth_rkey = 0x8000aa01;
  wc = make_recv_wc(6, IBV_WC_SUCCESS, IBV_WC_RECV, 0x20, 0x30, 8, &inv);
  EXPECT_EQ(wc.wc_flags, unsigned{IBV_WC_WITH_INV});
  EXPECT_EQ(wc.invalidated_rkey, 0x8000aa01u);

  wire::Packet plain;
  plain.info = &wire::opcode_info(wire::Opcode::kRcSendLast);
  plain.imm_be = 0x55;  // not carried by a plain LAST: not reported
  wc = make_recv_wc(7, IBV_WC_SUCCESS, IBV_WC_RECV, 0x20, 0x30, 8, &plain);
  EXPECT_EQ(wc.wc_flags, 0u);
  EXPECT_EQ(wc.imm_data, 0u);
  // No last packet (a message that failed before it): nothing from it.
  wc = make_recv_wc(8, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0x20, 0x30, 0, nullptr);
  EXPECT_EQ(wc.wc_flags, 0u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
}

}  // namespace
}  // namespace uroce::transport
