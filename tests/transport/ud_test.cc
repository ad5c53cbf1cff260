// UD queue pairs (transport/ud.cc, unreliable_qp.cc): DETH and Q_Key rules, the GRH area of
// receive buffers, the port-MTU limit, drops without a receive WQE, and the UD state machine.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "harness.h"
#include "transport/context.h"
#include "transport/ud.h"

namespace uroce::transport {
namespace {

using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;
constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kMtu = 1024;

// Turns a harness node into a UD QP (the harness builds RC QPs).
void make_ud(Node& n) {
  n.init.type = IBV_QPT_UD;
  n.init.port_mtu = kMtu;
  n.rebuild();
}

int to_init(Qp& qp, uint32_t qkey) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = qkey;
  return qp.modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0);
}
int to_state(Qp& qp, ibv_qp_state s, int extra_mask = 0, uint32_t sq_psn = 0) {
  ibv_qp_attr a{};
  a.qp_state = s;
  a.sq_psn = sq_psn;
  return qp.modify(a, IBV_QP_STATE | extra_mask, 0);
}

struct UdPair : ::testing::Test {
  UdPair() : a(kQpnA, kIpA), b(kQpnB, kIpB) {
    make_ud(a);
    make_ud(b);
    for (Node* n : {&a, &b}) {
      EXPECT_EQ(to_init(*n->qp, kQkey), 0);
      EXPECT_EQ(to_state(*n->qp, IBV_QPS_RTR), 0);
      EXPECT_EQ(to_state(*n->qp, IBV_QPS_RTS, IBV_QP_SQ_PSN, 0x100), 0);
    }
    src.resize(8192);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + 3);
    skey = a.mem.reg(a.pd, src.data(), src.size(), 0);
    dst.assign(8192, 0xee);
    dkey = b.mem.reg(b.pd, dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE);
  }
  SendWqe ud_send(uint64_t id, uint32_t len, uint32_t qkey = kQkey,
                  ibv_wr_opcode op = IBV_WR_SEND) {
    SendWqe w = test::send_wqe(id, reinterpret_cast<uint64_t>(src.data()), len, skey, op);
    w.send_flags = IBV_SEND_SIGNALED;
    w.ud_dst_ip = wire::IpAddr(kIpB);
    w.ud_remote_qpn = kQpnB;
    w.ud_remote_qkey = qkey;
    return w;
  }
  void post_recv(uint64_t id, uint32_t len, uint32_t off = 0) {
    ASSERT_EQ(b.qp->post_recv(
                  test::recv_wqe(id, reinterpret_cast<uint64_t>(dst.data() + off), len, dkey)),
              0);
  }
  // Moves what a sent to b, as if it came from kIpA.
  void deliver_all() {
    for (auto& c : test::drain(a)) test::deliver(b, *c, kIpA, 0);
  }

  Node a, b;
  std::vector<uint8_t> src, dst;
  uint32_t skey = 0, dkey = 0;
};

TEST_F(UdPair, SendIsOnePacketWithDethAndCompletesAtOnce) {
  ASSERT_EQ(a.qp->post_send(ud_send(1, 100), 0), 0);
  ASSERT_EQ(a.sink.sent.size(), 1u);
  const TxBuf& buf = a.sink.sent.front();
  const wire::Packet p = test::parsed(buf);
  EXPECT_EQ(p.bth.opcode, uint8_t(wire::Opcode::kUdSendOnly));
  EXPECT_EQ(p.bth.dest_qp, kQpnB);
  EXPECT_EQ(p.bth.psn, 0x100u);
  EXPECT_FALSE(p.bth.ack_req);
  EXPECT_EQ(p.deth.qkey, kQkey);
  EXPECT_EQ(p.deth.src_qp, kQpnA);
  EXPECT_EQ(p.payload.size(), 100u);
  // The AH's address, IPv4-mapped: a port sends it to that IPv4 address.
  EXPECT_EQ(buf.dst_ip, wire::IpAddr(kIpB));
  EXPECT_TRUE(buf.dst_ip.is_v4());
  EXPECT_EQ(buf.dst_ip.v4(), kIpB);
  EXPECT_EQ(buf.src_port, src_port_for_qpn(kQpnA));  // as for RC: from the QPN
  // No acknowledgement to wait for: the WQE completes when sent.
  ASSERT_EQ(a.scq.wcs.size(), 1u);
  EXPECT_EQ(a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(a.scq.wcs[0].opcode, IBV_WC_SEND);
  // PSNs count packets.
  ASSERT_EQ(a.qp->post_send(ud_send(2, 4), 0), 0);
  EXPECT_EQ(test::parsed(a.sink.sent.back()).bth.psn, 0x101u);
}

TEST_F(UdPair, ReceiveWritesGrhAreaThenPayload) {
  post_recv(7, 40 + 100);
  ASSERT_EQ(a.qp->post_send(ud_send(1, 100), 0), 0);
  deliver_all();
  ASSERT_EQ(b.rcq.wcs.size(), 1u);
  const ibv_wc& wc = b.rcq.wcs[0];
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 140u);  // the GRH area counts
  EXPECT_EQ(wc.wc_flags, unsigned(IBV_WC_GRH));
  EXPECT_EQ(wc.src_qp, kQpnA);
  EXPECT_EQ(wc.qp_num, kQpnB);
  EXPECT_EQ(wc.sl, kWcSlRoceV2Ipv4);  // mlx5's "IPv4" packet type, which UCX needs
  // The first 20 bytes are unused for IPv4, the last 20 hold the IPv4 header.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(dst[i], 0) << i;
  const uint8_t* ip = dst.data() + 20;
  EXPECT_EQ(ip[0], 0x45);
  EXPECT_EQ(ip[9], 17);  // UDP
  // Total length: IPv4 20 + UDP 8 + BTH 12 + DETH 8 + payload 100 + ICRC 4.
  EXPECT_EQ(ip[2] << 8 | ip[3], 152);
  EXPECT_EQ(std::vector<uint8_t>(ip + 12, ip + 16), (std::vector<uint8_t>{10, 0, 0, 1}));
  EXPECT_EQ(std::vector<uint8_t>(ip + 16, ip + 20), (std::vector<uint8_t>{10, 0, 0, 2}));
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += uint32_t(ip[i]) << 8 | ip[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  EXPECT_EQ(sum, 0xffffu) << "IPv4 header checksum";
  EXPECT_EQ(std::memcmp(dst.data() + 40, src.data(), 100), 0);
  EXPECT_EQ(dst[140], 0xee);  // nothing beyond the message
}

// A RoCE v1 datagram (a real GRH, DPDK devices with roce_v1=1) reports mlx5's "GRH" packet type.
TEST_F(UdPair, RoceV1ReceiveReportsGrhPacketTypeInSl) {
  post_recv(8, 40 + 64);
  ASSERT_EQ(a.qp->post_send(ud_send(1, 64), 0), 0);
  for (auto& c : test::drain(a)) {
    RxInfo rx;
    rx.src_ip = wire::IpAddr(kIpA);
    rx.dst_ip = wire::IpAddr(kIpB);
    rx.roce_v1 = true;
    b.qp->receive(c->pkt, rx, 0);
  }
  ASSERT_EQ(b.rcq.wcs.size(), 1u);
  EXPECT_EQ(b.rcq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(b.rcq.wcs[0].sl, kWcSlRoceV1);
  EXPECT_EQ(dst[0] >> 4, 6);  // the GRH's IPVer
}

// A RoCEv2 datagram over IPv6 (addresses not IPv4-mapped): its IPv6 header fills the GRH area,
// and wc.sl says IPv6, as mlx5 reports it.
TEST_F(UdPair, Ipv6ReceiveWritesTheIpv6HeaderAndReportsIpv6PacketTypeInSl) {
  post_recv(9, 40 + 64);
  ASSERT_EQ(a.qp->post_send(ud_send(1, 64), 0), 0);
  const wire::IpAddr from = *wire::IpAddr::parse("2001:db8::a"),
                     to = *wire::IpAddr::parse("2001:db8::b");
  for (auto& c : test::drain(a)) {
    RxInfo rx;
    rx.src_ip = from;
    rx.dst_ip = to;
    rx.ecn = kEcnEct0;
    b.qp->receive(c->pkt, rx, 0);
  }
  ASSERT_EQ(b.rcq.wcs.size(), 1u);
  EXPECT_EQ(b.rcq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(b.rcq.wcs[0].sl, kWcSlRoceV2Ipv6);
  EXPECT_EQ(dst[0] >> 4, 6);               // version
  EXPECT_EQ((dst[1] >> 4) & 3, kEcnEct0);  // the traffic class's ECN bits
  // Payload length: UDP 8 + BTH 12 + DETH 8 + payload 64 + ICRC 4.
  EXPECT_EQ(dst[4] << 8 | dst[5], 96);
  EXPECT_EQ(dst[6], 17);  // UDP
  EXPECT_EQ(std::memcmp(dst.data() + 8, from.data(), 16), 0);
  EXPECT_EQ(std::memcmp(dst.data() + 24, to.data(), 16), 0);
}

TEST_F(UdPair, SendWithImmediate) {
  post_recv(1, 200);
  SendWqe w = ud_send(1, 8, kQkey, IBV_WR_SEND_WITH_IMM);
  w.imm_be = 0x12345678;
  w.send_flags |= IBV_SEND_SOLICITED;
  ASSERT_EQ(a.qp->post_send(w, 0), 0);
  EXPECT_EQ(test::parsed(a.sink.sent.front()).bth.opcode, uint8_t(wire::Opcode::kUdSendOnlyImm));
  deliver_all();
  ASSERT_EQ(b.rcq.wcs.size(), 1u);
  EXPECT_EQ(b.rcq.wcs[0].wc_flags, unsigned(IBV_WC_GRH | IBV_WC_WITH_IMM));
  EXPECT_EQ(b.rcq.wcs[0].imm_data, 0x12345678u);
  EXPECT_TRUE(b.rcq.solicited.at(0));
}

TEST_F(UdPair, QkeyMismatchIsACountedDrop) {
  post_recv(1, 200);
  ASSERT_EQ(a.qp->post_send(ud_send(1, 8, 0x2222), 0), 0);
  deliver_all();
  EXPECT_TRUE(b.rcq.wcs.empty());
  EXPECT_EQ(b.qp->counters().qkey_violation, 1u);
  EXPECT_EQ(b.qp->counters().dropped_pkts, 1u);
  // The receive WQE was not consumed: the next matching datagram gets it.
  ASSERT_EQ(a.qp->post_send(ud_send(2, 8), 0), 0);
  deliver_all();
  ASSERT_EQ(b.rcq.wcs.size(), 1u);
  EXPECT_EQ(b.rcq.wcs[0].wr_id, 1u);
}

TEST_F(UdPair, HighBitQkeyInWrSendsTheQpsOwnQkey) {
  // IBTA C10-15: a WR Q_Key with the high-order bit set is replaced by the QP's Q_Key.
  ASSERT_EQ(a.qp->post_send(ud_send(1, 8, 0x80000005), 0), 0);
  EXPECT_EQ(test::parsed(a.sink.sent.back()).deth.qkey, kQkey);
  // The QP's own Q_Key may differ from the receiver's: then the receiver drops it.
  ibv_qp_attr at{};
  at.qkey = 0x33;
  ASSERT_EQ(a.qp->modify(at, IBV_QP_QKEY, 0), 0);  // RTS→RTS may change the Q_Key
  ASSERT_EQ(a.qp->post_send(ud_send(2, 8, 0x80000000), 0), 0);
  EXPECT_EQ(test::parsed(a.sink.sent.back()).deth.qkey, 0x33u);
  // Without the high bit the WR's Q_Key goes out as given.
  ASSERT_EQ(a.qp->post_send(ud_send(3, 8, 0x7fffffff), 0), 0);
  EXPECT_EQ(test::parsed(a.sink.sent.back()).deth.qkey, 0x7fffffffu);
  EXPECT_EQ(ud_wire_qkey(0x80000000, 9), 9u);
  EXPECT_EQ(ud_wire_qkey(0x1, 9), 1u);
}

TEST_F(UdPair, MessageLongerThanPortMtuFailsWithoutAPacket) {
  ASSERT_EQ(a.qp->post_send(ud_send(1, kMtu), 0), 0);  // exactly the MTU is fine
  ASSERT_EQ(a.sink.sent.size(), 1u);
  ASSERT_EQ(a.qp->post_send(ud_send(2, kMtu + 1), 0), 0);
  EXPECT_EQ(a.sink.sent.size(), 1u);
  ASSERT_EQ(a.scq.wcs.size(), 2u);
  EXPECT_EQ(a.scq.wcs[1].wr_id, 2u);
  EXPECT_EQ(a.scq.wcs[1].status, IBV_WC_LOC_LEN_ERR);
  // The send queue is in error (IBTA 10.3.1 SQE): later WRs are flushed, receives still work.
  EXPECT_EQ(a.qp->state(), IBV_QPS_SQE);
  ASSERT_EQ(a.qp->post_send(ud_send(3, 8), 0), 0);
  ASSERT_EQ(a.scq.wcs.size(), 3u);
  EXPECT_EQ(a.scq.wcs[2].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(a.sink.sent.size(), 1u);
  // SQE → RTS resumes.
  ASSERT_EQ(to_state(*a.qp, IBV_QPS_RTS), 0);
  ASSERT_EQ(a.qp->post_send(ud_send(4, 8), 0), 0);
  EXPECT_EQ(a.sink.sent.size(), 2u);
  EXPECT_EQ(a.scq.wcs.back().status, IBV_WC_SUCCESS);
}

TEST_F(UdPair, NoReceiveWqeIsACountedDrop) {
  ASSERT_EQ(a.qp->post_send(ud_send(1, 8), 0), 0);
  deliver_all();
  EXPECT_TRUE(b.rcq.wcs.empty());
  EXPECT_EQ(b.qp->counters().out_of_buffer, 1u);
  EXPECT_EQ(b.qp->counters().dropped_pkts, 1u);
  EXPECT_TRUE(b.sink.sent.empty());  // no RNR NAK, nothing at all
}

TEST_F(UdPair, ReceiveBufferTooSmallForGrhAndPayload) {
  post_recv(1, 40 + 19);
  post_recv(2, 40 + 20, 1024);
  ASSERT_EQ(a.qp->post_send(ud_send(1, 20), 0), 0);
  ASSERT_EQ(a.qp->post_send(ud_send(2, 20), 0), 0);
  deliver_all();
  ASSERT_EQ(b.rcq.wcs.size(), 2u);
  EXPECT_EQ(b.rcq.wcs[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(b.rcq.wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
}

TEST_F(UdPair, RefusesWhatUdCannotCarry) {
  SendWqe w = ud_send(1, 8, kQkey, IBV_WR_RDMA_WRITE);
  EXPECT_EQ(a.qp->post_send(w, 0), EINVAL);
  w.opcode = IBV_WR_RDMA_READ;
  EXPECT_EQ(a.qp->post_send(w, 0), EINVAL);
  w = ud_send(1, 8);
  w.ud_dst_ip = {};  // no address handle
  EXPECT_EQ(a.qp->post_send(w, 0), EINVAL);
  w.ud_dst_ip = wire::IpAddr(0u);  // 0.0.0.0, as refused when addresses were IPv4 integers
  EXPECT_EQ(a.qp->post_send(w, 0), EINVAL);
  EXPECT_TRUE(a.sink.sent.empty());
  // An RC or UC packet for a UD QP is dropped.
  auto c = test::craft(wire::Opcode::kUcSendOnly, kQpnB, 0, false);
  test::deliver(b, *c, kIpA, 0);
  EXPECT_EQ(b.qp->counters().dropped_pkts, 1u);
}

TEST(UdStateMachine, QkeyAtInitRtrWithoutAvRtsNeedsSqPsn) {
  Node n(kQpnA, kIpA);
  make_ud(n);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  EXPECT_EQ(n.qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT, 0), EINVAL);
  ASSERT_EQ(to_init(*n.qp, kQkey), 0);
  // Posting sends needs RTS.
  SendWqe dummy;
  EXPECT_EQ(n.qp->post_send(dummy, 0), EINVAL);
  EXPECT_EQ(to_state(*n.qp, IBV_QPS_RTR, IBV_QP_AV), EINVAL);  // UD has no path
  ASSERT_EQ(to_state(*n.qp, IBV_QPS_RTR), 0);
  EXPECT_EQ(n.qp->post_send(dummy, 0), EINVAL);
  EXPECT_EQ(to_state(*n.qp, IBV_QPS_RTS), EINVAL);
  ASSERT_EQ(to_state(*n.qp, IBV_QPS_RTS, IBV_QP_SQ_PSN, 5), 0);
  ibv_qp_attr q;
  ibv_qp_init_attr qi;
  n.qp->query(q, qi);
  EXPECT_EQ(q.qkey, kQkey);
  EXPECT_EQ(qi.qp_type, IBV_QPT_UD);
}

TEST_F(UdPair, ManyDatagramsOverTheLink) {
  test::Link link(a, b);
  for (int i = 0; i < 50; ++i) post_recv(i, 40 + 64, i * 128);
  for (int i = 0; i < 50; ++i) {
    SendWqe w = ud_send(i, 64);
    w.sge[0].addr += i;
    ASSERT_EQ(a.qp->post_send(w, 0), 0);
  }
  link.run_idle(1'000'000'000);
  ASSERT_EQ(b.rcq.wcs.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(b.rcq.wcs[i].wr_id, uint64_t(i));
    EXPECT_EQ(std::memcmp(dst.data() + i * 128 + 40, src.data() + i, 64), 0) << i;
  }
  EXPECT_EQ(b.qp->counters().sent_pkts, 0u);  // nothing is acknowledged
}

}  // namespace
}  // namespace uroce::transport
