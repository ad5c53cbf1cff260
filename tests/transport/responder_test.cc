// transport/responder.cc: PSN classification, SEND execution, ACK/NAK generation, RNR and the
// responder's error classes, driven by crafted request packets.
#include "transport/responder.h"

#include <gtest/gtest.h>

#include <random>

#include <algorithm>

#include <cstring>

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
      EXPECT_EQ(c->buf.dst_ip, wire::IpAddr(kRemoteIp));
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

// A retransmission of an acknowledged message is answered at its first packet, not only at its
// AckReq-marked last one: if that one is lost, the requester still learns where we are.
TEST_F(ResponderTest, FirstDuplicateOfARetransmissionIsAcked) {
  post_recv(1, 4096);
  post_recv(2, 4096);
  in(Opcode::kRcSendFirst, kRqPsn, false, bytes(256, 1));
  in(Opcode::kRcSendMiddle, kRqPsn + 1, false, bytes(256, 1));
  in(Opcode::kRcSendLast, kRqPsn + 2, true, bytes(10, 1));
  ASSERT_EQ(responses().size(), 1u);
  in(Opcode::kRcSendFirst, kRqPsn, false, bytes(256, 1));  // the requester resends it all
  auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].psn, kRqPsn + 2);  // cumulative: everything up to the message's end
  EXPECT_EQ(r[0].syndrome, test::ack_syndrome());
  EXPECT_EQ(r[0].msn, 1u);
  in(Opcode::kRcSendMiddle, kRqPsn + 1, false, bytes(256, 1));  // one ACK per episode
  EXPECT_TRUE(responses().empty());
  in(Opcode::kRcSendLast, kRqPsn + 2, true, bytes(10, 1));  // AckReq is always answered
  EXPECT_EQ(responses().size(), 1u);
  EXPECT_EQ(node.rcq.wcs.size(), 1u);
  // Progress re-arms it: the next retransmission is answered at its start again.
  in(Opcode::kRcSendOnly, kRqPsn + 3, true, bytes(10, 2));
  EXPECT_EQ(responses().size(), 1u);
  in(Opcode::kRcSendOnly, kRqPsn + 3, false, bytes(10, 2));
  EXPECT_EQ(responses().size(), 1u);
  EXPECT_EQ(node.rcq.wcs.size(), 2u);
  EXPECT_EQ(node.qp->counters().duplicate_request, 4u);
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

TEST_F(ResponderTest, SendWithInvalidateOfAKeyThatCannotBeInvalidatedIsNakInvalidRequest) {
  post_recv(1, 100);
  // FakeMemory allocates no memory windows and a region cannot be invalidated: no key can be
  // (tests/transport/invalidate_test.cc covers invalidation with the engine's key table).
  in(Opcode::kRcSendOnlyInv, kRqPsn, true, bytes(8, 1));
  const auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].syndrome, test::nak_syndrome(NakCode::kInvalidRequest));
  EXPECT_EQ(node.qp->state(), IBV_QPS_ERR);
  ASSERT_EQ(node.rcq.wcs.size(), 1u);
  EXPECT_EQ(node.rcq.wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
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

// While the port pushes back, answers wait in the responder. A NAK waiting there is never
// replaced by a later ACK: the requester must still learn of the gap or the missing receive.
TEST_F(ResponderTest, AWaitingSequenceNakIsNotSupersededByTheAckOfADuplicate) {
  for (int i = 0; i < 4; ++i) post_recv(i, 100);
  in(Opcode::kRcSendOnly, kRqPsn, true, bytes(4, 1));
  ASSERT_EQ(responses().size(), 1u);
  node.sink.budget = 0;
  in(Opcode::kRcSendOnly, kRqPsn + 2, true, bytes(4, 1));  // +1 lost: sequence NAK, waiting
  in(Opcode::kRcSendOnly, kRqPsn, false, bytes(4, 1));     // a late duplicate: re-ACKed
  node.sink.budget = -1;
  node.qp->pump(now++);
  const auto r = responses();
  ASSERT_EQ(r.size(), 1u) << "the duplicate's ACK says less than the NAK: not queued behind it";
  EXPECT_EQ(r[0].psn, kRqPsn + 1);
  EXPECT_EQ(r[0].syndrome, test::nak_syndrome(NakCode::kPsnSequenceError));
}

TEST_F(ResponderTest, AWaitingRnrNakIsNotSupersededByTheAckOfADuplicate) {
  post_recv(1, 100);
  in(Opcode::kRcSendOnly, kRqPsn, true, bytes(4, 1));
  ASSERT_EQ(responses().size(), 1u);
  node.sink.budget = 0;
  in(Opcode::kRcSendOnly, kRqPsn + 1, true, bytes(4, 1));  // no receive: RNR NAK, waiting
  in(Opcode::kRcSendOnly, kRqPsn, true, bytes(4, 1));      // a duplicate asking for an ACK
  node.sink.budget = -1;
  node.qp->pump(now++);
  const auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].psn, kRqPsn + 1);
  EXPECT_EQ(r[0].syndrome, test::rnr_syndrome(12));
}

// An ACK waiting is superseded by the newer ACK or NAK (cumulative: it says at least as much);
// an ACK that moves past a waiting NAK (the refused PSN executed since) is sent after it.
TEST_F(ResponderTest, WaitingAcksCoalesceButNaksStayInOrder) {
  for (int i = 0; i < 4; ++i) post_recv(i, 100);
  node.sink.budget = 0;
  in(Opcode::kRcSendOnly, kRqPsn, true, bytes(4, 1));
  in(Opcode::kRcSendOnly, kRqPsn + 1, true, bytes(4, 1));
  in(Opcode::kRcSendOnly, kRqPsn + 3, true, bytes(4, 1));  // gap at +2
  in(Opcode::kRcSendOnly, kRqPsn + 2, true, bytes(4, 1));  // the go-back-N resend
  node.sink.budget = -1;
  node.qp->pump(now++);
  const auto r = responses();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].psn, kRqPsn + 2);
  EXPECT_EQ(r[0].syndrome, test::nak_syndrome(NakCode::kPsnSequenceError));
  EXPECT_EQ(r[1].psn, kRqPsn + 2);
  EXPECT_EQ(r[1].syndrome, test::ack_syndrome());
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

// ---- RDMA WRITE / READ / ATOMIC ----

class ResponderRdmaTest : public ResponderTest {
 protected:
  ResponderRdmaTest() {
    mem.resize(4096);
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = uint8_t(i * 3 + 1);
    rkey = node.mem.reg(node.pd, mem.data(), mem.size(),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_ATOMIC);
  }
  uint64_t at(uint64_t off) const { return reinterpret_cast<uint64_t>(mem.data()) + off; }
  void in_reth(Opcode op, uint32_t psn, uint64_t va, uint32_t len,
               std::vector<uint8_t> payload = {}, uint32_t key = 0) {
    wire::Packet p;
    p.bth.opcode = uint8_t(op);
    p.bth.dest_qp = kQpn;
    p.bth.psn = psn;
    p.bth.ack_req = true;
    p.reth = {va, key ? key : rkey, len};
    test::deliver(node, *test::craft_headers(p, payload), kRemoteIp, now++);
  }
  void in_atomic(Opcode op, uint32_t psn, uint64_t va, uint64_t swap_add, uint64_t compare = 0) {
    wire::Packet p;
    p.bth.opcode = uint8_t(op);
    p.bth.dest_qp = kQpn;
    p.bth.psn = psn;
    p.bth.ack_req = true;
    p.atomic = {va, rkey, swap_add, compare};
    test::deliver(node, *test::craft_headers(p), kRemoteIp, now++);
  }
  std::vector<uint8_t> mem;
  uint32_t rkey = 0;
};

TEST_F(ResponderRdmaTest, ReadIsAnsweredInPmtuPacketsFromTheRegion) {
  in_reth(Opcode::kRcReadRequest, kRqPsn, at(100), 3 * 256 + 10);
  const auto r = test::drain(node);
  ASSERT_EQ(r.size(), 4u);
  const Opcode want[] = {Opcode::kRcReadResponseFirst, Opcode::kRcReadResponseMiddle,
                         Opcode::kRcReadResponseMiddle, Opcode::kRcReadResponseLast};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r[i]->pkt.bth.opcode, uint8_t(want[i]));
    EXPECT_EQ(r[i]->pkt.bth.psn, kRqPsn + i);
    const size_t len = i < 3 ? 256 : 10;
    ASSERT_EQ(r[i]->pkt.payload.size(), len);
    EXPECT_TRUE(std::equal(r[i]->pkt.payload.begin(), r[i]->pkt.payload.end(),
                           mem.begin() + 100 + 256 * i));
  }
  EXPECT_EQ(r[0]->pkt.aeth.syndrome, test::ack_syndrome());
  EXPECT_EQ(node.qp->counters().duplicate_request, 0u);
  // The READ took 4 PSNs: a SEND at +4 is the next expected request.
  post_recv(1, 100);
  in(Opcode::kRcSendOnly, kRqPsn + 4, true, bytes(4, 1));
  EXPECT_EQ(node.rcq.wcs.size(), 1u);
}

TEST_F(ResponderRdmaTest, DuplicateReadIsExecutedAgainFromTheMiddle) {
  in_reth(Opcode::kRcReadRequest, kRqPsn, at(0), 4 * 256);
  ASSERT_EQ(test::drain(node).size(), 4u);
  // The requester lost responses 2 and 3 and asks for the rest (IBTA 9.7.4.1.3.2).
  in_reth(Opcode::kRcReadRequest, kRqPsn + 2, at(512), 512);
  const auto r = test::drain(node);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]->pkt.bth.opcode, uint8_t(Opcode::kRcReadResponseFirst));
  EXPECT_EQ(r[0]->pkt.bth.psn, kRqPsn + 2);
  EXPECT_TRUE(std::equal(r[0]->pkt.payload.begin(), r[0]->pkt.payload.end(), mem.begin() + 512));
  EXPECT_EQ(r[1]->pkt.bth.opcode, uint8_t(Opcode::kRcReadResponseLast));
  EXPECT_EQ(r[1]->pkt.bth.psn, kRqPsn + 3);
  EXPECT_EQ(node.qp->counters().duplicate_request, 1u);
  // A "duplicate" that names other memory than the READ it repeats is dropped, not served.
  in_reth(Opcode::kRcReadRequest, kRqPsn + 2, at(1024), 512);
  EXPECT_TRUE(test::drain(node).empty());
  EXPECT_EQ(node.qp->counters().dropped_pkts, 1u);
  EXPECT_EQ(node.qp->state(), IBV_QPS_RTS);
}

TEST_F(ResponderRdmaTest, DuplicateAtomicIsAnsweredFromTheCacheNotExecutedAgain) {
  uint64_t v = 1000;
  std::memcpy(mem.data() + 64, &v, 8);
  in_atomic(Opcode::kRcFetchAdd, kRqPsn, at(64), 5);
  in_atomic(Opcode::kRcFetchAdd, kRqPsn, at(64), 5);  // our ATOMIC ACK was lost
  const auto r = test::drain(node);
  ASSERT_EQ(r.size(), 2u);
  for (const auto& c : r) {
    EXPECT_EQ(c->pkt.bth.opcode, uint8_t(Opcode::kRcAtomicAcknowledge));
    EXPECT_EQ(c->pkt.bth.psn, kRqPsn);
    EXPECT_EQ(c->pkt.atomic_ack, 1000u);
  }
  std::memcpy(&v, mem.data() + 64, 8);
  EXPECT_EQ(v, 1005u);  // once
  // A CMP_AND_SWP evicts it from the single resource (max_dest_rd_atomic 1): a duplicate of the
  // FETCH_ADD is now too old to answer and is dropped.
  in_atomic(Opcode::kRcCompareSwap, kRqPsn + 1, at(64), 7, 1005);
  ASSERT_EQ(test::drain(node).size(), 1u);
  std::memcpy(&v, mem.data() + 64, 8);
  EXPECT_EQ(v, 7u);
  in_atomic(Opcode::kRcFetchAdd, kRqPsn, at(64), 5);
  EXPECT_TRUE(test::drain(node).empty());
  std::memcpy(&v, mem.data() + 64, 8);
  EXPECT_EQ(v, 7u);
}

TEST_F(ResponderRdmaTest, WriteLengthsMustAddUpToTheDmaLength) {
  const std::vector<uint8_t> before = mem;
  in_reth(Opcode::kRcWriteOnly, kRqPsn, at(0), 200, bytes(100, 9));
  const auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].syndrome, test::nak_syndrome(NakCode::kInvalidRequest));
  EXPECT_EQ(node.qp->state(), IBV_QPS_ERR);
  EXPECT_TRUE(mem == before);
}

TEST_F(ResponderRdmaTest, WriteMiddleWithoutFirstIsInvalidRequest) {
  in(Opcode::kRcWriteMiddle, kRqPsn, true, bytes(256, 1));
  const auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].syndrome, test::nak_syndrome(NakCode::kInvalidRequest));
}

TEST_F(ResponderRdmaTest, WriteImmLastWithoutReceiveIsRnrAndTheResentLastCompletes) {
  in_reth(Opcode::kRcWriteFirst, kRqPsn, at(0), 256 + 10, bytes(256, 4));
  EXPECT_EQ(responses().size(), 1u);  // AckReq was set: ACK
  in(Opcode::kRcWriteLastImm, kRqPsn + 1, true, bytes(10, 5), 0x01020304);
  auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].syndrome, test::rnr_syndrome(12));
  EXPECT_EQ(r[0].psn, kRqPsn + 1);
  EXPECT_EQ(mem[256], uint8_t(256 * 3 + 1));  // the LAST's bytes not written yet
  auto& rb = post_recv(3, 16);
  in(Opcode::kRcWriteLastImm, kRqPsn + 1, true, bytes(10, 5), 0x01020304);
  r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].syndrome, test::ack_syndrome());
  ASSERT_EQ(node.rcq.wcs.size(), 1u);
  EXPECT_EQ(node.rcq.wcs[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(node.rcq.wcs[0].byte_len, 266u);
  EXPECT_EQ(node.rcq.wcs[0].imm_data, 0x01020304u);
  EXPECT_EQ(mem[0], 4);
  EXPECT_EQ(mem[265], 5);
  EXPECT_EQ(rb[0], 0xee);  // the receive's own buffer is untouched
}

TEST_F(ResponderRdmaTest, ZeroLengthWriteNamesNoMemory) {
  in_reth(Opcode::kRcWriteOnly, kRqPsn, 0, 0, {}, 0xdead);
  const auto r = responses();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].syndrome, test::ack_syndrome());
}

// Random requests (every RC request opcode, PSNs around the expected one, RETH/AtomicETH
// pointing around and into the region, random lengths): whatever the responder answers, it
// never touches memory outside what is registered, and never crashes.
TEST(ResponderFuzz, RandomRequestsStayInsideRegisteredMemory) {
  constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                       IBV_ACCESS_REMOTE_ATOMIC;
  constexpr uint32_t kPage = 4096;
  std::vector<uint8_t> arena(3 * kPage, 0xab), rbuf(3 * kPage, 0xab);
  Node node(kQpn, kLocalIp);
  test::PathParams pp;
  pp.mtu = IBV_MTU_256;
  pp.rd_atomic = 4;
  auto up = [&] { node.connect(kRemoteIp, kRemoteQpn, 0, kRqPsn, pp); };
  up();
  const uint32_t rkey = node.mem.reg(node.pd, arena.data() + kPage, kPage, kAll);
  const uint32_t lkey = node.mem.reg(node.pd, rbuf.data() + kPage, kPage, IBV_ACCESS_LOCAL_WRITE);
  const uint64_t base = reinterpret_cast<uint64_t>(arena.data() + kPage);
  const Opcode ops[] = {Opcode::kRcSendFirst,   Opcode::kRcSendMiddle,   Opcode::kRcSendLast,
                        Opcode::kRcSendLastImm, Opcode::kRcSendOnly,     Opcode::kRcWriteFirst,
                        Opcode::kRcWriteMiddle, Opcode::kRcWriteLast,    Opcode::kRcWriteLastImm,
                        Opcode::kRcWriteOnly,   Opcode::kRcWriteOnlyImm, Opcode::kRcReadRequest,
                        Opcode::kRcCompareSwap, Opcode::kRcFetchAdd,     Opcode::kRcSendOnlyInv,
                        Opcode::kRcAtomicWrite};
  std::mt19937_64 rng(11);
  uint32_t psn = kRqPsn, known = kRqPsn;
  int resets = 0;
  uint64_t responses = 0;
  for (int i = 0; i < 20000; ++i) {
    if (node.qp->state() == IBV_QPS_ERR) {
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_RESET;
      ASSERT_EQ(node.qp->modify(a, IBV_QP_STATE, 0), 0);
      up();
      psn = known = kRqPsn;
      ++resets;
    }
    if (i % 3 == 0) {
      (void)node.qp->post_recv(test::recv_wqe(i, reinterpret_cast<uint64_t>(rbuf.data() + kPage),
                                              uint32_t(rng() % kPage), lkey));
    }
    wire::Packet p;
    const Opcode op = ops[rng() % std::size(ops)];
    p.bth.opcode = uint8_t(op);
    p.bth.dest_qp = kQpn;
    p.bth.ack_req = rng() % 8 != 0;
    p.bth.se = rng() % 2;
    p.bth.psn = (psn + (rng() % 5 == 0 ? uint32_t(rng() % 5) - 2 : 0)) & kPsnMask;
    const uint64_t va = base + (rng() % (kPage + 600)) - 300;
    p.reth = {va, rng() % 10 == 0 ? uint32_t(rng()) : rkey, uint32_t(rng() % 1500)};
    p.atomic = {rng() % 2 ? va & ~7ull : va, rng() % 10 == 0 ? uint32_t(rng()) : rkey, rng(),
                rng()};
    const uint32_t flags = wire::opcode_info(op).flags;
    size_t len = 0;
    if (flags & wire::kHasPayload) len = rng() % 2 ? 256 : rng() % 257;
    if (op == Opcode::kRcAtomicWrite) {  // mostly its 8 bytes, so that some are placed
      len = rng() % 4 ? 8 : rng() % 17;
      if (rng() % 4) p.reth.dma_len = 8;
    }
    std::vector<uint8_t> payload(len, uint8_t(i));
    test::deliver(node, *test::craft_headers(p, payload), kRemoteIp, i);
    psn += (flags & wire::kRead) ? std::max<uint32_t>(1, (p.reth.dma_len + 255) / 256) : 1;
    // Follow the responder: an ACK or response for p expects p + 1 next, a NAK (sequence, RNR)
    // names the PSN it expects. Silence (a gap already NAKed) falls back to the last known.
    bool answered = false;
    for (auto& c : test::drain(node)) {
      ++responses;
      answered = true;
      const bool nak = c->pkt.bth.opcode == uint8_t(Opcode::kRcAcknowledge) &&
                       wire::aeth_type(c->pkt.aeth.syndrome) != wire::AethType::kAck;
      known = nak ? c->pkt.bth.psn : (c->pkt.bth.psn + 1) & kPsnMask;
    }
    if (answered || p.bth.ack_req) psn = known;
  }
  const auto untouched = [](const uint8_t* b, size_t n) {
    return std::all_of(b, b + n, [](uint8_t v) { return v == 0xab; });
  };
  EXPECT_TRUE(untouched(arena.data(), kPage));
  EXPECT_TRUE(untouched(arena.data() + 2 * kPage, kPage));
  EXPECT_TRUE(untouched(rbuf.data(), kPage));
  EXPECT_TRUE(untouched(rbuf.data() + 2 * kPage, kPage));
  EXPECT_FALSE(untouched(arena.data() + kPage, kPage));  // some WRITEs/ATOMICs executed
  EXPECT_GT(resets, 10);
  EXPECT_GT(responses, 1000u);
}

}  // namespace
}  // namespace uroce::transport
