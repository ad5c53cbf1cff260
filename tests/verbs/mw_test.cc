// Memory windows and invalidation through the verbs API (ibv_alloc_mw, ibv_bind_mw,
// IBV_WR_BIND_MW, IBV_WR_LOCAL_INV, IBV_WR_SEND_WITH_INV and their ibv_wr_* forms), driven as an
// application drives them: this binary links liburoce directly and connects two uroce devices
// on loopback addresses of its own (127.0.10.x).
#include <infiniband/verbs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "verbs_test_util.h"

namespace {

constexpr const char* kDevices = "uroce0=127.0.10.1,uroce1=127.0.10.2";

const auto* const g_env =
    ::testing::AddGlobalTestEnvironment(new uroce::test::DevicesEnv(kDevices));
using uroce::test::poll_n;

constexpr uint64_t kSendOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
                              IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND_WITH_INV |
                              IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW;
constexpr unsigned kRw = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

class MwTest : public ::testing::Test {
 protected:
  // Each side's mr is LOCAL_WRITE | MW_BIND: no remote access without a window.
  using Side = uroce::test::RcSide;

  void SetUp() override {
    open_side(a_, "uroce0");
    open_side(b_, "uroce1");
    if (HasFatalFailure()) return;
    uroce::test::connect_pair(a_, b_, {.access = kRw});
  }

  void TearDown() override {
    for (ibv_mw* mw : mws_) EXPECT_EQ(ibv_dealloc_mw(mw), 0);
    for (Side* s : {&a_, &b_}) uroce::test::close_rc(*s);
  }

  void open_side(Side& s, const char* name) {
    ASSERT_NO_FATAL_FAILURE(
        uroce::test::open_dev(s, name, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND));
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
    ia.sq_sig_all = 1;
    ia.pd = s.pd;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.send_ops_flags = kSendOps;
    s.qp = ibv_create_qp_ex(s.ctx, &ia);
    ASSERT_NE(s.qp, nullptr) << std::strerror(errno);
  }

  ibv_mw* alloc(ibv_mw_type type) {
    ibv_mw* mw = ibv_alloc_mw(b_.pd, type);
    EXPECT_NE(mw, nullptr) << std::strerror(errno);
    if (mw) mws_.push_back(mw);
    return mw;
  }
  uint64_t addr(Side& s, size_t off) { return reinterpret_cast<uintptr_t>(s.buf.data() + off); }

  // Posts an IBV_WR_BIND_MW of `mw` over b's buf[off, off + len) on b's QP; returns the rkey.
  uint32_t bind2(ibv_mw* mw, size_t off, size_t len, unsigned access, ibv_mr* mr = nullptr) {
    ibv_send_wr wr{};
    wr.wr_id = 77;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info.mr = mr ? mr : b_.mr;
    wr.bind_mw.bind_info.addr = addr(b_, off);
    wr.bind_mw.bind_info.length = len;
    wr.bind_mw.bind_info.mw_access_flags = access;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(b_.qp, &wr, &bad), 0);
    return wr.bind_mw.rkey;
  }
  // The next completion of `cq`; status/opcode checked by the caller.
  ibv_wc next(ibv_cq* cq) {
    auto wcs = poll_n(cq, 1);
    EXPECT_EQ(wcs.size(), 1u);
    return wcs.empty() ? ibv_wc{} : wcs[0];
  }
  // a: RDMA WRITE/READ of `len` bytes between a.buf[0] and b.buf[roff] under rkey.
  ibv_wc rdma(ibv_wr_opcode op, size_t roff, uint32_t len, uint32_t rkey) {
    ibv_sge sge{addr(a_, 0), len, a_.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 5;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = addr(b_, roff);
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
    return next(a_.scq);
  }
  void post_recv(Side& s, size_t off, uint32_t len) {
    uroce::test::post_recv_at(s.qp, s, 9, off, len);
  }

  Side a_, b_;
  std::vector<ibv_mw*> mws_;
};

TEST_F(MwTest, DeviceAdvertisesWindows) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(a_.ctx, &attr), 0);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  EXPECT_GT(attr.max_mw, 0);
}

TEST_F(MwTest, AllocAndDeallocBothTypes) {
  ibv_mw* m1 = ibv_alloc_mw(b_.pd, IBV_MW_TYPE_1);
  ibv_mw* m2 = ibv_alloc_mw(b_.pd, IBV_MW_TYPE_2);
  ASSERT_NE(m1, nullptr);
  ASSERT_NE(m2, nullptr);
  EXPECT_EQ(m1->type, IBV_MW_TYPE_1);
  EXPECT_EQ(m2->type, IBV_MW_TYPE_2);
  EXPECT_EQ(m1->pd, b_.pd);
  EXPECT_EQ(m1->context, b_.ctx);
  EXPECT_NE(m1->rkey, m2->rkey);
  EXPECT_NE(m1->rkey, b_.mr->rkey);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(b_.pd, static_cast<ibv_mw_type>(7)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // A window holds its PD.
  ibv_pd* pd = ibv_alloc_pd(b_.ctx);
  ASSERT_NE(pd, nullptr);
  ibv_mw* m3 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
  ASSERT_NE(m3, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
  EXPECT_EQ(ibv_dealloc_mw(m3), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_dealloc_mw(m1), 0);
  EXPECT_EQ(ibv_dealloc_mw(m2), 0);
}

TEST_F(MwTest, TypeTwoWindowGrantsAccessWithinItsRangeOnly) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  const uint32_t rkey = bind2(mw, 4096, 1024, kRw);
  ibv_wc wc = next(b_.scq);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.wr_id, 77u);
  EXPECT_EQ(rkey & 0xff, (mw->rkey + 1) & 0xff);  // the consumer's key byte

  std::memcpy(a_.buf.data(), "window!", 8);
  wc = rdma(IBV_WR_RDMA_WRITE, 4096 + 1016, 8, rkey);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_STREQ(b_.buf.data() + 4096 + 1016, "window!");
  std::memcpy(b_.buf.data() + 4096, "readback", 9);
  wc = rdma(IBV_WR_RDMA_READ, 4096, 9, rkey);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_STREQ(a_.buf.data(), "readback");
  // One byte past the window: remote access error (and the QPs go to ERR).
  wc = rdma(IBV_WR_RDMA_WRITE, 4096 + 1017, 8, rkey);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MwTest, TheMrKeyAloneGrantsNoRemoteAccess) {
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, 0, 8, b_.mr->rkey).status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MwTest, TypeOneWindowIsBoundByTheVerbAndRebindRetiresTheOldKey) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_1);
  const uint32_t key0 = mw->rkey;
  ibv_mw_bind bind{};
  bind.wr_id = 31;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info.mr = b_.mr;
  bind.bind_info.addr = addr(b_, 0);
  bind.bind_info.length = 256;
  bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(ibv_bind_mw(b_.qp, mw, &bind), 0);
  const uint32_t key1 = mw->rkey;
  EXPECT_EQ(key1, ibv_inc_rkey(key0));
  ibv_wc wc = next(b_.scq);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc.wr_id, 31u);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, 100, 8, key1).status, IBV_WC_SUCCESS);

  // Type 1 windows are not bound by work requests.
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_BIND_MW;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(key1);
  wr.bind_mw.bind_info = bind.bind_info;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(b_.qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);

  bind.bind_info.addr = addr(b_, 1024);
  ASSERT_EQ(ibv_bind_mw(b_.qp, mw, &bind), 0);
  const uint32_t key2 = mw->rkey;
  EXPECT_NE(key2, key1);
  EXPECT_EQ(next(b_.scq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, 1024, 8, key2).status, IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, 1024, 8, key1).status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MwTest, BindingNeedsAnMrRegisteredWithMwBind) {
  // int(…): rdma-core's ibv_reg_mr macro ANDs the access flags with IBV_ACCESS_OPTIONAL_RANGE, an
  // enumerator of another enum, which C++20 deprecates for an enumerator (clang:
  // -Wdeprecated-enum-enum-conversion); a combination of flags is an int already.
  ibv_mr* plain = ibv_reg_mr(b_.pd, b_.buf.data(), 4096, int(IBV_ACCESS_LOCAL_WRITE));
  ASSERT_NE(plain, nullptr);
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  bind2(mw, 0, 64, kRw, plain);
  ibv_wc wc = next(b_.scq);
  EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(b_.qp, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);
  EXPECT_EQ(ibv_dereg_mr(plain), 0);
}

TEST_F(MwTest, AnMrWithABoundWindowCannotBeDeregistered) {
  ibv_mr* mr = ibv_reg_mr(b_.pd, b_.buf.data(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_NE(mr, nullptr);
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  bind2(mw, 0, 64, kRw, mr);
  EXPECT_EQ(next(b_.scq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_dereg_mr(mr), EBUSY);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);  // deallocating invalidates and releases the MR
  mws_.clear();
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MwTest, LocalInvalidateKillsTheKey) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  const uint32_t rkey = bind2(mw, 0, 256, kRw);
  EXPECT_EQ(next(b_.scq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, 0, 8, rkey).status, IBV_WC_SUCCESS);
  ibv_send_wr wr{};
  wr.wr_id = 88;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(b_.qp, &wr, &bad), 0);
  ibv_wc wc = next(b_.scq);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(wc.wr_id, 88u);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, 0, 8, rkey).status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MwTest, LocalInvalidateOfAnMrKeyFails) {
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.invalidate_rkey = b_.mr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(b_.qp, &wr, &bad), 0);
  ibv_wc wc = next(b_.scq);
  EXPECT_EQ(wc.status, IBV_WC_LOC_QP_OP_ERR);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
}

TEST_F(MwTest, SendWithInvalidateInvalidatesAtTheReceiver) {
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  const uint32_t rkey = bind2(mw, 0, 256, kRw);
  EXPECT_EQ(next(b_.scq).status, IBV_WC_SUCCESS);
  post_recv(b_, 8192, 1024);
  std::memcpy(a_.buf.data(), "done with it", 13);
  ibv_sge sge{addr(a_, 0), 13, a_.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 3;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.invalidate_rkey = rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  ibv_wc wc = next(a_.scq);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_SEND);
  wc = next(b_.rcq);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 13u);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(wc.invalidated_rkey, rkey);
  EXPECT_STREQ(b_.buf.data() + 8192, "done with it");
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, 0, 8, rkey).status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(MwTest, SendWithInvalidateOfAnMrKeyIsAnInvalidRequest) {
  post_recv(b_, 8192, 1024);
  ibv_sge sge{addr(a_, 0), 8, a_.mr->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.invalidate_rkey = b_.mr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  EXPECT_EQ(next(a_.scq).status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(next(b_.rcq).status, IBV_WC_REM_INV_REQ_ERR);
}

TEST_F(MwTest, WrApiBindsInvalidatesAndSendsWithInvalidate) {
  ibv_qp_ex* bx = ibv_qp_to_qp_ex(b_.qp);
  ibv_qp_ex* ax = ibv_qp_to_qp_ex(a_.qp);
  ASSERT_NE(bx, nullptr);
  ASSERT_NE(ax, nullptr);
  ibv_mw* mw = alloc(IBV_MW_TYPE_2);
  const uint32_t rkey = (mw->rkey & ~0xffu) | 0x33;
  ibv_mw_bind_info info{b_.mr, addr(b_, 0), 512, kRw};
  ibv_wr_start(bx);
  bx->wr_id = 1;
  bx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(bx, mw, rkey, &info);
  bx->wr_id = 2;
  ibv_wr_local_inv(bx, rkey);
  ASSERT_EQ(ibv_wr_complete(bx), 0);
  auto wcs = poll_n(b_.scq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(wcs[1].status, IBV_WC_SUCCESS);

  // Bound again under a new key, then invalidated by the peer's SEND.
  const uint32_t rkey2 = ibv_inc_rkey(rkey);
  ibv_wr_start(bx);
  bx->wr_id = 3;
  ibv_wr_bind_mw(bx, mw, rkey2, &info);
  ASSERT_EQ(ibv_wr_complete(bx), 0);
  EXPECT_EQ(next(b_.scq).status, IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, 0, 8, rkey2).status, IBV_WC_SUCCESS);
  post_recv(b_, 8192, 64);
  ibv_wr_start(ax);
  ax->wr_id = 4;
  ax->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_inv(ax, rkey2);
  ibv_wr_set_sge(ax, a_.mr->lkey, addr(a_, 0), 16);
  ASSERT_EQ(ibv_wr_complete(ax), 0);
  EXPECT_EQ(next(a_.scq).status, IBV_WC_SUCCESS);
  ibv_wc wc = next(b_.rcq);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.invalidated_rkey, rkey2);

  // A type 1 window cannot be bound through ibv_wr_bind_mw: the batch fails.
  ibv_mw* m1 = alloc(IBV_MW_TYPE_1);
  ibv_wr_start(bx);
  ibv_wr_bind_mw(bx, m1, ibv_inc_rkey(m1->rkey), &info);
  EXPECT_EQ(ibv_wr_complete(bx), EINVAL);
}

}  // namespace
