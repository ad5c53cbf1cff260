// Responder resources at their full size (transport::kMaxRdAtomic, rxe's 128): that many READs
// and ATOMICs outstanding at once over a lossy link, each executed once and answered (replayed
// from the resources when a response is lost); the resources' storage growing only with use; the
// one beyond max_dest_rd_atomic refused; max_dest_rd_atomic changed in SQD.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <vector>

#include "harness.h"
#include "transport/responder.h"

namespace uroce::transport {
namespace {

using test::Link;
using test::LinkParams;
using test::Node;
using wire::Opcode;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;
constexpr Time kSecond = 1'000'000'000;
constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

TEST(RdAtomic, TheDeviceLimitIsRxes128) {
  EXPECT_GE(kMaxRdAtomic, 128);
}

// 128 READs and then 128 FETCH_ADDs posted at once, max_rd_atomic = max_dest_rd_atomic = 128,
// over a link that loses, duplicates and reorders: all 128 of each kind leave before the first
// answer comes back, every READ returns its bytes, every FETCH_ADD executes exactly once (the
// original values are a permutation of the counter's history and the final value is exact).
class FullResources : public ::testing::TestWithParam<uint64_t> {};

TEST_P(FullResources, OutstandingReadsAndAtomicsCompleteExactlyOnce) {
  test::PathParams pp;
  pp.mtu = IBV_MTU_1024;
  pp.timeout = 8;  // ~1 ms: lost answers are asked for again quickly
  pp.rd_atomic = kMaxRdAtomic;
  Node a(kQpnA, kIpA), b(kQpnB, kIpB);
  a.connect(kIpB, kQpnB, 0x100, 0x200, pp);
  b.connect(kIpA, kQpnA, 0x200, 0x100, pp);
  // One response packet per READ, so that all of them fit the send window (kSendWindowPkts).
  constexpr uint32_t kN = kMaxRdAtomic, kLen = 1000;
  std::vector<uint8_t> target(kN * kLen + 4096), local(kN * kLen + 8 * kN, 0);
  for (size_t i = 0; i < target.size(); ++i) target[i] = uint8_t(i * 7 + (i >> 8));
  const uint32_t rkey = b.mem.reg(b.pd, target.data(), target.size(), kRemoteAll);
  const uint32_t lkey = a.mem.reg(a.pd, local.data(), local.size(), IBV_ACCESS_LOCAL_WRITE);
  const auto tat = [&](size_t off) { return reinterpret_cast<uint64_t>(target.data() + off); };
  const auto lat = [&](size_t off) { return reinterpret_cast<uint64_t>(local.data() + off); };
  const size_t counter = kN * kLen;  // 8-byte aligned
  uint64_t zero = 0;
  std::memcpy(target.data() + counter, &zero, 8);

  for (uint32_t i = 0; i < kN; ++i) {
    ASSERT_EQ(
        a.qp->post_send(
            test::rdma_wqe(i, IBV_WR_RDMA_READ, lat(i * kLen), kLen, lkey, tat(i * kLen), rkey), 0),
        0);
  }
  EXPECT_EQ(a.sink.sent.size(), kN) << "every READ request leaves at once";
  for (uint32_t i = 0; i < kN; ++i) {
    ASSERT_EQ(
        a.qp->post_send(test::atomic_wqe(kN + i, IBV_WR_ATOMIC_FETCH_AND_ADD,
                                         lat(kN * kLen + 8 * i), lkey, tat(counter), rkey, i + 1),
                        0),
        0);
  }
  LinkParams lp;
  lp.loss = 0.03;
  lp.dup = 0.02;
  lp.reorder = 0.05;
  lp.seed = GetParam();
  Link link(a, b, lp);
  ASSERT_TRUE(link.run_until([&] { return a.scq.wcs.size() == 2 * kN; }, 60 * kSecond));
  for (uint32_t i = 0; i < 2 * kN; ++i) {
    EXPECT_EQ(a.scq.wcs[i].wr_id, i);
    EXPECT_EQ(a.scq.wcs[i].status, IBV_WC_SUCCESS) << "wr " << i;
  }
  EXPECT_TRUE(std::equal(local.begin(), local.begin() + kN * kLen, target.begin()));
  // Each FETCH_ADD added i + 1 once: the counter is the sum, and the original values each saw
  // are distinct partial sums.
  uint64_t final_value;
  std::memcpy(&final_value, target.data() + counter, 8);
  EXPECT_EQ(final_value, uint64_t{kN} * (kN + 1) / 2);
  std::vector<uint64_t> seen(kN);
  for (uint32_t i = 0; i < kN; ++i) std::memcpy(&seen[i], local.data() + kN * kLen + 8 * i, 8);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(seen.front(), 0u);
  EXPECT_EQ(a.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(b.qp->state(), IBV_QPS_RTS);
  // The link did lose answers, and the responder answered duplicates from its resources.
  EXPECT_GT(link.lost, 0u);
  EXPECT_GT(b.qp->counters().duplicate_request, 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, FullResources, ::testing::Values(1, 2, 3));

// The Responder alone, fed READ requests: its resources take memory only as they are used.
class ResourceStorage : public ::testing::Test {
 protected:
  ResourceStorage() {
    init.qpn = kQpnB;
    init.pd = 7;
    init.recv_cq = &rcq;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = kQpnA;
    attr.qp_access_flags = kRemoteAll;
    attr.max_dest_rd_atomic = kMaxRdAtomic;
    ctx.mtu = 1024;
    ctx.pd = init.pd;  // what a Qp sets from its QpInit
    target.assign(1 << 16, 0x5a);
    rkey = mem.reg(init.pd, target.data(), target.size(), kRemoteAll);
    r.reset(Psn(0));
  }
  // A READ of `len` bytes at target[off] with PSN `psn`; returns how many responses it queued.
  size_t read(uint32_t psn, uint32_t off, uint32_t len) {
    wire::Packet p;
    p.bth.opcode = uint8_t(Opcode::kRcReadRequest);
    p.bth.dest_qp = kQpnB;
    p.bth.psn = psn;
    p.reth = {reinterpret_cast<uint64_t>(target.data() + off), rkey, len};
    auto c = test::craft_headers(p);
    const ResponderOutcome o = r.on_request(c->pkt, ctx, rq);
    EXPECT_FALSE(o.fatal);
    size_t n = 0;
    while (r.has_response()) {
      TxBuf buf;
      EXPECT_FALSE(r.write_response(ctx, 0, &buf));
      ++n;
    }
    return n;
  }

  QpInit init;
  ibv_qp_attr attr{};
  test::FakeMemory mem;
  QpCounters counters;
  QpContext ctx{init, attr, mem, counters};
  test::CqRecorder rcq;
  RecvQueue rq;
  std::vector<uint8_t> target;
  uint32_t rkey = 0;
  Responder r;
};

TEST_F(ResourceStorage, GrowsWithUseUpToMaxDestRdAtomic) {
  EXPECT_EQ(r.resources_held(), 0u);
  EXPECT_EQ(r.resource_bytes(), 0u) << "a QP that serves no READ holds no resources";
  ASSERT_EQ(read(0, 0, 8), 1u);
  EXPECT_EQ(r.resources_held(), 1u);
  const size_t one = r.resource_bytes();
  EXPECT_GT(one, 0u);
  EXPECT_LE(one, 4 * 64u) << "the first READ reserves room for a few, not for 128";
  for (uint32_t i = 1; i < 1000; ++i) ASSERT_EQ(read(i, i % 512, 8), 1u);
  EXPECT_EQ(r.resources_held(), size_t{kMaxRdAtomic});
  EXPECT_LE(r.resource_bytes(), kMaxRdAtomic * 64u);
  EXPECT_EQ(r.resource_bytes() / r.resources_held() * r.resources_held(), r.resource_bytes())
      << "never more room than the bound";
  // The newest 128 are answered again when duplicated; the one before them is gone.
  const uint64_t dropped = counters.dropped_pkts;
  EXPECT_EQ(read(999, 999 % 512, 8), 1u);
  EXPECT_EQ(read(1000 - kMaxRdAtomic, (1000 - kMaxRdAtomic) % 512, 8), 1u);
  EXPECT_EQ(read(999 - kMaxRdAtomic, (999 - kMaxRdAtomic) % 512, 8), 0u);
  EXPECT_EQ(counters.dropped_pkts, dropped + 1);
}

TEST_F(ResourceStorage, FewResourcesNegotiatedFewHeld) {
  attr.max_dest_rd_atomic = 2;
  for (uint32_t i = 0; i < 50; ++i) ASSERT_EQ(read(i, 0, 8), 1u);
  EXPECT_EQ(r.resources_held(), 2u);
  EXPECT_LE(r.resource_bytes(), 2 * 64u);
}

// A READ beyond max_dest_rd_atomic while max_dest_rd_atomic READs still wait for their responses
// (the port pushes back) is NAKed invalid request, at its own PSN, after every response before it.
TEST(RdAtomicLimit, TheOneBeyondMaxDestRdAtomicIsRefused) {
  test::PathParams pp;
  pp.rd_atomic = kMaxRdAtomic;
  Node b(kQpnB, kIpB);
  b.connect(kIpA, kQpnA, 0, 0, pp);
  std::vector<uint8_t> target(4096, 3);
  const uint32_t rkey = b.mem.reg(b.pd, target.data(), target.size(), kRemoteAll);
  b.sink.budget = 0;
  for (uint32_t i = 0; i <= kMaxRdAtomic; ++i) {
    wire::Packet p;
    p.bth.opcode = uint8_t(Opcode::kRcReadRequest);
    p.bth.dest_qp = kQpnB;
    p.bth.psn = i;
    p.reth = {reinterpret_cast<uint64_t>(target.data()), rkey, 8};
    test::deliver(b, *test::craft_headers(p), kIpA, i + 1);
    EXPECT_EQ(b.qp->state(), i < kMaxRdAtomic ? IBV_QPS_RTS : IBV_QPS_ERR) << "READ " << i;
  }
  b.sink.budget = -1;
  b.qp->pump(1000);
  const auto out = test::drain(b);
  ASSERT_EQ(out.size(), kMaxRdAtomic + 1u);
  for (uint32_t i = 0; i < kMaxRdAtomic; ++i) {
    EXPECT_EQ(out[i]->pkt.bth.opcode, uint8_t(Opcode::kRcReadResponseOnly));
    EXPECT_EQ(out[i]->pkt.bth.psn, i);
  }
  EXPECT_EQ(out.back()->pkt.bth.opcode, uint8_t(Opcode::kRcAcknowledge));
  EXPECT_EQ(out.back()->pkt.bth.psn, kMaxRdAtomic);
  EXPECT_EQ(out.back()->pkt.aeth.syndrome, test::nak_syndrome(wire::NakCode::kInvalidRequest));
}

// max_dest_rd_atomic may change in SQD (SQD → SQD, IBTA 10.3.1): the resources kept follow the
// new bound, newest first, whether it shrinks below or grows beyond what a full ring held.
TEST(RdAtomicLimit, MaxDestRdAtomicChangedInSqd) {
  test::PathParams pp;
  pp.rd_atomic = 8;
  Node b(kQpnB, kIpB);
  b.connect(kIpA, kQpnA, 0, 0, pp);
  std::vector<uint8_t> target(4096);
  for (size_t i = 0; i < target.size(); ++i) target[i] = uint8_t(i);
  const uint32_t rkey = b.mem.reg(b.pd, target.data(), target.size(), kRemoteAll);
  Time now = 1;
  // READ i reads 1 byte at offset i: its response tells which READ it answers.
  auto read = [&](uint32_t psn) -> int {
    wire::Packet p;
    p.bth.opcode = uint8_t(Opcode::kRcReadRequest);
    p.bth.dest_qp = kQpnB;
    p.bth.psn = psn;
    p.reth = {reinterpret_cast<uint64_t>(target.data() + psn), rkey, 1};
    test::deliver(b, *test::craft_headers(p), kIpA, now++);
    const auto out = test::drain(b);
    if (out.empty()) return -1;
    EXPECT_EQ(out.size(), 1u);
    return out[0]->pkt.payload[0];
  };
  auto set_max_dest = [&](uint8_t n) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_SQD;
    a.max_dest_rd_atomic = n;
    ASSERT_EQ(b.qp->modify(a, IBV_QP_STATE | IBV_QP_MAX_DEST_RD_ATOMIC, now++), 0);
  };
  for (uint32_t i = 0; i < 11; ++i) ASSERT_EQ(read(i), int(i));  // the ring wrapped: 3..10 held
  ibv_qp_attr sqd{};
  sqd.qp_state = IBV_QPS_SQD;
  ASSERT_EQ(b.qp->modify(sqd, IBV_QP_STATE, now++), 0);
  set_max_dest(4);
  ASSERT_EQ(read(11), 11);  // a new READ in SQD: 8..11 kept
  for (uint32_t i = 8; i < 12; ++i) EXPECT_EQ(read(i), int(i)) << "duplicate " << i;
  EXPECT_EQ(read(7), -1);
  set_max_dest(16);
  for (uint32_t i = 12; i < 20; ++i) ASSERT_EQ(read(i), int(i));  // 8..19 kept
  for (uint32_t i = 8; i < 20; ++i) EXPECT_EQ(read(i), int(i)) << "duplicate " << i;
  EXPECT_EQ(read(7), -1);
  EXPECT_EQ(b.qp->state(), IBV_QPS_SQD);
}

}  // namespace
}  // namespace uroce::transport
