// transport/responder.cc: PSN classification, SEND execution, ACK/NAK generation, RNR and the
// responder's error classes, driven by crafted request packets.
#include "transport/responder.h"

#include <gtest/gtest.h>

#include "harness.h"

namespace uroce::transport {
namespace {

using test::Node;
using wire::NakCode;
using wire::Opcode;

constexpr uint32_t kLocalIp = 0x0a000002, kRemoteIp = 0x0a000001;
constexpr uint32_t kQpn = 0x22, kRemoteQpn = 0x11;
constexpr uint32_t kRqPsn = 0x500;

class ResponderTest : public ::testing::Test {
 protected:
  ResponderTest() {
    test::PathParams p;
    p.mtu = IBV_MTU_256;
    p.min_rnr_timer = 12;
    node.connect(kRemoteIp, kRemoteQpn, 0, kRqPsn, p);
  }
  // Posts a receive of `len` bytes into a fresh buffer.
  std::vector<uint8_t>& post_recv(uint64_t wr_id, uint32_t len) {
    bufs.emplace_back();
    const uint32_t key = node.buffer(bufs.back(), len, 0xee);
    EXPECT_EQ(node.qp->post_recv(
                  test::recv_wqe(wr_id, reinterpret_cast<uint64_t>(bufs.back().data()), len, key)),
              0);
    return bufs.back();
  }
  void in(Opcode op, uint32_t psn, bool ack_req, std::vector<uint8_t> payload = {},
          uint32_t imm = 0) {
    test::deliver(node, *test::craft(op, kQpn, psn, ack_req, payload, imm), kRemoteIp, now++);
  }
  // The ACKs/NAKs sent since the last call: (psn, syndrome, msn).
  struct Resp {
    uint32_t psn;
    uint8_t syndrome;
    uint32_t msn;
  };
  std::vector<Resp> responses() {
    std::vector<Resp> out;
    for (auto& c : test::drain(node)) {
      EXPECT_EQ(c->pkt.bth.opcode, uint8_t(Opcode::kRcAcknowledge));
      EXPECT_EQ(c->pkt.bth.dest_qp, kRemoteQpn);
      EXPECT_EQ(c->buf.dst_ip, kRemoteIp);
      out.push_back({c->pkt.bth.psn, c->pkt.aeth.syndrome, c->pkt.aeth.msn});
    }
    return out;
  }

  Node node{kQpn, kLocalIp};
  std::deque<std::vector<uint8_t>> bufs;
  Time now = 1;
};

std::vector<uint8_t> bytes(size_t n, uint8_t v) {
  return std::vector<uint8_t>(n, v);
}

TEST_F(ResponderTest, DeliversMultiPacketSendAndAcksWhenAsked) {
  auto& rb = post_recv(7, 1000);
  in(Opcode::kRcSendFirst, kRqPsn, false, bytes(256, 1));
  in(Opcode::kRcSendMiddle, kRqPsn + 1, false, bytes(256, 2));
  EXPECT_TRUE(responses().empty());  // no AckReq, no ACK
  in(Opcode::kRcSendLastImm, kRqPsn + 2, true, bytes(10, 3), 0xabcdef01);
  ASSERT_EQ(node.rcq.wcs.size(), 1u);
  const ibv_wc& wc = node.rcq.wcs[0];
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 522u);
  EXPECT_EQ(wc.wc_flags & IBV_WC_WITH_IMM, unsigned(IBV_WC_WITH_IMM));
  EXPECT_EQ(wc.imm_data, 0xabcdef01u);
  EXPECT_EQ(wc.qp_num, kQpn);
  EXPECT_EQ(wc.src_qp, kRemoteQpn);
  EXPECT_EQ(rb[0], 1);
  EXPECT_EQ(rb[256], 2);
  EXPECT_EQ(rb[521], 3);
  EXPECT_EQ(rb[522], 0xee);  // nothing written past the message
  const auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].psn, kRqPsn + 2);
  EXPECT_EQ(r[0].syndrome, test::ack_syndrome());
  EXPECT_EQ(r[0].msn, 1u);
  EXPECT_EQ(node.events.events, std::vector<ibv_event_type>{});  // COMM_EST only in RTR
}

TEST_F(ResponderTest, ScattersAcrossSeveralSges) {
  std::vector<uint8_t> a, b;
  const uint32_t ka = node.buffer(a, 100), kb = node.buffer(b, 400);
  RecvWqe w;
  w.wr_id = 1;
  w.num_sge = 2;
  w.sge[0] = {reinterpret_cast<uint64_t>(a.data()), 100, ka};
  w.sge[1] = {reinterpret_cast<uint64_t>(b.data()), 400, kb};
  ASSERT_EQ(node.qp->post_recv(w), 0);
  std::vector<uint8_t> p(256);
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t(i);
  in(Opcode::kRcSendFirst, kRqPsn, false, p);
  in(Opcode::kRcSendLast, kRqPsn + 1, true, bytes(50, 0x77));
  ASSERT_EQ(node.rcq.wcs.size(), 1u);
  EXPECT_EQ(node.rcq.wcs[0].byte_len, 306u);
  EXPECT_EQ(a[99], 99);
  EXPECT_EQ(b[0], 100);
  EXPECT_EQ(b[155], 255);
  EXPECT_EQ(b[156], 0x77);
  EXPECT_EQ(b[205], 0x77);
  EXPECT_EQ(b[206], 0);
}

TEST_F(ResponderTest, DuplicatesAreReAckedNeverDeliveredTwice) {
  post_recv(1, 100);
  post_recv(2, 100);
  in(Opcode::kRcSendOnly, kRqPsn, true, bytes(10, 1));
  ASSERT_EQ(responses().size(), 1u);
  in(Opcode::kRcSendOnly, kRqPsn, true, bytes(10, 1));  // the requester lost our ACK
  EXPECT_EQ(node.rcq.wcs.size(), 1u);
  const auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].psn, kRqPsn);
  EXPECT_EQ(r[0].syndrome, test::ack_syndrome());
  EXPECT_EQ(r[0].msn, 1u);
  in(Opcode::kRcSendOnly, kRqPsn - 100, false, bytes(10, 1));  // old, no AckReq: silent
  EXPECT_TRUE(responses().empty());
  EXPECT_EQ(node.qp->counters().duplicate_request, 2u);
  in(Opcode::kRcSendOnly, kRqPsn + 1, true, bytes(10, 2));
  EXPECT_EQ(node.rcq.wcs.size(), 2u);
  EXPECT_EQ(node.rcq.wcs[1].wr_id, 2u);
}

TEST_F(ResponderTest, OneSequenceNakPerGap) {
  for (int i = 0; i < 4; ++i) post_recv(i, 100);
  in(Opcode::kRcSendOnly, kRqPsn + 2, true, bytes(4, 1));  // PSN kRqPsn, +1 lost
  in(Opcode::kRcSendOnly, kRqPsn + 3, true, bytes(4, 1));
  in(Opcode::kRcSendOnly, kRqPsn + 4, true, bytes(4, 1));
  auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].psn, kRqPsn);
  EXPECT_EQ(r[0].syndrome, test::nak_syndrome(NakCode::kPsnSequenceError));
  EXPECT_EQ(node.qp->counters().out_of_seq_request, 1u);
  EXPECT_TRUE(node.rcq.wcs.empty());
  // Go-back-N arrives: the expected PSN ends the gap.
  in(Opcode::kRcSendOnly, kRqPsn, true, bytes(4, 1));
  in(Opcode::kRcSendOnly, kRqPsn + 1, true, bytes(4, 1));
  EXPECT_EQ(node.rcq.wcs.size(), 2u);
  r = responses();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].syndrome, test::ack_syndrome());
  // A new gap gets a new NAK.
  in(Opcode::kRcSendOnly, kRqPsn + 5, true, bytes(4, 1));
  r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].psn, kRqPsn + 2);
  EXPECT_EQ(r[0].syndrome, test::nak_syndrome(NakCode::kPsnSequenceError));
}

TEST_F(ResponderTest, RnrNakWhenNoReceiveIsPosted) {
  in(Opcode::kRcSendFirst, kRqPsn, false, bytes(256, 1));
  auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].psn, kRqPsn);
  EXPECT_EQ(r[0].syndrome, test::rnr_syndrome(12));  // min_rnr_timer, Table 45 code
  EXPECT_EQ(node.qp->counters().send_rnr_err, 1u);
  // The rest of the window is out of sequence and dropped without a sequence NAK.
  in(Opcode::kRcSendLast, kRqPsn + 1, true, bytes(1, 1));
  EXPECT_TRUE(responses().empty());
  // After the RNR wait the requester resends; now a receive is there.
  post_recv(5, 300);
  in(Opcode::kRcSendFirst, kRqPsn, false, bytes(256, 1));
  in(Opcode::kRcSendLast, kRqPsn + 1, true, bytes(1, 1));
  ASSERT_EQ(node.rcq.wcs.size(), 1u);
  EXPECT_EQ(node.rcq.wcs[0].byte_len, 257u);
  r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].syndrome, test::ack_syndrome());
}

TEST_F(ResponderTest, MessageLongerThanReceiveIsLocalLengthError) {
  post_recv(3, 300);
  post_recv(4, 300);
  in(Opcode::kRcSendFirst, kRqPsn, false, bytes(256, 1));
  in(Opcode::kRcSendMiddle, kRqPsn + 1, false, bytes(256, 1));
  ASSERT_EQ(node.rcq.wcs.size(), 2u);
  EXPECT_EQ(node.rcq.wcs[0].wr_id, 3u);
  EXPECT_EQ(node.rcq.wcs[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(node.rcq.wcs[1].wr_id, 4u);
  EXPECT_EQ(node.rcq.wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  const auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].psn, kRqPsn + 1);
  EXPECT_EQ(r[0].syndrome, test::nak_syndrome(NakCode::kInvalidRequest));
  EXPECT_EQ(node.qp->state(), IBV_QPS_ERR);
  in(Opcode::kRcSendLast, kRqPsn + 2, true, bytes(1, 1));  // ignored in ERR
  EXPECT_TRUE(responses().empty());
  EXPECT_GE(node.qp->counters().dropped_pkts, 1u);
}

TEST_F(ResponderTest, UnsupportedOpcodeIsNakInvalidRequest) {
  post_recv(1, 100);
  in(Opcode::kRcWriteOnly, kRqPsn, true, bytes(8, 1));
  const auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].syndrome, test::nak_syndrome(NakCode::kInvalidRequest));
  EXPECT_EQ(node.qp->state(), IBV_QPS_ERR);
  ASSERT_EQ(node.rcq.wcs.size(), 1u);
  EXPECT_EQ(node.rcq.wcs[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(ResponderTest, OpcodeSequenceAndLengthErrorsAreInvalidRequests) {
  post_recv(1, 1000);
  in(Opcode::kRcSendMiddle, kRqPsn, false, bytes(256, 1));  // no FIRST before it
  auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].syndrome, test::nak_syndrome(NakCode::kInvalidRequest));
  EXPECT_EQ(node.qp->state(), IBV_QPS_ERR);

  Node n2{0x33, kLocalIp};
  test::PathParams p;
  p.mtu = IBV_MTU_256;
  n2.connect(kRemoteIp, kRemoteQpn, 0, 0, p);
  std::vector<uint8_t> b;
  const uint32_t key = n2.buffer(b, 1000);
  ASSERT_EQ(n2.qp->post_recv(test::recv_wqe(1, reinterpret_cast<uint64_t>(b.data()), 1000, key)),
            0);
  // A FIRST shorter than the PMTU.
  test::deliver(n2, *test::craft(Opcode::kRcSendFirst, 0x33, 0, false, bytes(100, 1)), kRemoteIp,
                1);
  const auto out = test::drain(n2);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]->pkt.aeth.syndrome, test::nak_syndrome(NakCode::kInvalidRequest));
}

TEST_F(ResponderTest, BadReceiveKeyIsLocalProtectionError) {
  std::vector<uint8_t> b(100);
  ASSERT_EQ(node.qp->post_recv(test::recv_wqe(1, reinterpret_cast<uint64_t>(b.data()), 100, 0xbad)),
            0);
  in(Opcode::kRcSendOnly, kRqPsn, true, bytes(10, 1));
  ASSERT_EQ(node.rcq.wcs.size(), 1u);
  EXPECT_EQ(node.rcq.wcs[0].status, IBV_WC_LOC_PROT_ERR);
  const auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].syndrome, test::nak_syndrome(NakCode::kRemoteOperationalError));
  EXPECT_EQ(node.qp->state(), IBV_QPS_ERR);
}

TEST_F(ResponderTest, ForeignPacketsAreCountedDrops) {
  post_recv(1, 100);
  auto c = test::craft(Opcode::kRcSendOnly, kQpn, kRqPsn, true, bytes(4, 1));
  test::deliver(node, *c, 0x0a0000ff, 1);  // not our peer
  c->pkt.bth.pkey = 0x1234;
  test::deliver(node, *c, kRemoteIp, 2);  // wrong partition
  auto ud = test::craft(Opcode::kUdSendOnly, kQpn, kRqPsn, true, bytes(4, 1));
  test::deliver(node, *ud, kRemoteIp, 3);  // wrong transport service
  EXPECT_TRUE(node.rcq.wcs.empty());
  EXPECT_TRUE(responses().empty());
  EXPECT_EQ(node.qp->counters().dropped_pkts, 3u);
  EXPECT_EQ(node.qp->counters().rcvd_pkts, 0u);
}

TEST(ResponderInRtr, FirstPacketRaisesCommEst) {
  Node r{0x44, kLocalIp};
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(
      r.qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0), 0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = kRemoteQpn;
  a.rq_psn = 10;
  a.ah_attr = test::ah_for(kRemoteIp);
  ASSERT_EQ(r.qp->modify(a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                         0),
            0);
  ASSERT_EQ(r.qp->post_recv(test::recv_wqe(1, 0, 0, 0)), 0);  // zero-length receive
  test::deliver(r, *test::craft(Opcode::kRcSendOnly, 0x44, 10, true), kRemoteIp, 1);
  EXPECT_EQ(r.qp->counters().dropped_pkts, 0u);
  EXPECT_EQ(r.qp->counters().rcvd_pkts, 1u);
  EXPECT_EQ(r.rcq.wcs.size(), 1u);
  EXPECT_EQ(r.sink.sent.size(), 1u);
  EXPECT_EQ(r.qp->state(), IBV_QPS_RTR);
  ASSERT_EQ(r.events.events.size(), 1u);
  EXPECT_EQ(r.events.events[0], IBV_EVENT_COMM_EST);
  ASSERT_EQ(r.rcq.wcs.size(), 1u);
  EXPECT_EQ(r.rcq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r.sink.sent.size(), 1u);  // an RTR QP still answers with ACKs
}

}  // namespace
}  // namespace uroce::transport
