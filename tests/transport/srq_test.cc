// transport/srq.cc and the SRQ hook of the QP dispatcher: WQEs shared by several RC QPs, the
// limit event (one-shot, re-armed by modify), post_recv refused on a QP with an SRQ, RNR when the
// SRQ is empty, and the affiliated events of a QP entering ERR (QP_FATAL, LAST_WQE_REACHED).
#include "transport/srq.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "harness.h"

namespace uroce::transport {
namespace {

using test::Node;
using wire::Opcode;

constexpr uint32_t kLocalIp = 0x0a000002, kRemoteIp = 0x0a000001;
constexpr uint32_t kQpn1 = 0x22, kQpn2 = 0x23, kRemoteQpn1 = 0x11, kRemoteQpn2 = 0x12;
constexpr uint32_t kRqPsn = 0x700;

class LimitRecorder : public SrqEventSink {
 public:
  void srq_limit_reached() override { ++fired; }
  int fired = 0;
};

RecvWqe wqe(uint64_t wr_id, uint32_t num_sge = 1) {
  RecvWqe w;
  w.wr_id = wr_id;
  w.num_sge = num_sge;
  return w;
}

TEST(Srq, CheckInitRejectsImpossibleShapes) {
  EXPECT_EQ(Srq::check_init({.max_wr = 16, .max_sge = 1}), 0);
  EXPECT_EQ(Srq::check_init({.max_wr = 0, .max_sge = 1}), EINVAL);
  EXPECT_EQ(Srq::check_init({.max_wr = kMaxQpWr + 1, .max_sge = 1}), EINVAL);
  EXPECT_EQ(Srq::check_init({.max_wr = 16, .max_sge = 0}), EINVAL);
  EXPECT_EQ(Srq::check_init({.max_wr = 16, .max_sge = kMaxSge + 1}), EINVAL);
  EXPECT_EQ(Srq::check_init({.max_wr = 16, .max_sge = 1, .srq_limit = 17}), EINVAL);
}

TEST(Srq, PostIsBoundedAndTakeIsFifo) {
  Srq srq({.max_wr = 2, .max_sge = 2});
  EXPECT_EQ(srq.post_recv(wqe(1, 3)), EINVAL);  // more SGEs than max_sge
  EXPECT_EQ(srq.post_recv(wqe(1)), 0);
  EXPECT_EQ(srq.post_recv(wqe(2, 2)), 0);
  EXPECT_EQ(srq.post_recv(wqe(3)), ENOMEM);
  RecvQueue a, b;
  EXPECT_TRUE(srq.take(a));
  EXPECT_TRUE(srq.take(b));
  EXPECT_FALSE(srq.take(a));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0].wr_id, 1u);
  EXPECT_EQ(b[0].wr_id, 2u);
  EXPECT_EQ(b[0].num_sge, 2u);
}

TEST(Srq, LimitFiresOnceWhenCountDropsBelowItAndModifyRearms) {
  LimitRecorder ev;
  Srq srq({.max_wr = 8, .max_sge = 1, .srq_limit = 2, .events = &ev});
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(srq.post_recv(wqe(i)), 0);
  RecvQueue rq;
  srq.take(rq);  // 3 left
  srq.take(rq);  // 2 left: not below the limit
  EXPECT_EQ(ev.fired, 0);
  srq.take(rq);  // 1 left < 2
  EXPECT_EQ(ev.fired, 1);
  ibv_srq_attr attr{};
  srq.query(attr);
  EXPECT_EQ(attr.srq_limit, 0u) << "the limit disarms when it fires";
  EXPECT_EQ(attr.max_wr, 8u);
  EXPECT_EQ(attr.max_sge, 1u);
  srq.take(rq);  // 0 left, disarmed: no second event
  EXPECT_EQ(ev.fired, 1);

  // Re-armed by modify; posting alone never fires it.
  attr = {};
  attr.srq_limit = 3;
  ASSERT_EQ(srq.modify(attr, IBV_SRQ_LIMIT), 0);
  EXPECT_EQ(srq.limit(), 3u);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(srq.post_recv(wqe(10 + i)), 0);
  EXPECT_EQ(ev.fired, 1);
  srq.take(rq);  // 3 left
  EXPECT_EQ(ev.fired, 1);
  srq.take(rq);  // 2 left < 3
  EXPECT_EQ(ev.fired, 2);
}

TEST(Srq, ModifyResizesButNeverBelowQueuedOrUnderTheLimit) {
  Srq srq({.max_wr = 4, .max_sge = 1});
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(srq.post_recv(wqe(i)), 0);
  ibv_srq_attr attr{};
  attr.max_wr = 2;
  EXPECT_EQ(srq.modify(attr, IBV_SRQ_MAX_WR), EINVAL);  // 3 queued
  attr.max_wr = 0;
  EXPECT_EQ(srq.modify(attr, IBV_SRQ_MAX_WR), EINVAL);
  attr.max_wr = 16;
  ASSERT_EQ(srq.modify(attr, IBV_SRQ_MAX_WR), 0);
  EXPECT_EQ(srq.max_wr(), 16u);
  for (uint64_t i = 0; i < 13; ++i) ASSERT_EQ(srq.post_recv(wqe(i)), 0);
  EXPECT_EQ(srq.post_recv(wqe(99)), ENOMEM);
  attr = {};
  attr.srq_limit = 17;
  EXPECT_EQ(srq.modify(attr, IBV_SRQ_LIMIT), EINVAL);
  EXPECT_EQ(srq.limit(), 0u) << "nothing changes on error";
  attr.max_wr = 16;
  attr.srq_limit = 5;
  EXPECT_EQ(srq.modify(attr, IBV_SRQ_LIMIT | 0x100), EINVAL);  // unknown mask bit
  EXPECT_EQ(srq.modify(attr, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT), 0);
  EXPECT_EQ(srq.limit(), 5u);
}

// Two responder QPs of one device sharing one SRQ (and one memory), fed crafted requests.
class SharedSrqTest : public ::testing::Test {
 protected:
  SharedSrqTest() {
    test::PathParams p;
    p.mtu = IBV_MTU_256;
    p.min_rnr_timer = 12;
    for (Node* n : {&q1, &q2}) {
      n->init.srq = &srq;
      n->memory = &mem;
      n->rebuild();
    }
    q1.connect(kRemoteIp, kRemoteQpn1, 0, kRqPsn, p);
    q2.connect(kRemoteIp, kRemoteQpn2, 0, kRqPsn, p);
    buf.assign(4096, 0xee);
    key = mem.reg(q1.pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  }
  // A receive of `len` bytes at buf[off].
  void post(uint64_t wr_id, uint32_t off, uint32_t len) {
    ASSERT_EQ(srq.post_recv(
                  test::recv_wqe(wr_id, reinterpret_cast<uint64_t>(buf.data() + off), len, key)),
              0);
  }
  void in(Node& n, uint32_t qpn, Opcode op, uint32_t psn, std::vector<uint8_t> payload,
          bool ack_req = true) {
    test::deliver(n, *test::craft(op, qpn, psn, ack_req, payload), kRemoteIp, now++);
  }

  LimitRecorder limit;
  Srq srq{{.max_wr = 16, .max_sge = 1, .events = &limit}};
  test::FakeMemory mem;
  Node q1{kQpn1, kLocalIp}, q2{kQpn2, kLocalIp};
  std::vector<uint8_t> buf;
  uint32_t key = 0;
  Time now = 1;
};

TEST_F(SharedSrqTest, PostRecvOnAQpWithAnSrqIsRefused) {
  EXPECT_EQ(q1.qp->post_recv(test::recv_wqe(1, reinterpret_cast<uint64_t>(buf.data()), 8, key)),
            EINVAL);
  EXPECT_EQ(srq.size(), 0u);
}

TEST_F(SharedSrqTest, QpsTakeWqesInArrivalOrderAndAMultiPacketSendKeepsItsOwn) {
  post(1, 0, 1024);
  post(2, 1024, 1024);
  post(3, 2048, 1024);
  // q1 starts a two-packet SEND (takes WQE 1), q2 completes a one-packet SEND meanwhile (takes
  // WQE 2), then q1 finishes its message into WQE 1 and q2 sends again (WQE 3).
  in(q1, kQpn1, Opcode::kRcSendFirst, kRqPsn, std::vector<uint8_t>(256, 1), false);
  EXPECT_EQ(srq.size(), 2u);
  in(q2, kQpn2, Opcode::kRcSendOnly, kRqPsn, std::vector<uint8_t>(10, 2));
  in(q1, kQpn1, Opcode::kRcSendLast, kRqPsn + 1, std::vector<uint8_t>(20, 3));
  in(q2, kQpn2, Opcode::kRcSendOnly, kRqPsn + 1, std::vector<uint8_t>(5, 4));
  EXPECT_EQ(srq.size(), 0u);

  ASSERT_EQ(q1.rcq.wcs.size(), 1u);
  EXPECT_EQ(q1.rcq.wcs[0].wr_id, 1u);
  EXPECT_EQ(q1.rcq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(q1.rcq.wcs[0].byte_len, 276u);
  EXPECT_EQ(q1.rcq.wcs[0].qp_num, kQpn1);
  ASSERT_EQ(q2.rcq.wcs.size(), 2u);
  EXPECT_EQ(q2.rcq.wcs[0].wr_id, 2u);
  EXPECT_EQ(q2.rcq.wcs[0].byte_len, 10u);
  EXPECT_EQ(q2.rcq.wcs[0].qp_num, kQpn2);
  EXPECT_EQ(q2.rcq.wcs[1].wr_id, 3u);
  EXPECT_EQ(buf[0], 1);
  EXPECT_EQ(buf[256], 3);
  EXPECT_EQ(buf[276], 0xee);
  EXPECT_EQ(buf[1024], 2);
  EXPECT_EQ(buf[2048], 4);
}

TEST_F(SharedSrqTest, EmptySrqRnrNaksAndDuplicatesTakeNothing) {
  in(q1, kQpn1, Opcode::kRcSendOnly, kRqPsn, {1, 2, 3});
  auto out = test::drain(q1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::aeth_type(out[0]->pkt.aeth.syndrome), wire::AethType::kRnrNak);
  EXPECT_EQ(q1.qp->counters().send_rnr_err, 1u);

  post(1, 0, 64);
  post(2, 64, 64);
  in(q1, kQpn1, Opcode::kRcSendOnly, kRqPsn, {1, 2, 3});  // the requester's retry
  ASSERT_EQ(q1.rcq.wcs.size(), 1u);
  EXPECT_EQ(q1.rcq.wcs[0].wr_id, 1u);
  // A duplicate of the same SEND (our ACK was lost) is re-ACKed, never delivered: WQE 2 stays.
  in(q1, kQpn1, Opcode::kRcSendOnly, kRqPsn, {1, 2, 3});
  EXPECT_EQ(q1.rcq.wcs.size(), 1u);
  EXPECT_EQ(srq.size(), 1u);
  // Out of sequence: NAKed, takes nothing either.
  in(q1, kQpn1, Opcode::kRcSendOnly, kRqPsn + 5, {1});
  EXPECT_EQ(srq.size(), 1u);
}

TEST_F(SharedSrqTest, WriteWithImmediateTakesAWqeAtItsLastPacket) {
  post(1, 0, 64);
  wire::Packet h;
  h.bth.opcode = uint8_t(Opcode::kRcWriteOnlyImm);
  h.bth.dest_qp = kQpn1;
  h.bth.psn = kRqPsn;
  h.bth.ack_req = true;
  h.bth.pkey = wire::kDefaultPkey;
  h.reth = {reinterpret_cast<uint64_t>(buf.data() + 512), key, 4};
  h.imm_be = 0x01020304;
  // Remote write access for the test region.
  const uint32_t rkey =
      mem.reg(q1.pd, buf.data() + 512, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  h.reth.rkey = rkey;
  const std::vector<uint8_t> data{9, 8, 7, 6};
  test::deliver(q1, *test::craft_headers(h, data), kRemoteIp, now++);
  ASSERT_EQ(q1.rcq.wcs.size(), 1u);
  EXPECT_EQ(q1.rcq.wcs[0].wr_id, 1u);
  EXPECT_EQ(q1.rcq.wcs[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(q1.rcq.wcs[0].byte_len, 4u);
  EXPECT_EQ(buf[512], 9);
  EXPECT_EQ(srq.size(), 0u);
}

TEST_F(SharedSrqTest, LimitEventFiresFromTheDatapath) {
  ibv_srq_attr a{};
  a.srq_limit = 2;
  ASSERT_EQ(srq.modify(a, IBV_SRQ_LIMIT), 0);
  post(1, 0, 64);
  post(2, 64, 64);
  post(3, 128, 64);
  in(q1, kQpn1, Opcode::kRcSendOnly, kRqPsn, {1});  // 2 left
  EXPECT_EQ(limit.fired, 0);
  in(q2, kQpn2, Opcode::kRcSendOnly, kRqPsn, {1});  // 1 left < 2
  EXPECT_EQ(limit.fired, 1);
  in(q1, kQpn1, Opcode::kRcSendOnly, kRqPsn + 1, {1});
  EXPECT_EQ(limit.fired, 1);
}

TEST_F(SharedSrqTest, ErrByModifyRaisesLastWqeReachedOnly) {
  post(1, 0, 64);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(q1.qp->modify(a, IBV_QP_STATE, now), 0);
  EXPECT_EQ(q1.events.events, std::vector<ibv_event_type>{IBV_EVENT_QP_LAST_WQE_REACHED});
  EXPECT_TRUE(q1.rcq.wcs.empty()) << "WQEs still in the SRQ belong to no QP: not flushed";
  EXPECT_EQ(srq.size(), 1u);
  // The other QP keeps working from the same SRQ.
  in(q2, kQpn2, Opcode::kRcSendOnly, kRqPsn, {5});
  ASSERT_EQ(q2.rcq.wcs.size(), 1u);
  EXPECT_EQ(q2.rcq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(q2.events.events.empty());
}

TEST_F(SharedSrqTest, TransportErrorRaisesQpFatalThenLastWqeReached) {
  post(1, 0, 4);  // too small for the message
  post(2, 64, 64);
  in(q1, kQpn1, Opcode::kRcSendOnly, kRqPsn, std::vector<uint8_t>(8, 1));
  EXPECT_EQ(q1.qp->state(), IBV_QPS_ERR);
  ASSERT_EQ(q1.rcq.wcs.size(), 1u);
  EXPECT_EQ(q1.rcq.wcs[0].wr_id, 1u);
  EXPECT_EQ(q1.rcq.wcs[0].status, IBV_WC_LOC_LEN_ERR);
  // (No COMM_EST: the QP was already in RTS.)
  const std::vector<ibv_event_type> want{IBV_EVENT_QP_FATAL, IBV_EVENT_QP_LAST_WQE_REACHED};
  EXPECT_EQ(q1.events.events, want);
  EXPECT_EQ(srq.size(), 1u) << "the QP in ERR takes no more WQEs";
  in(q1, kQpn1, Opcode::kRcSendOnly, kRqPsn + 1, {1});
  EXPECT_EQ(srq.size(), 1u);
}

TEST(QpEvents, TransportErrorWithoutSrqRaisesQpFatal) {
  Node n(kQpn1, kLocalIp);
  n.connect(kRemoteIp, kRemoteQpn1, 0, kRqPsn);
  // An RDMA WRITE naming an rkey that does not exist: remote access error, the QP enters ERR.
  wire::Packet h;
  h.bth.opcode = uint8_t(Opcode::kRcWriteOnly);
  h.bth.dest_qp = kQpn1;
  h.bth.psn = kRqPsn;
  h.bth.ack_req = true;
  h.bth.pkey = wire::kDefaultPkey;
  h.reth = {0x1000, 0xdead, 4};
  const std::vector<uint8_t> data{1, 2, 3, 4};
  test::deliver(n, *test::craft_headers(h, data), kRemoteIp, 1);
  EXPECT_EQ(n.qp->state(), IBV_QPS_ERR);
  const std::vector<ibv_event_type> want{IBV_EVENT_QP_FATAL};
  EXPECT_EQ(n.events.events, want);
  // Moving to ERR by modify is the consumer's doing: no event.
  Node m(kQpn2, kLocalIp);
  m.connect(kRemoteIp, kRemoteQpn2, 0, kRqPsn);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(m.qp->modify(a, IBV_QP_STATE, 1), 0);
  EXPECT_TRUE(m.events.events.empty());
}

}  // namespace
}  // namespace uroce::transport
