// transport/requester.cc: segmentation, PSNs, AckReq, the send window, header fields and
// transmit backpressure, asserted on the packets a QP sends.
#include "transport/requester.h"

#include <gtest/gtest.h>

#include <cstring>

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
    EXPECT_EQ(pkts[i]->buf.dst_ip, wire::IpAddr(kRemoteIp));
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

// A sink that takes payloads by reference (a memif port): each packet whose payload is one piece
// of memory, at least the sink's minimum and needing no pad, leaves it in the memory region;
// anything else is copied as before. The bytes on the wire are the same either way.
TEST_F(RequesterTest, PayloadsGoByReferenceWhereTheSinkTakesThem) {
  node.sink.gather_from(512);
  up(IBV_MTU_1024);
  // One SGE, 4096 bytes: four packets, each pointing at its quarter of the region.
  const auto whole = pattern(4096, 2);
  send(whole, 1);
  // Two SGEs, 700 + 3000 bytes: the first packet spans both (copied), the next two lie in the
  // second (by reference), the last holds its 628 bytes (by reference: over the minimum, no pad).
  std::vector<uint8_t> r1 = pattern(700, 3), r2 = pattern(3000, 4);
  const uint32_t k1 = node.mem.reg(node.pd, r1.data(), r1.size(), 0);
  const uint32_t k2 = node.mem.reg(node.pd, r2.data(), r2.size(), 0);
  SendWqe s;
  s.wr_id = 2;
  s.num_sge = 2;
  s.sge[0] = {reinterpret_cast<uint64_t>(r1.data()), 700, k1};
  s.sge[1] = {reinterpret_cast<uint64_t>(r2.data()), 3000, k2};
  ASSERT_EQ(node.qp->post_send(s, 0), 0);
  // Below the minimum, and a length that needs a pad: copied.
  send(pattern(300, 5), 3);
  send(pattern(1022, 6), 4);

  const std::deque<TxBuf>& sent = node.sink.sent;
  ASSERT_EQ(sent.size(), 4u + 4u + 1u + 1u);
  const uint8_t* base = bufs[0].data();
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(sent[i].ext, base + i * 1024) << i;
  EXPECT_EQ(sent[4].ext, nullptr);
  EXPECT_EQ(sent[5].ext, r2.data() + 324);
  EXPECT_EQ(sent[6].ext, r2.data() + 1348);
  EXPECT_EQ(sent[7].ext, r2.data() + 2372);
  EXPECT_EQ(sent[8].ext, nullptr);
  EXPECT_EQ(sent[9].ext, nullptr);
  EXPECT_EQ(node.sink.gathered, 7u);

  const auto pkts = test::drain(node);
  std::vector<uint8_t> got;
  for (size_t i = 0; i < 4; ++i)
    got.insert(got.end(), pkts[i]->pkt.payload.begin(), pkts[i]->pkt.payload.end());
  EXPECT_EQ(got, whole);
  got.clear();
  for (size_t i = 4; i < 8; ++i)
    got.insert(got.end(), pkts[i]->pkt.payload.begin(), pkts[i]->pkt.payload.end());
  std::vector<uint8_t> want(r1);
  want.insert(want.end(), r2.begin(), r2.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(pkts[9]->pkt.payload.size(), 1022u);
  EXPECT_EQ(pkts[9]->pkt.bth.pad, 2);
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

// A window-limited stream whose ACKs each open a single slot: the packet that fills the window
// asks only when half an AckReq interval has passed since the last ask, so the responder is not
// made to ACK every packet (each ACK opening one slot for one more asking packet, for ever).
TEST_F(RequesterTest, AWindowLimitedStreamDoesNotAskOnEveryPacket) {
  up(IBV_MTU_256, 0);
  send(pattern(1000 * 256));
  ASSERT_EQ(test::drain(node).size(), kSendWindowPkts);
  size_t sent = 0, asked = 0;
  for (uint32_t psn = 0; psn < 320; ++psn) {
    test::deliver(node, *test::craft_ack(0x11, psn, test::ack_syndrome()), kRemoteIp, 1);
    for (const auto& p : test::drain(node)) {
      ++sent;
      asked += p->pkt.bth.ack_req;
    }
  }
  EXPECT_EQ(sent, 320u);  // one packet per acknowledged one: the window stays full
  // At most one ask per half interval (plus the periodic ones, which coincide), at least one per
  // interval.
  EXPECT_LE(asked, 320 / (kAckReqIntervalPkts / 2) + 1);
  EXPECT_GE(asked, 320 / kAckReqIntervalPkts);
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

TEST_F(RequesterTest, WriteCarriesRethInFirstAndImmediateInLast) {
  up(IBV_MTU_256, 0x200);
  const auto data = pattern(3 * 256 + 1);
  bufs.emplace_back(data);
  const uint32_t key = node.mem.reg(node.pd, bufs.back().data(), data.size(), 0);
  SendWqe w =
      test::rdma_wqe(1, IBV_WR_RDMA_WRITE_WITH_IMM, reinterpret_cast<uint64_t>(bufs.back().data()),
                     uint32_t(data.size()), key, 0x1234500, 0x77);
  w.imm_be = 0xcafe;
  ASSERT_EQ(node.qp->post_send(w, 0), 0);
  const auto pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 4u);
  EXPECT_EQ(pkts[0]->pkt.bth.opcode, uint8_t(Opcode::kRcWriteFirst));
  EXPECT_EQ(pkts[0]->pkt.reth.va, 0x1234500u);
  EXPECT_EQ(pkts[0]->pkt.reth.rkey, 0x77u);
  EXPECT_EQ(pkts[0]->pkt.reth.dma_len, 3u * 256 + 1);
  EXPECT_EQ(pkts[1]->pkt.bth.opcode, uint8_t(Opcode::kRcWriteMiddle));
  EXPECT_EQ(pkts[2]->pkt.bth.opcode, uint8_t(Opcode::kRcWriteMiddle));
  EXPECT_EQ(pkts[3]->pkt.bth.opcode, uint8_t(Opcode::kRcWriteLastImm));
  EXPECT_EQ(pkts[3]->pkt.imm_be, 0xcafeu);
  EXPECT_EQ(pkts[3]->pkt.payload.size(), 1u);
  EXPECT_EQ(pkts[3]->pkt.payload[0], data.back());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(pkts[i]->pkt.bth.psn, 0x200 + i);
}

TEST_F(RequesterTest, ReadIsOneRequestCoveringItsResponsePsns) {
  up(IBV_MTU_256, 0x300);
  std::vector<uint8_t> dst(1000);
  const uint32_t dkey = node.mem.reg(node.pd, dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(
      node.qp->post_send(test::rdma_wqe(1, IBV_WR_RDMA_READ, reinterpret_cast<uint64_t>(dst.data()),
                                        1000, dkey, 0xabc000, 0x55),
                         0),
      0);
  send(pattern(10), 2);
  const auto pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 2u);
  EXPECT_EQ(pkts[0]->pkt.bth.opcode, uint8_t(Opcode::kRcReadRequest));
  EXPECT_EQ(pkts[0]->pkt.bth.psn, 0x300u);
  EXPECT_TRUE(pkts[0]->pkt.bth.ack_req);
  EXPECT_EQ(pkts[0]->pkt.reth.va, 0xabc000u);
  EXPECT_EQ(pkts[0]->pkt.reth.rkey, 0x55u);
  EXPECT_EQ(pkts[0]->pkt.reth.dma_len, 1000u);
  EXPECT_EQ(pkts[1]->pkt.bth.psn, 0x304u);  // 4 response PSNs for 1000 bytes at 256
}

TEST_F(RequesterTest, AtomicRequestsCarryTheirOperands) {
  up(IBV_MTU_1024);
  std::vector<uint8_t> res(16);
  const uint32_t k = node.mem.reg(node.pd, res.data(), res.size(), IBV_ACCESS_LOCAL_WRITE);
  const uint64_t l = reinterpret_cast<uint64_t>(res.data());
  ASSERT_EQ(node.qp->post_send(
                test::atomic_wqe(1, IBV_WR_ATOMIC_CMP_AND_SWP, l, k, 0x1000, 9, 11, 22), 0),
            0);
  ASSERT_EQ(node.qp->post_send(
                test::atomic_wqe(2, IBV_WR_ATOMIC_FETCH_AND_ADD, l + 8, k, 0x1008, 9, 33), 0),
            0);
  auto pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 1u);  // max_rd_atomic 1: the second waits for the first
  EXPECT_EQ(pkts[0]->pkt.bth.opcode, uint8_t(Opcode::kRcCompareSwap));
  EXPECT_EQ(pkts[0]->pkt.atomic.va, 0x1000u);
  EXPECT_EQ(pkts[0]->pkt.atomic.rkey, 9u);
  EXPECT_EQ(pkts[0]->pkt.atomic.compare, 11u);
  EXPECT_EQ(pkts[0]->pkt.atomic.swap_add, 22u);
  wire::Packet ack;
  ack.bth.opcode = uint8_t(Opcode::kRcAtomicAcknowledge);
  ack.bth.psn = pkts[0]->pkt.bth.psn;
  ack.aeth.syndrome = test::ack_syndrome();
  ack.atomic_ack = 0x0102030405060708;
  test::deliver(node, *test::craft_headers(ack), kRemoteIp, 1);
  ASSERT_EQ(node.scq.wcs.size(), 1u);
  EXPECT_EQ(node.scq.wcs[0].opcode, IBV_WC_COMP_SWAP);
  uint64_t v;
  std::memcpy(&v, res.data(), 8);
  EXPECT_EQ(v, 0x0102030405060708u);
  pkts = test::drain(node);
  ASSERT_EQ(pkts.size(), 1u);
  EXPECT_EQ(pkts[0]->pkt.bth.opcode, uint8_t(Opcode::kRcFetchAdd));
  EXPECT_EQ(pkts[0]->pkt.atomic.swap_add, 33u);
  EXPECT_EQ(pkts[0]->pkt.bth.psn, ack.bth.psn + 1);
}

TEST_F(RequesterTest, ReadIntoMemoryWithoutLocalWriteIsLocalProtectionError) {
  up(IBV_MTU_1024);
  std::vector<uint8_t> dst(100);
  const uint32_t k = node.mem.reg(node.pd, dst.data(), dst.size(), 0);
  ASSERT_EQ(node.qp->post_send(test::rdma_wqe(1, IBV_WR_RDMA_READ,
                                              reinterpret_cast<uint64_t>(dst.data()), 100, k, 0, 1),
                               0),
            0);
  EXPECT_TRUE(node.sink.sent.empty());
  ASSERT_EQ(node.scq.wcs.size(), 1u);
  EXPECT_EQ(node.scq.wcs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(node.scq.wcs[0].opcode, IBV_WC_RDMA_READ);
}

}  // namespace
}  // namespace uroce::transport
