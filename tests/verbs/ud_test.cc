// UD queue pairs and address handles through the verbs API: this binary links liburoce directly,
// sends datagrams between a UD QP of uroce0 and one of uroce1, and answers with an AH made from
// the received work completion and GRH (ibv_create_ah_from_wc).
#include <infiniband/verbs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "verbs_test_util.h"

namespace {

// Addresses of their own (127.0.11.20x), so these tests run in parallel with the other suites.
constexpr const char* kDevices = "uroce0=127.0.11.201,uroce1=127.0.11.202";
constexpr uint32_t kQkey = 0x11111111;
constexpr size_t kGrh = 40;

const auto* const g_env =
    ::testing::AddGlobalTestEnvironment(new uroce::test::DevicesEnv(kDevices));
using uroce::test::poll_n;

class UdVerbsTest : public ::testing::Test {
 protected:
  struct Side : uroce::test::Dev {
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
  };

  void SetUp() override {
    open_side(a_, "uroce0");
    open_side(b_, "uroce1");
  }
  void TearDown() override {
    for (Side* s : {&a_, &b_}) {
      if (s->qp) ibv_destroy_qp(s->qp);
      if (s->cq) ibv_destroy_cq(s->cq);
      uroce::test::close_dev(*s, /*check=*/false);
    }
  }
  void open_side(Side& s, const char* name) {
    ASSERT_NO_FATAL_FAILURE(uroce::test::open_dev(s, name));
    s.cq = ibv_create_cq(s.ctx, 64, nullptr, nullptr, 0);
    ASSERT_NE(s.cq, nullptr);
    s.qp = uroce::test::create_ud_qp(s.pd, s.cq);
    ASSERT_NE(s.qp, nullptr);
    EXPECT_EQ(s.qp->qp_type, IBV_QPT_UD);
    ASSERT_NO_FATAL_FAILURE(uroce::test::ud_to_rts(s.qp, kQkey, 7));
  }
  ibv_ah* ah_to(Side& from, const Side& to) { return uroce::test::create_ah(from.pd, to.gid); }
  void post_recv(Side& s, uint64_t id, size_t off, uint32_t len) {
    uroce::test::post_recv_at(s.qp, s, id, off, len);
  }
  int post_send(Side& s, ibv_ah* ah, uint32_t qpn, size_t off, uint32_t len,
                uint32_t qkey = kQkey) {
    return uroce::test::post_ud_send(s.qp, s, off, len, ah, qpn, qkey);
  }

  Side a_, b_;
};

TEST_F(UdVerbsTest, AhNeedsAnIpv4MappedGrh) {
  ibv_ah_attr at{};
  at.port_num = 1;
  at.grh.dgid = b_.gid;
  errno = 0;
  EXPECT_EQ(ibv_create_ah(a_.pd, &at), nullptr) << "no GRH";
  EXPECT_EQ(errno, EINVAL);
  at.is_global = 1;
  at.grh.dgid.raw[0] = 0xfe;  // not ::ffff:a.b.c.d
  errno = 0;
  EXPECT_EQ(ibv_create_ah(a_.pd, &at), nullptr);
  EXPECT_EQ(errno, EINVAL);
  at.grh.dgid = b_.gid;
  at.grh.sgid_index = 1;  // RoCE v1: this (kernel-UDP) device has no GID 1
  errno = 0;
  EXPECT_EQ(ibv_create_ah(a_.pd, &at), nullptr);
  EXPECT_EQ(errno, EINVAL);
  at.grh.sgid_index = 0;
  ibv_ah* ah = ah_to(a_, b_);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(ah->context, a_.ctx);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(UdVerbsTest, DatagramAndReplyThroughAhFromWc) {
  post_recv(b_, 1, 0, kGrh + 1000);
  std::memset(a_.buf.data(), 'x', 1000);
  ibv_ah* ah = ah_to(a_, b_);
  ASSERT_NE(ah, nullptr);
  ASSERT_EQ(post_send(a_, ah, b_.qp->qp_num, 0, 1000), 0);
  auto swc = poll_n(a_.cq, 1);
  ASSERT_EQ(swc.size(), 1u);
  EXPECT_EQ(swc[0].status, IBV_WC_SUCCESS);
  auto rwc = poll_n(b_.cq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rwc[0].byte_len, kGrh + 1000);
  EXPECT_EQ(rwc[0].src_qp, a_.qp->qp_num);
  EXPECT_TRUE(rwc[0].wc_flags & IBV_WC_GRH);
  EXPECT_EQ(std::memcmp(b_.buf.data() + kGrh, a_.buf.data(), 1000), 0);

  // Answer the sender with an AH built from what was received.
  const auto* grh = reinterpret_cast<const ibv_grh*>(b_.buf.data());
  ibv_ah_attr at{};
  ASSERT_EQ(ibv_init_ah_from_wc(b_.ctx, 1, &rwc[0], const_cast<ibv_grh*>(grh), &at), 0);
  EXPECT_TRUE(at.is_global);
  EXPECT_EQ(std::memcmp(&at.grh.dgid, &a_.gid, sizeof(ibv_gid)), 0);
  ibv_ah* back = ibv_create_ah_from_wc(b_.pd, &rwc[0], const_cast<ibv_grh*>(grh), 1);
  ASSERT_NE(back, nullptr);
  post_recv(a_, 2, 4096, kGrh + 64);
  std::memset(b_.buf.data() + 8192, 'y', 64);
  ASSERT_EQ(post_send(b_, back, rwc[0].src_qp, 8192, 64), 0);
  auto reply = poll_n(a_.cq, 1);
  ASSERT_EQ(reply.size(), 1u);
  EXPECT_EQ(reply[0].wr_id, 2u);
  EXPECT_EQ(reply[0].byte_len, kGrh + 64);
  EXPECT_EQ(std::memcmp(a_.buf.data() + 4096 + kGrh, b_.buf.data() + 8192, 64), 0);

  // Without the GRH flag there is nothing to answer to.
  ibv_wc no_grh = rwc[0];
  no_grh.wc_flags = 0;
  errno = 0;
  EXPECT_EQ(ibv_create_ah_from_wc(b_.pd, &no_grh, const_cast<ibv_grh*>(grh), 1), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_destroy_ah(back), 0);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(UdVerbsTest, WrongQkeyIsDroppedAndPostNeedsAnAh) {
  post_recv(b_, 1, 0, kGrh + 64);
  ibv_ah* ah = ah_to(a_, b_);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(post_send(a_, nullptr, b_.qp->qp_num, 0, 64), EINVAL);
  ASSERT_EQ(post_send(a_, ah, b_.qp->qp_num, 0, 64, 0x1234), 0);
  EXPECT_EQ(poll_n(a_.cq, 1).size(), 1u);
  EXPECT_TRUE(poll_n(b_.cq, 1, 200).empty());
  // The receive WQE is still there for a datagram with the right Q_Key.
  ASSERT_EQ(post_send(a_, ah, b_.qp->qp_num, 0, 64), 0);
  auto rwc = poll_n(b_.cq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].wr_id, 1u);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(UdVerbsTest, WrApiSetsTheUdAddress) {
  ibv_qp_init_attr_ex ex{};
  ex.send_cq = ex.recv_cq = a_.cq;
  ex.qp_type = IBV_QPT_UD;
  ex.cap.max_send_wr = ex.cap.max_recv_wr = 4;
  ex.cap.max_send_sge = ex.cap.max_recv_sge = 1;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ex.pd = a_.pd;
  ex.send_ops_flags = IBV_QP_EX_WITH_SEND;
  ibv_qp* qp = ibv_create_qp_ex(a_.ctx, &ex);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.port_num = 1;
  at.qkey = kQkey;
  ASSERT_EQ(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
            0);
  at = {};
  at.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(ibv_modify_qp(qp, &at, IBV_QP_STATE), 0);
  at.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp);
  ASSERT_NE(qpx, nullptr);
  ibv_ah* ah = ah_to(a_, b_);
  ASSERT_NE(ah, nullptr);
  post_recv(b_, 5, 0, kGrh + 32);
  std::memset(a_.buf.data() + 100, 'z', 32);

  // Without an address the batch fails.
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, a_.mr->lkey, reinterpret_cast<uint64_t>(a_.buf.data() + 100), 32);
  ibv_wr_set_ud_addr(qpx, nullptr, b_.qp->qp_num, kQkey);
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);

  ibv_wr_start(qpx);
  qpx->wr_id = 2;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, a_.mr->lkey, reinterpret_cast<uint64_t>(a_.buf.data() + 100), 32);
  ibv_wr_set_ud_addr(qpx, ah, b_.qp->qp_num, kQkey);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);
  auto s = poll_n(a_.cq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 2u);
  auto r = poll_n(b_.cq, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].src_qp, qp->qp_num);
  EXPECT_EQ(std::memcmp(b_.buf.data() + kGrh, a_.buf.data() + 100, 32), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

// A UD QP on an SRQ takes its receive WQEs from the SRQ, in order, and has no receive queue of its
// own to post to (ibv_create_qp(3), IBTA 10.2.9.1).
TEST_F(UdVerbsTest, UdQpOnAnSrqTakesItsReceivesFromIt) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(b_.pd, &sa);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = b_.cq;
  ia.srq = srq;
  ia.qp_type = IBV_QPT_UD;
  ia.cap.max_send_wr = 4;
  ia.cap.max_send_sge = 1;
  ibv_qp* qp = ibv_create_qp(b_.pd, &ia);
  ASSERT_NE(qp, nullptr);
  ASSERT_NO_FATAL_FAILURE(uroce::test::ud_to_rtr(qp, kQkey));

  ibv_sge sge{reinterpret_cast<uint64_t>(b_.buf.data()), kGrh + 64, b_.mr->lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp, &wr, &bad), EINVAL) << "its receives go to the SRQ";
  for (uint64_t id : {41u, 42u}) {
    wr.wr_id = id;
    sge.addr = reinterpret_cast<uint64_t>(b_.buf.data() + (id - 41) * 1024);
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }
  ibv_ah* ah = ah_to(a_, b_);
  ASSERT_NE(ah, nullptr);
  std::memset(a_.buf.data(), 'q', 64);
  ASSERT_EQ(post_send(a_, ah, qp->qp_num, 0, 64), 0);
  ASSERT_EQ(post_send(a_, ah, qp->qp_num, 0, 64), 0);
  auto rwc = poll_n(b_.cq, 2);
  ASSERT_EQ(rwc.size(), 2u);
  EXPECT_EQ(rwc[0].wr_id, 41u);
  EXPECT_EQ(rwc[1].wr_id, 42u);
  for (const ibv_wc& wc : rwc) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.qp_num, qp->qp_num);
    EXPECT_EQ(wc.byte_len, kGrh + 64);
  }
  EXPECT_EQ(std::memcmp(b_.buf.data() + 1024 + kGrh, a_.buf.data(), 64), 0);
  EXPECT_EQ(poll_n(a_.cq, 2).size(), 2u);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// An AH the application never destroys is freed when its context closes (TearDown closes it; the
// sanitizer builds' leak checker fails the run otherwise).
TEST_F(UdVerbsTest, AhLeftOpenIsFreedAtClose) {
  ibv_ah* ah = ah_to(a_, b_);
  ASSERT_NE(ah, nullptr);
  EXPECT_EQ(ah->pd, a_.pd);
}

}  // namespace
