// XRC through the verbs API, as an application uses it: ibv_open_xrcd's sharing rules (fd -1, a
// file with O_CREAT / O_EXCL, closing while in use), XRC SRQs and ibv_get_srq_num, XRC send and
// receive QPs with the kernel's attribute masks, SEND / WRITE with immediate / READ / ATOMIC
// through ibv_post_send and the ibv_wr_* API (ibv_wr_set_xrc_srqn), ibv_open_qp, and the errors:
// an SRQ number the receiver does not have is an invalid request, the shapes ibv_create_qp_ex(3)
// forbids are refused. This binary links liburoce directly and connects two uroce devices on
// loopback addresses of its own (127.0.28.x).
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "verbs_test_util.h"

namespace {

constexpr const char* kDevices = "uroce0=127.0.28.1,uroce1=127.0.28.2";

const auto* const g_env =
    ::testing::AddGlobalTestEnvironment(new uroce::test::DevicesEnv(kDevices));
using uroce::test::poll_n;

constexpr unsigned kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

uint64_t addr_of(const void* p) {
  return reinterpret_cast<uintptr_t>(p);
}

ibv_xrcd* open_xrcd(ibv_context* ctx, int fd, int oflags) {
  ibv_xrcd_init_attr a{};
  a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  a.fd = fd;
  a.oflags = oflags;
  return ibv_open_xrcd(ctx, &a);
}

ibv_srq* create_xrc_srq(ibv_context* ctx, ibv_xrcd* xrcd, ibv_cq* cq, ibv_pd* pd) {
  ibv_srq_init_attr_ex a{};
  a.attr.max_wr = 16;
  a.attr.max_sge = 1;
  a.comp_mask =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
  a.srq_type = IBV_SRQT_XRC;
  a.xrcd = xrcd;
  a.cq = cq;
  a.pd = pd;
  return ibv_create_srq_ex(ctx, &a);
}

ibv_qp* create_recv_qp(ibv_context* ctx, ibv_xrcd* xrcd) {
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_XRC_RECV;
  a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  a.xrcd = xrcd;
  return ibv_create_qp_ex(ctx, &a);
}

ibv_qp* create_send_qp(ibv_context* ctx, ibv_pd* pd, ibv_cq* cq, uint64_t send_ops = 0) {
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_XRC_SEND;
  a.send_cq = cq;
  a.cap.max_send_wr = 16;
  a.cap.max_send_sge = 1;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd;
  if (send_ops) {
    a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = send_ops;
  }
  return ibv_create_qp_ex(ctx, &a);
}

// RESET → RTS with the masks of ibv_xsrq_pingpong (the kernel's XRC_INI / XRC_TGT columns).
void connect_xrc(ibv_qp* qp, uint32_t dest_qpn, const ibv_gid& dgid) {
  const bool recv = qp->qp_type == IBV_QPT_XRC_RECV;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags =
      recv ? (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC) : 0;
  ASSERT_EQ(
      ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
      0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 7;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = dgid;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (recv) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 7;
  a.max_rd_atomic = 4;
  mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
  if (!recv) mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  ASSERT_EQ(ibv_modify_qp(qp, &a, mask), 0);
}

// A temporary file to open XRC domains on.
struct DomainFile {
  DomainFile() {
    char tmpl[] = "/tmp/uroce-xrcd.XXXXXX";
    fd = mkstemp(tmpl);
    path = tmpl;
  }
  ~DomainFile() {
    if (fd >= 0) close(fd);
    unlink(path.c_str());
  }
  int fd = -1;
  std::string path;
};

TEST(XrcDomain, OpenAndCloseFollowTheKernelsRules) {
  ibv_context* ctx = uroce::test::open_named("uroce0");
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx, &attr), 0);
  EXPECT_TRUE(attr.device_cap_flags & IBV_DEVICE_XRC);
  // fd -1: a domain of its own each time.
  ibv_xrcd* a = open_xrcd(ctx, -1, O_CREAT);
  ASSERT_NE(a, nullptr) << std::strerror(errno);
  ibv_xrcd* b = open_xrcd(ctx, -1, O_CREAT);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->context, ctx);
  // A file: no domain yet and no O_CREAT is EINVAL; O_CREAT makes one, O_EXCL refuses it then.
  DomainFile f;
  ASSERT_GE(f.fd, 0);
  errno = 0;
  EXPECT_EQ(open_xrcd(ctx, f.fd, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_xrcd* c = open_xrcd(ctx, f.fd, O_CREAT | O_EXCL);
  ASSERT_NE(c, nullptr) << std::strerror(errno);
  errno = 0;
  EXPECT_EQ(open_xrcd(ctx, f.fd, O_CREAT | O_EXCL), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_xrcd* d = open_xrcd(ctx, f.fd, 0);  // the existing one
  ASSERT_NE(d, nullptr);
  // Bad arguments.
  errno = 0;
  EXPECT_EQ(open_xrcd(ctx, 1000000, O_CREAT), nullptr);
  EXPECT_EQ(errno, EBADF);
  errno = 0;
  EXPECT_EQ(open_xrcd(ctx, -1, O_RDWR | O_CREAT), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_xrcd_init_attr bad{};
  bad.comp_mask = IBV_XRCD_INIT_ATTR_FD;  // no oflags
  bad.fd = -1;
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(ctx, &bad), nullptr);
  EXPECT_EQ(errno, EINVAL);

  // A domain of its own cannot close while an SRQ uses it; one on a file closes its handle.
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ASSERT_TRUE(pd && cq);
  ibv_srq* sa = create_xrc_srq(ctx, a, cq, pd);
  ASSERT_NE(sa, nullptr) << std::strerror(errno);
  ibv_srq* sc = create_xrc_srq(ctx, c, cq, pd);
  ASSERT_NE(sc, nullptr);
  uint32_t na = 0, nc = 0;
  ASSERT_EQ(ibv_get_srq_num(sa, &na), 0);
  ASSERT_EQ(ibv_get_srq_num(sc, &nc), 0);
  EXPECT_NE(na, 0u);
  EXPECT_NE(na, nc);
  EXPECT_EQ(ibv_close_xrcd(a), EBUSY);
  EXPECT_EQ(ibv_destroy_cq(cq), EBUSY) << "the XRC SRQs complete into it";
  EXPECT_EQ(ibv_close_xrcd(c), 0) << "the domain on the file lives on through d and the SRQ";
  EXPECT_EQ(ibv_destroy_srq(sa), 0);
  EXPECT_EQ(ibv_destroy_srq(sc), 0);
  EXPECT_EQ(ibv_close_xrcd(a), 0);
  EXPECT_EQ(ibv_close_xrcd(b), 0);
  EXPECT_EQ(ibv_close_xrcd(d), 0);
  // A basic SRQ has no number for XRC requests to name.
  ibv_srq_init_attr basic{};
  basic.attr.max_wr = 4;
  basic.attr.max_sge = 1;
  ibv_srq* s = ibv_create_srq(pd, &basic);
  ASSERT_NE(s, nullptr);
  uint32_t n = 0;
  EXPECT_EQ(ibv_get_srq_num(s, &n), EOPNOTSUPP);
  EXPECT_EQ(ibv_destroy_srq(s), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// uroce0 sends through an XRC send QP; uroce1 receives through an XRC receive QP into two XRC
// SRQs of one domain, each with a CQ of its own.
class XrcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(uroce::test::open_dev(a_, "uroce0", kRemote));
    ASSERT_NO_FATAL_FAILURE(uroce::test::open_dev(b_, "uroce1", kRemote));
    scq_ = ibv_create_cq(a_.ctx, 64, nullptr, nullptr, 0);
    cq1_ = ibv_create_cq(b_.ctx, 64, nullptr, nullptr, 0);
    cq2_ = ibv_create_cq(b_.ctx, 64, nullptr, nullptr, 0);
    ASSERT_TRUE(scq_ && cq1_ && cq2_);
    xrcd_ = open_xrcd(b_.ctx, file_.fd, O_CREAT);
    ASSERT_NE(xrcd_, nullptr) << std::strerror(errno);
    srq1_ = create_xrc_srq(b_.ctx, xrcd_, cq1_, b_.pd);
    srq2_ = create_xrc_srq(b_.ctx, xrcd_, cq2_, b_.pd);
    ASSERT_TRUE(srq1_ && srq2_);
    ASSERT_EQ(ibv_get_srq_num(srq1_, &n1_), 0);
    ASSERT_EQ(ibv_get_srq_num(srq2_, &n2_), 0);
    send_ = create_send_qp(
        a_.ctx, a_.pd, scq_,
        IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD);
    ASSERT_NE(send_, nullptr) << std::strerror(errno);
    recv_ = create_recv_qp(b_.ctx, xrcd_);
    ASSERT_NE(recv_, nullptr) << std::strerror(errno);
    EXPECT_EQ(recv_->qp_type, IBV_QPT_XRC_RECV);
    EXPECT_EQ(recv_->pd, nullptr);
    ASSERT_NO_FATAL_FAILURE(connect_xrc(send_, recv_->qp_num, b_.gid));
    ASSERT_NO_FATAL_FAILURE(connect_xrc(recv_, send_->qp_num, a_.gid));
  }

  void TearDown() override {
    for (ibv_qp* q : {send_, recv_, opened_})
      if (q) {
        EXPECT_EQ(ibv_destroy_qp(q), 0);
      }
    for (ibv_srq* s : {srq1_, srq2_})
      if (s) {
        EXPECT_EQ(ibv_destroy_srq(s), 0);
      }
    if (xrcd_) {
      EXPECT_EQ(ibv_close_xrcd(xrcd_), 0);
    }
    for (ibv_cq* c : {scq_, cq1_, cq2_})
      if (c) {
        EXPECT_EQ(ibv_destroy_cq(c), 0);
      }
    uroce::test::close_dev(a_);
    uroce::test::close_dev(b_);
  }

  void post_srq_recv(ibv_srq* srq, uint64_t wr_id, size_t off, uint32_t len) {
    ibv_sge sge{addr_of(b_.buf.data() + off), len, b_.mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }

  // A SEND (or WRITE with immediate) of a's buffer [off, off + len) to SRQ `srqn`.
  int send(uint32_t srqn, size_t off, uint32_t len, ibv_wr_opcode op = IBV_WR_SEND,
           uint64_t raddr = 0) {
    ibv_sge sge{addr_of(a_.buf.data() + off), len, a_.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = off;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.qp_type.xrc.remote_srqn = srqn;
    wr.imm_data = htobe32(0xabcd);
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = b_.mr->rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(send_, &wr, &bad);
  }

  uroce::test::Dev a_, b_;
  DomainFile file_;
  ibv_cq *scq_ = nullptr, *cq1_ = nullptr, *cq2_ = nullptr;
  ibv_xrcd* xrcd_ = nullptr;
  ibv_srq *srq1_ = nullptr, *srq2_ = nullptr;
  uint32_t n1_ = 0, n2_ = 0;
  ibv_qp *send_ = nullptr, *recv_ = nullptr, *opened_ = nullptr;
};

TEST_F(XrcTest, SendsReachTheSrqTheyName) {
  post_srq_recv(srq1_, 11, 0, 8192);
  post_srq_recv(srq2_, 22, 8192, 8192);
  for (size_t i = 0; i < 8192; ++i) a_.buf[i] = static_cast<char>(i * 7);
  ASSERT_EQ(send(n2_, 0, 5000), 0);  // five packets at MTU 1024
  ASSERT_EQ(send(n1_, 5000, 100), 0);
  auto wcs = poll_n(scq_, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  auto r2 = poll_n(cq2_, 1);
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r2[0].wr_id, 22u);
  EXPECT_EQ(r2[0].byte_len, 5000u);
  EXPECT_EQ(r2[0].qp_num, recv_->qp_num);
  EXPECT_EQ(r2[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(std::memcmp(b_.buf.data() + 8192, a_.buf.data(), 5000), 0);
  auto r1 = poll_n(cq1_, 1);
  ASSERT_EQ(r1.size(), 1u);
  EXPECT_EQ(r1[0].wr_id, 11u);
  EXPECT_EQ(r1[0].byte_len, 100u);
  EXPECT_EQ(std::memcmp(b_.buf.data(), a_.buf.data() + 5000, 100), 0);
}

TEST_F(XrcTest, WriteWithImmediateReadAndAtomicThroughTheWrApi) {
  post_srq_recv(srq1_, 33, 0, 0);
  std::memset(a_.buf.data(), 0x42, 3000);
  ASSERT_EQ(send(n1_, 0, 3000, IBV_WR_RDMA_WRITE_WITH_IMM, addr_of(b_.buf.data() + 1000)), 0);
  auto wcs = poll_n(scq_, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wcs[0].status);
  auto r = poll_n(cq1_, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(be32toh(r[0].imm_data), 0xabcdu);
  EXPECT_EQ(b_.buf[1000], 0x42);
  EXPECT_EQ(b_.buf[3999], 0x42);
  EXPECT_EQ(b_.buf[4000], 0);

  // READ and FETCH_ADD through ibv_wr_*, each naming SRQ 2 (whose PD is the buffer's).
  ibv_qp_ex* qx = ibv_qp_to_qp_ex(send_);
  ASSERT_NE(qx, nullptr);
  uint64_t counter = 100;
  std::memcpy(b_.buf.data() + 16384, &counter, 8);
  ibv_wr_start(qx);
  qx->wr_id = 1;
  qx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_read(qx, b_.mr->rkey, addr_of(b_.buf.data() + 1000));
  ibv_wr_set_xrc_srqn(qx, n2_);
  ibv_wr_set_sge(qx, a_.mr->lkey, addr_of(a_.buf.data() + 20000), 3000);
  qx->wr_id = 2;
  ibv_wr_atomic_fetch_add(qx, b_.mr->rkey, addr_of(b_.buf.data() + 16384), 5);
  ibv_wr_set_xrc_srqn(qx, n2_);
  ibv_wr_set_sge(qx, a_.mr->lkey, addr_of(a_.buf.data() + 30000), 8);
  ASSERT_EQ(ibv_wr_complete(qx), 0);
  wcs = poll_n(scq_, 2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
  EXPECT_EQ(std::memcmp(a_.buf.data() + 20000, b_.buf.data() + 1000, 3000), 0);
  uint64_t fetched = 0, now = 0;
  std::memcpy(&fetched, a_.buf.data() + 30000, 8);
  std::memcpy(&now, b_.buf.data() + 16384, 8);
  EXPECT_EQ(fetched, 100u);
  EXPECT_EQ(now, 105u);
}

TEST_F(XrcTest, AnSrqTheReceiverDoesNotHaveIsAnInvalidRequest) {
  post_srq_recv(srq1_, 11, 0, 4096);
  // A number that is no SRQ of uroce1: its receive QP's (QPs and XRC SRQs are numbered from one
  // space, so no SRQ has it).
  ASSERT_EQ(send(recv_->qp_num, 0, 64), 0);
  auto wcs = poll_n(scq_, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(wcs[0].status);
  EXPECT_TRUE(poll_n(cq1_, 1, 50).empty());
}

TEST_F(XrcTest, OpenQpSharesTheReceiveQpUntilItsLastHandle) {
  ibv_qp_open_attr oa{};
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = recv_->qp_num;
  oa.xrcd = xrcd_;
  oa.qp_type = IBV_QPT_XRC_RECV;
  // Through another handle on the domain's file, from another context of the device.
  ibv_context* other = uroce::test::open_named("uroce1");
  ASSERT_NE(other, nullptr);
  ibv_xrcd* x2 = open_xrcd(other, file_.fd, 0);
  ASSERT_NE(x2, nullptr) << std::strerror(errno);
  oa.xrcd = x2;
  opened_ = ibv_open_qp(other, &oa);
  ASSERT_NE(opened_, nullptr) << std::strerror(errno);
  EXPECT_EQ(opened_->qp_num, recv_->qp_num);
  EXPECT_EQ(opened_->state, IBV_QPS_RTS);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  EXPECT_EQ(ibv_query_qp(opened_, &qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_RTS);
  // The creator's handle goes; the QP stays and still receives.
  ASSERT_EQ(ibv_destroy_qp(recv_), 0);
  recv_ = nullptr;
  post_srq_recv(srq1_, 11, 0, 4096);
  ASSERT_EQ(send(n1_, 0, 64), 0);
  auto wcs = poll_n(scq_, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wcs[0].status);
  EXPECT_EQ(poll_n(cq1_, 1).size(), 1u);
  // Unknown numbers, other types, a missing domain.
  oa.qp_num = 0xabcdef;
  errno = 0;
  EXPECT_EQ(ibv_open_qp(other, &oa), nullptr);
  EXPECT_EQ(errno, EINVAL);
  oa.qp_num = opened_->qp_num;
  oa.qp_type = IBV_QPT_RC;
  EXPECT_EQ(ibv_open_qp(other, &oa), nullptr);
  oa.qp_type = IBV_QPT_XRC_RECV;
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM;
  EXPECT_EQ(ibv_open_qp(other, &oa), nullptr);
  EXPECT_EQ(ibv_destroy_qp(opened_), 0);
  opened_ = nullptr;
  EXPECT_EQ(ibv_close_xrcd(x2), 0);
  EXPECT_EQ(ibv_close_device(other), 0);
}

TEST_F(XrcTest, ShapesTheManPageForbids) {
  // No receive queue on either half, no send queue on the receive half.
  ibv_sge sge{addr_of(b_.buf.data()), 64, b_.mr->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  EXPECT_NE(ibv_post_recv(send_, &rwr, &rbad), 0);
  EXPECT_NE(ibv_post_recv(recv_, &rwr, &rbad), 0);
  ibv_send_wr swr{};
  swr.opcode = IBV_WR_SEND;
  ibv_send_wr* sbad = nullptr;
  EXPECT_NE(ibv_post_send(recv_, &swr, &sbad), 0);
  // ATOMIC WRITE is RC's only.
  errno = 0;
  EXPECT_EQ(create_send_qp(a_.ctx, a_.pd, scq_, IBV_QP_EX_WITH_ATOMIC_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // A receive QP needs a domain; a send QP takes no SRQ.
  ibv_qp_init_attr_ex a{};
  a.qp_type = IBV_QPT_XRC_RECV;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(b_.ctx, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a = {};
  a.qp_type = IBV_QPT_XRC_SEND;
  a.send_cq = scq_;
  a.srq = srq1_;
  a.cap.max_send_wr = 1;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = a_.pd;
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(a_.ctx, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // An XRC SRQ needs a domain, a CQ and a PD.
  ibv_srq_init_attr_ex s{};
  s.attr.max_wr = 4;
  s.attr.max_sge = 1;
  s.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_PD;
  s.srq_type = IBV_SRQT_XRC;
  s.xrcd = xrcd_;
  s.pd = b_.pd;
  errno = 0;
  EXPECT_EQ(ibv_create_srq_ex(b_.ctx, &s), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
