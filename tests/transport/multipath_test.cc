// Multipath spraying (QpInit::paths, transport/multipath.h): PathSet's per-path loss rule on its
// own, then two QPs over the virtual-time link whose paths (UDP source ports) have different
// lengths, so sprayed packets arrive out of order by design.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "harness.h"
#include "transport/multipath.h"

namespace uroce::transport {
namespace {

using test::Link;
using test::LinkParams;
using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;
constexpr Time kSecond = 1'000'000'000;
constexpr uint16_t kBase = 0xC123;

// ---------------------------------------------------------------------------------------------
// PathSet alone.

TEST(PathSet, OffForOnePath) {
  PathSet p;
  p.reset(kQpnA, kBase, 1);
  EXPECT_FALSE(p.on());
  EXPECT_EQ(p.paths(), 1u);
}

TEST(PathSet, SpraysRoundRobinFromTheQpsOwnPort) {
  PathSet p;
  p.reset(kQpnA, kBase, 4);
  ASSERT_TRUE(p.on());
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < 8; ++i) ports.push_back(p.send(Psn(100 + i), true));
  EXPECT_EQ(ports[0], kBase);  // slot 0 is the QP's own port
  std::set<uint16_t> distinct(ports.begin(), ports.end());
  EXPECT_EQ(distinct.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(ports[i], ports[i + 4]);
  for (uint16_t port : ports) EXPECT_GE(port, 0xC000);  // the dynamic range, as rxe keeps it
  // A packet that is not sprayed keeps slot 0.
  EXPECT_EQ(p.send(Psn(108), false), kBase);
}

TEST(PathSet, AHoleIsLostOnlyWhenALaterPacketOfItsOwnPathArrived) {
  PathSet p;
  p.reset(kQpnA, kBase, 2);
  for (uint32_t i = 0; i < 6; ++i) p.send(Psn(i), true);  // slot 0: 0 2 4; slot 1: 1 3 5
  // 1, 3 and 5 (the other path) arrive: nothing of slot 0 is lost, however far ahead they are.
  for (uint32_t i : {1u, 3u, 5u}) p.delivered(Psn(i));
  EXPECT_FALSE(p.lost(Psn(0)));
  EXPECT_FALSE(p.lost(Psn(2)));
  EXPECT_FALSE(p.lost(Psn(4)));
  // 2 arrives: 0, sent before it on the same path, is lost; 4 is not.
  p.delivered(Psn(2));
  EXPECT_TRUE(p.lost(Psn(0)));
  EXPECT_FALSE(p.lost(Psn(4)));
  // Resent, 0 is a new transmission: not lost until its path shows a later arrival.
  p.send(Psn(0), true);
  EXPECT_FALSE(p.lost(Psn(0)));
}

TEST(PathSet, ARouteThatLostIsReplacedOnceAndItsStragglersJudgedByIt) {
  PathSet p;
  p.reset(kQpnA, kBase, 2);
  for (uint32_t i = 0; i < 8; ++i) p.send(Psn(i), true);  // slot 0: 0 2 4 6
  p.delivered(Psn(4));
  ASSERT_TRUE(p.lost(Psn(0)));
  ASSERT_TRUE(p.lost(Psn(2)));
  EXPECT_FALSE(p.rotate(Psn(6)));  // no evidence against 6: nothing changes
  const uint16_t before = p.port(0);
  EXPECT_TRUE(p.rotate(Psn(0)));
  EXPECT_NE(p.port(0), before);
  EXPECT_FALSE(p.rotate(Psn(2)));  // the same route: already replaced
  // Packets on the new route arrive; 6, a straggler of the old route, is not taken for lost.
  const uint16_t fresh = p.send(Psn(8), true);  // slot 0 (round robin), the new route
  EXPECT_EQ(fresh, p.port(0));
  p.delivered(Psn(8));
  EXPECT_FALSE(p.lost(Psn(6)));
  // A later packet of the old route does show it lost.
  p.delivered(Psn(6));
  EXPECT_TRUE(p.lost(Psn(2)));
}

TEST(PathSet, AStallCountsEverythingSentAsLostButBlamesNoRoute) {
  PathSet p;
  p.reset(kQpnA, kBase, 4);
  for (uint32_t i = 0; i < 8; ++i) p.send(Psn(i), true);
  EXPECT_FALSE(p.lost(Psn(7)));
  p.expire_all();
  for (uint32_t i = 0; i < 8; ++i) EXPECT_TRUE(p.lost(Psn(i)));
  EXPECT_FALSE(p.rotate(Psn(3)));
  p.send(Psn(8), true);
  EXPECT_FALSE(p.lost(Psn(8)));  // sent after the stall
}

TEST(PathSet, AMarkedPathMovesAtOnceAndAgainOnlyOnceItsNewRouteWasTried) {
  PathSet p;
  p.reset(kQpnA, kBase, 2);
  for (uint32_t i = 0; i < 4; ++i) p.send(Psn(i), true);  // slot 1: 1 3
  const uint16_t hot = p.port(1);
  EXPECT_TRUE(p.marked(hot));  // a slot's first route moves at its first mark
  const uint16_t second = p.port(1);
  EXPECT_NE(second, hot);
  EXPECT_FALSE(p.marked(hot));     // no slot is on that route any more
  EXPECT_FALSE(p.marked(second));  // the new route has not delivered yet: not tried
  EXPECT_FALSE(p.marked(0x1234));  // not ours
  p.send(Psn(4), true);
  p.send(Psn(5), true);  // slot 1, the second route
  p.delivered(Psn(5));
  EXPECT_TRUE(p.marked(second));  // tried, and marked again: it moves too
  EXPECT_NE(p.port(1), second);
  // 3, in flight on the first route, is judged by that route; 5 arrived on another.
  EXPECT_FALSE(p.lost(Psn(3)));
}

TEST(PathSet, StragglersOfRoutesReplacedInQuickSuccessionAreNotTakenForLost) {
  PathSet p;
  p.reset(kQpnA, kBase, 2);
  p.send(Psn(0), true);  // slot 0, route A
  p.send(Psn(1), true);  // slot 1
  p.send(Psn(2), true);  // slot 0, route A
  p.delivered(Psn(2));
  ASSERT_TRUE(p.marked(p.port(0)));  // route A → B (a first route moves at once)
  p.send(Psn(3), true);
  p.send(Psn(4), true);  // slot 0, route B
  p.delivered(Psn(4));
  ASSERT_TRUE(p.marked(p.port(0)));  // route B → C
  p.send(Psn(5), true);
  p.send(Psn(6), true);  // slot 0, route C
  p.delivered(Psn(6));
  // 0 was sent before 2 on route A: lost. Nothing is known against 3 (slot 1).
  EXPECT_TRUE(p.lost(Psn(0)));
  EXPECT_FALSE(p.lost(Psn(3)));
}

// ---------------------------------------------------------------------------------------------
// Two QPs over the link.

test::PathParams path() {
  test::PathParams pp;
  pp.mtu = IBV_MTU_1024;
  pp.timeout = 8;  // ~1 ms
  pp.rd_atomic = 4;
  return pp;
}

struct Pair {
  Pair(uint8_t paths, bool b_sr = true) : a(kQpnA, kIpA), b(kQpnB, kIpB) {
    a.init.selective_repeat = true;
    b.init.selective_repeat = b_sr;
    a.init.paths = paths;
    a.init.early_retransmit = b.init.early_retransmit = true;
    a.rebuild();
    b.rebuild();
    a.connect(kIpB, kQpnB, 0xffff00, 0xfffe00, path());
    b.connect(kIpA, kQpnA, 0xfffe00, 0xffff00, path());
    src.resize(2 << 20);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 131 + (i >> 10));
    skey = a.mem.reg(a.pd, src.data(), src.size(), 0);
    rmem.assign(2 << 20, 0);
    rkey = b.mem.reg(b.pd, rmem.data(), rmem.size(),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    rbuf.assign(4096, 0);
    rbkey = b.mem.reg(b.pd, rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  }
  uint64_t at(std::vector<uint8_t>& v, uint64_t off) {
    return reinterpret_cast<uint64_t>(v.data() + off);
  }
  Node a, b;
  std::vector<uint8_t> src, rmem, rbuf;
  uint32_t skey = 0, rkey = 0, rbkey = 0;
};

// The link's paths: a's packets take 0, 3, 6 or 9 µs extra by their source port (a hash of it),
// each path FIFO — sprayed packets arrive far out of PSN order, as over ECMP routes whose
// queues differ. What a sent, by port, is counted.
struct Paths {
  std::map<uint16_t, uint64_t> ports;  // a's packets per UDP source port
  void attach(Link& link) {
    link.path_delay = [this](int from, uint16_t port) -> Time {
      if (from != 0) return 0;
      ++ports[port];
      return Time((port * 2654435761u >> 20) % 4) * 3'000;
    };
  }
};

struct Outcome {
  QpCounters a;
  uint64_t lost = 0;
};

// Negotiates selective repeat with one zero-length WRITE, then `writes` RDMA WRITEs of `len`
// bytes (and, with `send_after`, a SEND behind them), every byte checked.
Outcome writes(Pair& p, Link& link, int writes, uint32_t len, bool send_after = false) {
  EXPECT_EQ(p.a.qp->post_send(test::rdma_wqe(~0ull, IBV_WR_RDMA_WRITE, p.at(p.src, 0), 0, p.skey,
                                             p.at(p.rmem, 0), p.rkey),
                              link.now),
            0);
  EXPECT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 1; }, 60 * kSecond));
  p.a.scq.wcs.clear();
  const QpCounters before = p.a.qp->counters();
  for (int i = 0; i < writes; ++i) {
    const uint64_t off = uint64_t(i % 16) * len;
    EXPECT_EQ(p.a.qp->post_send(test::rdma_wqe(i, IBV_WR_RDMA_WRITE, p.at(p.src, off + i), len,
                                               p.skey, p.at(p.rmem, off), p.rkey),
                                link.now),
              0);
  }
  size_t want = size_t(writes);
  if (send_after) {
    EXPECT_EQ(p.b.qp->post_recv(test::recv_wqe(77, p.at(p.rbuf, 0), 64, p.rbkey)), 0);
    EXPECT_EQ(p.a.qp->post_send(
                  test::rdma_wqe(writes, IBV_WR_SEND, p.at(p.src, 0), 64, p.skey, 0, 0), link.now),
              0);
    ++want;
  }
  EXPECT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == want; }, 600 * kSecond));
  link.run_idle(link.now + kSecond);
  EXPECT_EQ(p.a.scq.wcs.size(), want);
  for (size_t i = 0; i < p.a.scq.wcs.size(); ++i) {
    EXPECT_EQ(p.a.scq.wcs[i].wr_id, i);  // completions in order, whatever the arrival order
    EXPECT_EQ(p.a.scq.wcs[i].status, IBV_WC_SUCCESS);
  }
  for (int i = std::max(0, writes - 16); i < writes; ++i) {
    const uint64_t off = uint64_t(i % 16) * len;
    EXPECT_TRUE(
        std::equal(p.src.begin() + off + i, p.src.begin() + off + i + len, p.rmem.begin() + off))
        << "WRITE " << i;
  }
  if (send_after) {
    EXPECT_EQ(p.b.rcq.wcs.size(), 1u);
    EXPECT_TRUE(std::equal(p.src.begin(), p.src.begin() + 64, p.rbuf.begin()));
  }
  EXPECT_EQ(p.a.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(p.b.qp->state(), IBV_QPS_RTS);
  Outcome r;
  r.a = p.a.qp->counters();
  r.a.retransmitted_pkts -= before.retransmitted_pkts;
  r.a.sr_sack_rcvd -= before.sr_sack_rcvd;
  r.a.mp_sprayed_pkts -= before.mp_sprayed_pkts;
  r.lost = link.lost;
  return r;
}

TEST(Multipath, SpraysOverEveryPathAndReorderingResendsNothing) {
  Pair p(8);
  Link link(p.a, p.b);
  Paths paths;
  paths.attach(link);
  const Outcome r = writes(p, link, 48, 64 * 1024);  // 3072 packets of 1 KiB
  std::printf("8 paths, 0-9 us skew: %zu ports, %llu SACKs, %llu resent\n", paths.ports.size(),
              (unsigned long long)r.a.sr_sack_rcvd, (unsigned long long)r.a.retransmitted_pkts);
  EXPECT_EQ(paths.ports.size(), 8u);
  // Every port carried its share of the sprayed packets.
  for (const auto& [port, n] : paths.ports) EXPECT_GT(n, 3072u / 8 / 2) << port;
  EXPECT_GE(r.a.mp_sprayed_pkts, 3072u);
  EXPECT_GT(r.a.sr_sack_rcvd, 100u);  // the packets did arrive out of order
  // No packet was taken for lost: reordering across paths costs no resend, and no timer fired.
  EXPECT_EQ(r.a.retransmitted_pkts, 0u);
  EXPECT_EQ(r.a.local_ack_timeout_err, 0u);
  EXPECT_EQ(r.a.early_retransmits, 0u);
}

TEST(Multipath, OnePathSpraysNothing) {
  Pair p(1);
  Link link(p.a, p.b);
  Paths paths;
  paths.attach(link);
  const Outcome r = writes(p, link, 8, 64 * 1024);
  EXPECT_EQ(paths.ports.size(), 1u);
  EXPECT_EQ(r.a.mp_sprayed_pkts, 0u);
  EXPECT_EQ(r.a.sr_sack_rcvd, 0u);
}

TEST(Multipath, APeerWithoutSelectiveRepeatGetsOnePath) {
  Pair p(8, /*b_sr=*/false);
  Link link(p.a, p.b);
  Paths paths;
  paths.attach(link);
  const Outcome r = writes(p, link, 8, 64 * 1024);
  EXPECT_EQ(paths.ports.size(), 1u);
  EXPECT_EQ(r.a.mp_sprayed_pkts, 0u);
}

TEST(Multipath, ALossIsFoundOnItsOwnPathAndOnlyItIsResent) {
  Pair p(4);
  Link link(p.a, p.b);
  Paths paths;
  paths.attach(link);
  // One WRITE packet lost once, in the middle of the stream.
  std::set<uint32_t> seen;
  int nth = 0;
  link.drop_if = [&](int from, const wire::Packet& pkt) {
    if (from != 0 || pkt.bth.opcode != uint8_t(wire::Opcode::kRcWriteOnly) ||
        !seen.insert(pkt.bth.psn).second)
      return false;
    return ++nth == 500;
  };
  const Outcome r = writes(p, link, 16, 64 * 1024);
  EXPECT_EQ(r.lost, 1u);
  EXPECT_EQ(r.a.retransmitted_pkts, 1u);
  EXPECT_EQ(r.a.sr_selective_resends, 1u);
  EXPECT_EQ(r.a.mp_path_rotations, 1u);  // the route that lost it was replaced
  EXPECT_EQ(r.a.local_ack_timeout_err, 0u);
  EXPECT_EQ(paths.ports.size(), 5u);  // four paths and the replacement
}

TEST(Multipath, ABlackHoledPathIsAbandoned) {
  Pair p(4);
  Link link(p.a, p.b);
  Paths paths;
  paths.attach(link);
  // From the 200th packet on, every packet of a on one of its sprayed ports (not its own) is
  // lost: a route that failed. No later packet of that path ever arrives to show the losses;
  // the stall does (the probe), and the route is replaced.
  const auto lengths = link.path_delay;
  uint16_t dead = 0;
  uint64_t sent = 0;
  link.path_delay = [&](int from, uint16_t port) -> Time {
    const Time d = lengths(from, port);
    if (from != 0) return d;
    if (++sent == 200) {
      for (const auto& [q, n] : paths.ports)
        if (q != paths.ports.begin()->first || paths.ports.size() == 1) dead = q;
    }
    return dead != 0 && port == dead ? kNever : d;
  };
  const Outcome r = writes(p, link, 32, 64 * 1024);
  std::printf("black hole: lost %llu, resent %llu, rotations %llu, probes %llu, timeouts %llu\n",
              (unsigned long long)r.lost, (unsigned long long)r.a.retransmitted_pkts,
              (unsigned long long)r.a.mp_path_rotations, (unsigned long long)r.a.early_retransmits,
              (unsigned long long)r.a.local_ack_timeout_err);
  ASSERT_NE(dead, 0);
  EXPECT_EQ(r.a.mp_path_rotations, 1u);
  // The dead route swallowed its share of one window (a quarter of 256 packets) until the stall
  // showed it — here the ACK timer (1 ms; a probe needs more room below it) — and nothing after
  // it was replaced: without the replacement, a quarter of the 2048 packets would have gone.
  EXPECT_LE(r.lost, 256u / 4 + 4);
  EXPECT_LE(r.a.retransmitted_pkts, r.lost + 4);
  EXPECT_LE(r.a.local_ack_timeout_err + r.a.early_retransmits, 1u);
}

TEST(Multipath, AMarkedPathIsLeftForAnother) {
  Pair p(4);
  p.b.init.cc.np.enabled = true;  // b answers CE marks with CNPs, as the device does by default
  p.b.init.cc.np.min_time_between_cnps = 0;
  p.b.rebuild();
  p.b.connect(kIpA, kQpnA, 0xfffe00, 0xffff00, path());
  p.rkey = p.b.mem.reg(p.b.pd, p.rmem.data(), p.rmem.size(),
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  Link link(p.a, p.b);
  Paths paths;
  paths.attach(link);
  // One of a's ports crosses a congested switch: every ECN-capable packet on it is marked CE.
  uint16_t hot = 0;
  std::map<uint16_t, uint64_t> marked;
  link.ce_if = [&](int from, uint16_t port) {
    if (from != 0) return false;
    if (hot == 0 && paths.ports.size() >= 3) hot = std::next(paths.ports.begin(), 2)->first;
    if (port != hot) return false;
    ++marked[port];
    return true;
  };
  const Outcome r = writes(p, link, 32, 64 * 1024);
  std::printf("marked path: %llu packets marked, %llu CNPs, %llu ECN rotations, %zu ports\n",
              (unsigned long long)marked[hot], (unsigned long long)p.b.qp->counters().np_cnp_sent,
              (unsigned long long)r.a.mp_ecn_rotations, paths.ports.size());
  ASSERT_NE(hot, 0);
  EXPECT_GT(p.b.qp->counters().np_cnp_sent, 0u);
  EXPECT_GE(r.a.mp_ecn_rotations, 1u);
  // The marked route was left at the first CNP. The link's rate is infinite, so the first
  // window (256 packets, a quarter of them on that route) was out before any CNP came back; no
  // packet crossed the route after it. Without moving, a quarter of the 2048 would have.
  EXPECT_LE(marked[hot], 256u / 4);
  EXPECT_EQ(r.a.mp_ecn_rotations, 1u);
  EXPECT_EQ(r.a.retransmitted_pkts, 0u);
}

TEST(Multipath, ASendBehindSprayedWritesWaitsForThemInsteadOfOvertaking) {
  Pair p(8);
  Link link(p.a, p.b);
  Paths paths;
  paths.attach(link);
  const Outcome r = writes(p, link, 8, 64 * 1024, /*send_after=*/true);
  // The SEND keeps slot 0 and left only when every sprayed packet before it was acknowledged:
  // the responder never saw it ahead of a gap, so nothing was dropped and nothing resent.
  EXPECT_EQ(r.a.retransmitted_pkts, 0u);
  EXPECT_EQ(p.b.qp->counters().out_of_seq_request, 0u);
}

}  // namespace
}  // namespace uroce::transport
