// transport/requester.cc: segmentation, PSNs, AckReq, the send window, header fields and
// transmit backpressure, asserted on the packets a QP sends.
#include "transport/requester.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "harness.h"

namespace uroce::transport {
namespace {

using test::Node;
using wire::Opcode;

constexpr uint32_t kLocalIp = 0x0a000001, kRemoteIp = 0x0a000002;
constexpr uint32_t kRemoteQpn = 0x22;

std::vector<uint8_t> pattern(size_t n, uint8_t seed = 1) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

class RequesterTest : public ::testing::Test {
 protected:
  void up(ibv_mtu mtu, uint32_t sq_psn = 0x100) {
    test::PathParams p;
    p.mtu = mtu;
    node.connect(kRemoteIp, kRemoteQpn, sq_psn, 0, p);
  }
  // Posts a SEND of `data` from a registered copy.
  void send(const std::vector<uint8_t>& data, uint64_t wr_id = 1, ibv_wr_opcode op = IBV_WR_SEND,
            uint32_t imm = 0) {
    bufs.emplace_back(data);
    const uint32_t key = node.mem.reg(node.pd, bufs.back().data(), data.size(), 0);
    SendWqe w = test::send_wqe(wr_id, reinterpret_cast<uint64_t>(bufs.back().data()),
                               static_cast<uint32_t>(data.size()), key, op);
    w.imm_be = imm;
    ASSERT_EQ(node.qp->post_send(w, 0), 0);
  }
  Node node{0x11, kLocalIp};
  std::deque<std::vector<uint8_t>> bufs;
};

class Segmentation : public RequesterTest, public ::testing::WithParamInterface<ibv_mtu> {};

TEST_P(Segmentation, SplitsByPathMtu) {
  const ibv_mtu mtu = GetParam();
  const uint32_t m = 128u << mtu;  // IBV_MTU_256 = 1
  up(mtu);
  const auto data = pattern(3 * m + 5);
  send(data);
  auto pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 4u);
  const Opcode ops[] = {Opcode::kRcSendFirst, Opcode::kRcSendMiddle, Opcode::kRcSendMiddle,
                        Opcode::kRcSendLast};
  std::vector<uint8_t> got;
  for (size_t i = 0; i < pkts.size(); ++i) {
    const wire::Packet& p = pkts[i]->pkt;
    EXPECT_EQ(p.bth.opcode, uint8_t(ops[i]));
    EXPECT_EQ(p.bth.psn, 0x100 + i);
    EXPECT_EQ(p.bth.dest_qp, kRemoteQpn);
    EXPECT_EQ(p.bth.pkey, 0xffff);
    EXPECT_TRUE(p.bth.migreq);
    EXPECT_EQ(p.bth.ack_req, i == 3);  // only the last packet of a short message asks
    EXPECT_EQ(p.payload.size(), i < 3 ? m : 5u);
    EXPECT_EQ(p.bth.pad, i < 3 ? 0 : 3);
    EXPECT_EQ(pkts[i]->buf.ecn, kEcnEct0);
    EXPECT_EQ(pkts[i]->buf.dst_ip, kRemoteIp);
    EXPECT_EQ(pkts[i]->buf.src_port, src_port_for_qpn(0x11));
    got.insert(got.end(), p.payload.begin(), p.payload.end());
  }
  EXPECT_EQ(got, data);
  EXPECT_EQ(node.qp->counters().sent_pkts, 4u);

  // Exactly one MTU is an ONLY packet; MTU + 1 is FIRST + LAST.
  send(pattern(m), 2);
  pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 1u);
  EXPECT_EQ(pkts[0]->pkt.bth.opcode, uint8_t(Opcode::kRcSendOnly));
  EXPECT_EQ(pkts[0]->pkt.bth.psn, 0x104u);
  send(pattern(m + 1), 3);
  pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 2u);
  EXPECT_EQ(pkts[1]->pkt.payload.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Mtus, Segmentation,
                         ::testing::Values(IBV_MTU_256, IBV_MTU_1024, IBV_MTU_4096));

TEST_F(RequesterTest, ImmediateTravelsInLastOrOnly) {
  up(IBV_MTU_256);
  send(pattern(10), 1, IBV_WR_SEND_WITH_IMM, 0xdeadbeef);
  send(pattern(300), 2, IBV_WR_SEND_WITH_IMM, 0x01020304);
  const auto pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 3u);
  EXPECT_EQ(pkts[0]->pkt.bth.opcode, uint8_t(Opcode::kRcSendOnlyImm));
  EXPECT_EQ(pkts[0]->pkt.imm_be, 0xdeadbeefu);
  EXPECT_EQ(pkts[1]->pkt.bth.opcode, uint8_t(Opcode::kRcSendFirst));
  EXPECT_EQ(pkts[2]->pkt.bth.opcode, uint8_t(Opcode::kRcSendLastImm));
  EXPECT_EQ(pkts[2]->pkt.imm_be, 0x01020304u);
}

TEST_F(RequesterTest, ZeroLengthSendIsOneEmptyOnlyPacket) {
  up(IBV_MTU_1024);
  SendWqe w;
  w.wr_id = 9;
  w.num_sge = 0;
  ASSERT_EQ(node.qp->post_send(w, 0), 0);
  const auto pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 1u);
  EXPECT_EQ(pkts[0]->pkt.bth.opcode, uint8_t(Opcode::kRcSendOnly));
  EXPECT_TRUE(pkts[0]->pkt.payload.empty());
  EXPECT_TRUE(pkts[0]->pkt.bth.ack_req);
}

TEST_F(RequesterTest, InlineDataAndSeveralSgesAreConcatenated) {
  up(IBV_MTU_256);
  SendWqe w;
  w.send_flags = IBV_SEND_INLINE | IBV_SEND_SOLICITED;
  const auto in = pattern(200, 9);
  w.inline_len = 200;
  std::copy(in.begin(), in.end(), w.inline_data.begin());
  ASSERT_EQ(node.qp->post_send(w, 0), 0);

  // Three SGEs from two regions, 100 + 300 + 50 bytes: two MTU-256 packets.
  std::vector<uint8_t> r1 = pattern(400, 3), r2 = pattern(64, 5);
  const uint32_t k1 = node.mem.reg(node.pd, r1.data(), r1.size(), 0);
  const uint32_t k2 = node.mem.reg(node.pd, r2.data(), r2.size(), 0);
  SendWqe s;
  s.num_sge = 3;
  s.sge[0] = {reinterpret_cast<uint64_t>(r1.data()), 100, k1};
  s.sge[1] = {reinterpret_cast<uint64_t>(r1.data() + 100), 300, k1};
  s.sge[2] = {reinterpret_cast<uint64_t>(r2.data() + 4), 50, k2};
  ASSERT_EQ(node.qp->post_send(s, 0), 0);

  const auto pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 3u);
  EXPECT_TRUE(std::equal(in.begin(), in.end(), pkts[0]->pkt.payload.begin()));
  EXPECT_TRUE(pkts[0]->pkt.bth.se);
  std::vector<uint8_t> want(r1.begin(), r1.end());
  want.insert(want.end(), r2.begin() + 4, r2.begin() + 54);
  std::vector<uint8_t> got(pkts[1]->pkt.payload.begin(), pkts[1]->pkt.payload.end());
  got.insert(got.end(), pkts[2]->pkt.payload.begin(), pkts[2]->pkt.payload.end());
  EXPECT_EQ(got, want);
  EXPECT_FALSE(pkts[2]->pkt.bth.se);
}

TEST_F(RequesterTest, MessageSpanningThePsnWrap) {
  up(IBV_MTU_256, 0xfffffe);
  send(pattern(5 * 256));
  const auto pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 5u);
  const uint32_t want[] = {0xfffffe, 0xffffff, 0, 1, 2};
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(pkts[i]->pkt.bth.psn, want[i]);
  // An ACK of PSN 2 (after the wrap) completes it.
  test::deliver(node, *test::craft_ack(0x11, 2, test::ack_syndrome()), kRemoteIp, 1);
  ASSERT_EQ(node.scq.wcs.size(), 1u);
  EXPECT_EQ(node.scq.wcs[0].status, IBV_WC_SUCCESS);
  send(pattern(1), 2);
  EXPECT_EQ(test::drain(node)[0]->pkt.bth.psn, 3u);
}

TEST_F(RequesterTest, WindowBoundsUnackedPacketsAndAckReqKeepsItMoving) {
  up(IBV_MTU_256, 0);
  send(pattern(1000 * 256));
  auto pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), kSendWindowPkts);
  EXPECT_FALSE(node.qp->wants_pump());
  for (size_t i = 0; i < pkts.size(); ++i) {
    const bool periodic = (i + 1) % kAckReqIntervalPkts == 0;
    const bool fills_window = i + 1 == kSendWindowPkts;
    EXPECT_EQ(pkts[i]->pkt.bth.ack_req, periodic || fills_window) << i;
  }
  // Acknowledging 100 packets opens the window by 100.
  test::deliver(node, *test::craft_ack(0x11, 99, test::ack_syndrome()), kRemoteIp, 1);
  pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 100u);
  EXPECT_EQ(pkts.front()->pkt.bth.psn, kSendWindowPkts);
  EXPECT_TRUE(node.scq.wcs.empty());  // the message is not complete
}

TEST_F(RequesterTest, BackpressureKeepsStateAndResumes) {
  up(IBV_MTU_256);
  node.sink.budget = 2;
  send(pattern(5 * 256));
  EXPECT_EQ(node.sink.sent.size(), 2u);
  EXPECT_TRUE(node.qp->wants_pump());
  node.sink.budget = -1;
  node.qp->pump(1);
  EXPECT_FALSE(node.qp->wants_pump());
  const auto pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(pkts[i]->pkt.bth.psn, 0x100 + i);
  EXPECT_EQ(node.qp->counters().retransmitted_pkts, 0u);
}

TEST(SrcPort, DerivedFromQpnInDynamicRange) {
  std::set<uint16_t> ports;
  for (uint32_t qpn = 1; qpn < 200; ++qpn) {
    const uint16_t p = src_port_for_qpn(qpn);
    EXPECT_GE(p, 0xC000);
    ports.insert(p);
  }
  EXPECT_GT(ports.size(), 190u);  // neighbouring QPNs spread over the range
}

}  // namespace
}  // namespace uroce::transport
