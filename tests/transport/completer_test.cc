// transport/completer.cc: ACK processing, completion order and fields, the retransmission timer,
// retry and RNR retry counters, NAK handling and local errors, driven by crafted responses.
#include "transport/completer.h"

#include <gtest/gtest.h>

#include <random>

#include <algorithm>

#include <cstring>

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
  EXPECT_EQ(node->qp->counters().retry_rnr_exceeded_err, 1u);
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

// A READ of 4 packets (0x1000..0x1003) then a SEND (0x1004); responses are crafted.
class CompleterReadTest : public CompleterTest {
 protected:
  void SetUp() override {
    up();
    rdata.assign(1024, 0);
    rkey = node->mem.reg(node->pd, rdata.data(), rdata.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_EQ(node->qp->post_send(
                  test::rdma_wqe(1, IBV_WR_RDMA_READ, reinterpret_cast<uint64_t>(rdata.data()),
                                 1024, rkey, 0x40000, 0x99),
                  now),
              0);
    send(2, 10);
    ASSERT_EQ(sent_psns(), (std::vector<uint32_t>{kSqPsn, kSqPsn + 4}));
  }
  void read_resp(Opcode op, uint32_t psn, uint8_t fill, size_t len = 256) {
    wire::Packet p;
    p.bth.opcode = uint8_t(op);
    p.bth.psn = psn;
    p.aeth.syndrome = test::ack_syndrome();
    const std::vector<uint8_t> payload(len, fill);
    test::deliver(*node, *test::craft_headers(p, payload), kRemoteIp, now);
  }
  std::vector<uint8_t> rdata;
  uint32_t rkey = 0;
};

TEST_F(CompleterReadTest, ResponsesFillTheSgesAndCompleteTheRead) {
  read_resp(Opcode::kRcReadResponseFirst, kSqPsn, 1);
  read_resp(Opcode::kRcReadResponseMiddle, kSqPsn + 1, 2);
  read_resp(Opcode::kRcReadResponseMiddle, kSqPsn + 1, 9);       // duplicate: ignored
  read_resp(Opcode::kRcReadResponseMiddle, kSqPsn + 2, 3, 100);  // wrong length: dropped
  EXPECT_EQ(node->qp->counters().dropped_pkts, 1u);
  read_resp(Opcode::kRcReadResponseMiddle, kSqPsn + 2, 3);
  EXPECT_TRUE(node->scq.wcs.empty());
  read_resp(Opcode::kRcReadResponseLast, kSqPsn + 3, 4);
  ASSERT_EQ(node->scq.wcs.size(), 1u);
  EXPECT_EQ(node->scq.wcs[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(node->scq.wcs[0].byte_len, 1024u);
  EXPECT_EQ(rdata[0], 1);
  EXPECT_EQ(rdata[256], 2);
  EXPECT_EQ(rdata[512], 3);
  EXPECT_EQ(rdata[1023], 4);
}

TEST_F(CompleterReadTest, AckBeyondAnIncompleteReadAsksForTheRestOfIt) {
  read_resp(Opcode::kRcReadResponseFirst, kSqPsn, 1);
  read_resp(Opcode::kRcReadResponseMiddle, kSqPsn + 1, 2);
  // Responses 2 and 3 were lost; the SEND's ACK arrives. It must not complete the READ.
  resp(kSqPsn + 4, test::ack_syndrome());
  EXPECT_TRUE(node->scq.wcs.empty());
  auto pkts = test::drain(*node);
  ASSERT_GE(pkts.size(), 1u);
  EXPECT_EQ(pkts[0]->pkt.bth.opcode, uint8_t(Opcode::kRcReadRequest));
  EXPECT_EQ(pkts[0]->pkt.bth.psn, kSqPsn + 2);
  EXPECT_EQ(pkts[0]->pkt.reth.va, 0x40000u + 512);
  EXPECT_EQ(pkts[0]->pkt.reth.dma_len, 512u);
  EXPECT_EQ(pkts[0]->pkt.reth.rkey, 0x99u);
  // The same ACK again does not ask twice.
  resp(kSqPsn + 4, test::ack_syndrome());
  EXPECT_TRUE(test::drain(*node).empty());
  read_resp(Opcode::kRcReadResponseFirst, kSqPsn + 2, 3);
  read_resp(Opcode::kRcReadResponseLast, kSqPsn + 3, 4);
  ASSERT_EQ(node->scq.wcs.size(), 1u);
  EXPECT_EQ(node->scq.wcs[0].wr_id, 1u);
  resp(kSqPsn + 4, test::ack_syndrome());
  ASSERT_EQ(node->scq.wcs.size(), 2u);
  EXPECT_EQ(rdata[511], 2);
  EXPECT_EQ(rdata[512], 3);
}

TEST_F(CompleterReadTest, ReadResponseImplicitlyAcknowledgesEarlierRequests) {
  // A fresh QP: SEND (0x1000) then a one-packet READ (0x1001).
  up();
  rkey = node->mem.reg(node->pd, rdata.data(), rdata.size(), IBV_ACCESS_LOCAL_WRITE);
  send(1, 10);
  ASSERT_EQ(node->qp->post_send(
                test::rdma_wqe(2, IBV_WR_RDMA_READ, reinterpret_cast<uint64_t>(rdata.data()), 100,
                               rkey, 0x40000, 0x99),
                now),
            0);
  read_resp(Opcode::kRcReadResponseOnly, kSqPsn + 1, 7, 100);
  ASSERT_EQ(node->scq.wcs.size(), 2u);
  EXPECT_EQ(node->scq.wcs[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(node->scq.wcs[1].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(node->scq.wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(rdata[99], 7);
}

TEST_F(CompleterReadTest, ResponseAfterALostOneAsksForTheRest) {
  read_resp(Opcode::kRcReadResponseFirst, kSqPsn, 1);
  read_resp(Opcode::kRcReadResponseLast, kSqPsn + 3, 4);  // 1 and 2 lost
  const auto pkts = test::drain(*node);
  ASSERT_GE(pkts.size(), 1u);
  EXPECT_EQ(pkts[0]->pkt.bth.psn, kSqPsn + 1);
  EXPECT_EQ(pkts[0]->pkt.reth.dma_len, 768u);
  EXPECT_TRUE(node->scq.wcs.empty());
}

// Random responses (ACK/NAK syndromes, READ responses and ATOMIC ACKs with PSNs around the
// outstanding ones and random lengths) while READs and ATOMICs are in flight: results land only
// in the posted SGEs, never around them, and nothing crashes.
TEST(CompleterFuzz, RandomResponsesStayInsideTheSges) {
  constexpr uint32_t kPage = 4096;
  std::vector<uint8_t> local(3 * kPage, 0xab), src(kPage, 1);
  auto node = std::make_unique<Node>(kQpn, kLocalIp);
  test::PathParams pp;
  pp.mtu = IBV_MTU_256;
  pp.rd_atomic = 4;
  pp.timeout = 0;  // no timer: only what we feed moves it
  node->connect(kRemoteIp, 0x22, kSqPsn, 0, pp);
  const uint32_t lkey =
      node->mem.reg(node->pd, local.data() + kPage, kPage, IBV_ACCESS_LOCAL_WRITE);
  const uint32_t skey = node->mem.reg(node->pd, src.data(), src.size(), 0);
  const uint64_t l = reinterpret_cast<uint64_t>(local.data() + kPage);
  const Opcode resp_ops[] = {Opcode::kRcAcknowledge,        Opcode::kRcReadResponseFirst,
                             Opcode::kRcReadResponseMiddle, Opcode::kRcReadResponseLast,
                             Opcode::kRcReadResponseOnly,   Opcode::kRcAtomicAcknowledge};
  std::mt19937_64 rng(5);
  uint32_t lo = kSqPsn;  // PSNs of interest: around those the requester has used
  int resets = 0;
  size_t completions = 0;
  for (int i = 0; i < 20000; ++i) {
    if (node->qp->state() == IBV_QPS_ERR) {
      completions += node->scq.wcs.size();
      node = std::make_unique<Node>(kQpn, kLocalIp);
      node->connect(kRemoteIp, 0x22, kSqPsn, 0, pp);
      node->mem.reg(node->pd, local.data() + kPage, kPage, IBV_ACCESS_LOCAL_WRITE);  // = lkey
      node->mem.reg(node->pd, src.data(), src.size(), 0);
      lo = kSqPsn;
      ++resets;
    }
    if (i % 4 == 0) {
      const uint32_t off = uint32_t(rng() % (kPage / 8)) * 8;
      switch (rng() % 4) {
        case 0:
          (void)node->qp->post_send(
              test::rdma_wqe(i, IBV_WR_RDMA_READ, l + off, uint32_t(rng() % (kPage - off)), lkey,
                             0x1000, 1),
              i);
          break;
        case 1:
          (void)node->qp->post_send(
              test::atomic_wqe(i, IBV_WR_ATOMIC_FETCH_AND_ADD, l + off, lkey, 0x1000, 1, 1), i);
          break;
        default:
          (void)node->qp->post_send(
              test::send_wqe(i, reinterpret_cast<uint64_t>(src.data()), rng() % 600, skey), i);
          break;
      }
    }
    for (auto& c : test::drain(*node)) lo = std::max(lo, c->pkt.bth.psn);
    wire::Packet p;
    const Opcode op = resp_ops[rng() % std::size(resp_ops)];
    p.bth.opcode = uint8_t(op);
    p.bth.dest_qp = kQpn;
    p.bth.psn = (lo - 8 + uint32_t(rng() % 24)) & kPsnMask;
    p.aeth.syndrome = rng() % 4 ? test::ack_syndrome() : uint8_t(rng());
    p.atomic_ack = rng();
    size_t len = 0;
    if (wire::opcode_info(op).flags & wire::kHasPayload) len = rng() % 2 ? 256 : rng() % 257;
    std::vector<uint8_t> payload(len, uint8_t(i));
    test::deliver(*node, *test::craft_headers(p, payload), kRemoteIp, i);
  }
  completions += node->scq.wcs.size();
  EXPECT_EQ(lkey, 0x100u);  // the re-registrations above rely on the keys repeating
  const auto untouched = [](const uint8_t* b, size_t n) {
    return std::all_of(b, b + n, [](uint8_t v) { return v == 0xab; });
  };
  EXPECT_TRUE(untouched(local.data(), kPage));
  EXPECT_TRUE(untouched(local.data() + 2 * kPage, kPage));
  EXPECT_FALSE(untouched(local.data() + kPage, kPage));  // some results were placed
  EXPECT_GT(completions, 100u);
}

}  // namespace
}  // namespace uroce::transport
