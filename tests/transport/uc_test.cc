// UC queue pairs (transport/uc.cc, unreliable_qp.cc): segmentation without acknowledgements,
// completion when sent, and the responder's all-or-nothing message delivery with
// resynchronisation on the next FIRST/ONLY packet (IBTA 9.8.3).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "harness.h"
#include "transport/uc.h"

namespace uroce::transport {
namespace {

using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;
constexpr uint32_t kMtu = 1024;
constexpr Time kSecond = 1'000'000'000;

using test::connect_uc;

struct UcPair : ::testing::Test {
  UcPair() : a(kQpnA, kIpA), b(kQpnB, kIpB) {
    connect_uc(a, kIpB, kQpnB, 0x10, 0x20);
    connect_uc(b, kIpA, kQpnA, 0x20, 0x10);
    src.resize(1 << 16);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 13 + (i >> 8));
    skey = a.mem.reg(a.pd, src.data(), src.size(), 0);
    dst.assign(1 << 16, 0);
    dkey =
        b.mem.reg(b.pd, dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  }
  void send(uint64_t id, uint32_t off, uint32_t len, ibv_wr_opcode op = IBV_WR_SEND) {
    ASSERT_EQ(
        a.qp->post_send(
            test::send_wqe(id, reinterpret_cast<uint64_t>(src.data() + off), len, skey, op), 0),
        0);
  }
  void write(uint64_t id, uint32_t soff, uint32_t doff, uint32_t len, uint32_t rkey,
             ibv_wr_opcode op = IBV_WR_RDMA_WRITE) {
    ASSERT_EQ(
        a.qp->post_send(test::rdma_wqe(id, op, reinterpret_cast<uint64_t>(src.data() + soff), len,
                                       skey, reinterpret_cast<uint64_t>(dst.data() + doff), rkey),
                        0),
        0);
  }
  void post_recv(uint64_t id, uint32_t off, uint32_t len) {
    ASSERT_EQ(b.qp->post_recv(
                  test::recv_wqe(id, reinterpret_cast<uint64_t>(dst.data() + off), len, dkey)),
              0);
  }
  bool same(uint32_t doff, uint32_t soff, uint32_t len) const {
    return std::memcmp(dst.data() + doff, src.data() + soff, len) == 0;
  }

  Node a, b;
  std::vector<uint8_t> src, dst;
  uint32_t skey = 0, dkey = 0;
};

TEST_F(UcPair, SendIsSegmentedWithPsnsAndNoAckRequest) {
  send(1, 0, 4 * kMtu + 100);
  ASSERT_EQ(a.sink.sent.size(), 5u);
  const wire::Opcode want[] = {wire::Opcode::kUcSendFirst, wire::Opcode::kUcSendMiddle,
                               wire::Opcode::kUcSendMiddle, wire::Opcode::kUcSendMiddle,
                               wire::Opcode::kUcSendLast};
  for (int i = 0; i < 5; ++i) {
    const wire::Packet p = test::parsed(a.sink.sent[i]);
    EXPECT_EQ(p.bth.opcode, uint8_t(want[i])) << i;
    EXPECT_EQ(p.bth.psn, 0x10u + i);
    EXPECT_FALSE(p.bth.ack_req);
    EXPECT_EQ(p.bth.dest_qp, kQpnB);
  }
  // Completed once sent: nothing will acknowledge it.
  ASSERT_EQ(a.scq.wcs.size(), 1u);
  EXPECT_EQ(a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wire_opcode(wr_opcode_info(IBV_WR_RDMA_WRITE_WITH_IMM), wire::Service::kUc, true, true),
            wire::Opcode::kUcWriteOnlyImm);
  EXPECT_EQ(wire_opcode(wr_opcode_info(IBV_WR_SEND_WITH_IMM), wire::Service::kUc, false, true),
            wire::Opcode::kUcSendLastImm);
}

TEST_F(UcPair, MessagesArriveOverTheLinkWithoutResponses) {
  test::Link link(a, b);
  post_recv(1, 0, 8192);
  post_recv(2, 8192, 8192);
  send(1, 0, 5000);
  send(2, 100, 1);
  ASSERT_TRUE(link.run_until([&] { return b.rcq.wcs.size() == 2; }, kSecond));
  EXPECT_EQ(b.rcq.wcs[0].byte_len, 5000u);
  EXPECT_EQ(b.rcq.wcs[0].src_qp, kQpnA);
  EXPECT_EQ(b.rcq.wcs[1].byte_len, 1u);
  EXPECT_TRUE(same(0, 0, 5000));
  EXPECT_TRUE(same(8192, 100, 1));
  EXPECT_EQ(link.delivered, 6u);
  EXPECT_EQ(b.qp->counters().sent_pkts, 0u);
  EXPECT_EQ(a.scq.wcs.size(), 2u);
}

TEST_F(UcPair, LostMiddlePacketDropsThatMessageOnly) {
  test::Link link(a, b);
  // Drop the second packet (a MIDDLE) of the first message.
  int seen = 0;
  link.drop_if = [&](int from, const wire::Packet&) { return from == 0 && ++seen == 2; };
  post_recv(1, 0, 8192);
  post_recv(2, 8192, 8192);
  send(1, 0, 3 * kMtu);      // FIRST MIDDLE LAST: lost
  send(2, 4096, 3 * kMtu);   // arrives
  send(3, 16384, 2 * kMtu);  // arrives
  link.run_idle(kSecond);
  // The sender cannot know: every WQE completed successfully.
  ASSERT_EQ(a.scq.wcs.size(), 3u);
  for (const ibv_wc& wc : a.scq.wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  // The receive WQE the lost message had started filling is reused by the next message.
  ASSERT_EQ(b.rcq.wcs.size(), 2u);
  EXPECT_EQ(b.rcq.wcs[0].wr_id, 1u);
  EXPECT_EQ(b.rcq.wcs[0].byte_len, 3 * kMtu);
  EXPECT_TRUE(same(0, 4096, 3 * kMtu));
  EXPECT_EQ(b.rcq.wcs[1].wr_id, 2u);
  EXPECT_TRUE(same(8192, 16384, 2 * kMtu));
  EXPECT_EQ(b.qp->counters().uc_dropped_msgs, 1u);
  EXPECT_EQ(b.qp->counters().dropped_pkts, 1u);  // the LAST after the gap
}

TEST_F(UcPair, LostFirstPacketDropsTheRestOfItsMessage) {
  test::Link link(a, b);
  int seen = 0;
  link.drop_if = [&](int from, const wire::Packet&) { return from == 0 && ++seen == 1; };
  post_recv(1, 0, 8192);
  send(1, 0, 3 * kMtu);
  send(2, 4096, 100);
  link.run_idle(kSecond);
  ASSERT_EQ(b.rcq.wcs.size(), 1u);
  EXPECT_EQ(b.rcq.wcs[0].byte_len, 100u);
  EXPECT_TRUE(same(0, 4096, 100));
  EXPECT_EQ(b.qp->counters().dropped_pkts, 2u);  // its MIDDLE and LAST
}

TEST_F(UcPair, ResynchronisesOnAFirstPacketWithAnotherPsn) {
  // The receiver expects PSN 0x10; a message starting elsewhere is still accepted (9.8.3.1).
  post_recv(1, 0, 8192);
  auto c = test::craft(wire::Opcode::kUcSendOnly, kQpnB, 0x500, false,
                       std::span<const uint8_t>(src.data(), 12));
  test::deliver(b, *c, kIpA, 0);
  ASSERT_EQ(b.rcq.wcs.size(), 1u);
  EXPECT_EQ(b.rcq.wcs[0].byte_len, 12u);
  // From another address: dropped (UC is connected).
  post_recv(2, 0, 8192);
  test::deliver(b, *c, 0x0a000009, 0);
  EXPECT_EQ(b.rcq.wcs.size(), 1u);
}

TEST_F(UcPair, RdmaWriteAndWriteWithImmediate) {
  test::Link link(a, b);
  post_recv(9, 0, 0);
  write(1, 0, 1000, 2 * kMtu + 10, dkey);
  write(2, 5000, 9000, 300, dkey, IBV_WR_RDMA_WRITE_WITH_IMM);
  link.run_idle(kSecond);
  EXPECT_TRUE(same(1000, 0, 2 * kMtu + 10));
  EXPECT_TRUE(same(9000, 5000, 300));
  // Only the WRITE with immediate consumes a receive WQE.
  ASSERT_EQ(b.rcq.wcs.size(), 1u);
  EXPECT_EQ(b.rcq.wcs[0].wr_id, 9u);
  EXPECT_EQ(b.rcq.wcs[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(b.rcq.wcs[0].byte_len, 300u);
  EXPECT_TRUE(b.rcq.wcs[0].wc_flags & IBV_WC_WITH_IMM);
}

TEST_F(UcPair, WriteWithBadRkeyIsDroppedSilently) {
  test::Link link(a, b);
  write(1, 0, 0, 2 * kMtu, dkey + 1000);
  write(2, 0, 4096, 100, dkey);
  link.run_idle(kSecond);
  for (size_t i = 0; i < 2 * kMtu; ++i) ASSERT_EQ(dst[i], 0) << i;
  EXPECT_TRUE(same(4096, 0, 100));
  EXPECT_EQ(b.qp->counters().dropped_pkts, 2u);
  EXPECT_TRUE(b.sink.sent.empty());  // no NAK on UC
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
}

TEST_F(UcPair, NoReceiveWqeDropsTheMessage) {
  test::Link link(a, b);
  send(1, 0, 2 * kMtu);
  link.run_idle(kSecond);
  EXPECT_EQ(b.qp->counters().out_of_buffer, 1u);
  EXPECT_TRUE(b.rcq.wcs.empty());
  post_recv(1, 0, 8192);
  send(2, 4096, 2 * kMtu);
  link.run_idle(kSecond);
  ASSERT_EQ(b.rcq.wcs.size(), 1u);
  EXPECT_TRUE(same(0, 4096, 2 * kMtu));
}

TEST_F(UcPair, RefusesReadAndAtomics) {
  EXPECT_EQ(a.qp->post_send(test::rdma_wqe(1, IBV_WR_RDMA_READ, 0, 8, skey, 0, dkey), 0), EINVAL);
  EXPECT_EQ(
      a.qp->post_send(test::atomic_wqe(1, IBV_WR_ATOMIC_FETCH_AND_ADD, 0, skey, 0, dkey, 1), 0),
      EINVAL);
}

TEST_F(UcPair, BadLkeyCompletesInErrorAndStopsTheSendQueue) {
  SendWqe w = test::send_wqe(1, reinterpret_cast<uint64_t>(src.data()), 8, skey + 77);
  ASSERT_EQ(a.qp->post_send(w, 0), 0);
  ASSERT_EQ(a.scq.wcs.size(), 1u);
  EXPECT_EQ(a.scq.wcs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(a.qp->state(), IBV_QPS_SQE);
  EXPECT_TRUE(a.sink.sent.empty());
}

}  // namespace
}  // namespace uroce::transport
