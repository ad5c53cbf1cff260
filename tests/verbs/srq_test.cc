// Shared receive queues and affiliated async events through the verbs API: this binary links
// liburoce directly and connects two RC QPs of uroce0 to two QPs of uroce1 that share one SRQ.
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "verbs_test_util.h"

namespace {

// Addresses of their own (127.0.13.x), so these tests run in parallel with the other suites.
constexpr const char* kDevices = "uroce0=127.0.13.1,uroce1=127.0.13.2";

const auto* const g_env =
    ::testing::AddGlobalTestEnvironment(new uroce::test::DevicesEnv(kDevices));
using uroce::test::next_event;
using uroce::test::open_named;
using uroce::test::poll_n;

constexpr int kQps = 2;
constexpr size_t kSlot = 256;  // bytes per receive buffer slot

class SrqTest : public ::testing::Test {
 protected:
  struct Side : uroce::test::Dev {
    ibv_cq* cq = nullptr;
    ibv_qp* qp[kQps] = {};
  };

  void SetUp() override {
    open_side(a_, "uroce0");
    open_side(b_, "uroce1");
    ASSERT_FALSE(HasFatalFailure());
    ibv_srq_init_attr sa{};
    sa.srq_context = this;
    sa.attr.max_wr = 64;
    sa.attr.max_sge = 1;
    srq_ = ibv_create_srq(b_.pd, &sa);
    ASSERT_NE(srq_, nullptr) << std::strerror(errno);
    EXPECT_GE(sa.attr.max_wr, 64u);
    EXPECT_GE(sa.attr.max_sge, 1u);
    EXPECT_EQ(srq_->context, b_.ctx);
    EXPECT_EQ(srq_->pd, b_.pd);
    EXPECT_EQ(srq_->srq_context, this);
    for (int i = 0; i < kQps; ++i) {
      create_qp(a_, i, nullptr);
      create_qp(b_, i, srq_);
      ASSERT_FALSE(HasFatalFailure());
    }
    for (int i = 0; i < kQps; ++i) {
      connect(a_, i, b_);
      connect(b_, i, a_);
    }
  }

  void TearDown() override {
    for (Side* s : {&a_, &b_})
      for (ibv_qp*& qp : s->qp)
        if (qp) {
          EXPECT_EQ(ibv_destroy_qp(qp), 0);
          qp = nullptr;
        }
    if (srq_) {
      EXPECT_EQ(ibv_destroy_srq(srq_), 0);
    }
    for (Side* s : {&a_, &b_}) {
      if (s->cq) {
        EXPECT_EQ(ibv_destroy_cq(s->cq), 0);
      }
      uroce::test::close_dev(*s);
    }
  }

  void open_side(Side& s, const char* name) {
    ASSERT_NO_FATAL_FAILURE(uroce::test::open_dev(s, name));
    s.cq = ibv_create_cq(s.ctx, 256, nullptr, nullptr, 0);
    ASSERT_NE(s.cq, nullptr);
  }

  void create_qp(Side& s, int i, ibv_srq* srq) {
    ibv_qp_init_attr ia{};
    ia.send_cq = s.cq;
    ia.recv_cq = s.cq;
    ia.srq = srq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 32;
    ia.cap.max_recv_wr = 32;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    s.qp[i] = ibv_create_qp(s.pd, &ia);
    ASSERT_NE(s.qp[i], nullptr) << std::strerror(errno);
    EXPECT_EQ(s.qp[i]->srq, srq);
  }

  static void connect(Side& local, int i, const Side& remote) {
    uroce::test::connect_rc(local.qp[i], remote.qp[i]->qp_num, remote.gid,
                            {.psn = 1, .min_rnr_timer = 1});
  }

  // Posts receive `wr_id` into slot `slot` of b's buffer (kSlot bytes, or `len`).
  void post_srq(uint64_t wr_id, size_t slot, uint32_t len = kSlot) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(b_.buf.data() + slot * kSlot), len, b_.mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_srq_recv(srq_, &wr, &bad), 0);
  }

  // a.qp[i] sends `len` bytes of value `v` (signaled); waits for its send completion.
  void send(int i, char v, uint32_t len = 16, ibv_wc_status want = IBV_WC_SUCCESS) {
    std::memset(a_.buf.data() + i * kSlot, v, len);
    ASSERT_EQ(uroce::test::post_send_at(a_.qp[i], a_, i * kSlot, len, 1000 + i, IBV_SEND_SIGNALED),
              0);
    auto wcs = poll_n(a_.cq, 1);
    ASSERT_EQ(wcs.size(), 1u);
    EXPECT_EQ(wcs[0].status, want) << ibv_wc_status_str(wcs[0].status);
  }

  Side a_, b_;
  ibv_srq* srq_ = nullptr;
};

TEST_F(SrqTest, ReceivesOfSeveralQpsComeFromTheSharedQueue) {
  for (int k = 0; k < 4; ++k) post_srq(k, k);
  send(0, 'a');
  send(1, 'b');
  send(1, 'c');
  send(0, 'd');
  auto wcs = poll_n(b_.cq, 4);
  ASSERT_EQ(wcs.size(), 4u);
  // The SRQ hands out WQEs in posting order to whichever QP needs one next.
  const char want[] = {'a', 'b', 'c', 'd'};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(wcs[k].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[k].opcode, IBV_WC_RECV);
    EXPECT_EQ(wcs[k].wr_id, uint64_t(k));
    EXPECT_EQ(wcs[k].byte_len, 16u);
    EXPECT_EQ(b_.buf[k * kSlot], want[k]);
  }
  EXPECT_EQ(wcs[0].qp_num, b_.qp[0]->qp_num);
  EXPECT_EQ(wcs[1].qp_num, b_.qp[1]->qp_num);
  EXPECT_EQ(wcs[2].qp_num, b_.qp[1]->qp_num);
  EXPECT_EQ(wcs[3].qp_num, b_.qp[0]->qp_num);
}

TEST_F(SrqTest, QpWithSrqRefusesPostRecvAndReportsIt) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(b_.buf.data()), 8, b_.mr->lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_recv(b_.qp[0], &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);

  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(b_.qp[0], &attr, IBV_QP_CAP, &init), 0);
  EXPECT_EQ(init.srq, srq_);
}

TEST_F(SrqTest, PostSrqRecvValidatesAndPostsThePrefix) {
  ibv_sge sge[2] = {{reinterpret_cast<uintptr_t>(b_.buf.data()), 8, b_.mr->lkey},
                    {reinterpret_cast<uintptr_t>(b_.buf.data() + 8), 8, b_.mr->lkey}};
  ibv_recv_wr w2{};
  w2.wr_id = 2;
  w2.sg_list = sge;
  w2.num_sge = 2;  // more than max_sge
  ibv_recv_wr w1{};
  w1.wr_id = 1;
  w1.sg_list = sge;
  w1.num_sge = 1;
  w1.next = &w2;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_recv(srq_, &w1, &bad), EINVAL);
  EXPECT_EQ(bad, &w2);
  // w1 was posted: one send completes into it.
  send(0, 'x', 8);
  auto wcs = poll_n(b_.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
}

TEST_F(SrqTest, QueryAndModify) {
  ibv_srq_attr attr{};
  ASSERT_EQ(ibv_query_srq(srq_, &attr), 0);
  EXPECT_EQ(attr.max_wr, 64u);
  EXPECT_EQ(attr.max_sge, 1u);
  EXPECT_EQ(attr.srq_limit, 0u);
  attr = {};
  attr.max_wr = 128;
  attr.srq_limit = 10;
  ASSERT_EQ(ibv_modify_srq(srq_, &attr, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), 0);
  attr = {};
  ASSERT_EQ(ibv_query_srq(srq_, &attr), 0);
  EXPECT_EQ(attr.max_wr, 128u);
  EXPECT_EQ(attr.srq_limit, 10u);
  attr.srq_limit = 129;
  EXPECT_EQ(ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT), EINVAL);
}

TEST_F(SrqTest, DestroyIsBusyWhileQpsUseIt) {
  EXPECT_EQ(ibv_destroy_srq(srq_), EBUSY);
  ASSERT_EQ(ibv_destroy_qp(b_.qp[0]), 0);
  b_.qp[0] = nullptr;
  EXPECT_EQ(ibv_destroy_srq(srq_), EBUSY);
  ASSERT_EQ(ibv_destroy_qp(b_.qp[1]), 0);
  b_.qp[1] = nullptr;
  EXPECT_EQ(ibv_destroy_srq(srq_), 0);
  srq_ = nullptr;
}

TEST_F(SrqTest, LimitEventFiresOnceOnTheAsyncFdAndModifyRearmsIt) {
  for (int k = 0; k < 3; ++k) post_srq(k, k);
  ibv_srq_attr attr{};
  attr.srq_limit = 2;
  ASSERT_EQ(ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT), 0);
  ibv_async_event ev{};
  send(0, 'a');  // 2 left: not below the limit
  EXPECT_FALSE(next_event(b_.ctx, &ev, 50));
  send(1, 'b');  // 1 left
  ASSERT_TRUE(next_event(b_.ctx, &ev, 2000));
  EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(ev.element.srq, srq_);
  ibv_ack_async_event(&ev);
  ASSERT_EQ(ibv_query_srq(srq_, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 0u) << "disarmed after firing";
  send(0, 'c');  // 0 left, disarmed
  EXPECT_FALSE(next_event(b_.ctx, &ev, 50));

  for (int k = 0; k < 4; ++k) post_srq(10 + k, k);
  attr = {};
  attr.srq_limit = 4;
  ASSERT_EQ(ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT), 0);
  send(1, 'd');  // 3 left < 4
  ASSERT_TRUE(next_event(b_.ctx, &ev, 2000));
  EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  ibv_ack_async_event(&ev);
  EXPECT_EQ(poll_n(b_.cq, 4).size(), 4u);
}

TEST_F(SrqTest, QpToErrReportsLastWqeReached) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(b_.qp[0], &a, IBV_QP_STATE), 0);
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(b_.ctx, &ev, 2000));
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(ev.element.qp, b_.qp[0]);
  ibv_ack_async_event(&ev);
  EXPECT_FALSE(next_event(b_.ctx, &ev, 20)) << "no QP_FATAL for a modify";
  // The other QP still receives from the SRQ.
  post_srq(7, 0);
  send(1, 'z');
  auto wcs = poll_n(b_.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 7u);
  EXPECT_EQ(wcs[0].qp_num, b_.qp[1]->qp_num);
}

TEST_F(SrqTest, TransportErrorReportsQpFatalThenLastWqeReached) {
  post_srq(1, 0, 8);  // too small for the 64-byte message
  send(0, 'q', 64, IBV_WC_REM_INV_REQ_ERR);
  auto wcs = poll_n(b_.cq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_LEN_ERR);
  ibv_async_event ev{};
  ASSERT_TRUE(next_event(b_.ctx, &ev, 2000));
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev.element.qp, b_.qp[0]);
  ibv_ack_async_event(&ev);
  ASSERT_TRUE(next_event(b_.ctx, &ev, 2000));
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(ev.element.qp, b_.qp[0]);
  ibv_ack_async_event(&ev);
  // Acknowledged, so destroy does not wait.
  ASSERT_EQ(ibv_destroy_qp(b_.qp[0]), 0);
  b_.qp[0] = nullptr;
}

TEST_F(SrqTest, DestroyWaitsUntilHandedOutEventsAreAcknowledged) {
  post_srq(1, 0);
  post_srq(2, 1);
  ibv_srq_attr attr{};
  attr.srq_limit = 2;
  ASSERT_EQ(ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT), 0);
  send(0, 'a');  // 1 left < 2
  ibv_async_event srq_ev{};
  ASSERT_TRUE(next_event(b_.ctx, &srq_ev, 2000));
  ASSERT_EQ(srq_ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(b_.qp[0], &a, IBV_QP_STATE), 0);
  ibv_async_event qp_ev{};
  ASSERT_TRUE(next_event(b_.ctx, &qp_ev, 2000));
  ASSERT_EQ(qp_ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);

  // ibv_destroy_qp(3), ibv_destroy_srq(3): destroying waits for the acknowledgements.
  std::atomic<bool> qp_gone{false};
  std::thread t([&] {
    EXPECT_EQ(ibv_destroy_qp(b_.qp[0]), 0);
    qp_gone = true;
  });
  usleep(50'000);
  EXPECT_FALSE(qp_gone);
  ibv_ack_async_event(&qp_ev);
  t.join();
  EXPECT_TRUE(qp_gone);
  b_.qp[0] = nullptr;

  ASSERT_EQ(ibv_destroy_qp(b_.qp[1]), 0);
  b_.qp[1] = nullptr;
  std::atomic<bool> srq_gone{false};
  std::thread u([&] {
    EXPECT_EQ(ibv_destroy_srq(srq_), 0);
    srq_gone = true;
  });
  usleep(50'000);
  EXPECT_FALSE(srq_gone);
  ibv_ack_async_event(&srq_ev);
  u.join();
  EXPECT_TRUE(srq_gone);
  srq_ = nullptr;
}

TEST_F(SrqTest, CreateSrqExBasicOnlyAndRcOnly) {
  ibv_srq_init_attr_ex x{};
  x.attr.max_wr = 8;
  x.attr.max_sge = 2;
  x.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  x.srq_type = IBV_SRQT_BASIC;
  x.pd = b_.pd;
  ibv_srq* s = ibv_create_srq_ex(b_.ctx, &x);
  ASSERT_NE(s, nullptr) << std::strerror(errno);
  EXPECT_EQ(ibv_destroy_srq(s), 0);
  // An XRC SRQ needs an XRC domain and a CQ (xrc_test.cc has the rest).
  x.srq_type = IBV_SRQT_XRC;
  errno = 0;
  EXPECT_EQ(ibv_create_srq_ex(b_.ctx, &x), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_srq_init_attr bad{};
  bad.attr.max_wr = 0;
  bad.attr.max_sge = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_srq(b_.pd, &bad), nullptr);
  EXPECT_EQ(errno, EINVAL);
  bad.attr.max_wr = 1u << 30;
  EXPECT_EQ(ibv_create_srq(b_.pd, &bad), nullptr);
  // An SRQ of another context cannot feed a QP.
  ibv_qp_init_attr ia{};
  ia.send_cq = a_.cq;
  ia.recv_cq = a_.cq;
  ia.srq = srq_;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(a_.pd, &ia), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(SrqTest, CloseDeviceReleasesALeftoverSrq) {
  ibv_context* ctx = open_named("uroce1");
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  ASSERT_NE(ibv_create_srq(pd, &sa), nullptr);
  EXPECT_EQ(ibv_close_device(ctx), 0);  // ASan/LSan would report the SRQ otherwise
}

}  // namespace
