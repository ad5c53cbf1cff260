// The per-QP counters (transport/qp_counters.h) each count what their row says: a QP pair on the
// virtual-time link (harness.h) is driven through one loss, one lost ACK, one missing receive and
// one lost READ response, and every counter of both QPs is checked — the ones the case moves by
// exactly how much, and every other error counter stays zero.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "harness.h"

namespace uroce::transport {
namespace {

using test::Link;
using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;
constexpr uint32_t kPsnAB = 0x100, kPsnBA = 0x200;
constexpr Time kSecond = 1'000'000'000;
constexpr uint32_t kBth = 12, kAckLen = 16;  // BTH; BTH + AETH (IBTA 9.2, 9.3.5)

struct Pair {
  Pair() : a(kQpnA, kIpA), b(kQpnB, kIpB) {
    a.connect(kIpB, kQpnB, kPsnAB, kPsnBA);  // path MTU 1024
    b.connect(kIpA, kQpnA, kPsnBA, kPsnAB);
    skey = a.buffer(src, 8192, 0x5a);
    dkey = b.buffer(dst, 8192);
    lkey = a.buffer(lbuf, 8192);
  }
  void send(uint32_t len) {
    ASSERT_EQ(a.qp->post_send(test::send_wqe(1, addr(src), len, skey), link.now), 0);
  }
  void post_recv() { ASSERT_EQ(b.qp->post_recv(test::recv_wqe(2, addr(dst), 8192, dkey)), 0); }
  static uint64_t addr(std::vector<uint8_t>& v) { return reinterpret_cast<uint64_t>(v.data()); }
  bool run_to_completion() {
    return link.run_until([this] { return a.scq.wcs.size() == 1; }, 10 * kSecond);
  }
  Node a, b;
  Link link{a, b};
  std::vector<uint8_t> src, dst, lbuf;
  uint32_t skey = 0, dkey = 0, lkey = 0;
};

// Every counter of `c` by name.
std::map<std::string, uint64_t> by_name(const QpCounters& c) {
  std::map<std::string, uint64_t> m;
  for_each_qp_counter(c, [&m](const char* name, uint64_t v) { m[name] = v; });
  return m;
}

// Each error counter (kind kError) of `c` equals `want`'s entry, or zero when `want` names none.
void expect_errors(const QpCounters& c, const std::map<std::string, uint64_t>& want,
                   const char* who) {
  const auto got = by_name(c);
  for (const QpCounterInfo& info : kQpCounterInfo) {
    auto it = want.find(info.name);
    if (it != want.end()) {
      EXPECT_EQ(got.at(info.name), it->second) << who << " " << info.name;
    } else if (info.kind == QpCounterKind::kError) {
      EXPECT_EQ(got.at(info.name), 0u) << who << " " << info.name;
    }
  }
}

// Packets and bytes both ways agree end to end: what one QP sent the other accepted, byte for
// byte, and the bytes are the IB packets' (BTH, payload, pad; no ICRC).
TEST(QpCountersTest, PacketsAndBytesBothWays) {
  Pair p;
  p.post_recv();
  p.send(3000);  // FIRST and MIDDLE of 1024 bytes, LAST of 952
  ASSERT_TRUE(p.run_to_completion());
  p.link.run_idle(p.link.now + kSecond);
  const QpCounters &a = p.a.qp->counters(), &b = p.b.qp->counters();
  EXPECT_EQ(a.sent_pkts, 3u);
  EXPECT_EQ(a.sent_bytes, 3000u + 3 * kBth);
  EXPECT_EQ(b.rcvd_pkts, a.sent_pkts);
  EXPECT_EQ(b.rcvd_bytes, a.sent_bytes);
  EXPECT_GE(b.sent_pkts, 1u);  // ACKs only
  EXPECT_EQ(b.sent_bytes, kAckLen * b.sent_pkts);
  EXPECT_EQ(a.rcvd_pkts, b.sent_pkts);
  EXPECT_EQ(a.rcvd_bytes, b.sent_bytes);
  expect_errors(a, {}, "requester");
  expect_errors(b, {}, "responder");
}

// A request lost on the way: the responder sees the next one out of sequence (one
// out_of_sequence, one sequence NAK sent), the requester receives the NAK and resends the lost
// packet and the one after it (go-back-N, IBTA 9.7.5.2.2).
TEST(QpCountersTest, LostRequestCountsSequenceErrorsOnBothSides) {
  Pair p;
  bool dropped = false;
  p.link.drop_if = [&](int from, const wire::Packet& pkt) {
    if (from != 0 || dropped || pkt.bth.psn != kPsnAB + 1) return false;
    return dropped = true;
  };
  p.post_recv();
  p.send(3000);
  ASSERT_TRUE(p.run_to_completion());
  p.link.run_idle(p.link.now + kSecond);
  ASSERT_TRUE(dropped);
  expect_errors(p.a.qp->counters(), {{"rcvd_seq_err", 1}, {"retransmitted_pkts", 2}}, "requester");
  expect_errors(p.b.qp->counters(), {{"out_of_sequence", 1}, {"out_of_seq_request", 1}},
                "responder");
  EXPECT_EQ(p.a.qp->counters().sent_pkts, 5u);
  EXPECT_EQ(p.a.qp->counters().completer_retry_err, 1u);
  // The responder accepted four packets (the one out of sequence too, before the PSN check).
  EXPECT_EQ(p.b.qp->counters().rcvd_pkts, 4u);
}

// Two packets past the gap: each is out of sequence, one NAK answers the gap.
TEST(QpCountersTest, EveryPacketPastAGapIsOutOfSequenceButOneNakIsSent) {
  Pair p;
  bool dropped = false;
  p.link.drop_if = [&](int from, const wire::Packet& pkt) {
    if (from != 0 || dropped || pkt.bth.psn != kPsnAB) return false;
    return dropped = true;
  };
  p.post_recv();
  p.send(3000);
  ASSERT_TRUE(p.run_to_completion());
  p.link.run_idle(p.link.now + kSecond);
  expect_errors(p.b.qp->counters(), {{"out_of_sequence", 2}, {"out_of_seq_request", 1}},
                "responder");
  expect_errors(p.a.qp->counters(), {{"rcvd_seq_err", 1}, {"retransmitted_pkts", 3}}, "requester");
}

// The ACK lost: the requester's ACK timer expires (one local_ack_timeout_err), it resends, and
// the responder counts the resend as a duplicate and ACKs it again.
TEST(QpCountersTest, LostAckCountsATimeoutAndADuplicate) {
  Pair p;
  bool dropped = false;
  p.link.drop_if = [&](int from, const wire::Packet&) {
    if (from != 1 || dropped) return false;
    return dropped = true;
  };
  p.post_recv();
  p.send(100);
  ASSERT_TRUE(p.run_to_completion());
  p.link.run_idle(p.link.now + kSecond);
  expect_errors(p.a.qp->counters(), {{"local_ack_timeout_err", 1}, {"retransmitted_pkts", 1}},
                "requester");
  expect_errors(p.b.qp->counters(), {{"duplicate_request", 1}}, "responder");
  EXPECT_EQ(p.b.qp->counters().sent_pkts, 2u);  // the lost ACK and the one after the resend
}

// No receive WQE: the responder sends an RNR NAK, the requester receives it, waits and resends.
TEST(QpCountersTest, MissingReceiveCountsRnrOnBothSides) {
  Pair p;
  p.send(100);
  ASSERT_TRUE(p.link.run_until([&] { return p.b.qp->counters().send_rnr_err == 1; }, 10 * kSecond));
  p.post_recv();
  ASSERT_TRUE(p.run_to_completion());
  p.link.run_idle(p.link.now + kSecond);
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  expect_errors(p.a.qp->counters(), {{"rcvd_rnr_err", 1}, {"retransmitted_pkts", 1}}, "requester");
  expect_errors(p.b.qp->counters(), {{"send_rnr_err", 1}}, "responder");
}

// A READ response lost: the next one shows the gap, the requester asks again from the missing
// PSN (an implied NAK, IBTA 9.7.5.1.1), and the responder answers the resent READ request as a
// duplicate from its responder resources.
TEST(QpCountersTest, LostReadResponseCountsAnImpliedNak) {
  Pair p;
  std::vector<uint8_t> rmem(4096, 0x33);
  const uint32_t rkey = p.b.mem.reg(p.b.pd, rmem.data(), rmem.size(),
                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  bool dropped = false;
  p.link.drop_if = [&](int from, const wire::Packet& pkt) {
    if (from != 1 || dropped ||
        pkt.bth.opcode != static_cast<uint8_t>(wire::Opcode::kRcReadResponseFirst))
      return false;
    return dropped = true;
  };
  ASSERT_EQ(p.a.qp->post_send(test::rdma_wqe(1, IBV_WR_RDMA_READ, Pair::addr(p.lbuf), 2048, p.lkey,
                                             Pair::addr(rmem), rkey),
                              p.link.now),
            0);
  ASSERT_TRUE(p.run_to_completion());
  p.link.run_idle(p.link.now + kSecond);
  ASSERT_TRUE(dropped);
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  expect_errors(p.a.qp->counters(), {{"implied_nak_seq_err", 1}, {"retransmitted_pkts", 1}},
                "requester");
  expect_errors(p.b.qp->counters(), {{"duplicate_request", 1}}, "responder");
}

}  // namespace
}  // namespace uroce::transport
