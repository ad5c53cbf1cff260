// The DSCP of a QP's packets (transport/context.h QpContext::dscp): the port's default unless the
// AV's GRH traffic class sets one — as on RNICs, where RoCEv2 carries the traffic class in the IPv4
// TOS byte (Annex A17.4.5.2) — for requests, ACKs and READ responses alike; per AH for UD. And
// the rest of a packet's route (transport/env.h stamp_route).
#include <gtest/gtest.h>

#include "harness.h"
#include "transport/context.h"

namespace uroce::transport {
namespace {

using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;

TEST(TrafficClass, TheAvsTrafficClassSetsTheDscpOfEveryPacket) {
  for (uint8_t tclass : {uint8_t{0}, uint8_t{26 << 2}, uint8_t{46 << 2 | 2}}) {
    SCOPED_TRACE(int(tclass));
    Node a(0x11, kIpA), b(0x22, kIpB);
    test::PathParams p;
    p.traffic_class = tclass;
    a.connect(kIpB, 0x22, 0, 0, p);
    b.connect(kIpA, 0x11, 0, 0, p);
    std::vector<uint8_t> src, dst;
    const uint32_t skey = a.buffer(src, 4096, 0x5a);
    const uint32_t dkey = b.mem.reg(b.pd, (dst.assign(4096, 0), dst.data()), dst.size(),
                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    ASSERT_EQ(
        b.qp->post_recv(test::recv_wqe(1, reinterpret_cast<uint64_t>(dst.data()), 4096, dkey)), 0);
    ASSERT_EQ(
        a.qp->post_send(test::send_wqe(2, reinterpret_cast<uint64_t>(src.data()), 2048, skey), 0),
        0);
    ASSERT_EQ(
        a.qp->post_send(test::rdma_wqe(3, IBV_WR_RDMA_READ, reinterpret_cast<uint64_t>(src.data()),
                                       1024, skey, reinterpret_cast<uint64_t>(dst.data()), dkey),
                        0),
        0);
    const uint8_t want = tclass == 0 ? kDscpPortDefault : uint8_t(tclass >> 2);
    size_t seen = 0;
    // Deliver by hand, looking at every packet either side sends (SENDs, READ request, ACKs,
    // READ responses).
    for (int round = 0; round < 8; ++round) {
      for (auto [from, to, to_ip] : {std::tuple{&a, &b, kIpA}, std::tuple{&b, &a, kIpB}}) {
        for (auto& c : test::drain(*from)) {
          EXPECT_EQ(c->buf.dscp, want) << "opcode " << int(c->pkt.bth.opcode);
          ++seen;
          test::deliver(*to, *c, to_ip, 1000 * round);
        }
      }
    }
    EXPECT_GE(seen, 4u);  // 2 SENDs (MTU 1024), the READ request, its response, ACKs
    EXPECT_EQ(a.scq.wcs.size(), 2u);
  }
}

// A port hands out reused buffers: every packet gets its whole route, so nothing of the last
// packet's (a CNP's DSCP, priority and ECN, a RoCE v1 peer) stays on the next.
TEST(TrafficClass, EveryPacketGetsItsWholeRoute) {
  TxBuf buf;
  stamp_route(&buf, Route{.dst_ip = wire::IpAddr(kIpB),
                          .src_port = 0xc001,
                          .ecn = kEcnNotEct,
                          .dscp = 48,
                          .pcp = 6,
                          .roce_v1 = true});
  QpInit init;
  ibv_qp_attr attr{};
  test::FakeMemory mem;
  QpCounters counters;
  QpContext ctx{init, attr, mem, counters};
  ctx.remote_ip = wire::IpAddr(kIpA);
  ctx.src_port = 0xd00d;
  stamp_route(&buf, data_route(ctx));
  EXPECT_EQ(buf.dst_ip, wire::IpAddr(kIpA));
  EXPECT_EQ(buf.src_port, 0xd00d);
  EXPECT_EQ(buf.ecn, kEcnEct0);  // a QP's data and ACKs are ECN-capable
  EXPECT_EQ(buf.dscp, kDscpPortDefault);
  EXPECT_EQ(buf.pcp, kPcpPortDefault);
  EXPECT_FALSE(buf.roce_v1);
}

}  // namespace
}  // namespace uroce::transport
