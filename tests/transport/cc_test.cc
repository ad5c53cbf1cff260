// Congestion control in the QP (transport/qp.cc with transport/cc): the NP answers CE-marked
// packets with CNPs to the sending QP, at most one per interval; the RP reacts to CNPs (uroce's
// and the ConnectX-4 Lx frame of tests/wire/vectors) and the pacer then releases the QP's
// packets at its rate; TIMELY follows the round trips the completer measures; UC and UD QPs run
// the same NP and RP. Virtual time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "frame_util.h"
#include "harness.h"
#include "transport/cc/constants.h"
#include "transport/cc/pacer.h"
#include "transport/cc/parse.h"
#include "transport/qp_state.h"

namespace uroce::transport {
namespace {

using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;
constexpr Time kUs = 1000;

cc::CcConfig config(const char* spec) {
  std::string err;
  std::optional<cc::CcConfig> c = cc::parse_cc(spec, &err);
  EXPECT_TRUE(c.has_value()) << err;
  return c.value_or(cc::CcConfig{});
}

// A node whose QP is created with congestion-control configuration `spec`.
void with_cc(Node& n, const char* spec) {
  n.init.cc = config(spec);
  n.rebuild();
}

void receive(Node& n, const test::Crafted& c, uint32_t src_ip, Time now, uint8_t ecn) {
  RxInfo rx;
  rx.src_ip = wire::IpAddr(src_ip);
  rx.dst_ip = wire::IpAddr(n.ip);
  rx.ecn = ecn;
  n.qp->receive(c.pkt, rx, now);
}

std::vector<const TxBuf*> cnps_in(const Node& n) {
  std::vector<const TxBuf*> out;
  for (const TxBuf& b : n.sink.sent) {
    if (b.len > 0 && b.data[0] == uint8_t(wire::Opcode::kCnp)) out.push_back(&b);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Notification point: B receives A's SENDs, some marked CE.

class Np : public ::testing::Test {
 protected:
  void SetUp() override { setup("dcqcn"); }  // cx preset: min_time_between_cnps 4 µs
  void setup(const char* spec) {
    with_cc(b, spec);
    b.connect(kIpA, kQpnA, 0, 0);
    buf.resize(64 * 1024);
    key = b.mem.reg(b.pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    for (int i = 0; i < 64; ++i) {
      ASSERT_EQ(b.qp->post_recv(test::recv_wqe(i, uint64_t(buf.data()) + i * 1024, 1024, key)), 0);
    }
  }
  // A's SEND ONLY with PSN `psn`, arriving at `t` with ECN codepoint `ecn`.
  void send(uint32_t psn, Time t, uint8_t ecn) {
    const uint8_t payload[16] = {};
    receive(b, *test::craft(wire::Opcode::kRcSendOnly, kQpnB, psn, true, payload), kIpA, t, ecn);
  }
  Node b{kQpnB, kIpB};
  std::vector<uint8_t> buf;
  uint32_t key = 0;
};

TEST_F(Np, MarkedPacketIsAnsweredWithACnpToTheSendingQp) {
  send(0, 10 * kUs, kEcnEct0);
  EXPECT_TRUE(cnps_in(b).empty());
  send(1, 11 * kUs, kEcnCe);
  const std::vector<const TxBuf*> c = cnps_in(b);
  ASSERT_EQ(c.size(), 1u);
  const TxBuf& cnp = *c[0];
  EXPECT_EQ(cnp.len, wire::kCnpBytes);
  EXPECT_EQ(cnp.dst_ip, wire::IpAddr(kIpA));
  EXPECT_EQ(cnp.ecn, kEcnNotEct);
  // The CNP carries DSCP 48; the ACKs around it the port's default.
  ASSERT_EQ(b.sink.sent.size(), 3u);  // ACK, CNP, ACK
  EXPECT_EQ(b.sink.sent[0].dscp, kDscpPortDefault);
  EXPECT_EQ(b.sink.sent[1].dscp, cc::kCnpDscp);
  EXPECT_EQ(b.sink.sent[2].dscp, kDscpPortDefault);
  // And its own 802.1p priority, for a port that tags (cnp_802p_prio, default 6).
  EXPECT_EQ(b.sink.sent[0].pcp, kPcpPortDefault);
  EXPECT_EQ(b.sink.sent[1].pcp, cc::kCnpPrio);
  EXPECT_EQ(b.sink.sent[2].pcp, kPcpPortDefault);
  wire::Packet p;
  ASSERT_EQ(wire::parse({cnp.data, cnp.len}, p), wire::ParseError::kOk);
  EXPECT_EQ(p.bth.dest_qp, kQpnA);  // the QP that sent the marked packet
  EXPECT_TRUE(p.bth.becn);
  EXPECT_EQ(b.qp->counters().np_ecn_marked_roce_packets, 1u);
  EXPECT_EQ(b.qp->counters().np_cnp_sent, 1u);
  // The marked SEND itself was received and acknowledged as usual.
  EXPECT_EQ(b.rcq.wcs.size(), 2u);
}

TEST_F(Np, CnpDscpAndPriorityAreConfigurable) {
  setup("dcqcn,cnp_dscp=40,cnp_802p_prio=3");
  send(0, 10 * kUs, kEcnCe);
  const std::vector<const TxBuf*> c = cnps_in(b);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]->dscp, 40);
  EXPECT_EQ(c[0]->pcp, 3);
}

TEST_F(Np, AtMostOneCnpPerInterval) {
  // Marks every microsecond for 20 µs: one CNP per 4 µs.
  for (uint32_t i = 0; i < 20; ++i) send(i, (100 + i) * kUs, kEcnCe);
  EXPECT_EQ(cnps_in(b).size(), 5u);
  EXPECT_EQ(b.qp->counters().np_ecn_marked_roce_packets, 20u);
  EXPECT_EQ(b.qp->counters().np_cnp_sent, 5u);
  // A CNP is sent once: time passing (timers, pumps) sends no other.
  const size_t before = b.sink.sent.size();
  b.qp->on_timer(10'000 * kUs);
  b.qp->pump(10'000 * kUs);
  EXPECT_EQ(b.sink.sent.size(), before);
}

TEST_F(Np, CnpWaitsForATransmitBuffer) {
  b.sink.budget = 0;  // the port's ring is full
  send(0, 5 * kUs, kEcnCe);
  EXPECT_TRUE(cnps_in(b).empty());
  EXPECT_TRUE(b.qp->wants_pump());
  b.sink.budget = -1;
  b.qp->pump(6 * kUs);
  ASSERT_EQ(cnps_in(b).size(), 1u);
  // It went out before the ACK that was waiting too.
  EXPECT_EQ(b.sink.sent.front().data[0], uint8_t(wire::Opcode::kCnp));
  EXPECT_EQ(b.qp->counters().np_cnp_sent, 1u);
}

// A receiver B configured with `spec` that has just received one CE-marked SEND from A.
std::unique_ptr<Node> marked_receiver(const char* spec) {
  auto b = std::make_unique<Node>(kQpnB, kIpB);
  with_cc(*b, spec);
  b->connect(kIpA, kQpnA, 0, 0);
  static std::vector<uint8_t> buf(1024);
  const uint32_t key = b->mem.reg(b->pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  EXPECT_EQ(b->qp->post_recv(test::recv_wqe(1, uint64_t(buf.data()), 1024, key)), 0);
  const uint8_t payload[8] = {};
  receive(*b, *test::craft(wire::Opcode::kRcSendOnly, kQpnB, 0, true, payload), kIpA, 0, kEcnCe);
  EXPECT_EQ(b->rcq.wcs.size(), 1u) << spec;
  return b;
}

TEST(NpOff, MarksAreCountedButNotAnswered) {
  for (const char* spec : {"none", "timely", "dcqcn,np=0"}) {
    const std::unique_ptr<Node> b = marked_receiver(spec);
    EXPECT_TRUE(cnps_in(*b).empty()) << spec;
    EXPECT_EQ(b->qp->counters().np_ecn_marked_roce_packets, 1u) << spec;
    EXPECT_EQ(b->qp->counters().np_cnp_sent, 0u) << spec;
  }
}

TEST(NpOnly, NoneWithNpAnswersForItsPeers) {
  // `none,np=1`: a receiver that answers marks without limiting its own sending.
  const std::unique_ptr<Node> b = marked_receiver("none,np=1");
  EXPECT_EQ(cnps_in(*b).size(), 1u);
  EXPECT_FALSE(b->qp->cc_limiting());
}

// ---------------------------------------------------------------------------------------------
// Reaction point: A sends to B and receives CNPs.

class Rp : public ::testing::Test {
 protected:
  void setup(const char* spec) {
    with_cc(a, spec);
    a.connect(kIpB, kQpnB, 0, 0);
    data.resize(512 * 1024);
    key = a.mem.reg(a.pd, data.data(), data.size(), 0);
  }
  void cnp(Time t, uint32_t from_ip = kIpB) {
    test::Crafted c;
    c.buf.len = uint32_t(wire::build_headers(wire::cnp_packet(kQpnA), c.buf.data));
    ASSERT_EQ(wire::parse({c.buf.data, c.buf.len}, c.pkt), wire::ParseError::kOk);
    receive(a, c, from_ip, t, kEcnNotEct);
  }
  Node a{kQpnA, kIpA};
  std::vector<uint8_t> data;
  uint32_t key = 0;
};

TEST_F(Rp, CnpHalvesTheRateAndThePacerSpacesPackets) {
  setup("dcqcn,preset=paper,pacer_burst=0");
  EXPECT_EQ(a.qp->cc_rate_bps(), kDefaultLineRateBps);
  EXPECT_FALSE(a.qp->cc_limiting());
  cnp(0);
  EXPECT_EQ(a.qp->counters().rp_cnp_handled, 1u);
  EXPECT_EQ(a.qp->cc_rate_bps(), kDefaultLineRateBps / 2);
  EXPECT_TRUE(a.qp->cc_limiting());
  EXPECT_DOUBLE_EQ(a.qp->cc_alpha(0), 1.0);
  // A 100-packet SEND: the first packet leaves at once, then one per frame time at 12.5 Gb/s.
  // (50 of them, ~35 µs: before the rate-increase timer, at 55 µs, raises the rate.)
  ASSERT_EQ(a.qp->post_send(test::send_wqe(1, uint64_t(data.data()), 100 * 1024, key), 10 * kUs),
            0);
  ASSERT_EQ(a.sink.sent.size(), 1u);
  EXPECT_FALSE(a.qp->wants_pump());  // held by the pacer, not by the port
  std::vector<Time> at = {10 * kUs};
  while (a.sink.sent.size() < 50) {
    const Time t = a.qp->next_deadline();
    ASSERT_LT(t, 10 * kUs + 100 * 1000 * kUs);
    const size_t n = a.sink.sent.size();
    a.qp->on_timer(t);
    ASSERT_EQ(a.sink.sent.size(), n + 1) << "one packet per release";
    at.push_back(t);
  }
  // 1024 B of payload + BTH = 1036 B of IB packet, 1086 B framed: 695.04 ns at 12.5 Gb/s.
  const double frame_ns = double(cc::frame_bytes(1036)) * 8 / 12.5;
  for (size_t i = 1; i < at.size(); ++i) EXPECT_NEAR(double(at[i] - at[i - 1]), frame_ns, 1.0);
  EXPECT_NEAR(double(at.back() - at.front()), 49 * frame_ns, 1.0);
  EXPECT_LT(at.back(), 55 * kUs);
}

TEST_F(Rp, WithoutCnpsNothingIsPacedOrTimed) {
  setup("dcqcn,preset=paper");
  ASSERT_EQ(a.qp->post_send(test::send_wqe(1, uint64_t(data.data()), 100 * 1024, key), 0), 0);
  EXPECT_EQ(a.sink.sent.size(), 100u);  // all at once, as without congestion control
  EXPECT_FALSE(a.qp->cc_limiting());
  // The only deadline is the transport's own ACK timer (67 ms), not a congestion-control timer.
  EXPECT_GT(a.qp->next_deadline(), 60'000 * kUs);
}

TEST_F(Rp, RecoversThroughTheQpTimers) {
  setup("dcqcn,preset=paper");
  cnp(0);
  // The RP's rate-increase timer (T = 55 µs) is a deadline of the QP.
  EXPECT_EQ(a.qp->next_deadline(), 55 * kUs);
  a.qp->on_timer(55 * kUs);
  EXPECT_EQ(a.qp->cc_rate_bps(), kDefaultLineRateBps / 4 * 3);  // fast recovery: halfway back
  for (int i = 0; i < 100 && a.qp->cc_limiting(); ++i) a.qp->on_timer(a.qp->next_deadline());
  EXPECT_FALSE(a.qp->cc_limiting());
  EXPECT_EQ(a.qp->cc_rate_bps(), kDefaultLineRateBps);
  EXPECT_EQ(a.qp->next_deadline(), kNever);
}

TEST_F(Rp, CnpsThatAreNotActedOn) {
  // From someone other than the peer: a bogus packet.
  setup("dcqcn");
  cnp(0, 0x0a0000ff);
  EXPECT_EQ(a.qp->counters().dropped_pkts, 1u);
  EXPECT_EQ(a.qp->counters().rp_cnp_handled + a.qp->counters().rp_cnp_ignored, 0u);
  EXPECT_FALSE(a.qp->cc_limiting());
  // No DCQCN on the QP: ignored.
  for (const char* spec : {"none", "timely"}) {
    Node n{kQpnA, kIpA};
    with_cc(n, spec);
    n.connect(kIpB, kQpnB, 0, 0);
    test::Crafted c;
    c.buf.len = uint32_t(wire::build_headers(wire::cnp_packet(kQpnA), c.buf.data));
    ASSERT_EQ(wire::parse({c.buf.data, c.buf.len}, c.pkt), wire::ParseError::kOk);
    receive(n, c, kIpB, 0, kEcnNotEct);
    EXPECT_EQ(n.qp->counters().rp_cnp_ignored, 1u) << spec;
    EXPECT_EQ(n.qp->cc_rate_bps(), kDefaultLineRateBps) << spec;
  }
}

// The ConnectX-4 Lx CNP of tests/wire/vectors, addressed to QP 0x118 from 10.0.17.1, reaches a
// uroce QP 0x118 at 10.0.18.1 connected to that peer: it cuts the rate.
TEST(RpVector, ReactsToTheConnectXCnp) {
  const wire::testing::Frame f = wire::testing::Frame::load("cnp_cx4lx.hex");
  const uint32_t peer = wire::testing::be32(f.ip() + 12), self = wire::testing::be32(f.ip() + 16);
  Node n{0x118, self};
  with_cc(n, "dcqcn");
  n.connect(peer, 0x2222, 0, 0);
  wire::Packet p;
  ASSERT_EQ(wire::parse(f.ib(), p), wire::ParseError::kOk);
  RxInfo rx;
  rx.src_ip = wire::IpAddr(peer);
  rx.dst_ip = wire::IpAddr(self);
  rx.ecn = uint8_t(f.ip()[1] & 3);
  n.qp->receive(p, rx, 5 * kUs);
  EXPECT_EQ(n.qp->counters().rp_cnp_handled, 1u);
  EXPECT_EQ(n.qp->counters().dropped_pkts, 0u);
  EXPECT_LT(n.qp->cc_rate_bps(), kDefaultLineRateBps * 51 / 100);
  EXPECT_TRUE(n.qp->cc_limiting());
}

// ---------------------------------------------------------------------------------------------
// TIMELY: the completer's round-trip samples drive the rate.

TEST_F(Rp, TimelyFollowsTheRoundTrips) {
  setup("timely,pacer_burst=0");
  Time t = 0;
  uint32_t psn = 0;
  std::vector<uint64_t> rates;
  // One-packet SENDs, each ACKed after a round trip that grows by 20 µs each time.
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(a.qp->post_send(test::send_wqe(i, uint64_t(data.data()), 64, key), t), 0);
    const Time rtt = (100 + 20 * Time(i)) * kUs;
    t += rtt;
    test::deliver(a, *test::craft_ack(kQpnA, psn++, test::ack_syndrome()), kIpB, t);
    rates.push_back(a.qp->cc_rate_bps());
    t += 50 * kUs;
  }
  // The first sample has no gradient: still the line rate. Then every rise cuts.
  EXPECT_EQ(rates[0], kDefaultLineRateBps);
  for (size_t i = 1; i < rates.size(); ++i) EXPECT_LT(rates[i], rates[i - 1]) << i;
  EXPECT_TRUE(a.qp->cc_limiting());
  EXPECT_EQ(a.qp->counters().rp_cnp_handled, 0u);
}

}  // namespace
}  // namespace uroce::transport

namespace uroce::transport {
namespace {

// A paced QP over the virtual-time link: a transfer at a fixed rate (rpg_max_rate below the
// line rate) takes its bytes' time at that rate, and pacing alone never looks like loss: nothing
// is resent, no probe or ACK timer fires.
TEST(PacedLink, TransferAtTheCappedRateWithoutRetransmissions) {
  Node a{kQpnA, kIpA}, b{kQpnB, kIpB};
  a.init.early_retransmit = b.init.early_retransmit = true;
  with_cc(a, "dcqcn,rpg_max_rate=200,pacer_burst=0");  // 200 Mb/s
  with_cc(b, "dcqcn");
  a.connect(kIpB, kQpnB, 0, 0);
  b.connect(kIpA, kQpnA, 0, 0);
  test::Link link(a, b);
  constexpr uint32_t kLen = 4 << 20;
  std::vector<uint8_t> src(kLen, 0x5a), dst(kLen);
  const uint32_t lkey = a.mem.reg(a.pd, src.data(), kLen, 0);
  const uint32_t rkey =
      b.mem.reg(b.pd, dst.data(), kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(a.qp->post_send(test::rdma_wqe(1, IBV_WR_RDMA_WRITE, uint64_t(src.data()), kLen, lkey,
                                           uint64_t(dst.data()), rkey),
                            0),
            0);
  ASSERT_TRUE(link.run_until([&] { return !a.scq.wcs.empty(); }, 10'000'000'000ull));
  EXPECT_EQ(a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(src, dst);
  // 4096 packets of 1024 bytes, each a 1086-byte frame (the first 1102 with its RETH).
  const double expect_ns = (4096.0 * 1086 + 16) * 8 / 0.2;
  EXPECT_NEAR(double(link.now), expect_ns, expect_ns * 0.01);
  EXPECT_EQ(a.qp->counters().retransmitted_pkts, 0u);
  EXPECT_EQ(a.qp->counters().early_retransmits, 0u);
  EXPECT_EQ(a.qp->counters().local_ack_timeout_err, 0u);
}

// Packet pacing set by the application (IBV_QP_RATE_LIMIT entering RTS or in RTS, or the path's
// ah_attr.static_rate): the pacer holds the QP to it with no congestion control at all, and to
// the lower of the two when the rate control limits too. 1 MiB WRITEs in 1024-byte packets,
// 1086-byte frames (the first 1102); the transfer takes its bytes' time at the rate.
double paced_write_ns(Node& a, Node& b, test::PathParams pa, uint32_t rate_limit_in_rts = 0) {
  a.connect(kIpB, kQpnB, 0, 0, pa);
  b.connect(kIpA, kQpnA, 0, 0);
  if (rate_limit_in_rts) {
    ibv_qp_attr m{};
    m.rate_limit = rate_limit_in_rts;
    EXPECT_EQ(a.qp->modify(m, IBV_QP_RATE_LIMIT, 0), 0);
  }
  test::Link link(a, b);
  constexpr uint32_t kLen = 1 << 20;
  std::vector<uint8_t> src(kLen, 0x5a), dst(kLen);
  const uint32_t lkey = a.mem.reg(a.pd, src.data(), kLen, 0);
  const uint32_t rkey =
      b.mem.reg(b.pd, dst.data(), kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  EXPECT_EQ(a.qp->post_send(test::rdma_wqe(1, IBV_WR_RDMA_WRITE, uint64_t(src.data()), kLen, lkey,
                                           uint64_t(dst.data()), rkey),
                            0),
            0);
  EXPECT_TRUE(link.run_until([&] { return !a.scq.wcs.empty(); }, 100'000'000'000ull));
  EXPECT_EQ(src, dst);
  EXPECT_EQ(a.qp->counters().retransmitted_pkts, 0u);
  return double(link.now);
}
constexpr double kPacedBits = (1024.0 * 1086 + 16) * 8;

TEST(PacedLink, RateLimitEnteringRtsHoldsTheQpToIt) {
  Node a{kQpnA, kIpA}, b{kQpnB, kIpB};
  with_cc(a, "dcqcn,pacer_burst=0");  // no CNP comes: DCQCN never limits
  test::PathParams p;
  p.rate_limit = 300'000;  // kbit/s
  const double ns = paced_write_ns(a, b, p);
  EXPECT_NEAR(ns, kPacedBits / 0.3, kPacedBits / 0.3 * 0.01);
}

TEST(PacedLink, RateLimitInRtsAndTheLowerOfItAndTheRateControl) {
  Node a{kQpnA, kIpA}, b{kQpnB, kIpB};
  with_cc(a, "dcqcn,rpg_max_rate=200,pacer_burst=0");   // 200 Mb/s
  const double ns = paced_write_ns(a, b, {}, 100'000);  // 100 Mb/s, RTS to RTS
  EXPECT_NEAR(ns, kPacedBits / 0.1, kPacedBits / 0.1 * 0.01);
  Node c{kQpnA, kIpA}, d{kQpnB, kIpB};
  with_cc(c, "dcqcn,rpg_max_rate=200,pacer_burst=0");
  const double ns2 = paced_write_ns(c, d, {}, 400'000);  // above the rate control's 200
  EXPECT_NEAR(ns2, kPacedBits / 0.2, kPacedBits / 0.2 * 0.01);
}

TEST(PacedLink, StaticRateOfThePathHoldsTheQpToIt) {
  Node a{kQpnA, kIpA}, b{kQpnB, kIpB};
  with_cc(a, "dcqcn,pacer_burst=0");  // no CNP comes: DCQCN never limits
  test::PathParams p;
  p.static_rate = IBV_RATE_2_5_GBPS;
  const double ns = paced_write_ns(a, b, p);
  EXPECT_NEAR(ns, kPacedBits / 2.5, kPacedBits / 2.5 * 0.02);
}

TEST(PacedLink, RateLimitOutsideTheCapsOrOutsideRtsIsRefused) {
  Node a{kQpnA, kIpA};
  ibv_qp_attr m{};
  m.rate_limit = 1000;
  EXPECT_EQ(a.qp->modify(m, IBV_QP_RATE_LIMIT, 0), EINVAL) << "RESET";
  a.connect(kIpB, kQpnB, 0, 0);
  m.rate_limit = kMaxRateLimitKbps + 1;
  EXPECT_EQ(a.qp->modify(m, IBV_QP_RATE_LIMIT, 0), EINVAL);
  m.rate_limit = 0;  // no limit
  EXPECT_EQ(a.qp->modify(m, IBV_QP_RATE_LIMIT, 0), 0);
  // A path whose static rate names no ibv_rate.
  ibv_qp_attr rtr{};
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = IBV_MTU_1024;
  rtr.ah_attr = test::ah_for(kIpB);
  rtr.ah_attr.static_rate = 200;
  const int path = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  EXPECT_EQ(check_modify(IBV_QPT_RC, IBV_QPS_INIT, rtr, path).err, EINVAL);
  rtr.ah_attr.static_rate = IBV_RATE_10_GBPS;
  EXPECT_EQ(check_modify(IBV_QPT_RC, IBV_QPS_INIT, rtr, path).err, 0);
}

// The same with perftest's pattern: 64 KiB WRITEs posted 128 deep, path MTU 4096.
TEST(PacedLink, ManyMessagesAtTheCappedRate) {
  Node a{kQpnA, kIpA}, b{kQpnB, kIpB};
  a.init.early_retransmit = b.init.early_retransmit = true;
  with_cc(a, "dcqcn,rpg_max_rate=200");
  with_cc(b, "dcqcn");
  test::PathParams path;
  path.mtu = IBV_MTU_4096;
  a.connect(kIpB, kQpnB, 0, 0, path);
  b.connect(kIpA, kQpnA, 0, 0, path);
  test::Link link(a, b);
  constexpr uint32_t kMsg = 64 * 1024, kMsgs = 512;
  std::vector<uint8_t> src(kMsg, 0x5a), dst(kMsg);
  const uint32_t lkey = a.mem.reg(a.pd, src.data(), kMsg, 0);
  const uint32_t rkey =
      b.mem.reg(b.pd, dst.data(), kMsg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  uint32_t posted = 0;
  auto top_up = [&] {
    while (posted < kMsgs && posted - a.scq.wcs.size() < 128) {
      ASSERT_EQ(a.qp->post_send(test::rdma_wqe(posted, IBV_WR_RDMA_WRITE, uint64_t(src.data()),
                                               kMsg, lkey, uint64_t(dst.data()), rkey),
                                link.now),
                0);
      ++posted;
    }
  };
  top_up();
  ASSERT_TRUE(link.run_until(
      [&] {
        top_up();
        return a.scq.wcs.size() == kMsgs;
      },
      100'000'000'000ull));
  const double expect_ns = double(kMsgs) * 16 * (4096 + 12 + 50) * 8 / 0.2;
  std::printf("paced 64 KiB WRITEs: %.1f ms for %.1f ms of bytes at 200 Mb/s, resent %llu\n",
              double(link.now) / 1e6, expect_ns / 1e6,
              (unsigned long long)a.qp->counters().retransmitted_pkts);
  EXPECT_NEAR(double(link.now), expect_ns, expect_ns * 0.02);
  EXPECT_EQ(a.qp->counters().retransmitted_pkts, 0u);
  EXPECT_EQ(a.qp->counters().early_retransmits, 0u);
}

}  // namespace
}  // namespace uroce::transport

namespace uroce::transport {
namespace {

// max_inflight caps what a QP has unacknowledged (CcConfig::max_inflight, requester.h): a
// 64 KiB WRITE with a 4 KiB cap at path MTU 1024 puts 4 packets on the wire, no more, until
// an ACK comes back; without the cap the loss-adaptive window (256) lets all 64 go.
TEST(MaxInflight, CapsThePacketsInFlight) {
  for (const char* spec : {"none,max_inflight=4096", "dcqcn,max_inflight=4000", "none"}) {
    Node a{kQpnA, kIpA};
    with_cc(a, spec);
    a.connect(kIpB, kQpnB, 0, 0);
    std::vector<uint8_t> src(64 * 1024, 1);
    const uint32_t lkey = a.mem.reg(a.pd, src.data(), src.size(), 0);
    ASSERT_EQ(a.qp->post_send(test::rdma_wqe(1, IBV_WR_RDMA_WRITE, uint64_t(src.data()),
                                             uint32_t(src.size()), lkey, 0x1000, 0x99),
                              0),
              0);
    const size_t want = std::string(spec) == "none" ? 64 : 4;  // 4000 B round up to 4 packets
    EXPECT_EQ(a.sink.sent.size(), want) << spec;
    // The last packet under the cap asks for the ACK that opens it again.
    EXPECT_TRUE(test::parsed(a.sink.sent.back()).bth.ack_req) << spec;
    if (want == 4) {
      // An ACK of the first two packets lets two more go.
      deliver(a, *test::craft_ack(kQpnA, 1, test::ack_syndrome()), kIpB, 10 * kUs);
      EXPECT_EQ(a.sink.sent.size(), 6u) << spec;
    }
  }
}

// Over the link, a capped QP still completes its transfer, byte-exact, without resending.
TEST(MaxInflight, TransferCompletesUnderTheCap) {
  Node a{kQpnA, kIpA}, b{kQpnB, kIpB};
  with_cc(a, "dcqcn,max_inflight=8192");
  a.connect(kIpB, kQpnB, 0, 0);
  b.connect(kIpA, kQpnA, 0, 0);
  test::Link link(a, b);
  constexpr uint32_t kLen = 1 << 20;
  std::vector<uint8_t> src(kLen), dst(kLen);
  for (uint32_t i = 0; i < kLen; ++i) src[i] = uint8_t(i * 7);
  const uint32_t lkey = a.mem.reg(a.pd, src.data(), kLen, 0);
  const uint32_t rkey =
      b.mem.reg(b.pd, dst.data(), kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(a.qp->post_send(test::rdma_wqe(1, IBV_WR_RDMA_WRITE, uint64_t(src.data()), kLen, lkey,
                                           uint64_t(dst.data()), rkey),
                            0),
            0);
  ASSERT_TRUE(link.run_until([&] { return !a.scq.wcs.empty(); }, 1'000'000'000ull));
  EXPECT_EQ(a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(src, dst);
  EXPECT_EQ(a.qp->counters().retransmitted_pkts, 0u);
  // 1024 packets, 8 per round trip of 2 × 2 µs: at least 128 round trips.
  EXPECT_GE(link.now, 128 * 4 * kUs);
}

// ---------------------------------------------------------------------------------------------
// UC and UD: the same NP and RP per QP. A UC QP answers and hears only its connected peer; a UD
// QP answers the source of each marked datagram (DETH's source QP at its address) and is
// rate-controlled as a whole, whatever the destination.

constexpr uint32_t kIpC = 0x0a000003;
constexpr uint32_t kQkey = 0x11111111;

void make_ud(Node& n, const char* spec) {
  n.init.type = IBV_QPT_UD;
  n.init.port_mtu = 1024;
  n.init.cc = config(spec);
  n.rebuild();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = kQkey;
  ASSERT_EQ(n.qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0), 0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(n.qp->modify(a, IBV_QP_STATE, 0), 0);
  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(n.qp->modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN, 0), 0);
}

// A UD SEND ONLY to `dest_qpn` from source QP `src_qpn`.
std::unique_ptr<test::Crafted> ud_datagram(uint32_t dest_qpn, uint32_t src_qpn) {
  wire::Packet h;
  h.bth.opcode = uint8_t(wire::Opcode::kUdSendOnly);
  h.bth.pkey = wire::kDefaultPkey;
  h.bth.dest_qp = dest_qpn;
  h.deth.qkey = kQkey;
  h.deth.src_qp = src_qpn;
  const uint8_t payload[16] = {};
  return test::craft_headers(h, payload);
}

test::Crafted cnp_to(uint32_t qpn) {
  test::Crafted c;
  c.buf.len = uint32_t(wire::build_headers(wire::cnp_packet(qpn), c.buf.data));
  EXPECT_EQ(wire::parse({c.buf.data, c.buf.len}, c.pkt), wire::ParseError::kOk);
  return c;
}

TEST(UcNp, MarkedPacketIsAnsweredWithACnpToThePeer) {
  Node b{kQpnB, kIpB};
  b.init.cc = config("dcqcn");
  test::connect_uc(b, kIpA, kQpnA, 0, 0);
  std::vector<uint8_t> buf(1024);
  const uint32_t key = b.mem.reg(b.pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_EQ(b.qp->post_recv(test::recv_wqe(1, uint64_t(buf.data()), 1024, key)), 0);
  const uint8_t payload[16] = {};
  receive(b, *test::craft(wire::Opcode::kUcSendOnly, kQpnB, 0, false, payload), kIpA, kUs, kEcnCe);
  EXPECT_EQ(b.rcq.wcs.size(), 1u);  // received as usual
  const std::vector<const TxBuf*> c = cnps_in(b);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(b.sink.sent.size(), 1u);  // UC answers nothing else
  EXPECT_EQ(c[0]->dst_ip, wire::IpAddr(kIpA));
  EXPECT_EQ(c[0]->dscp, cc::kCnpDscp);
  EXPECT_EQ(c[0]->ecn, kEcnNotEct);
  EXPECT_EQ(test::parsed(*c[0]).bth.dest_qp, kQpnA);
  EXPECT_EQ(b.qp->counters().np_ecn_marked_roce_packets, 1u);
  EXPECT_EQ(b.qp->counters().np_cnp_sent, 1u);
  // From a stranger the packet is dropped before the NP sees it: no CNP goes to a forged source.
  receive(b, *test::craft(wire::Opcode::kUcSendOnly, kQpnB, 1, false, payload), kIpC, 100 * kUs,
          kEcnCe);
  EXPECT_EQ(cnps_in(b).size(), 1u);
  EXPECT_EQ(b.qp->counters().np_ecn_marked_roce_packets, 1u);
}

TEST(UdNp, EachMarkedSourceIsAnsweredAtMostOncePerInterval) {
  Node b{kQpnB, kIpB};
  make_ud(b, "dcqcn");  // cx: min_time_between_cnps 4 µs
  std::vector<uint8_t> buf(8 * 1024);
  const uint32_t key = b.mem.reg(b.pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(b.qp->post_recv(test::recv_wqe(i, uint64_t(buf.data()) + 1024 * i, 1024, key)), 0);
  receive(b, *ud_datagram(kQpnB, 0x33), kIpA, 10 * kUs, kEcnCe);
  // Another sender 1 µs later, inside the interval: counted, not answered.
  receive(b, *ud_datagram(kQpnB, 0x44), kIpC, 11 * kUs, kEcnCe);
  // The same one after the interval: answered.
  receive(b, *ud_datagram(kQpnB, 0x44), kIpC, 20 * kUs, kEcnCe);
  receive(b, *ud_datagram(kQpnB, 0x55), kIpC, 30 * kUs, kEcnEct0);  // unmarked: nothing
  EXPECT_EQ(b.rcq.wcs.size(), 4u);
  const std::vector<const TxBuf*> c = cnps_in(b);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0]->dst_ip, wire::IpAddr(kIpA));
  EXPECT_EQ(test::parsed(*c[0]).bth.dest_qp, 0x33u);
  EXPECT_EQ(c[1]->dst_ip, wire::IpAddr(kIpC));
  EXPECT_EQ(test::parsed(*c[1]).bth.dest_qp, 0x44u);
  EXPECT_EQ(b.qp->counters().np_ecn_marked_roce_packets, 3u);
  EXPECT_EQ(b.qp->counters().np_cnp_sent, 2u);
  // A marked datagram the receive side then drops (no receive WQE left) is still answered: the
  // path to this QP is congested either way.
  for (int i = 0; i < 4; ++i) receive(b, *ud_datagram(kQpnB, 0x33), kIpA, 40 * kUs, kEcnEct0);
  receive(b, *ud_datagram(kQpnB, 0x66), kIpA, 50 * kUs, kEcnCe);
  EXPECT_EQ(b.qp->counters().out_of_buffer, 1u);
  ASSERT_EQ(cnps_in(b).size(), 3u);
  EXPECT_EQ(test::parsed(*cnps_in(b)[2]).bth.dest_qp, 0x66u);
}

// The gaps between the first `n` packets `a` sends when each release is run at its deadline.
std::vector<Time> paced_departures(Node& a, size_t n, Time start) {
  std::vector<Time> at = {start};
  while (a.sink.sent.size() < n) {
    const Time t = a.qp->next_deadline();
    EXPECT_LT(t, start + 1'000'000 * kUs);
    if (t >= start + 1'000'000 * kUs) break;
    const size_t before = a.sink.sent.size();
    a.qp->on_timer(t);
    EXPECT_EQ(a.sink.sent.size(), before + 1) << "one packet per release";
    at.push_back(t);
  }
  return at;
}

TEST(UcRp, CnpFromThePeerCutsTheRateAndThePacerSpacesPackets) {
  Node a{kQpnA, kIpA};
  a.init.cc = config("dcqcn,preset=paper,pacer_burst=0");
  test::connect_uc(a, kIpB, kQpnB, 0, 0);
  std::vector<uint8_t> data(100 * 1024);
  const uint32_t key = a.mem.reg(a.pd, data.data(), data.size(), 0);
  receive(a, cnp_to(kQpnA), kIpC, 0, kEcnNotEct);  // not from the peer: a bogus packet
  EXPECT_EQ(a.qp->counters().dropped_pkts, 1u);
  EXPECT_FALSE(a.qp->cc_limiting());
  receive(a, cnp_to(kQpnA), kIpB, 0, kEcnNotEct);
  EXPECT_EQ(a.qp->counters().rp_cnp_handled, 1u);
  EXPECT_EQ(a.qp->cc_rate_bps(), kDefaultLineRateBps / 2);
  ASSERT_EQ(a.qp->post_send(test::send_wqe(1, uint64_t(data.data()), 100 * 1024, key), 10 * kUs),
            0);
  ASSERT_EQ(a.sink.sent.size(), 1u);  // the first at once, the rest held by the pacer
  EXPECT_FALSE(a.qp->wants_pump());
  const std::vector<Time> at = paced_departures(a, 50, 10 * kUs);
  ASSERT_EQ(at.size(), 50u);
  // UC SEND MIDDLE: 1024 B of payload + BTH = 1036 B, 1086 B framed: 695.04 ns at 12.5 Gb/s.
  const double frame_ns = double(cc::frame_bytes(1036)) * 8 / 12.5;
  for (size_t i = 1; i < at.size(); ++i) EXPECT_NEAR(double(at[i] - at[i - 1]), frame_ns, 1.0);
  // The whole message goes out and completes (UC: when sent), the rate recovering meanwhile.
  for (int i = 0; i < 1000 && a.scq.wcs.empty(); ++i) a.qp->on_timer(a.qp->next_deadline());
  ASSERT_EQ(a.scq.wcs.size(), 1u);
  EXPECT_EQ(a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(a.sink.sent.size(), 100u);
}

TEST(UdRp, CnpFromAnySourceCutsTheQpsRateForEveryDestination) {
  Node a{kQpnA, kIpA};
  make_ud(a, "dcqcn,preset=paper,pacer_burst=0");
  std::vector<uint8_t> data(1024);
  const uint32_t key = a.mem.reg(a.pd, data.data(), data.size(), 0);
  // A UD QP has no peer: whoever it sends to may report congestion.
  receive(a, cnp_to(kQpnA), kIpC, 0, kEcnNotEct);
  EXPECT_EQ(a.qp->counters().rp_cnp_handled, 1u);
  EXPECT_EQ(a.qp->cc_rate_bps(), kDefaultLineRateBps / 2);
  for (uint64_t i = 0; i < 20; ++i) {
    SendWqe w = test::send_wqe(i, uint64_t(data.data()), 1024, key);
    w.ud_dst_ip = wire::IpAddr(i % 2 ? kIpB : kIpC);  // alternating destinations share the one rate
    w.ud_remote_qpn = kQpnB;
    w.ud_remote_qkey = kQkey;
    ASSERT_EQ(a.qp->post_send(w, 10 * kUs), 0);
  }
  ASSERT_EQ(a.sink.sent.size(), 1u);
  const std::vector<Time> at = paced_departures(a, 20, 10 * kUs);
  ASSERT_EQ(at.size(), 20u);
  // UD SEND ONLY: 1024 B of payload + BTH + DETH = 1044 B, 1094 B framed: 700.16 ns at 12.5 Gb/s.
  const double frame_ns = double(cc::frame_bytes(1044)) * 8 / 12.5;
  for (size_t i = 1; i < at.size(); ++i) EXPECT_NEAR(double(at[i] - at[i - 1]), frame_ns, 1.0);
  EXPECT_EQ(a.scq.wcs.size(), 20u);
  // It recovers through its timers, as an RC QP does.
  for (int i = 0; i < 200 && a.qp->cc_limiting(); ++i) a.qp->on_timer(a.qp->next_deadline());
  EXPECT_FALSE(a.qp->cc_limiting());
  EXPECT_EQ(a.qp->next_deadline(), kNever);
}

}  // namespace
}  // namespace uroce::transport
