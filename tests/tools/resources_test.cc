// What uroce-perf derives from a test's operation (src/tools/perf/resources.h, test_opcode): its
// work-request opcode, and from that opcode's row in the transport's opcode table the QP's
// send-ops flag, whether it may go inline and whether -o (outstanding READs/atomics) applies.
#include "tools/perf/resources.h"

#include <gtest/gtest.h>

#include "transport/wr_opcode.h"

namespace uroce::perf {
namespace {

TEST(ResourcesTest, EachTestsOperationIsItsRowOfTheOpcodeTable) {
  struct Case {
    Verb verb;
    AtomicOp atomic;
    ibv_wr_opcode opcode;
    uint64_t send_ops;  // what ibv_create_qp_ex must be asked for
    bool inline_ok;     // perftest's -I applies (SEND and WRITE tests)
    bool rd_atomic;     // -o and the responder depth apply (READ and atomic tests)
  };
  const Case cases[] = {
      {Verb::kSend, AtomicOp::kFetchAndAdd, IBV_WR_SEND, IBV_QP_EX_WITH_SEND, true, false},
      {Verb::kWrite, AtomicOp::kFetchAndAdd, IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE, true,
       false},
      {Verb::kRead, AtomicOp::kFetchAndAdd, IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ, false,
       true},
      {Verb::kAtomic, AtomicOp::kFetchAndAdd, IBV_WR_ATOMIC_FETCH_AND_ADD,
       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, false, true},
      {Verb::kAtomic, AtomicOp::kCmpAndSwap, IBV_WR_ATOMIC_CMP_AND_SWP,
       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, false, true},
  };
  for (const Case& c : cases) {
    const ibv_wr_opcode op = test_opcode(c.verb, c.atomic);
    EXPECT_EQ(op, c.opcode);
    const transport::WrOpcodeInfo& row = transport::wr_opcode_info(op);
    EXPECT_TRUE(row.allowed_on(IBV_QPT_RC)) << row.name;
    EXPECT_EQ(row.qp_ex_flag, c.send_ops) << row.name;
    EXPECT_EQ((row.flags & transport::kWrInline) != 0, c.inline_ok) << row.name;
    EXPECT_EQ((row.flags & transport::kWrReadOrAtomic) != 0, c.rd_atomic) << row.name;
  }
}

}  // namespace
}  // namespace uroce::perf
