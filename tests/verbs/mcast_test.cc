// UD multicast through the verbs API (ibv_attach_mcast / ibv_detach_mcast): UD QPs of uroce1
// attach to an IPv4 group, a UD QP of uroce0 sends to the group's MGID with the multicast QPN
// 0xFFFFFF, and every attached QP with the right Q_Key receives a copy.
//
// Both devices live on loopback addresses. Linux delivers multicast on lo without any set-up
// (the sender picks the interface with IP_MULTICAST_IF, the receivers join on lo by address, and
// multicast loopback copies the datagram to them), so this needs neither root nor a route.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "verbs_test_util.h"

namespace {

// Addresses of their own (127.0.19.x), so these tests run in parallel with the other suites.
constexpr const char* kDevices = "uroce0=127.0.19.1,uroce1=127.0.19.2";
constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kMcastQpn = 0xffffff;
constexpr size_t kGrh = 40;

const auto* const g_env =
    ::testing::AddGlobalTestEnvironment(new uroce::test::DevicesEnv(kDevices));
using uroce::test::poll_n;

// ::ffff:a.b.c.d, the RoCEv2 MGID of an IPv4 group.
ibv_gid v4_gid(const char* ip) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  in_addr a{};
  inet_pton(AF_INET, ip, &a);
  std::memcpy(g.raw + 12, &a, 4);
  return g;
}

class McastVerbsTest : public ::testing::Test {
 protected:
  struct Side : uroce::test::Dev {
    ibv_cq* cq = nullptr;
    std::vector<ibv_qp*> qps;
  };

  void SetUp() override {
    open_side(a_, "uroce0");
    open_side(b_, "uroce1");
  }
  void TearDown() override {
    for (Side* s : {&a_, &b_}) {
      for (ibv_qp* qp : s->qps) ibv_destroy_qp(qp);
      if (s->cq) ibv_destroy_cq(s->cq);
      uroce::test::close_dev(*s, /*check=*/false);
    }
  }
  void open_side(Side& s, const char* name) {
    ASSERT_NO_FATAL_FAILURE(uroce::test::open_dev(s, name));
    s.cq = ibv_create_cq(s.ctx, 64, nullptr, nullptr, 0);
    ASSERT_NE(s.cq, nullptr);
  }
  // A UD QP in RTS with Q_Key `qkey`, owned by the side.
  ibv_qp* ud_qp(Side& s, uint32_t qkey = kQkey) {
    ibv_qp* qp = uroce::test::create_ud_qp(s.pd, s.cq);
    EXPECT_NE(qp, nullptr);
    if (!qp) return nullptr;
    s.qps.push_back(qp);
    uroce::test::ud_to_rts(qp, qkey);
    return qp;
  }
  ibv_ah* group_ah(Side& from, const ibv_gid& mgid) {
    return uroce::test::create_ah(from.pd, mgid);
  }
  void post_recv(Side& s, ibv_qp* qp, uint64_t id, size_t off, uint32_t len) {
    uroce::test::post_recv_at(qp, s, id, off, len);
  }
  // Sends `len` bytes of a_.buf from `qp` to the group and waits for the send completion.
  void send_to_group(ibv_qp* qp, ibv_ah* ah, uint32_t len, uint32_t qkey = kQkey) {
    ASSERT_EQ(uroce::test::post_ud_send(qp, a_, 0, len, ah, kMcastQpn, qkey), 0);
    auto swc = poll_n(a_.cq, 1);
    ASSERT_EQ(swc.size(), 1u);
    EXPECT_EQ(swc[0].status, IBV_WC_SUCCESS);
  }

  Side a_, b_;
};

TEST_F(McastVerbsTest, AttachChecksQpTypeAndMgid) {
  ibv_qp* ud = ud_qp(b_);
  ASSERT_NE(ud, nullptr);
  const ibv_gid group = v4_gid("239.19.0.1");
  // A unicast GID names no group.
  EXPECT_EQ(ibv_attach_mcast(ud, nullptr, 0), EINVAL);
  const ibv_gid unicast = v4_gid("127.0.19.1");
  EXPECT_EQ(ibv_attach_mcast(ud, &unicast, 0), EINVAL);
  // Only UD QPs take part in multicast.
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = b_.cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ibv_qp* rc = ibv_create_qp(b_.pd, &ia);
  ASSERT_NE(rc, nullptr);
  b_.qps.push_back(rc);
  EXPECT_EQ(ibv_attach_mcast(rc, &group, 0), EINVAL);
  // Detaching what is not attached fails; attaching twice is harmless.
  EXPECT_EQ(ibv_detach_mcast(ud, &group, 0), EINVAL);
  EXPECT_EQ(ibv_attach_mcast(ud, &group, 0), 0);
  EXPECT_EQ(ibv_attach_mcast(ud, &group, 0), 0);
  EXPECT_EQ(ibv_detach_mcast(ud, &group, 0), 0);
  EXPECT_EQ(ibv_detach_mcast(ud, &group, 0), EINVAL);
}

TEST_F(McastVerbsTest, LimitsAreReportedAndEnforced) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(b_.ctx, &attr), 0);
  ASSERT_GT(attr.max_mcast_grp, 0);
  ASSERT_GT(attr.max_mcast_qp_attach, 0);
  EXPECT_EQ(attr.max_total_mcast_qp_attach, attr.max_mcast_grp * attr.max_mcast_qp_attach);
  const ibv_gid group = v4_gid("239.19.0.6");
  for (int i = 0; i < attr.max_mcast_qp_attach; ++i) {
    ibv_qp* qp = ud_qp(b_);
    ASSERT_NE(qp, nullptr);
    ASSERT_EQ(ibv_attach_mcast(qp, &group, 0), 0) << i;
  }
  ibv_qp* one_more = ud_qp(b_);
  ASSERT_NE(one_more, nullptr);
  EXPECT_EQ(ibv_attach_mcast(one_more, &group, 0), ENOMEM);
}

TEST_F(McastVerbsTest, GroupDatagramReachesEveryAttachedQp) {
  ibv_qp* tx = ud_qp(a_);
  ibv_qp* r1 = ud_qp(b_);
  ibv_qp* r2 = ud_qp(b_);
  ibv_qp* outsider = ud_qp(b_);  // not attached: gets nothing
  ASSERT_TRUE(tx && r1 && r2 && outsider);
  const ibv_gid group = v4_gid("239.19.0.2");
  // The same group by its other MGID form, ff0e::ffff:239.19.0.2.
  ibv_gid group_ff0e = group;
  group_ff0e.raw[0] = 0xff;
  group_ff0e.raw[1] = 0x0e;
  ASSERT_EQ(ibv_attach_mcast(r1, &group, 0), 0);
  ASSERT_EQ(ibv_attach_mcast(r2, &group_ff0e, 0), 0);
  post_recv(b_, r1, 1, 0, kGrh + 512);
  post_recv(b_, r2, 2, 4096, kGrh + 512);
  post_recv(b_, outsider, 3, 8192, kGrh + 512);
  for (int i = 0; i < 300; ++i) a_.buf[i] = static_cast<char>(i * 7);
  ibv_ah* ah = group_ah(a_, group);
  ASSERT_NE(ah, nullptr);
  send_to_group(tx, ah, 300);

  auto rwc = poll_n(b_.cq, 2);
  ASSERT_EQ(rwc.size(), 2u);
  bool got1 = false, got2 = false;
  for (const ibv_wc& wc : rwc) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, kGrh + 300);
    EXPECT_EQ(wc.src_qp, tx->qp_num);
    EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
    const size_t off = wc.wr_id == 1 ? 0 : 4096;
    if (wc.wr_id == 1) got1 = wc.qp_num == r1->qp_num;
    if (wc.wr_id == 2) got2 = wc.qp_num == r2->qp_num;
    EXPECT_EQ(std::memcmp(b_.buf.data() + off + kGrh, a_.buf.data(), 300), 0);
    // The GRH area's IPv4 header (its last 20 bytes) names the sender and the group.
    const uint8_t* ip = reinterpret_cast<const uint8_t*>(b_.buf.data() + off + 20);
    in_addr src{}, dst{};
    std::memcpy(&src, ip + 12, 4);
    std::memcpy(&dst, ip + 16, 4);
    EXPECT_STREQ(inet_ntoa(src), "127.0.19.1");
    EXPECT_STREQ(inet_ntoa(dst), "239.19.0.2");
  }
  EXPECT_TRUE(got1 && got2);
  EXPECT_TRUE(poll_n(b_.cq, 1, 100).empty()) << "the unattached QP received a copy";
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(McastVerbsTest, DetachStopsDelivery) {
  ibv_qp* tx = ud_qp(a_);
  ibv_qp* stays = ud_qp(b_);
  ibv_qp* leaves = ud_qp(b_);
  ASSERT_TRUE(tx && stays && leaves);
  const ibv_gid group = v4_gid("239.19.0.3");
  ASSERT_EQ(ibv_attach_mcast(stays, &group, 0), 0);
  ASSERT_EQ(ibv_attach_mcast(leaves, &group, 0), 0);
  ASSERT_EQ(ibv_detach_mcast(leaves, &group, 0), 0);
  post_recv(b_, stays, 1, 0, kGrh + 64);
  post_recv(b_, leaves, 2, 4096, kGrh + 64);
  ibv_ah* ah = group_ah(a_, group);
  ASSERT_NE(ah, nullptr);
  send_to_group(tx, ah, 64);
  // The QP still attached shows the datagram went out; the detached one gets no copy.
  auto rwc = poll_n(b_.cq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].qp_num, stays->qp_num);
  EXPECT_TRUE(poll_n(b_.cq, 1, 100).empty()) << "a detached QP received a copy";

  // With no member left the device leaves the group: nothing arrives any more.
  ASSERT_EQ(ibv_detach_mcast(stays, &group, 0), 0);
  post_recv(b_, stays, 3, 0, kGrh + 64);
  send_to_group(tx, ah, 64);
  EXPECT_TRUE(poll_n(b_.cq, 1, 200).empty()) << "delivered after the last detach";
  // Attaching again resumes delivery (the receive WQEs posted above are still there).
  ASSERT_EQ(ibv_attach_mcast(leaves, &group, 0), 0);
  send_to_group(tx, ah, 64);
  rwc = poll_n(b_.cq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].qp_num, leaves->qp_num);
  EXPECT_EQ(rwc[0].wr_id, 2u);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(McastVerbsTest, QkeyMismatchIsDropped) {
  ibv_qp* tx = ud_qp(a_);
  ibv_qp* rx = ud_qp(b_);
  ibv_qp* other_key = ud_qp(b_, kQkey + 1);
  ASSERT_TRUE(tx && rx && other_key);
  const ibv_gid group = v4_gid("239.19.0.4");
  ASSERT_EQ(ibv_attach_mcast(rx, &group, 0), 0);
  ASSERT_EQ(ibv_attach_mcast(other_key, &group, 0), 0);
  post_recv(b_, rx, 1, 0, kGrh + 64);
  post_recv(b_, rx, 2, 4096, kGrh + 64);
  post_recv(b_, other_key, 3, 8192, kGrh + 64);
  ibv_ah* ah = group_ah(a_, group);
  ASSERT_NE(ah, nullptr);
  // A Q_Key neither member has: both drop it (IBTA C10-15).
  send_to_group(tx, ah, 64, 0x5555);
  EXPECT_TRUE(poll_n(b_.cq, 1, 200).empty()) << "a datagram with a foreign Q_Key was delivered";
  // kQkey: only the member whose Q_Key it is receives, into its first receive WQE.
  send_to_group(tx, ah, 64);
  auto rwc = poll_n(b_.cq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].qp_num, rx->qp_num);
  EXPECT_EQ(rwc[0].wr_id, 1u);
  EXPECT_TRUE(poll_n(b_.cq, 1, 100).empty());
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(McastVerbsTest, DestroyingAnAttachedQpDetachesIt) {
  ibv_qp* tx = ud_qp(a_);
  ibv_qp* gone = ud_qp(b_);
  ibv_qp* rx = ud_qp(b_);
  ASSERT_TRUE(tx && gone && rx);
  const ibv_gid group = v4_gid("239.19.0.5");
  ASSERT_EQ(ibv_attach_mcast(gone, &group, 0), 0);
  ASSERT_EQ(ibv_destroy_qp(gone), 0);
  b_.qps.erase(b_.qps.begin());
  // The group is left with the last member gone; joining anew works and delivers.
  ASSERT_EQ(ibv_attach_mcast(rx, &group, 0), 0);
  post_recv(b_, rx, 1, 0, kGrh + 64);
  ibv_ah* ah = group_ah(a_, group);
  ASSERT_NE(ah, nullptr);
  send_to_group(tx, ah, 64);
  auto rwc = poll_n(b_.cq, 1);
  ASSERT_EQ(rwc.size(), 1u);
  EXPECT_EQ(rwc[0].qp_num, rx->qp_num);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

}  // namespace
