// The verbs API of liburoce, driven the way an application drives it: this binary links liburoce
// directly (no libibverbs behind it) and talks to two uroce devices on loopback addresses.
#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "transport/wr_opcode.h"
#include "uroce/uroce.h"

#include "verbs_test_util.h"

// rdma-core's private query (IBVERBS_PRIVATE_34) that ibv_devinfo imports.
extern "C" int ibv_query_gid_type(struct ibv_context* context, uint8_t port_num, unsigned int index,
                                  int* type);

namespace {

// Addresses of their own, so that ctest never collides with programs run by hand on 127.0.0.1/2.
constexpr const char* kDevices = "uroce0=127.0.7.1,uroce1=127.0.7.2";

const auto* const g_env =
    ::testing::AddGlobalTestEnvironment(new uroce::test::DevicesEnv(kDevices));
using uroce::test::open_named;
using uroce::test::poll_n;

class ContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = open_named("uroce0");
    ASSERT_NE(ctx_, nullptr) << std::strerror(errno);
  }
  void TearDown() override {
    if (ctx_) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
  }
  ibv_context* ctx_ = nullptr;
};

TEST(DeviceList, ListsConfiguredDevices) {
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(n, 2);
  EXPECT_EQ(list[2], nullptr);  // NULL-terminated
  EXPECT_STREQ(ibv_get_device_name(list[0]), "uroce0");
  EXPECT_STREQ(ibv_get_device_name(list[1]), "uroce1");
  EXPECT_EQ(uroce_is_uroce_device(list[0]), 1);
  EXPECT_EQ(list[0]->transport_type, IBV_TRANSPORT_IB);
  EXPECT_EQ(list[0]->node_type, IBV_NODE_CA);
  EXPECT_NE(ibv_get_device_guid(list[0]), 0u);
  EXPECT_NE(ibv_get_device_guid(list[0]), ibv_get_device_guid(list[1]));
  EXPECT_EQ(ibv_get_device_index(list[0]), 0);
  EXPECT_EQ(ibv_get_device_index(list[1]), 1);
  ibv_free_device_list(list);
  // A second list is independent of the first.
  ibv_device** again = ibv_get_device_list(nullptr);
  ASSERT_NE(again, nullptr);
  EXPECT_STREQ(ibv_get_device_name(again[0]), "uroce0");
  ibv_free_device_list(again);
  EXPECT_STRNE(uroce_version(), "");
}

TEST_F(ContextTest, ContextLayoutReachesUroce) {
  EXPECT_EQ(ctx_->abi_compat, __VERBS_ABI_IS_EXTENDED);
  verbs_context* v = verbs_get_ctx(ctx_);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->sz, sizeof(verbs_context));
  EXPECT_NE(ctx_->ops.poll_cq, nullptr);
  EXPECT_NE(ctx_->ops.post_send, nullptr);
  EXPECT_NE(ctx_->ops.post_recv, nullptr);
  EXPECT_NE(ctx_->ops.req_notify_cq, nullptr);
  EXPECT_EQ(ctx_->num_comp_vectors, 1);
  EXPECT_GE(fcntl(ctx_->async_fd, F_GETFD), 0) << "async_fd must be a pollable descriptor";
}

TEST_F(ContextTest, AsyncEventFdIsNonBlockingCapable) {
  // Applications poll async_fd and read events with O_NONBLOCK set, as with the kernel's.
  int flags = fcntl(ctx_->async_fd, F_GETFL);
  ASSERT_GE(flags, 0);
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
  pollfd pfd{ctx_->async_fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0) << "no event pending";
  ibv_async_event ev{};
  errno = 0;
  EXPECT_EQ(ibv_get_async_event(ctx_, &ev), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(ContextTest, ContextsOfOneDeviceShareItsEngine) {
  ibv_context* second = open_named("uroce0");
  ASSERT_NE(second, nullptr) << "a second context must not try to bind the address again";
  ibv_pd* pd1 = ibv_alloc_pd(ctx_);
  ibv_pd* pd2 = ibv_alloc_pd(second);
  ASSERT_NE(pd1, nullptr);
  ASSERT_NE(pd2, nullptr);
  EXPECT_NE(pd1->handle, pd2->handle);
  EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
  EXPECT_EQ(ibv_close_device(second), 0);
  // The first context keeps working after the second closed.
  ibv_port_attr p{};
  EXPECT_EQ(ibv_query_port(ctx_, 1, &p), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd1), 0);
}

TEST_F(ContextTest, CloseReleasesLeftoverObjects) {
  ibv_context* ctx = open_named("uroce1");
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  std::vector<char> buf(4096);
  // int(…): rdma-core's ibv_reg_mr macro ANDs the access flags with IBV_ACCESS_OPTIONAL_RANGE, an
  // enumerator of another enum, which C++20 deprecates for an enumerator (clang:
  // -Wdeprecated-enum-enum-conversion); a combination of flags is an int already.
  ASSERT_NE(ibv_reg_mr(pd, buf.data(), buf.size(), int(IBV_ACCESS_LOCAL_WRITE)), nullptr);
  ibv_cq* cq = ibv_create_cq(ctx, 8, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ASSERT_NE(ibv_create_qp(pd, &ia), nullptr);
  // Like closing the uverbs fd: everything goes with the context (ASan checks for leaks).
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(ContextTest, QueryDeviceTellsLimits) {
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  EXPECT_EQ(std::string(a.fw_ver).rfind("uroce ", 0), 0u) << a.fw_ver;
  EXPECT_NE(a.vendor_id, 0u);
  EXPECT_GT(a.max_mr_size, static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
  EXPECT_EQ(a.max_sge, 16);
  EXPECT_GT(a.max_qp, 0);
  EXPECT_GT(a.max_ah, 0);  // 0 reads as "no address handles"
  EXPECT_GT(a.max_cq, 0);
  EXPECT_GT(a.max_cqe, 0);
  // As large as the CQs middleware asks for (libfabric's rxm: 262144), and enforced.
  EXPECT_GE(a.max_cqe, 262144);
  ibv_cq* big = ibv_create_cq(ctx_, 262144, nullptr, nullptr, 0);
  EXPECT_NE(big, nullptr);
  if (big) {
    EXPECT_EQ(ibv_destroy_cq(big), 0);
  }
  EXPECT_EQ(ibv_create_cq(ctx_, a.max_cqe + 1, nullptr, nullptr, 0), nullptr);
  EXPECT_GT(a.max_mr, 0);
  EXPECT_GT(a.max_qp_wr, 0);
  // rxe's 128 outstanding READ/ATOMIC: perftest sets its depth from the peer's figure.
  EXPECT_GE(a.max_qp_rd_atom, 128);
  EXPECT_GE(a.max_qp_init_rd_atom, 128);
  EXPECT_GE(a.max_res_rd_atom, a.max_qp_rd_atom);
  EXPECT_EQ(a.phys_port_cnt, 1);
  EXPECT_EQ(a.node_guid, ibv_get_device_guid(ctx_->device));
  EXPECT_GT(a.max_srq, 0);
  EXPECT_GT(a.max_srq_wr, 0);
  EXPECT_GT(a.max_srq_sge, 0);
  EXPECT_EQ(a.atomic_cap, IBV_ATOMIC_HCA);  // atomics are atomic across the whole device

  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &ex), 0);
  EXPECT_EQ(std::memcmp(&ex.orig_attr, &a, sizeof a), 0);
  EXPECT_EQ(ex.phys_port_cnt_ex, 1u);  // equal to phys_port_cnt below 256 ports
}

// Every object limit ibv_query_device reports is the one creation enforces: up to it succeeds,
// one past it fails with ENOMEM (a program that sizes itself by the figures must not meet another
// limit first, and one that checks them must not be told of room that is not there). max_ah is
// INT32_MAX: an AH is process memory with no table behind it (ENOMEM when memory runs out).
TEST_F(ContextTest, EveryObjectLimitIsEnforcedAtTheReportedFigure) {
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  EXPECT_EQ(a.max_ah, INT32_MAX);
  auto up_to_the_limit = [](const char* what, int limit, auto make, auto destroy) {
    std::vector<decltype(make())> made;
    made.reserve(static_cast<size_t>(limit));
    for (int i = 0; i < limit; ++i) {
      auto o = make();
      if (!o) {
        ADD_FAILURE() << what << " " << i << " of " << limit << ": " << std::strerror(errno);
        break;
      }
      made.push_back(o);
    }
    if (made.size() == static_cast<size_t>(limit)) {
      errno = 0;
      auto past = make();
      EXPECT_EQ(past, nullptr) << what << ": one past the reported " << limit;
      EXPECT_EQ(errno, ENOMEM) << what;
      if (past) made.push_back(past);
    }
    for (auto o : made) EXPECT_EQ(destroy(o), 0) << what;
  };
  up_to_the_limit(
      "PD", a.max_pd, [&] { return ibv_alloc_pd(ctx_); }, ibv_dealloc_pd);
  up_to_the_limit(
      "CQ", a.max_cq, [&] { return ibv_create_cq(ctx_, 1, nullptr, nullptr, 0); }, ibv_destroy_cq);
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  static char buf[64];
  up_to_the_limit(
      "MR", a.max_mr, [&] { return ibv_reg_mr(pd, buf, sizeof buf, int(IBV_ACCESS_LOCAL_WRITE)); },
      ibv_dereg_mr);
  up_to_the_limit(
      "MW", a.max_mw, [&] { return ibv_alloc_mw(pd, IBV_MW_TYPE_2); }, ibv_dealloc_mw);
  up_to_the_limit(
      "SRQ", a.max_srq,
      [&] {
        ibv_srq_init_attr sa{};
        sa.attr.max_wr = 1;
        sa.attr.max_sge = 1;
        return ibv_create_srq(pd, &sa);
      },
      ibv_destroy_srq);
  ibv_cq* cq = ibv_create_cq(ctx_, 1, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  up_to_the_limit(
      "QP", a.max_qp,
      [&] {
        ibv_qp_init_attr ia{};
        ia.send_cq = ia.recv_cq = cq;
        ia.qp_type = IBV_QPT_UD;
        ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
        ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
        return ibv_create_qp(pd, &ia);
      },
      ibv_destroy_qp);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// The per-object sizes too: a QP or SRQ asked for exactly the reported figure is created, one
// past it is refused with EINVAL (ibv_create_qp(3)), and so is an MR one byte past max_mr_size
// (refused before any memory is looked at).
TEST_F(ContextTest, EverySizeLimitIsEnforcedAtTheReportedFigure) {
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  ibv_cq* cq = ibv_create_cq(ctx_, 1, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  auto qp_with = [&](auto&& set) {
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    set(ia.cap);
    errno = 0;
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    const int err = qp ? 0 : errno;
    if (qp) {
      EXPECT_EQ(ibv_destroy_qp(qp), 0);
    }
    return err;
  };
  const uint32_t wr = static_cast<uint32_t>(a.max_qp_wr), sge = static_cast<uint32_t>(a.max_sge);
  EXPECT_EQ(qp_with([&](ibv_qp_cap& c) { c.max_send_wr = wr; }), 0);
  EXPECT_EQ(qp_with([&](ibv_qp_cap& c) { c.max_send_wr = wr + 1; }), EINVAL);
  EXPECT_EQ(qp_with([&](ibv_qp_cap& c) { c.max_recv_wr = wr; }), 0);
  EXPECT_EQ(qp_with([&](ibv_qp_cap& c) { c.max_recv_wr = wr + 1; }), EINVAL);
  EXPECT_EQ(qp_with([&](ibv_qp_cap& c) { c.max_send_sge = sge; }), 0);
  EXPECT_EQ(qp_with([&](ibv_qp_cap& c) { c.max_send_sge = sge + 1; }), EINVAL);
  EXPECT_EQ(qp_with([&](ibv_qp_cap& c) { c.max_recv_sge = sge; }), 0);
  EXPECT_EQ(qp_with([&](ibv_qp_cap& c) { c.max_recv_sge = sge + 1; }), EINVAL);
  auto srq_with = [&](uint32_t max_wr, uint32_t max_sge) {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = max_wr;
    sa.attr.max_sge = max_sge;
    errno = 0;
    ibv_srq* srq = ibv_create_srq(pd, &sa);
    const int err = srq ? 0 : errno;
    if (srq) {
      EXPECT_EQ(ibv_destroy_srq(srq), 0);
    }
    return err;
  };
  EXPECT_EQ(srq_with(static_cast<uint32_t>(a.max_srq_wr), 1), 0);
  EXPECT_EQ(srq_with(static_cast<uint32_t>(a.max_srq_wr) + 1, 1), EINVAL);
  EXPECT_EQ(srq_with(1, static_cast<uint32_t>(a.max_srq_sge)), 0);
  EXPECT_EQ(srq_with(1, static_cast<uint32_t>(a.max_srq_sge) + 1), EINVAL);
  static char buf[64];
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf, a.max_mr_size + 1, int(IBV_ACCESS_LOCAL_WRITE)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// The capabilities that follow from the operations ibv_post_send accepts are the opcode table's
// (transport/wr_opcode.h): claimed exactly when its rows say the operations are carried.
TEST_F(ContextTest, QueryDeviceCapabilitiesAreTheOpcodeTables) {
  using uroce::transport::wr_opcode_info;
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &ex), 0);
  const bool atomics = wr_opcode_info(IBV_WR_ATOMIC_CMP_AND_SWP).supported &&
                       wr_opcode_info(IBV_WR_ATOMIC_FETCH_AND_ADD).supported;
  EXPECT_EQ(ex.orig_attr.atomic_cap, atomics ? IBV_ATOMIC_HCA : IBV_ATOMIC_NONE);
  const unsigned mw = IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  const unsigned want = wr_opcode_info(IBV_WR_BIND_MW).supported ? mw : 0;
  EXPECT_EQ(ex.orig_attr.device_cap_flags & mw, want);
  EXPECT_EQ(ex.device_cap_flags_ex & mw, want);
}

TEST_F(ContextTest, QueryPortTellsRoceV2Port) {
  ibv_port_attr p{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &p), 0);  // the inline verb, through verbs_context
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(p.max_mtu, IBV_MTU_4096);
  EXPECT_GE(p.active_mtu, IBV_MTU_1024);
  EXPECT_EQ(p.gid_tbl_len, 1);
  EXPECT_EQ(p.pkey_tbl_len, 1);
  EXPECT_GT(p.max_msg_sz, 4096u);
  EXPECT_EQ(ibv_query_port(ctx_, 2, &p), EINVAL);
}

TEST_F(ContextTest, CompatQueryPortWritesOnly48Bytes) {
  // ibv_query_port@IBVERBS_1.1 serves old binaries whose struct ends at `flags`.
  unsigned char buf[sizeof(ibv_port_attr) + 16];
  std::memset(buf, 0xa5, sizeof buf);
  ASSERT_EQ((ibv_query_port)(ctx_, 1, reinterpret_cast<_compat_ibv_port_attr*>(buf)), 0);
  ibv_port_attr p;
  std::memcpy(&p, buf, 48);
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  for (size_t i = 48; i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xa5) << "byte " << i;
}

TEST_F(ContextTest, GidIsIpv4MappedRoceV2) {
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
  char text[INET6_ADDRSTRLEN];
  ASSERT_NE(inet_ntop(AF_INET6, gid.raw, text, sizeof text), nullptr);
  EXPECT_STREQ(text, "::ffff:127.0.7.1");
  EXPECT_NE(ibv_query_gid(ctx_, 1, 1, &gid), 0);
  EXPECT_NE(ibv_query_gid(ctx_, 2, 0, &gid), 0);

  ibv_gid_entry e{};
  ASSERT_EQ(ibv_query_gid_ex(ctx_, 1, 0, &e, 0), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);  // public enum: RoCE v2 = 2
  EXPECT_EQ(e.port_num, 1u);
  EXPECT_EQ(std::memcmp(&e.gid, &gid, sizeof gid), 0);
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, 1, &e, 0), EINVAL);

  ibv_gid_entry table[4]{};
  EXPECT_EQ(ibv_query_gid_table(ctx_, table, 4, 0), 1);
  EXPECT_EQ(table[0].gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_LT(ibv_query_gid_table(ctx_, table, 4, 1), 0);

  int type = -1;
  ASSERT_EQ(ibv_query_gid_type(ctx_, 1, 0, &type), 0);
  EXPECT_EQ(type, 1);  // rdma-core's private enum: RoCE v2 = 1

  __be16 pkey = 0;
  ASSERT_EQ(ibv_query_pkey(ctx_, 1, 0, &pkey), 0);
  EXPECT_EQ(be16toh(pkey), 0xffff);
  EXPECT_NE(ibv_query_pkey(ctx_, 1, 1, &pkey), 0);
  EXPECT_EQ(ibv_get_pkey_index(ctx_, 1, htobe16(0xffff)), 0);
}

TEST_F(ContextTest, PdAndMrLifecycle) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  EXPECT_EQ(pd->context, ctx_);
  std::vector<char> buf(8192);
  ibv_mr* mr =
      ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  EXPECT_EQ(mr->addr, buf.data());
  EXPECT_EQ(mr->length, buf.size());
  EXPECT_EQ(mr->pd, pd);
  EXPECT_EQ(mr->context, ctx_);
  EXPECT_NE(mr->lkey, 0u);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);  // an MR still uses it

  // perftest registers with ibv_reg_mr_iova2 (iova == addr).
  ibv_mr* mr2 = ibv_reg_mr_iova2(pd, buf.data(), 4096, reinterpret_cast<uintptr_t>(buf.data()),
                                 IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr2, nullptr) << std::strerror(errno);
  EXPECT_NE(mr2->lkey, mr->lkey);
  EXPECT_EQ(ibv_dereg_mr(mr2), 0);

  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf.data(), buf.size(), int(IBV_ACCESS_REMOTE_WRITE)), nullptr);
  EXPECT_EQ(errno, EINVAL) << "remote write needs local write";
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf.data(), 0, int(IBV_ACCESS_LOCAL_WRITE)), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf.data(), buf.size(), int(IBV_ACCESS_ZERO_BASED)), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);

  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(ContextTest, CqAndChannelLifecycle) {
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 0, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_create_cq(ctx_, 16, nullptr, nullptr, 1), nullptr) << "one completion vector";

  ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
  ASSERT_NE(ch, nullptr);
  EXPECT_GE(ch->fd, 0);
  int tag = 0;
  ibv_cq* cq = ibv_create_cq(ctx_, 64, &tag, ch, 0);
  ASSERT_NE(cq, nullptr);
  EXPECT_GE(cq->cqe, 64);
  EXPECT_EQ(cq->cq_context, &tag);
  EXPECT_EQ(cq->channel, ch);
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 0);
  EXPECT_EQ(ibv_req_notify_cq(cq, 0), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);
  EXPECT_EQ(ibv_resize_cq(cq, 128), 0);
  EXPECT_GE(cq->cqe, 128);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(ContextTest, UnimplementedVerbsSayEopnotsupp) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd, nullptr);
  // SRQs are implemented (srq_test.cc); only XRC and tag-matching SRQs are not.
  ibv_srq_init_attr_ex sx{};
  sx.attr.max_wr = 16;
  sx.attr.max_sge = 1;
  sx.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
  sx.srq_type = IBV_SRQT_TM;
  sx.pd = pd;
  errno = 0;
  EXPECT_EQ(ibv_create_srq_ex(ctx_, &sx), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // AHs are implemented (ud_test.cc); RoCE needs the GRH, so one without is invalid.
  ibv_ah_attr ah{};
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd, &ah), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Memory windows are implemented (mw_test.cc).
  ibv_td_init_attr td{};
  errno = 0;
  EXPECT_EQ(ibv_alloc_td(ctx_, &td), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

// A connected RC pair between uroce0 and uroce1.
class RcPairTest : public ::testing::Test {
 protected:
  using Side = uroce::test::RcSide;

  void SetUp() override {
    open_side(a_, "uroce0");
    open_side(b_, "uroce1");
    if (HasFatalFailure()) return;
    uroce::test::connect_pair(a_, b_);
  }

  void TearDown() override {
    for (Side* s : {&a_, &b_}) uroce::test::close_rc(*s);
  }

  static ibv_qp_init_attr qp_attr(Side& s) {
    ibv_qp_init_attr ia{};
    ia.send_cq = s.scq;
    ia.recv_cq = s.rcq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 64;
    ia.cap.max_recv_wr = 64;
    ia.cap.max_send_sge = 2;
    ia.cap.max_recv_sge = 2;
    ia.cap.max_inline_data = 64;
    ia.qp_context = &s;
    return ia;
  }

  // ibv_create_qp_ex's attributes for an RC QP of a_ with the ibv_wr_* operations `send_ops`.
  ibv_qp_init_attr_ex send_ops_attr(uint64_t send_ops, uint32_t depth = 4) {
    ibv_qp_init_attr_ex ex{};
    ex.send_cq = a_.scq;
    ex.recv_cq = a_.rcq;
    ex.qp_type = IBV_QPT_RC;
    ex.cap.max_send_wr = ex.cap.max_recv_wr = depth;
    ex.cap.max_send_sge = ex.cap.max_recv_sge = 1;
    ex.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ex.pd = a_.pd;
    ex.send_ops_flags = send_ops;
    return ex;
  }

  void open_side(Side& s, const char* name) {
    ASSERT_NO_FATAL_FAILURE(uroce::test::open_dev(s, name));
    s.ch = ibv_create_comp_channel(s.ctx);
    ASSERT_NE(s.ch, nullptr);
    s.scq = ibv_create_cq(s.ctx, 128, nullptr, nullptr, 0);
    s.rcq = ibv_create_cq(s.ctx, 128, &s, s.ch, 0);
    ASSERT_NE(s.scq, nullptr);
    ASSERT_NE(s.rcq, nullptr);
    ibv_qp_init_attr ia = qp_attr(s);
    s.qp = ibv_create_qp(s.pd, &ia);
    ASSERT_NE(s.qp, nullptr) << std::strerror(errno);
    EXPECT_EQ(s.qp->state, IBV_QPS_RESET);
    EXPECT_GE(ia.cap.max_inline_data, 64u);
  }

  static ibv_qp_attr init_attr() { return uroce::test::rc_init_attr(); }
  static ibv_qp_attr rtr_attr(const Side& remote) {
    return uroce::test::rc_rtr_attr(remote.qp->qp_num, remote.gid);
  }
  static constexpr int kInitMask = uroce::test::kRcInitMask;
  static constexpr int kRtrMask = uroce::test::kRcRtrMask;

  void post_recv(Side& s, uint64_t wr_id, size_t off, uint32_t len) {
    uroce::test::post_recv_at(s.qp, s, wr_id, off, len);
  }

  // Arms b's receive CQ, sends b one message from a and waits on b's channel for the event, which
  // it takes into *cq / *cq_ctx and acknowledges: b's receive completion (wr_id) is then queued
  // and not yet polled.
  void receive_on_armed_cq(uint64_t wr_id, ibv_cq** cq, void** cq_ctx) {
    ASSERT_EQ(ibv_req_notify_cq(b_.rcq, 0), 0);
    post_recv(b_, wr_id, 0, 64);
    ASSERT_EQ(uroce::test::post_send_at(a_.qp, a_, 0, 16), 0);
    pollfd pfd{b_.ch->fd, POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 2000), 1) << "the channel fd must become readable";
    ASSERT_EQ(ibv_get_cq_event(b_.ch, cq, cq_ctx), 0);
    ibv_ack_cq_events(*cq, 1);
  }

  Side a_, b_;
};

TEST_F(RcPairTest, QueryQpReportsStateAndCaps) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(a_.qp, &attr, IBV_QP_STATE | IBV_QP_CAP, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(init.send_cq, a_.scq);
  EXPECT_EQ(init.recv_cq, a_.rcq);
  EXPECT_EQ(init.qp_type, IBV_QPT_RC);
  EXPECT_GE(init.cap.max_send_wr, 64u);
  EXPECT_GE(init.cap.max_inline_data, 64u);
  EXPECT_EQ(a_.qp->qp_context, &a_);
}

// Packet pacing (docs/verbs.md): the range in packet_pacing_caps, ibv_modify_qp_rate_limit on an
// RTS QP, the rate in ibv_query_qp; what the pacer makes of it is transport_tests' PacedLink.
TEST_F(RcPairTest, RateLimitIsSetAndReported) {
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(a_.qp->context, nullptr, &ex), 0);
  EXPECT_EQ(ex.packet_pacing_caps.qp_rate_limit_min, 1u);
  EXPECT_EQ(ex.packet_pacing_caps.qp_rate_limit_max, 100'000'000u);
  EXPECT_TRUE(ex.packet_pacing_caps.supported_qpts & (1u << IBV_QPT_RC));
  ibv_qp_rate_limit_attr rl{};
  rl.rate_limit = 250'000;  // kbit/s
  rl.max_burst_sz = 4096;
  rl.typical_pkt_sz = 4096;
  ASSERT_EQ(ibv_modify_qp_rate_limit(a_.qp, &rl), 0);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(a_.qp, &attr, IBV_QP_RATE_LIMIT, &init), 0);
  EXPECT_EQ(attr.rate_limit, 250'000u);
  rl = {};
  rl.max_burst_sz = 4096;  // a burst without a rate, as mlx5 refuses it
  EXPECT_EQ(ibv_modify_qp_rate_limit(a_.qp, &rl), EINVAL);
  rl = {};
  rl.rate_limit = 100'000'001;  // past qp_rate_limit_max
  EXPECT_EQ(ibv_modify_qp_rate_limit(a_.qp, &rl), EINVAL);
  rl = {};
  rl.comp_mask = 1;
  EXPECT_EQ(ibv_modify_qp_rate_limit(a_.qp, &rl), EINVAL);
}

TEST_F(RcPairTest, SendWithImmCompletesOnBothSides) {
  post_recv(b_, 7, 0, 4096);
  const char msg[] = "hello over uroce";
  std::memcpy(a_.buf.data(), msg, sizeof msg);
  ibv_sge sge{reinterpret_cast<uintptr_t>(a_.buf.data()), sizeof msg, a_.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 42;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htobe32(0xabcd1234);
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);

  auto s = poll_n(a_.scq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(s[0].status);
  EXPECT_EQ(s[0].wr_id, 42u);
  EXPECT_EQ(s[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(s[0].qp_num, a_.qp->qp_num);

  auto r = poll_n(b_.rcq, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(r[0].status);
  EXPECT_EQ(r[0].wr_id, 7u);
  EXPECT_EQ(r[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(r[0].byte_len, sizeof msg);
  EXPECT_TRUE(r[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(r[0].imm_data), 0xabcd1234u);
  EXPECT_EQ(r[0].qp_num, b_.qp->qp_num);
  EXPECT_EQ(r[0].src_qp, a_.qp->qp_num);
  EXPECT_STREQ(b_.buf.data(), msg);
}

TEST_F(RcPairTest, CountersSeeTraffic) {
  auto get = [](ibv_context* ctx, const char* name) -> long long {
    int n = uroce_query_counters(ctx, nullptr, 0);
    EXPECT_GT(n, 0);
    std::vector<uroce_counter> cs(static_cast<size_t>(n));
    EXPECT_EQ(uroce_query_counters(ctx, cs.data(), n), n);
    for (const auto& c : cs)
      if (std::strcmp(c.name, name) == 0) return static_cast<long long>(c.value);
    return -1;
  };
  long long before = get(b_.ctx, "rcvd_pkts");
  ASSERT_GE(before, 0) << "rcvd_pkts is listed";
  post_recv(b_, 1, 0, 64);
  ASSERT_EQ(uroce::test::post_send_at(a_.qp, a_, 0, 8), 0);
  ASSERT_EQ(poll_n(b_.rcq, 1).size(), 1u);
  EXPECT_GT(get(b_.ctx, "rcvd_pkts"), before);

  uroce_counter one;
  EXPECT_EQ(uroce_query_counters(nullptr, &one, 1), -1);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(RcPairTest, MrWithIovaIsAddressedByIova) {
  // ibv_reg_mr_iova2: the region's first byte is named 0x10000 by SGEs, whatever its address.
  std::vector<char> src(256, 0);
  std::memcpy(src.data(), "named by iova", 14);
  constexpr uint64_t kIova = 0x10000;
  ibv_mr* mr = ibv_reg_mr_iova2(a_.pd, src.data(), src.size(), kIova, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << std::strerror(errno);
  post_recv(b_, 1, 0, 64);
  ibv_sge sge{kIova, 14, mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  auto s = poll_n(a_.scq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(s[0].status);
  ASSERT_EQ(poll_n(b_.rcq, 1).size(), 1u);
  EXPECT_STREQ(b_.buf.data(), "named by iova");
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(RcPairTest, InlineSendCopiesAtPostTime) {
  post_recv(b_, 1, 0, 256);
  char payload[32] = "inline payload";
  ibv_sge sge{reinterpret_cast<uintptr_t>(payload), sizeof payload, 0};  // no lkey needed
  ibv_send_wr wr{};
  wr.wr_id = 5;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a_.qp, &wr, &bad), 0);
  std::memset(payload, 'X', sizeof payload);  // the buffer is free again once post returns
  auto r = poll_n(b_.rcq, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].byte_len, 32u);
  EXPECT_STREQ(b_.buf.data(), "inline payload");
  EXPECT_EQ(poll_n(a_.scq, 1).size(), 1u);
}

TEST_F(RcPairTest, PostSendValidatesEveryWr) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(a_.buf.data()), 8, a_.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_TSO;  // raw packet QPs only
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(a_.qp, &wr, &bad), EOPNOTSUPP);
  EXPECT_EQ(bad, &wr);

  wr.opcode = IBV_WR_SEND;
  ibv_sge three[3] = {sge, sge, sge};
  wr.sg_list = three;
  wr.num_sge = 3;  // max_send_sge is 2
  bad = nullptr;
  EXPECT_EQ(ibv_post_send(a_.qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);

  std::vector<char> big(1024);
  ibv_sge inl{reinterpret_cast<uintptr_t>(big.data()), static_cast<uint32_t>(big.size()), 0};
  wr.sg_list = &inl;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_INLINE;  // larger than max_inline_data
  bad = nullptr;
  EXPECT_EQ(ibv_post_send(a_.qp, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);

  // A chain: the good WR before the bad one is posted, *bad_wr names the bad one.
  post_recv(b_, 1, 0, 64);
  ibv_send_wr good{};
  good.wr_id = 11;
  good.sg_list = &sge;
  good.num_sge = 1;
  good.opcode = IBV_WR_SEND;
  good.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr worse = good;
  worse.wr_id = 12;
  worse.opcode = IBV_WR_TSO;
  good.next = &worse;
  bad = nullptr;
  EXPECT_EQ(ibv_post_send(a_.qp, &good, &bad), EOPNOTSUPP);
  EXPECT_EQ(bad, &worse);
  auto s = poll_n(a_.scq, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 11u);

  ibv_recv_wr rwr{};
  rwr.sg_list = three;
  rwr.num_sge = 3;
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(a_.qp, &rwr, &rbad), EINVAL);
  EXPECT_EQ(rbad, &rwr);
}

TEST_F(RcPairTest, CompletionChannelSignalsArmedCq) {
  ibv_cq* cq = nullptr;
  void* cq_ctx = nullptr;
  ASSERT_NO_FATAL_FAILURE(receive_on_armed_cq(3, &cq, &cq_ctx));
  EXPECT_EQ(cq, b_.rcq);
  EXPECT_EQ(cq_ctx, &b_);
  EXPECT_EQ(b_.rcq->comp_events_completed, 1u);
  auto r = poll_n(b_.rcq, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 3u);

  // Not re-armed: a second completion raises no event.
  post_recv(b_, 4, 0, 64);
  ASSERT_EQ(uroce::test::post_send_at(a_.qp, a_, 0, 16), 0);
  ASSERT_EQ(poll_n(b_.rcq, 1).size(), 1u);
  pollfd pfd{b_.ch->fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 50), 0);
}

// A program that polls its channel's non-blocking fd in its own loop, as UCX's ucp_worker_wait
// does: each readable fd is followed by ibv_get_cq_event until it gives an event (EAGAIN sends it
// back to its poll()); it then drains its CQ, arms it, and looks at the channel once more before
// it sleeps again. The fd wakes on the datagram itself while the program has the receive side,
// and on the engine's event after the program went idle long enough for the engine to take the
// receive side back (the pause): both ways, every message's event arrives and no readable fd goes
// unanswered for ever.
TEST_F(RcPairTest, AProgramPollingItsNonBlockingChannelFdGetsEveryEvent) {
  ASSERT_EQ(fcntl(b_.ch->fd, F_SETFL, fcntl(b_.ch->fd, F_GETFL) | O_NONBLOCK), 0);
  ASSERT_EQ(ibv_req_notify_cq(b_.rcq, 0), 0);
  ibv_cq* cq = nullptr;
  void* cq_ctx = nullptr;
  for (int i = 0; i < 30; ++i) {
    if (i % 10 == 9) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the pause
    post_recv(b_, 100 + i, 0, 64);
    ASSERT_EQ(uroce::test::post_send_at(a_.qp, a_, 0, 16, i, IBV_SEND_SIGNALED), 0);
    for (;;) {
      pollfd pfd{b_.ch->fd, POLLIN, 0};
      ASSERT_EQ(poll(&pfd, 1, 30'000), 1) << "message " << i << ": the fd never became readable";
      if (ibv_get_cq_event(b_.ch, &cq, &cq_ctx) == 0) break;
      ASSERT_EQ(errno, EAGAIN);
    }
    EXPECT_EQ(cq, b_.rcq);
    ibv_ack_cq_events(cq, 1);
    auto r = poll_n(b_.rcq, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].wr_id, uint64_t(100 + i));
    ibv_wc wc;
    EXPECT_EQ(ibv_poll_cq(b_.rcq, 1, &wc), 0);
    ASSERT_EQ(ibv_req_notify_cq(b_.rcq, 0), 0);
    EXPECT_EQ(ibv_get_cq_event(b_.ch, &cq, &cq_ctx), -1);
    EXPECT_EQ(errno, EAGAIN);
    ASSERT_EQ(poll_n(a_.scq, 1).size(), 1u) << "message " << i << ": no ACK";
  }
}

TEST_F(RcPairTest, DestroyRemovesTheQpsCompletions) {
  // As mlx4/mlx5, which libfabric's verbs provider is written against: after destroying an
  // endpoint's QP it polls what is left and reports what it finds no completion for as flushed;
  // with the completions left in place, libfabric 1.17's rxm crashed (SIGSEGV) in fi_pingpong -e
  // rdm when one was a receive the peer's disconnect had overtaken.
  ibv_cq* cq = nullptr;
  void* cq_ctx = nullptr;
  ASSERT_NO_FATAL_FAILURE(receive_on_armed_cq(5, &cq, &cq_ctx));

  ASSERT_EQ(ibv_destroy_qp(b_.qp), 0);
  b_.qp = nullptr;
  EXPECT_EQ(poll_n(b_.rcq, 1, 50).size(), 0u);
}

TEST_F(RcPairTest, AMoveToResetRemovesTheQpsCompletions) {
  // As mlx4/mlx5: the flush of an earlier life must not surface once the QP is reconnected.
  post_recv(b_, 6, 0, 64);
  post_recv(b_, 7, 64, 64);
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(b_.qp, &err, IBV_QP_STATE), 0);
  // The flushes are queued at once (the error state's contract, IBTA 10.3.1); none is polled.
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(b_.qp, &reset, IBV_QP_STATE), 0);
  EXPECT_EQ(poll_n(b_.rcq, 1, 50).size(), 0u);
}

// ibv_create_qp_ex takes the send_ops_flags of exactly the operations the opcode table carries.
TEST_F(RcPairTest, SendOpsFlagsAreTheOpcodeTables) {
  for (const uroce::transport::WrOpcodeInfo& row : uroce::transport::wr_table::kRows) {
    if (row.qp_ex_flag == 0) continue;
    ibv_qp_init_attr_ex ex = send_ops_attr(row.qp_ex_flag);
    errno = 0;
    ibv_qp* qp = ibv_create_qp_ex(a_.ctx, &ex);
    if (row.supported) {
      ASSERT_NE(qp, nullptr) << row.name << ": " << std::strerror(errno);
      EXPECT_NE(ibv_qp_to_qp_ex(qp), nullptr) << row.name;
      EXPECT_EQ(ibv_destroy_qp(qp), 0);
    } else {
      EXPECT_EQ(qp, nullptr) << row.name;
      EXPECT_EQ(errno, EOPNOTSUPP) << row.name;
    }
  }
}

// ibv_post_send accepts the opcodes the table carries (EOPNOTSUPP for the others), IBV_SEND_INLINE
// only on those that send data of their own, and each completes with its row's completion opcode.
TEST_F(RcPairTest, PostSendFollowsTheOpcodeTable) {
  // In ERR a WR the QP takes completes at once, flushed: only what the verbs layer refuses fails.
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(a_.qp, &err, IBV_QP_STATE), 0);
  std::vector<uint64_t> taken;
  for (size_t i = 0; i < uroce::transport::wr_table::kSize; ++i) {
    const uroce::transport::WrOpcodeInfo& row = uroce::transport::wr_table::kRows[i];
    if (row.name == nullptr) continue;
    for (bool inl : {false, true}) {
      // A BIND_MW needs a window (tests/verbs/mw_test.cc); inline, the verbs layer refuses it
      // before it looks.
      if (i == IBV_WR_BIND_MW && !inl) continue;
      ibv_sge sge{reinterpret_cast<uintptr_t>(a_.buf.data()), 8, a_.mr->lkey};
      ibv_send_wr wr{};
      wr.wr_id = i << 1 | (inl ? 1 : 0);
      wr.opcode = static_cast<ibv_wr_opcode>(i);
      wr.send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_send_wr* bad = nullptr;
      const int want = !row.supported                                      ? EOPNOTSUPP
                       : inl && !(row.flags & uroce::transport::kWrInline) ? EINVAL
                                                                           : 0;
      EXPECT_EQ(ibv_post_send(a_.qp, &wr, &bad), want) << row.name << (inl ? " inline" : "");
      if (want == 0) taken.push_back(wr.wr_id);
    }
  }
  const std::vector<ibv_wc> wcs = poll_n(a_.scq, taken.size());
  ASSERT_EQ(wcs.size(), taken.size());
  for (size_t k = 0; k < wcs.size(); ++k) {
    EXPECT_EQ(wcs[k].wr_id, taken[k]);
    EXPECT_EQ(wcs[k].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wcs[k].opcode, uroce::transport::wr_table::kRows[wcs[k].wr_id >> 1].wc_opcode)
        << uroce::transport::wr_table::kRows[wcs[k].wr_id >> 1].name;
  }
}

TEST_F(RcPairTest, LifecycleErrors) {
  EXPECT_EQ(ibv_destroy_cq(a_.scq), EBUSY) << "a QP still uses the CQ";

  ibv_qp_init_attr ia = qp_attr(a_);
  ia.qp_type = IBV_QPT_RAW_PACKET;  // RC, UC and UD are implemented
  errno = 0;
  EXPECT_EQ(ibv_create_qp(a_.pd, &ia), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ia = qp_attr(a_);
  ia.cap.max_send_sge = 17;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(a_.pd, &ia), nullptr);
  EXPECT_EQ(errno, EINVAL);

  // TSO: raw packet QPs only.
  ibv_qp_init_attr_ex ex = send_ops_attr(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO);
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(a_.ctx, &ex), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(ibv_qp_to_qp_ex(a_.qp), nullptr) << "created without send ops";

  // A fresh QP: transitions with missing or invalid attributes fail with EINVAL and leave the
  // state alone.
  ia = qp_attr(a_);
  ibv_qp* qp = ibv_create_qp(a_.pd, &ia);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr attr = init_attr();
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX), EINVAL);
  EXPECT_EQ(qp->state, IBV_QPS_RESET);
  attr.port_num = 2;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, kInitMask), EINVAL);
  attr = init_attr();
  ASSERT_EQ(ibv_modify_qp(qp, &attr, kInitMask), 0);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);
  attr = rtr_attr(b_);
  attr.ah_attr.is_global = 0;  // RoCE needs the GRH
  EXPECT_EQ(ibv_modify_qp(qp, &attr, kRtrMask), EINVAL);
  attr = rtr_attr(b_);
  attr.ah_attr.grh.sgid_index = 1;  // RoCE v1: only on a DPDK device with roce_v1=1
  EXPECT_EQ(ibv_modify_qp(qp, &attr, kRtrMask), EINVAL);
  attr = rtr_attr(b_);
  EXPECT_EQ(ibv_modify_qp(qp, &attr, kRtrMask & ~IBV_QP_DEST_QPN), EINVAL);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);
  attr.qp_state = IBV_QPS_ERR;
  EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), 0);
  EXPECT_EQ(qp->state, IBV_QPS_ERR);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

TEST_F(RcPairTest, ExtendedCqPollsCompletions) {
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.wc_flags = IBV_WC_STANDARD_FLAGS;
  ibv_cq_ex* cqx = ibv_create_cq_ex(a_.ctx, &ca);
  ASSERT_NE(cqx, nullptr) << std::strerror(errno);
  ibv_qp_init_attr ia = qp_attr(a_);
  ia.send_cq = ibv_cq_ex_to_cq(cqx);
  ibv_qp* qp = ibv_create_qp(a_.pd, &ia);
  ASSERT_NE(qp, nullptr);

  ibv_poll_cq_attr pa{};
  EXPECT_EQ(ibv_start_poll(cqx, &pa), ENOENT);

  // A send posted in ERR completes with a flush error (IBTA 10.8.3.3): a completion on the
  // extended CQ without needing a peer.
  ibv_qp_attr attr = init_attr();
  ASSERT_EQ(ibv_modify_qp(qp, &attr, kInitMask), 0);
  attr.qp_state = IBV_QPS_ERR;  // RESET -> ERR is not a transition (IBTA 10.3.1); INIT -> ERR is
  ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), 0);
  ASSERT_EQ(uroce::test::post_send_at(qp, a_, 0, 8, 99, IBV_SEND_SIGNALED), 0);

  int rc = ENOENT;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while ((rc = ibv_start_poll(cqx, &pa)) == ENOENT && std::chrono::steady_clock::now() < deadline)
    usleep(100);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(cqx->wr_id, 99u);
  EXPECT_EQ(cqx->status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(ibv_wc_read_qp_num(cqx), qp->qp_num);
  EXPECT_EQ(ibv_next_poll(cqx), ENOENT);
  ibv_end_poll(cqx);

  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
}

TEST_F(RcPairTest, WrApiPostsABatch) {
  // perftest's default path: ibv_create_qp_ex with send ops, ibv_qp_to_qp_ex, ibv_wr_*.
  ibv_qp_init_attr_ex ex = send_ops_attr(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM, 16);
  ibv_qp* qp = ibv_create_qp_ex(a_.ctx, &ex);
  ASSERT_NE(qp, nullptr) << std::strerror(errno);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp);
  ASSERT_NE(qpx, nullptr);
  EXPECT_EQ(qpx->wr_rdma_write, nullptr) << "only the operations asked for";

  // Reconnect b_'s QP to this new QP: both sides RESET -> RTS.
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(b_.qp, &reset, IBV_QP_STATE), 0);
  ASSERT_NO_FATAL_FAILURE(uroce::test::connect_rc(qp, b_.qp->qp_num, b_.gid));
  ASSERT_NO_FATAL_FAILURE(uroce::test::connect_rc(b_.qp, qp->qp_num, a_.gid));

  post_recv(b_, 1, 0, 64);
  post_recv(b_, 2, 64, 64);
  std::memcpy(a_.buf.data(), "first", 6);
  char second[] = "second";
  ibv_wr_start(qpx);
  qpx->wr_id = 21;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, a_.mr->lkey, reinterpret_cast<uintptr_t>(a_.buf.data()), 6);
  qpx->wr_id = 22;
  ibv_wr_send_imm(qpx, htobe32(77));
  ibv_wr_set_inline_data(qpx, second, sizeof second);
  ASSERT_EQ(ibv_wr_complete(qpx), 0);

  auto s = poll_n(a_.scq, 2);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 21u);
  EXPECT_EQ(s[1].wr_id, 22u);
  auto r = poll_n(b_.rcq, 2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].byte_len, 6u);
  EXPECT_STREQ(b_.buf.data(), "first");
  EXPECT_EQ(r[1].byte_len, sizeof second);
  EXPECT_TRUE(r[1].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(r[1].imm_data), 77u);
  EXPECT_STREQ(b_.buf.data() + 64, "second");

  // A bad WR fails the whole batch at ibv_wr_complete.
  ibv_wr_start(qpx);
  qpx->wr_id = 23;
  ibv_wr_send(qpx);
  std::vector<char> big(1024);
  ibv_wr_set_inline_data(qpx, big.data(), big.size());  // over max_inline_data
  EXPECT_EQ(ibv_wr_complete(qpx), EINVAL);
  EXPECT_EQ(poll_n(a_.scq, 1, 50).size(), 0u);

  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

}  // namespace
