// IBTA 1.5 ATOMIC WRITE through the verbs API, as an application uses it: IBV_WR_ATOMIC_WRITE by
// ibv_post_send (the 8 bytes from an SGE or inline data, the target in wr.rdma),
// ibv_wr_atomic_write on an ibv_qp_ex created with IBV_QP_EX_WITH_ATOMIC_WRITE (the 8 bytes by
// pointer), the capability in ibv_query_device_ex, and the refusals: UC/UD QPs, lengths other than
// 8, and the responder's NAKs (a key without remote write, a misaligned target). This binary links
// liburoce directly and connects two uroce devices on loopback addresses of its own (127.0.24.x).
#include <infiniband/verbs.h>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "verbs_test_util.h"

namespace {

constexpr const char* kDevices = "uroce0=127.0.24.1,uroce1=127.0.24.2";

const auto* const g_env =
    ::testing::AddGlobalTestEnvironment(new uroce::test::DevicesEnv(kDevices));
using uroce::test::poll_n;

constexpr uint64_t kSendOps = IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_RDMA_WRITE;
// IB_UVERBS_DEVICE_ATOMIC_WRITE of the kernel's uAPI: rdma-core 44 has no name for it.
constexpr uint64_t kDeviceAtomicWrite = 1ULL << 40;

class AtomicWriteTest : public ::testing::Test {
 protected:
  using Side = uroce::test::RcSide;

  void SetUp() override {
    open_side(a_, "uroce0");
    open_side(b_, "uroce1");
    if (HasFatalFailure()) return;
    // b's QP lets remote writes in (rxe requires it of an ATOMIC WRITE, as of a WRITE).
    uroce::test::connect_pair(a_, b_, {.access = IBV_ACCESS_REMOTE_WRITE});
  }

  void TearDown() override {
    for (Side* s : {&a_, &b_}) uroce::test::close_rc(*s);
  }

  void open_side(Side& s, const char* name) {
    // Remote write only: what rxe's responder checks an ATOMIC WRITE's R_Key for.
    ASSERT_NO_FATAL_FAILURE(
        uroce::test::open_dev(s, name, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
    s.scq = ibv_create_cq(s.ctx, 128, nullptr, nullptr, 0);
    s.rcq = ibv_create_cq(s.ctx, 128, nullptr, nullptr, 0);
    ASSERT_NE(s.scq, nullptr);
    ASSERT_NE(s.rcq, nullptr);
    ibv_qp_init_attr_ex ia{};
    ia.send_cq = s.scq;
    ia.recv_cq = s.rcq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 64;
    ia.cap.max_recv_wr = 64;
    ia.cap.max_send_sge = 2;
    ia.cap.max_recv_sge = 2;
    ia.cap.max_inline_data = 16;
    ia.sq_sig_all = 1;
    ia.pd = s.pd;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.send_ops_flags = kSendOps;
    s.qp = ibv_create_qp_ex(s.ctx, &ia);
    ASSERT_NE(s.qp, nullptr) << std::strerror(errno);
  }

  static uint64_t addr(Side& s, size_t off) {
    return reinterpret_cast<uintptr_t>(s.buf.data() + off);
  }
  // An IBV_WR_ATOMIC_WRITE of a.buf[loff, +len) to b.buf[roff] under rkey, by ibv_post_send.
  int post(uint64_t id, size_t loff, uint32_t len, size_t roff, uint32_t rkey, unsigned flags = 0) {
    ibv_sge sge{addr(a_, loff), len, a_.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.opcode = IBV_WR_ATOMIC_WRITE;
    wr.send_flags = flags;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = addr(b_, roff);
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(a_.qp, &wr, &bad);
  }
  // The one completion expected on a's send CQ.
  ibv_wc next() {
    auto wcs = poll_n(a_.scq, 1);
    EXPECT_EQ(wcs.size(), 1u);
    return wcs.empty() ? ibv_wc{} : wcs[0];
  }
  bool same(size_t loff, size_t roff) const {
    return std::memcmp(a_.buf.data() + loff, b_.buf.data() + roff, 8) == 0;
  }

  Side a_, b_;
};

TEST_F(AtomicWriteTest, DeviceReportsTheCapability) {
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(a_.ctx, nullptr, &ex), 0);
  EXPECT_TRUE(ex.device_cap_flags_ex & kDeviceAtomicWrite);
}

TEST_F(AtomicWriteTest, PostSendFromAnSgeAndInline) {
  const uint8_t v1[8] = {1, 2, 3, 4, 5, 6, 7, 8}, v2[8] = {9, 10, 11, 12, 13, 14, 15, 16};
  std::memcpy(a_.buf.data(), v1, 8);
  std::memcpy(a_.buf.data() + 8, v2, 8);
  ASSERT_EQ(post(1, 0, 8, 64, b_.mr->rkey), 0);
  ASSERT_EQ(post(2, 8, 8, 128, b_.mr->rkey, IBV_SEND_INLINE), 0);
  // Inline data is taken at post: the buffer may change at once.
  std::memset(a_.buf.data() + 8, 0, 8);
  const std::vector<ibv_wc> wcs = poll_n(a_.scq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (uint64_t id : {1u, 2u}) {
    const ibv_wc& wc = wcs[id - 1];
    EXPECT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.opcode, IBV_WC_ATOMIC_WRITE);
  }
  EXPECT_EQ(std::memcmp(b_.buf.data() + 64, v1, 8), 0);
  EXPECT_EQ(std::memcmp(b_.buf.data() + 128, v2, 8), 0);
  EXPECT_EQ(b_.buf[63], 0);
  EXPECT_EQ(b_.buf[72], 0);
  // No receive completion on the target: it consumes no receive WQE.
  EXPECT_EQ(poll_n(b_.rcq, 1, 50).size(), 0u);
}

TEST_F(AtomicWriteTest, WrAtomicWriteTakesTheValueByPointer) {
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(a_.qp);
  ASSERT_NE(qpx, nullptr);
  ASSERT_NE(qpx->wr_atomic_write, nullptr);
  uint64_t value = 0x1122334455667788;
  ibv_wr_start(qpx);
  qpx->wr_id = 7;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_atomic_write(qpx, b_.mr->rkey, addr(b_, 256), &value);
  value = 0;  // copied when the WR was built
  qpx->wr_id = 8;
  const uint64_t second = 0x0102030405060708;
  ibv_wr_atomic_write(qpx, b_.mr->rkey, addr(b_, 264), &second);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  const std::vector<ibv_wc> wcs = poll_n(a_.scq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (uint64_t id : {7u, 8u}) {
    const ibv_wc& wc = wcs[id - 7];
    EXPECT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.opcode, IBV_WC_ATOMIC_WRITE);
  }
  uint64_t got;
  std::memcpy(&got, b_.buf.data() + 256, 8);
  EXPECT_EQ(got, 0x1122334455667788u);
  std::memcpy(&got, b_.buf.data() + 264, 8);
  EXPECT_EQ(got, 0x0102030405060708u);
}

TEST_F(AtomicWriteTest, LengthOtherThanEightIsRefusedAtPost) {
  EXPECT_EQ(post(1, 0, 4, 64, b_.mr->rkey), EINVAL);
  EXPECT_EQ(post(1, 0, 16, 64, b_.mr->rkey), EINVAL);
  EXPECT_EQ(poll_n(a_.scq, 1, 50).size(), 0u);
}

TEST_F(AtomicWriteTest, MisalignedTargetIsRemoteInvalidRequest) {
  ASSERT_EQ(post(1, 0, 8, 66, b_.mr->rkey), 0);
  const ibv_wc wc = next();
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(wc.status);
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(b_.buf[i], 0) << i;
}

TEST_F(AtomicWriteTest, KeyWithoutRemoteWriteIsRemoteAccessError) {
  std::vector<char> ro(64, 0);
  ibv_mr* mr =
      ibv_reg_mr(b_.pd, ro.data(), ro.size(),
                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  ASSERT_NE(mr, nullptr);
  ibv_sge sge{addr(a_, 0), 8, a_.mr->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_ATOMIC_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(ro.data());
  wr.wr.rdma.rkey = mr->rkey;
  ibv_send_wr* bad = nullptr;
  std::memset(a_.buf.data(), 0x3c, 8);
  ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  const ibv_wc wc = next();
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc.status);
  for (char c : ro) EXPECT_EQ(c, 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// RC only, like rxe: a UC QP refuses the WR at post.
TEST_F(AtomicWriteTest, UcRefusesIt) {
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = a_.scq;
  ia.qp_type = IBV_QPT_UC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ibv_qp* uc = ibv_create_qp(a_.pd, &ia);
  ASSERT_NE(uc, nullptr);
  // RESET → RTS with UC's attribute masks (ibv_modify_qp(3)), so that only the opcode is wrong.
  ibv_qp_attr at = uroce::test::rc_init_attr();
  ASSERT_EQ(
      ibv_modify_qp(uc, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
      0);
  at = uroce::test::rc_rtr_attr(b_.qp->qp_num, b_.gid);
  ASSERT_EQ(
      ibv_modify_qp(uc, &at,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN),
      0);
  at = uroce::test::rc_rts_attr();
  ASSERT_EQ(ibv_modify_qp(uc, &at, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
  ASSERT_EQ(uc->state, IBV_QPS_RTS);
  ibv_sge sge{addr(a_, 0), 8, a_.mr->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_ATOMIC_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(uc, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_EQ(ibv_destroy_qp(uc), 0);
}

}  // namespace
