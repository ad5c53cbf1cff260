// Two QPs over the virtual-time link (harness.h): end-to-end reliability of the requester,
// responder and completer together, with targeted and random loss, duplication and reordering.
#include <gtest/gtest.h>

#include "harness.h"

namespace uroce::transport {
namespace {

using test::Link;
using test::LinkParams;
using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;
constexpr Time kSecond = 1'000'000'000;

struct Pair {
  explicit Pair(test::PathParams p = {}, uint32_t psn_ab = 0x10, uint32_t psn_ba = 0x20)
      : a(kQpnA, kIpA), b(kQpnB, kIpB) {
    a.connect(kIpB, kQpnB, psn_ab, psn_ba, p);
    b.connect(kIpA, kQpnA, psn_ba, psn_ab, p);
    src.resize(1 << 20);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 131 + (i >> 10));
    skey = a.mem.reg(a.pd, src.data(), src.size(), 0);
    dst.resize(1 << 22);
    dkey = b.mem.reg(b.pd, dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE);
  }
  // Send `len` bytes from src offset `off` as WQE `id`.
  void send(uint64_t id, uint32_t off, uint32_t len, Time now) {
    ASSERT_EQ(a.qp->post_send(
                  test::send_wqe(id, reinterpret_cast<uint64_t>(src.data() + off), len, skey), now),
              0);
  }
  // Post a receive of `len` bytes at dst offset `off`.
  void recv(uint64_t id, uint64_t off, uint32_t len) {
    ASSERT_EQ(b.qp->post_recv(
                  test::recv_wqe(id, reinterpret_cast<uint64_t>(dst.data() + off), len, dkey)),
              0);
  }
  Node a, b;
  std::vector<uint8_t> src, dst;
  uint32_t skey = 0, dkey = 0;
};

TEST(Link, SendArrivesOnce) {
  Pair p;
  p.recv(1, 0, 5000);
  p.send(7, 0, 3000, 0);
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].wr_id, 7u);
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.b.rcq.wcs[0].byte_len, 3000u);
  EXPECT_TRUE(std::equal(p.src.begin(), p.src.begin() + 3000, p.dst.begin()));
  link.run_idle(kSecond);
  EXPECT_EQ(p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.a.qp->next_deadline(), kNever);
}

TEST(Link, MultiPacketMessageAcrossThePsnWrap) {
  test::PathParams pp;
  pp.mtu = IBV_MTU_256;
  Pair p(pp, 0xfffffa, 0xfffff0);
  p.recv(1, 0, 4096);
  p.recv(2, 4096, 4096);
  p.send(1, 0, 10 * 256, 0);  // PSNs 0xfffffa .. 0x000003
  p.send(2, 100, 1000, 0);
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 2; }, kSecond));
  ASSERT_EQ(p.b.rcq.wcs.size(), 2u);
  EXPECT_TRUE(std::equal(p.src.begin(), p.src.begin() + 2560, p.dst.begin()));
  EXPECT_TRUE(std::equal(p.src.begin() + 100, p.src.begin() + 1100, p.dst.begin() + 4096));
}

TEST(Link, LostPacketTriggersOneSequenceNakAndGoBackN) {
  test::PathParams pp;
  pp.mtu = IBV_MTU_256;
  Pair p(pp, 0x10, 0x20);
  p.recv(1, 0, 8192);
  Link link(p.a, p.b);
  bool dropped = false;
  link.drop_if = [&](int from, const wire::Packet& pkt) {
    if (from == 0 && pkt.bth.psn == 0x12 && !dropped) return dropped = true;
    return false;
  };
  p.send(1, 0, 20 * 256, 0);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.b.qp->counters().out_of_seq_request, 1u);
  EXPECT_EQ(p.a.qp->counters().rcvd_seq_err, 1u);
  EXPECT_EQ(p.a.qp->counters().local_ack_timeout_err, 0u);  // the NAK, not the timer, recovered
  EXPECT_EQ(p.a.qp->counters().retransmitted_pkts, 18u);    // 0x12 .. 0x23 went again
  EXPECT_TRUE(std::equal(p.src.begin(), p.src.begin() + 20 * 256, p.dst.begin()));
}

TEST(Link, LostAckIsRecoveredByTimeoutAndDuplicateReAck) {
  Pair p;
  p.recv(1, 0, 100);
  Link link(p.a, p.b);
  int acks = 0;
  link.drop_if = [&](int from, const wire::Packet&) { return from == 1 && acks++ == 0; };
  p.send(1, 0, 100, 0);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, 10 * kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.a.qp->counters().local_ack_timeout_err, 1u);
  EXPECT_EQ(p.b.qp->counters().duplicate_request, 1u);
  EXPECT_EQ(p.b.rcq.wcs.size(), 1u);  // delivered once
}

TEST(Link, RnrNakThenReceiveIsPostedLater) {
  test::PathParams pp;
  pp.min_rnr_timer = 14;  // 1.28 ms
  Pair p(pp);
  p.send(1, 0, 100, 0);
  Link link(p.a, p.b);
  link.run_until([] { return false; }, 2'000'000);  // 2 ms: at least one RNR NAK
  EXPECT_GE(p.a.qp->counters().rcvd_rnr_err, 1u);
  EXPECT_TRUE(p.a.scq.wcs.empty());
  p.recv(1, 0, 100);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.b.rcq.wcs.size(), 1u);
}

TEST(Link, RnrRetryExceeded) {
  test::PathParams pp;
  pp.rnr_retry = 3;
  Pair p(pp);
  p.send(1, 0, 100, 0);
  p.send(2, 0, 100, 0);
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 2; }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(p.a.scq.wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(p.a.qp->counters().rcvd_rnr_err, 4u);
  EXPECT_EQ(p.b.qp->counters().send_rnr_err, 4u);
}

TEST(Link, RetryExhaustionFlushesBothQueues) {
  test::PathParams pp;
  pp.timeout = 8;
  pp.retry_cnt = 3;
  Pair p(pp);
  std::vector<uint8_t> rb(64);
  const uint32_t rk = p.a.mem.reg(p.a.pd, rb.data(), rb.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(p.a.qp->post_recv(test::recv_wqe(50, reinterpret_cast<uint64_t>(rb.data()), 64, rk)),
            0);
  p.send(1, 0, 100, 0);
  p.send(2, 0, 100, 0);
  Link link(p.a, p.b, LinkParams{.loss = 1.0});
  ASSERT_TRUE(link.run_until([&] { return p.a.qp->state() == IBV_QPS_ERR; }, kSecond));
  ASSERT_EQ(p.a.scq.wcs.size(), 2u);
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(p.a.scq.wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  ASSERT_EQ(p.a.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.a.rcq.wcs[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(p.a.rcq.wcs[0].wr_id, 50u);
  EXPECT_EQ(p.a.qp->counters().local_ack_timeout_err, 4u);  // 1 + retry_cnt timeouts
}

TEST(Link, TooLongMessageIsLocLenErrAndRemInvReqErr) {
  Pair p;
  p.recv(1, 0, 100);
  p.send(1, 0, 101, 0);
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.b.rcq.wcs[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(p.a.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(p.b.qp->state(), IBV_QPS_ERR);
}

// The acceptance test of the foundation: 1000 messages of random sizes over a link that loses
// 5%, duplicates and reorders, delivered exactly once, in order, byte-exact.
class LossyLink : public ::testing::TestWithParam<uint64_t> {};

TEST_P(LossyLink, ThousandMessagesExactlyOnceInOrder) {
  test::PathParams pp;
  pp.mtu = IBV_MTU_1024;
  pp.timeout = 8;  // ~1 ms
  pp.retry_cnt = 7;
  Pair p(pp, 0xffff00, 0xfffe00);  // both directions cross the PSN wrap
  constexpr int kMessages = 1000;
  constexpr uint32_t kMaxLen = 12000;
  std::mt19937_64 rng(GetParam());
  std::vector<std::pair<uint32_t, uint32_t>> msgs;  // (src offset, length)
  for (int i = 0; i < kMessages; ++i) {
    const uint32_t len = rng() % 4 == 0 ? uint32_t(rng() % 64) : uint32_t(rng() % kMaxLen);
    msgs.emplace_back(uint32_t(rng() % (p.src.size() - kMaxLen)), len);
  }
  // Receives go into 12 KiB slots of the destination buffer, at most 64 outstanding (each is
  // checked before its slot is reused); at most 200 SENDs are outstanding.
  Link link(p.a, p.b, LinkParams{.loss = 0.05, .dup = 0.03, .reorder = 0.1, .seed = GetParam()});
  constexpr uint32_t kSlot = 12288;
  const size_t slots = p.dst.size() / kSlot;
  int posted = 0, sent = 0;
  auto top_up = [&] {
    while (posted < kMessages && posted - int(p.b.rcq.wcs.size()) < 64) {
      p.recv(posted, (posted % slots) * kSlot, kMaxLen);
      ++posted;
    }
    while (sent < kMessages && sent - int(p.a.scq.wcs.size()) < 200) {
      p.send(sent, msgs[sent].first, msgs[sent].second, link.now);
      ++sent;
    }
  };
  top_up();
  size_t checked = 0;
  bool ok = link.run_until(
      [&] {
        // Check each receive as it completes, before its slot is reused.
        for (; checked < p.b.rcq.wcs.size(); ++checked) {
          const ibv_wc& wc = p.b.rcq.wcs[checked];
          EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
          EXPECT_EQ(wc.wr_id, checked);
          EXPECT_EQ(wc.byte_len, msgs[checked].second);
          const uint8_t* got = p.dst.data() + (checked % slots) * kSlot;
          const uint8_t* want = p.src.data() + msgs[checked].first;
          if (!std::equal(want, want + msgs[checked].second, got)) {
            ADD_FAILURE() << "message " << checked << " corrupted";
          }
        }
        top_up();
        return p.a.scq.wcs.size() == kMessages;
      },
      600 * kSecond);
  ASSERT_TRUE(ok) << "sent " << sent << " completed " << p.a.scq.wcs.size() << " received "
                  << p.b.rcq.wcs.size();
  for (size_t i = 0; i < p.a.scq.wcs.size(); ++i) {
    EXPECT_EQ(p.a.scq.wcs[i].wr_id, i);
    EXPECT_EQ(p.a.scq.wcs[i].status, IBV_WC_SUCCESS);
  }
  link.run_idle(link.now + kSecond);
  const QpCounters& ca = p.a.qp->counters();
  const QpCounters& cb = p.b.qp->counters();
  RecordProperty("lost", std::to_string(link.lost));
  RecordProperty("retransmitted", std::to_string(ca.retransmitted_pkts));
  RecordProperty("seq_naks", std::to_string(ca.rcvd_seq_err));
  RecordProperty("rnr_naks", std::to_string(ca.rcvd_rnr_err));
  RecordProperty("timeouts", std::to_string(ca.local_ack_timeout_err));
  RecordProperty("duplicates", std::to_string(cb.duplicate_request));
  RecordProperty("virtual_ms", std::to_string(link.now / 1'000'000));
  EXPECT_EQ(p.b.rcq.wcs.size(), size_t(kMessages));
  EXPECT_GT(link.lost, 0u);
  EXPECT_GT(link.duplicated, 0u);
  EXPECT_GT(p.b.qp->counters().duplicate_request, 0u);
  EXPECT_GT(p.a.qp->counters().retransmitted_pkts, 0u);
  EXPECT_EQ(p.a.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(p.b.qp->state(), IBV_QPS_RTS);
}

INSTANTIATE_TEST_SUITE_P(Seeds, LossyLink, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace uroce::transport
