// A device on an IPv6 address (v6 on ::1) beside one on IPv4 (v4 on 127.0.29.1), through the
// verbs: GID 0 is the plain IPv6 address, every query agrees, address vectors of the device's own
// family work end to end (RC, UD with ibv_init_ah_from_wc over the IPv6 header in the GRH area),
// the other family is EINVAL, and multicast (IPv4 groups) is not offered on the IPv6 device.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "verbs_test_util.h"

namespace {

class Env : public ::testing::Environment {
 public:
  void SetUp() override { setenv("UROCE_DEVICES", "v6=::1,v4=127.0.29.1", 1); }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new Env);

using uroce::test::RcSide;

ibv_gid gid_of(const char* text) {
  ibv_gid g{};
  EXPECT_EQ(inet_pton(AF_INET6, text, g.raw), 1) << text;
  return g;
}

class Ipv6Test : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(uroce::test::open_dev(a_, "v6"));
    ASSERT_NO_FATAL_FAILURE(uroce::test::open_dev(b_, "v6"));
    ASSERT_NO_FATAL_FAILURE(uroce::test::open_dev(c_, "v4"));
  }
  void TearDown() override {
    for (RcSide* s : {&a_, &b_, &c_}) uroce::test::close_rc(*s);
  }
  RcSide a_, b_, c_;  // two contexts of the IPv6 device, one of the IPv4 device
};

TEST_F(Ipv6Test, GidZeroIsTheIpv6AddressEverywhere) {
  const ibv_gid loop6 = gid_of("::1");
  EXPECT_EQ(std::memcmp(a_.gid.raw, loop6.raw, 16), 0);  // ibv_query_gid (open_dev)
  ibv_gid_entry e{};
  ASSERT_EQ(ibv_query_gid_ex(a_.ctx, 1, 0, &e, 0), 0);
  EXPECT_EQ(std::memcmp(e.gid.raw, loop6.raw, 16), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
  ibv_gid_entry table[4]{};
  ASSERT_EQ(ibv_query_gid_table(a_.ctx, table, 4, 0), 1);
  EXPECT_EQ(std::memcmp(table[0].gid.raw, loop6.raw, 16), 0);
  EXPECT_EQ(table[0].gid_type, IBV_GID_TYPE_ROCE_V2);
  // The IPv4 device's GID stays IPv4-mapped.
  const ibv_gid mapped = gid_of("::ffff:127.0.29.1");
  EXPECT_EQ(std::memcmp(c_.gid.raw, mapped.raw, 16), 0);
  // Multicast groups are IPv4: none on the IPv6 device.
  ibv_device_attr da{};
  ASSERT_EQ(ibv_query_device(a_.ctx, &da), 0);
  EXPECT_EQ(da.max_mcast_grp, 0);
  ASSERT_EQ(ibv_query_device(c_.ctx, &da), 0);
  EXPECT_GT(da.max_mcast_grp, 0);
}

TEST_F(Ipv6Test, RcOverIpv6AndTheOtherFamilyIsRefused) {
  for (RcSide* s : {&a_, &b_, &c_}) ASSERT_NO_FATAL_FAILURE(uroce::test::create_rc_qp(*s));
  // An IPv4-mapped DGID from the IPv6 device, an IPv6 one from the IPv4 device: EINVAL.
  ibv_qp_attr init = uroce::test::rc_init_attr();
  ASSERT_EQ(ibv_modify_qp(a_.qp, &init, uroce::test::kRcInitMask), 0);
  ASSERT_EQ(ibv_modify_qp(c_.qp, &init, uroce::test::kRcInitMask), 0);
  ibv_qp_attr rtr = uroce::test::rc_rtr_attr(c_.qp->qp_num, c_.gid);
  EXPECT_EQ(ibv_modify_qp(a_.qp, &rtr, uroce::test::kRcRtrMask), EINVAL);
  rtr = uroce::test::rc_rtr_attr(a_.qp->qp_num, a_.gid);
  EXPECT_EQ(ibv_modify_qp(c_.qp, &rtr, uroce::test::kRcRtrMask), EINVAL);
  // An IPv6 multicast DGID is no peer either.
  rtr = uroce::test::rc_rtr_attr(b_.qp->qp_num, gid_of("ff02::1"));
  EXPECT_EQ(ibv_modify_qp(a_.qp, &rtr, uroce::test::kRcRtrMask), EINVAL);

  // Between the two contexts of the IPv6 device (two QPs on ::1): a SEND arrives intact.
  ASSERT_EQ(ibv_modify_qp(a_.qp, &(rtr = uroce::test::rc_rtr_attr(b_.qp->qp_num, b_.gid)),
                          uroce::test::kRcRtrMask),
            0);
  ibv_qp_attr rts = uroce::test::rc_rts_attr();
  ASSERT_EQ(ibv_modify_qp(a_.qp, &rts, uroce::test::kRcRtsMask), 0);
  uroce::test::connect_rc(b_.qp, a_.qp->qp_num, a_.gid);
  for (size_t i = 0; i < 4096; ++i) a_.buf[i] = static_cast<char>(i * 7);
  uroce::test::post_recv_at(b_.qp, b_, 1, 0, 4096);
  ASSERT_EQ(uroce::test::post_send_at(a_.qp, a_, 0, 4096, 2), 0);
  auto sent = uroce::test::poll_n(a_.scq, 1);
  auto got = uroce::test::poll_n(b_.rcq, 1);
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(got[0].byte_len, 4096u);
  EXPECT_EQ(std::memcmp(a_.buf.data(), b_.buf.data(), 4096), 0);
}

TEST_F(Ipv6Test, UdOverIpv6AnswersFromTheIpv6HeaderInTheGrhArea) {
  constexpr uint32_t kQkey = 0x1234;
  ibv_cq* cqa = ibv_create_cq(a_.ctx, 16, nullptr, nullptr, 0);
  ibv_cq* cqb = ibv_create_cq(b_.ctx, 16, nullptr, nullptr, 0);
  ASSERT_TRUE(cqa && cqb);
  ibv_qp* qa = uroce::test::create_ud_qp(a_.pd, cqa);
  ibv_qp* qb = uroce::test::create_ud_qp(b_.pd, cqb);
  ASSERT_TRUE(qa && qb);
  ASSERT_NO_FATAL_FAILURE(uroce::test::ud_to_rts(qa, kQkey));
  ASSERT_NO_FATAL_FAILURE(uroce::test::ud_to_rts(qb, kQkey));
  // AHs of the other family, or an IPv6 multicast GID, are EINVAL; the IPv6 device's own works.
  errno = 0;
  EXPECT_EQ(uroce::test::create_ah(a_.pd, c_.gid), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(uroce::test::create_ah(c_.pd, a_.gid), nullptr);
  EXPECT_EQ(uroce::test::create_ah(a_.pd, gid_of("ff02::1")), nullptr);
  ibv_ah* ah = uroce::test::create_ah(a_.pd, b_.gid);
  ASSERT_NE(ah, nullptr) << std::strerror(errno);
  // An IPv4 group cannot be joined from the IPv6 device.
  const ibv_gid group = gid_of("::ffff:239.1.2.3");
  EXPECT_EQ(ibv_attach_mcast(qa, &group, 0), EOPNOTSUPP);

  // A datagram a → b: the receive's GRH area holds its IPv6 header; the answer b → a goes to the
  // source it names.
  uroce::test::post_recv_at(qb, b_, 1, 0, 40 + 256);
  std::memcpy(a_.buf.data() + 1024, "over IPv6", 10);
  ASSERT_EQ(uroce::test::post_ud_send(qa, a_, 1024, 10, ah, qb->qp_num, kQkey), 0);
  auto got = uroce::test::poll_n(cqb, 1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(got[0].wc_flags & IBV_WC_GRH);
  EXPECT_EQ(got[0].byte_len, 40u + 10u);
  EXPECT_EQ(std::memcmp(b_.buf.data() + 40, "over IPv6", 10), 0);
  auto* grh = reinterpret_cast<ibv_grh*>(b_.buf.data());
  const auto* raw = reinterpret_cast<const uint8_t*>(grh);
  EXPECT_EQ(raw[0] >> 4, 6);  // IPv6
  EXPECT_EQ(raw[6], 17);      // next header UDP: RoCEv2 over IPv6, not a v1 GRH
  ibv_ah_attr back{};
  ASSERT_EQ(ibv_init_ah_from_wc(b_.ctx, 1, &got[0], grh, &back), 0);
  EXPECT_TRUE(back.is_global);
  EXPECT_EQ(back.grh.sgid_index, 0);
  EXPECT_EQ(std::memcmp(back.grh.dgid.raw, a_.gid.raw, 16), 0);  // ::1
  ibv_ah* reply = ibv_create_ah(b_.pd, &back);
  ASSERT_NE(reply, nullptr) << std::strerror(errno);
  uroce::test::post_recv_at(qa, a_, 3, 2048, 40 + 256);
  ASSERT_EQ(uroce::test::post_ud_send(qb, b_, 4096, 4, reply, qa->qp_num, kQkey), 0);
  auto answer = uroce::test::poll_n(cqa, 2);  // a's send and its receive
  size_t received = 0;
  for (const ibv_wc& wc : answer)
    if (wc.opcode == IBV_WC_RECV && wc.status == IBV_WC_SUCCESS) ++received;
  EXPECT_EQ(received, 1u);
  uroce::test::poll_n(cqb, 1);  // b's send
  EXPECT_EQ(ibv_destroy_ah(reply), 0);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  EXPECT_EQ(ibv_destroy_qp(qa), 0);
  EXPECT_EQ(ibv_destroy_qp(qb), 0);
  EXPECT_EQ(ibv_destroy_cq(cqa), 0);
  EXPECT_EQ(ibv_destroy_cq(cqb), 0);
}

}  // namespace
