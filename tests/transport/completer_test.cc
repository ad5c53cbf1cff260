// transport/completer.cc: ACK processing, completion order and fields, the retransmission timer,
// retry and RNR retry counters, NAK handling and local errors, driven by crafted responses.
#include "transport/completer.h"

#include <gtest/gtest.h>

#include "harness.h"
#include "transport/qp_state.h"

namespace uroce::transport {
namespace {

using test::Node;
using wire::NakCode;
using wire::Opcode;

constexpr uint32_t kLocalIp = 0x0a000001, kRemoteIp = 0x0a000002;
constexpr uint32_t kQpn = 0x11;
constexpr uint32_t kSqPsn = 0x1000;

class CompleterTest : public ::testing::Test {
 protected:
  void up(bool sig_all = true, test::PathParams p = {}) {
    node = std::make_unique<Node>(kQpn, kLocalIp, sig_all);
    p.mtu = IBV_MTU_256;
    node->connect(kRemoteIp, 0x22, kSqPsn, 0, p);
    data.assign(1 << 16, 0x5a);
    key = node->mem.reg(node->pd, data.data(), data.size(), 0);
  }
  void send(uint64_t wr_id, uint32_t len, unsigned flags = 0) {
    SendWqe w = test::send_wqe(wr_id, reinterpret_cast<uint64_t>(data.data()), len, key);
    w.send_flags = flags;
    ASSERT_EQ(node->qp->post_send(w, now), 0);
  }
  void resp(uint32_t psn, uint8_t syndrome) {
    test::deliver(*node, *test::craft_ack(kQpn, psn, syndrome), kRemoteIp, now);
  }
  std::vector<uint32_t> sent_psns() {
    std::vector<uint32_t> v;
    for (auto& c : test::drain(*node)) v.push_back(c->pkt.bth.psn);
    return v;
  }

  std::unique_ptr<Node> node;
  std::vector<uint8_t> data;
  uint32_t key = 0;
  Time now = 1000;
};

TEST_F(CompleterTest, CumulativeAckCompletesInOrderWithFields) {
  up();
  send(1, 600);  // PSNs 0x1000..0x1002
  send(2, 10);   // 0x1003
  send(3, 300);  // 0x1004..0x1005
  EXPECT_EQ(sent_psns().size(), 6u);
  resp(kSqPsn + 1, test::ack_syndrome());  // part of WQE 1: nothing completes
  EXPECT_TRUE(node->scq.wcs.empty());
  resp(kSqPsn + 3, test::ack_syndrome());  // covers 1 and 2
  ASSERT_EQ(node->scq.wcs.size(), 2u);
  EXPECT_EQ(node->scq.wcs[0].wr_id, 1u);
  EXPECT_EQ(node->scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(node->scq.wcs[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(node->scq.wcs[0].qp_num, kQpn);
  EXPECT_EQ(node->scq.wcs[0].byte_len, 600u);
  EXPECT_EQ(node->scq.wcs[1].wr_id, 2u);
  resp(kSqPsn + 2, test::ack_syndrome());  // stale: ignored
  resp(kSqPsn + 9, test::ack_syndrome());  // ghost: never sent
  EXPECT_EQ(node->scq.wcs.size(), 2u);
  EXPECT_EQ(node->qp->counters().dropped_pkts, 1u);
  resp(kSqPsn + 5, test::ack_syndrome());
  ASSERT_EQ(node->scq.wcs.size(), 3u);
  EXPECT_EQ(node->scq.wcs[2].wr_id, 3u);
  EXPECT_EQ(node->qp->next_deadline(), kNever);  // nothing outstanding: timer stopped
}

TEST_F(CompleterTest, UnsignaledWqesCompleteSilently) {
  up(/*sig_all=*/false);
  send(1, 10);
  send(2, 10, IBV_SEND_SIGNALED);
  send(3, 10);
  resp(kSqPsn + 2, test::ack_syndrome());
  ASSERT_EQ(node->scq.wcs.size(), 1u);
  EXPECT_EQ(node->scq.wcs[0].wr_id, 2u);
}

TEST_F(CompleterTest, TimeoutRetransmitsAndRetryExhaustionFlushes) {
  test::PathParams p;
  p.timeout = 10;  // 4.096 us * 1024
  p.retry_cnt = 2;
  up(true, p);
  send(1, 300);  // 0x1000, 0x1001
  send(2, 10);   // 0x1002
  EXPECT_EQ(sent_psns().size(), 3u);
  const Time t = ack_timeout_ns(10);
  EXPECT_EQ(node->qp->next_deadline(), now + t);
  resp(kSqPsn, test::ack_syndrome());  // progress restarts the timer
  now += 100;
  EXPECT_EQ(node->qp->next_deadline(), now - 100 + t);
  node->qp->on_timer(now);  // too early: nothing happens
  EXPECT_TRUE(sent_psns().empty());
  for (int retry = 0; retry < 2; ++retry) {
    now = node->qp->next_deadline();
    node->qp->on_timer(now);
    EXPECT_EQ(sent_psns(), (std::vector<uint32_t>{kSqPsn + 1, kSqPsn + 2}));
    EXPECT_EQ(node->qp->next_deadline(), now + t);
  }
  EXPECT_EQ(node->qp->counters().retransmitted_pkts, 4u);
  now = node->qp->next_deadline();
  node->qp->on_timer(now);
  EXPECT_TRUE(sent_psns().empty());
  ASSERT_EQ(node->scq.wcs.size(), 2u);
  EXPECT_EQ(node->scq.wcs[0].wr_id, 1u);
  EXPECT_EQ(node->scq.wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(node->scq.wcs[1].wr_id, 2u);
  EXPECT_EQ(node->scq.wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(node->qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(node->qp->counters().retry_exceeded_err, 1u);
  EXPECT_EQ(node->qp->counters().local_ack_timeout_err, 3u);
  EXPECT_EQ(node->qp->next_deadline(), kNever);
}

TEST_F(CompleterTest, TimeoutZeroMeansNoTimer) {
  test::PathParams p;
  p.timeout = 0;
  up(true, p);
  send(1, 10);
  EXPECT_EQ(node->qp->next_deadline(), kNever);
}

TEST_F(CompleterTest, SequenceNakGoesBackN) {
  up();
  send(1, 10);   // 0x1000
  send(2, 600);  // 0x1001..0x1003
  EXPECT_EQ(sent_psns().size(), 4u);
  resp(kSqPsn + 2, test::nak_syndrome(NakCode::kPsnSequenceError));
  // The NAK acknowledges 0x1000..0x1001 implicitly and asks for 0x1002 onwards.
  ASSERT_EQ(node->scq.wcs.size(), 1u);
  EXPECT_EQ(node->scq.wcs[0].wr_id, 1u);
  EXPECT_EQ(sent_psns(), (std::vector<uint32_t>{kSqPsn + 2, kSqPsn + 3}));
  EXPECT_EQ(node->qp->counters().rcvd_seq_err, 1u);
  // A repeated NAK for the same PSN (no progress) spends a retry and resends again.
  resp(kSqPsn + 2, test::nak_syndrome(NakCode::kPsnSequenceError));
  EXPECT_EQ(sent_psns(), (std::vector<uint32_t>{kSqPsn + 2, kSqPsn + 3}));
  resp(kSqPsn + 3, test::ack_syndrome());
  EXPECT_EQ(node->scq.wcs.size(), 2u);
}

TEST_F(CompleterTest, RnrNakWaitsTheTimerThenRetries) {
  test::PathParams p;
  p.rnr_retry = 2;
  up(true, p);
  send(1, 10);
  send(2, 10);
  EXPECT_EQ(sent_psns().size(), 2u);
  const Time wait = rnr_timer_ns(14);  // 1.28 ms
  for (int i = 0; i < 2; ++i) {
    resp(kSqPsn, test::rnr_syndrome(14));
    EXPECT_TRUE(sent_psns().empty());
    EXPECT_FALSE(node->qp->wants_pump());
    EXPECT_EQ(node->qp->next_deadline(), now + wait);
    node->qp->on_timer(now + wait - 1);
    EXPECT_TRUE(sent_psns().empty());
    now += wait;
    node->qp->on_timer(now);
    EXPECT_EQ(sent_psns(), (std::vector<uint32_t>{kSqPsn, kSqPsn + 1}));
  }
  EXPECT_EQ(node->qp->counters().rcvd_rnr_err, 2u);
  resp(kSqPsn, test::rnr_syndrome(14));  // third RNR NAK: rnr_retry = 2 exhausted
  ASSERT_EQ(node->scq.wcs.size(), 2u);
  EXPECT_EQ(node->scq.wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(node->scq.wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(node->qp->counters().rnr_retry_exceeded_err, 1u);
  EXPECT_EQ(node->qp->state(), IBV_QPS_ERR);
}

TEST_F(CompleterTest, RnrRetrySevenIsInfinite) {
  test::PathParams p;
  p.rnr_retry = 7;
  up(true, p);
  send(1, 10);
  test::drain(*node);
  for (int i = 0; i < 50; ++i) {
    resp(kSqPsn, test::rnr_syndrome(1));
    now += rnr_timer_ns(1);
    node->qp->on_timer(now);
    ASSERT_EQ(sent_psns().size(), 1u);
  }
  EXPECT_TRUE(node->scq.wcs.empty());
  EXPECT_EQ(node->qp->state(), IBV_QPS_RTS);
}

TEST_F(CompleterTest, RemoteErrorsCompleteWithTheirStatus) {
  const std::pair<NakCode, ibv_wc_status> cases[] = {
      {NakCode::kInvalidRequest, IBV_WC_REM_INV_REQ_ERR},
      {NakCode::kRemoteAccessError, IBV_WC_REM_ACCESS_ERR},
      {NakCode::kRemoteOperationalError, IBV_WC_REM_OP_ERR},
  };
  for (const auto& [code, status] : cases) {
    up();
    send(1, 10);
    send(2, 10);
    send(3, 10);
    resp(kSqPsn + 1, test::nak_syndrome(code));
    ASSERT_EQ(node->scq.wcs.size(), 3u);
    EXPECT_EQ(node->scq.wcs[0].status, IBV_WC_SUCCESS);  // implicitly acknowledged
    EXPECT_EQ(node->scq.wcs[1].status, status);
    EXPECT_EQ(node->scq.wcs[2].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(node->qp->state(), IBV_QPS_ERR);
  }
}

TEST_F(CompleterTest, BadLkeyIsLocalProtectionErrorAfterEarlierWqes) {
  up();
  send(1, 10);
  SendWqe bad = test::send_wqe(2, reinterpret_cast<uint64_t>(data.data()), 10, 0xbad);
  ASSERT_EQ(node->qp->post_send(bad, now), 0);
  send(3, 10);
  // WQE 1 is on the wire; WQE 2 fails before sending anything; WQE 3 waits behind it.
  EXPECT_EQ(sent_psns(), (std::vector<uint32_t>{kSqPsn}));
  EXPECT_TRUE(node->scq.wcs.empty());
  resp(kSqPsn, test::ack_syndrome());
  ASSERT_EQ(node->scq.wcs.size(), 3u);
  EXPECT_EQ(node->scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(node->scq.wcs[1].wr_id, 2u);
  EXPECT_EQ(node->scq.wcs[1].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(node->scq.wcs[2].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(node->qp->state(), IBV_QPS_ERR);
  EXPECT_TRUE(sent_psns().empty());
}

TEST_F(CompleterTest, BadLkeyFirstInQueueFailsAtOnce) {
  up();
  SendWqe bad = test::send_wqe(2, reinterpret_cast<uint64_t>(data.data()), 10, 0xbad);
  ASSERT_EQ(node->qp->post_send(bad, now), 0);
  ASSERT_EQ(node->scq.wcs.size(), 1u);
  EXPECT_EQ(node->scq.wcs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(node->qp->state(), IBV_QPS_ERR);
}

TEST_F(CompleterTest, ResponsesIgnoredBeforeRts) {
  Node n{kQpn, kLocalIp};
  test::deliver(n, *test::craft_ack(kQpn, 0, test::ack_syndrome()), kRemoteIp, 1);
  EXPECT_EQ(n.qp->counters().dropped_pkts, 1u);
}

}  // namespace
}  // namespace uroce::transport
