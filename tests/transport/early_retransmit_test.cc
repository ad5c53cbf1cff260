// transport/completer.cc, early retransmission (QpInit::early_retransmit): the probe timer that
// resends from the oldest unacknowledged PSN when a loss at the tail leaves both sides silent,
// long before the local ACK timeout, without touching the IBTA timeout and retry budget. On the
// virtual-time link (harness.h): recovery times, the dead-peer deadline, exactly-once delivery
// under loss, and the switch that restores the plain IBTA behaviour packet for packet.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "harness.h"
#include "transport/psn.h"

namespace uroce::transport {
namespace {

using test::Link;
using test::LinkParams;
using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;
constexpr Time kMs = 1'000'000;
constexpr Time kSecond = 1'000 * kMs;
constexpr Time kAckTimeout14 = Time{4096} << 14;  // 67.1 ms, perftest's default
constexpr Time kPto = 5 * kMs;  // the PTO's floor (completer.cc), far above the link's round trip

bool is_nak(const wire::Packet& p) {
  return p.bth.opcode == uint8_t(wire::Opcode::kRcAcknowledge) &&
         wire::aeth_type(p.aeth.syndrome) == wire::AethType::kNak;
}

struct Pair {
  Pair(bool early, test::PathParams pp) : a(kQpnA, kIpA), b(kQpnB, kIpB) {
    for (Node* n : {&a, &b}) {
      n->init.early_retransmit = early;
      n->rebuild();
    }
    a.connect(kIpB, kQpnB, 0xffff00, 0xfffe00, pp);
    b.connect(kIpA, kQpnA, 0xfffe00, 0xffff00, pp);
    src.resize(4 << 20);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 131 + (i >> 10));
    skey = a.mem.reg(a.pd, src.data(), src.size(), 0);
    dst.resize(4 << 20);
    dkey = b.mem.reg(b.pd, dst.data(), dst.size(), IBV_ACCESS_LOCAL_WRITE);
    rmem.resize(4 << 20);
    for (size_t i = 0; i < rmem.size(); ++i) rmem[i] = uint8_t(i * 17 + (i >> 9) + 5);
    rkey = b.mem.reg(b.pd, rmem.data(), rmem.size(),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC);
    lbuf.assign(4 << 20, 0);
    lkey = a.mem.reg(a.pd, lbuf.data(), lbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  }
  uint64_t at(std::vector<uint8_t>& v, uint64_t off) {
    return reinterpret_cast<uint64_t>(v.data() + off);
  }
  SendWqe write(uint64_t id, uint64_t off, uint32_t len) {
    return test::rdma_wqe(id, IBV_WR_RDMA_WRITE, at(src, off), len, skey, at(rmem, off), rkey);
  }
  // Posts a WRITE and runs until it completes; returns the virtual time it took.
  Time write_and_wait(Link& link, uint64_t id, uint64_t off, uint32_t len) {
    const size_t before = a.scq.wcs.size();
    const Time t0 = link.now;
    EXPECT_EQ(a.qp->post_send(write(id, off, len), link.now), 0);
    EXPECT_TRUE(link.run_until([&] { return a.scq.wcs.size() > before; }, link.now + 10 * kSecond));
    EXPECT_EQ(a.scq.wcs.back().status, IBV_WC_SUCCESS);
    EXPECT_TRUE(std::equal(src.begin() + off, src.begin() + off + len, rmem.begin() + off));
    return link.now - t0;
  }
  Node a, b;
  std::vector<uint8_t> src, dst, rmem, lbuf;
  uint32_t skey = 0, dkey = 0, rkey = 0, lkey = 0;
};

test::PathParams path14() {
  test::PathParams pp;
  pp.mtu = IBV_MTU_1024;
  pp.timeout = 14;
  return pp;
}

// The last packet of a WRITE is lost: no later packet reveals the gap, the responder says
// nothing. With probes the requester resends it after ~5 ms (the PTO floor, the link's round
// trip being 4 us); without, after the 67 ms ACK timeout.
TEST(EarlyRetransmit, LostLastPacketRecoveredAfterThePtoNotTheAckTimeout) {
  for (const bool early : {true, false}) {
    SCOPED_TRACE(early);
    Pair p(early, path14());
    Link link(p.a, p.b);
    p.write_and_wait(link, 0, 0, 4096);  // a round-trip sample
    bool dropped = false;
    const uint32_t last_psn = (0xffff00 + 4 + 3) & kPsnMask;
    link.drop_if = [&](int from, const wire::Packet& pkt) {
      if (from != 0 || pkt.bth.psn != last_psn || dropped) return false;
      dropped = true;
      return true;
    };
    const Time took = p.write_and_wait(link, 1, 8192, 4096);
    EXPECT_TRUE(dropped);
    const QpCounters& c = p.a.qp->counters();
    if (early) {
      EXPECT_GE(took, kPto);
      EXPECT_LT(took, kPto + kMs);
      EXPECT_EQ(c.early_retransmits, 1u);
      EXPECT_EQ(c.local_ack_timeout_err, 0u);
      EXPECT_EQ(c.send_window_cuts, 1u);  // a probe halves the window like a sequence NAK
    } else {
      EXPECT_GE(took, kAckTimeout14);
      EXPECT_EQ(c.early_retransmits, 0u);
      EXPECT_EQ(c.local_ack_timeout_err, 1u);
    }
    // The whole message goes again: only its last packet asked for an ACK, so none of it was
    // acknowledged (the resend head asks, then the last packet again).
    EXPECT_EQ(c.retransmitted_pkts, 4u);
    EXPECT_EQ(p.a.qp->state(), IBV_QPS_RTS);
  }
}

// A packet in the middle is lost and so is the one NAK that reports the gap: the responder
// discards the rest silently (IBTA 9.7.5.2.2). The probe ends the stall.
TEST(EarlyRetransmit, LostNakRecoveredAfterThePto) {
  for (const bool early : {true, false}) {
    SCOPED_TRACE(early);
    Pair p(early, path14());
    Link link(p.a, p.b);
    p.write_and_wait(link, 0, 0, 4096);
    bool dropped_data = false, dropped_nak = false;
    const uint32_t lost_psn = (0xffff00 + 4 + 2) & kPsnMask;
    link.drop_if = [&](int from, const wire::Packet& pkt) {
      if (from == 0 && pkt.bth.psn == lost_psn && !dropped_data) return dropped_data = true;
      if (from == 1 && is_nak(pkt) && !dropped_nak) return dropped_nak = true;
      return false;
    };
    const Time took = p.write_and_wait(link, 1, 16384, 8 * 1024);
    EXPECT_TRUE(dropped_data);
    EXPECT_TRUE(dropped_nak);
    const QpCounters& c = p.a.qp->counters();
    EXPECT_EQ(c.rcvd_seq_err, 0u);
    if (early) {
      EXPECT_LT(took, kPto + kMs);
      EXPECT_EQ(c.early_retransmits, 1u);
      EXPECT_EQ(c.local_ack_timeout_err, 0u);
    } else {
      EXPECT_GE(took, kAckTimeout14);
      EXPECT_EQ(c.local_ack_timeout_err, 1u);
    }
  }
}

// The first resent packet after a NAK is lost too: the responder already NAKed this gap and
// stays silent; the probe timer restarted with the resend and ends it.
TEST(EarlyRetransmit, LostFirstResendRecoveredAfterThePto) {
  Pair p(true, path14());
  Link link(p.a, p.b);
  p.write_and_wait(link, 0, 0, 4096);
  int seen = 0;
  const uint32_t lost_psn = (0xffff00 + 4 + 2) & kPsnMask;
  link.drop_if = [&](int from, const wire::Packet& pkt) {
    return from == 0 && pkt.bth.psn == lost_psn && ++seen <= 2;  // original and first resend
  };
  const Time took = p.write_and_wait(link, 1, 16384, 8 * 1024);
  EXPECT_EQ(seen, 3);
  const QpCounters& c = p.a.qp->counters();
  EXPECT_EQ(c.rcvd_seq_err, 1u);
  EXPECT_EQ(c.early_retransmits, 1u);
  EXPECT_EQ(c.local_ack_timeout_err, 0u);
  EXPECT_LT(took, kPto + kMs);
}

// A dead peer: after some traffic (so the PTO is known) nothing from A arrives any more.
// Probes go out, but the error comes exactly when it comes without them: timeout * (retry_cnt
// + 1) after the last progress, with the same counters for the IBTA timer.
TEST(EarlyRetransmit, DeadPeerStillEndsInRetryExceededAtTheAckTimeout) {
  Time took[2];
  uint64_t timeouts[2], probes[2];
  for (const bool early : {true, false}) {
    test::PathParams pp = path14();
    pp.retry_cnt = 3;
    Pair p(early, pp);
    Link link(p.a, p.b);
    p.write_and_wait(link, 0, 0, 4096);
    link.drop_if = [](int from, const wire::Packet&) { return from == 0; };
    const Time t0 = link.now;
    ASSERT_EQ(p.a.qp->post_send(p.write(1, 8192, 64 * 1024), link.now), 0);
    ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 2; }, link.now + 10 * kSecond));
    EXPECT_EQ(p.a.scq.wcs[1].status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(p.a.qp->state(), IBV_QPS_ERR);
    took[early] = link.now - t0;
    timeouts[early] = p.a.qp->counters().local_ack_timeout_err;
    probes[early] = p.a.qp->counters().early_retransmits;
    EXPECT_EQ(p.a.qp->counters().retry_exceeded_err, 1u);
  }
  EXPECT_EQ(took[1], took[0]);
  EXPECT_EQ(took[1], 4 * kAckTimeout14);  // timeout * (retry_cnt + 1)
  EXPECT_EQ(timeouts[1], timeouts[0]);
  EXPECT_EQ(timeouts[1], 4u);
  EXPECT_EQ(probes[0], 0u);
  // 5, 15 and 35 ms after the send (doubling), then half the ACK timeout after each timeout:
  // a few per timeout, not a stream.
  EXPECT_GE(probes[1], 4u);
  EXPECT_LE(probes[1], 10u);
}

// ACKs that keep coming never let the probe fire, on a short and on a long round trip (4 ms:
// the PTO follows the measured round trip above its floor).
TEST(EarlyRetransmit, NoProbesWhileAcksFlow) {
  for (const Time latency : {Time{2'000}, Time{2'000'000}}) {
    SCOPED_TRACE(latency);
    Pair p(true, path14());
    Link link(p.a, p.b, LinkParams{.latency = latency});
    for (int i = 0; i < 200; ++i) {
      const uint64_t off = uint64_t(i % 32) * 65536;
      ASSERT_EQ(p.a.qp->post_send(p.write(i, off, 65536), link.now), 0);
      if (i % 50 == 0) link.run_until([] { return false; }, link.now + 3 * latency);  // spread out
    }
    ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 200; }, 3600 * kSecond));
    const QpCounters& c = p.a.qp->counters();
    EXPECT_EQ(c.early_retransmits, 0u);
    EXPECT_EQ(c.retransmitted_pkts, 0u);
    EXPECT_EQ(c.local_ack_timeout_err, 0u);
  }
}

// Everything delivered exactly once at 1%, 5% and 20% loss (with duplication and reordering):
// multi-packet SENDs, WRITEs, READs and FETCH_AND_ADDs, probes firing.
struct LossCase {
  double loss;
  uint64_t seed;
};
class EarlyRetransmitLoss : public ::testing::TestWithParam<LossCase> {};

TEST_P(EarlyRetransmitLoss, AllOperationsExactlyOnce) {
  const LossCase lc = GetParam();
  test::PathParams pp = path14();
  pp.rd_atomic = 4;
  Pair p(true, pp);
  enum Kind { kSend, kWrite, kRead, kAtomic };
  struct Op {
    Kind kind;
    uint32_t off, len;
  };
  constexpr int kOps = 400;
  constexpr uint32_t kSlot = 32768;
  constexpr uint32_t kSlots = 32;
  const uint64_t wbase = p.rmem.size() / 2;       // WRITE slots
  const uint64_t abase = wbase + kSlots * kSlot;  // one 8-byte counter per op, starting at 0
  std::memset(p.rmem.data() + abase, 0, kOps * 8);
  std::mt19937_64 rng(lc.seed);
  std::vector<Op> ops;
  std::vector<int> recv_op;
  for (int i = 0; i < kOps; ++i) {
    Op o{Kind(rng() % 4), 0, uint32_t(rng() % kSlot)};
    o.off = uint32_t(rng() % (p.src.size() - kSlot));
    if (o.kind == kRead) o.off = uint32_t(rng() % (p.rmem.size() / 2 - kSlot));
    if (o.kind == kAtomic) o.len = 8;
    if (o.kind == kSend) recv_op.push_back(i);
    ops.push_back(o);
  }
  Link link(p.a, p.b, LinkParams{.loss = lc.loss, .dup = 0.01, .reorder = 0.05, .seed = lc.seed});
  int posted = 0, posted_recvs = 0;
  auto top_up = [&] {
    while (posted_recvs < int(recv_op.size()) &&
           posted_recvs - int(p.b.rcq.wcs.size()) < int(kSlots)) {
      ASSERT_EQ(p.b.qp->post_recv(test::recv_wqe(
                    posted_recvs, p.at(p.dst, (posted_recvs % kSlots) * kSlot), kSlot, p.dkey)),
                0);
      ++posted_recvs;
    }
    while (posted < kOps && posted - int(p.a.scq.wcs.size()) < int(kSlots)) {
      const int i = posted++;
      const Op& o = ops[i];
      const uint64_t slot = (i % kSlots) * kSlot;
      SendWqe w;
      if (o.kind == kSend) {
        w = test::send_wqe(i, p.at(p.src, o.off), o.len, p.skey);
      } else if (o.kind == kWrite) {
        w = test::rdma_wqe(i, IBV_WR_RDMA_WRITE, p.at(p.src, o.off), o.len, p.skey,
                           p.at(p.rmem, wbase + slot), p.rkey);
      } else if (o.kind == kRead) {
        w = test::rdma_wqe(i, IBV_WR_RDMA_READ, p.at(p.lbuf, slot), o.len, p.lkey,
                           p.at(p.rmem, o.off), p.rkey);
      } else {
        std::memset(p.lbuf.data() + slot, 0xee, 8);
        w = test::atomic_wqe(i, IBV_WR_ATOMIC_FETCH_AND_ADD, p.at(p.lbuf, slot), p.lkey,
                             p.at(p.rmem, abase + uint64_t(i) * 8), p.rkey, uint64_t(i) + 1);
      }
      ASSERT_EQ(p.a.qp->post_send(w, link.now), 0);
    }
  };
  top_up();
  size_t cs = 0, cr = 0;
  const bool ok = link.run_until(
      [&] {
        for (; cs < p.a.scq.wcs.size(); ++cs) {
          const ibv_wc& wc = p.a.scq.wcs[cs];
          const Op& o = ops[cs];
          EXPECT_EQ(wc.wr_id, cs);
          EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "op " << cs;
          const uint64_t slot = (cs % kSlots) * kSlot;
          if (o.kind == kRead && !std::equal(p.rmem.begin() + o.off, p.rmem.begin() + o.off + o.len,
                                             p.lbuf.begin() + slot)) {
            ADD_FAILURE() << "READ " << cs;
          }
          if (o.kind == kWrite && !std::equal(p.src.begin() + o.off, p.src.begin() + o.off + o.len,
                                              p.rmem.begin() + wbase + slot)) {
            ADD_FAILURE() << "WRITE " << cs;
          }
          if (o.kind == kAtomic) {
            uint64_t orig, now_v;
            std::memcpy(&orig, p.lbuf.data() + slot, 8);
            std::memcpy(&now_v, p.rmem.data() + abase + cs * 8, 8);
            EXPECT_EQ(orig, 0u) << "ATOMIC " << cs;       // the value before the one add
            EXPECT_EQ(now_v, cs + 1) << "ATOMIC " << cs;  // added exactly once
          }
        }
        for (; cr < p.b.rcq.wcs.size(); ++cr) {
          const ibv_wc& wc = p.b.rcq.wcs[cr];
          const Op& o = ops[recv_op[cr]];
          EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
          EXPECT_EQ(wc.wr_id, cr);
          EXPECT_EQ(wc.byte_len, o.len);
          if (!std::equal(p.src.begin() + o.off, p.src.begin() + o.off + o.len,
                          p.dst.begin() + (cr % kSlots) * kSlot)) {
            ADD_FAILURE() << "SEND " << recv_op[cr];
          }
        }
        top_up();
        return p.a.scq.wcs.size() == size_t(kOps);
      },
      3600 * kSecond);
  ASSERT_TRUE(ok) << "posted " << posted << " completed " << p.a.scq.wcs.size();
  link.run_idle(link.now + kSecond);
  EXPECT_EQ(p.a.scq.wcs.size(), size_t(kOps));
  EXPECT_EQ(p.b.rcq.wcs.size(), recv_op.size());
  EXPECT_EQ(p.a.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(p.b.qp->state(), IBV_QPS_RTS);
  EXPECT_GT(link.lost, 0u);
  EXPECT_GT(p.a.qp->counters().early_retransmits, 0u);
  std::printf("loss %.2f seed %llu: %llu probes, %llu timeouts, %.1f virtual ms\n", lc.loss,
              (unsigned long long)lc.seed, (unsigned long long)p.a.qp->counters().early_retransmits,
              (unsigned long long)p.a.qp->counters().local_ack_timeout_err, double(link.now) / 1e6);
}

INSTANTIATE_TEST_SUITE_P(Loss, EarlyRetransmitLoss,
                         ::testing::Values(LossCase{0.01, 1}, LossCase{0.05, 1}, LossCase{0.05, 2},
                                           LossCase{0.20, 1}),
                         [](const auto& info) {
                           return "loss" + std::to_string(int(info.param.loss * 100)) + "_seed" +
                                  std::to_string(info.param.seed);
                         });

// With the switch off, the seeded lossy WRITE stream is packet for packet what it was before
// early retransmission existed: the hash of every packet's direction, PSN, opcode, AckReq and
// send time, and the counters, were recorded from the code without it — and recorded again when
// the window-filling packet's AckReq got its half-interval floor (requester.cc), which changes
// AckReq bits and so the timing of everything after the first full window.
TEST(EarlyRetransmit, OffIsTheIbtaBehaviourPacketForPacket) {
  Pair p(false, path14());
  Link link(p.a, p.b, LinkParams{.loss = 0.05, .seed = 7});
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the packet trace
  link.drop_if = [&](int from, const wire::Packet& pkt) {
    h = (h ^
         (uint64_t(from) << 32 | pkt.bth.psn | uint64_t(pkt.bth.opcode) << 40 |
          uint64_t(pkt.bth.ack_req) << 48) ^
         (link.now << 20)) *
        1099511628211ull;
    return false;
  };
  for (int i = 0; i < 40; ++i) {
    ASSERT_EQ(p.a.qp->post_send(test::rdma_wqe(i, IBV_WR_RDMA_WRITE, p.at(p.src, i * 8192), 20000,
                                               p.skey, p.at(p.rmem, i * 8192), p.rkey),
                                link.now),
              0);
  }
  ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 40; }, 3600 * kSecond));
  const QpCounters& c = p.a.qp->counters();
  EXPECT_EQ(h, 38156403145418176ull);
  EXPECT_EQ(link.now, 335732320u);
  EXPECT_EQ(c.sent_pkts, 2152u);
  EXPECT_EQ(c.retransmitted_pkts, 1352u);
  EXPECT_EQ(c.local_ack_timeout_err, 5u);
  EXPECT_EQ(c.rcvd_seq_err, 34u);
  EXPECT_EQ(c.send_window_cuts, 11u);
  EXPECT_EQ(link.lost, 105u);
  EXPECT_EQ(c.early_retransmits, 0u);
}

// What it buys: the bulk WRITE transfer of send_window_test.cc (200 x 64 KiB, 5% loss, seed 7)
// at perftest's default ACK timeout, with and without probes.
TEST(EarlyRetransmitCost, BulkWriteAtFivePercentLoss) {
  Time took[2];
  uint64_t timeouts[2];
  for (const bool early : {false, true}) {
    Pair p(early, path14());
    Link link(p.a, p.b, LinkParams{.loss = 0.05, .seed = 7});
    constexpr int kWrites = 200;
    constexpr uint32_t kLen = 64 * 1024;
    for (int i = 0; i < kWrites; ++i) {
      const uint64_t off = uint64_t(i % 32) * kLen;
      ASSERT_EQ(p.a.qp->post_send(test::rdma_wqe(i, IBV_WR_RDMA_WRITE, p.at(p.src, off + i), kLen,
                                                 p.skey, p.at(p.rmem, off), p.rkey),
                                  link.now),
                0);
    }
    ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == kWrites; }, 3600 * kSecond));
    for (const ibv_wc& wc : p.a.scq.wcs) ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    for (int i = kWrites - 32; i < kWrites; ++i) {
      const uint64_t off = uint64_t(i % 32) * kLen;
      ASSERT_TRUE(std::equal(p.src.begin() + off + i, p.src.begin() + off + i + kLen,
                             p.rmem.begin() + off));
    }
    const QpCounters& c = p.a.qp->counters();
    took[early] = link.now;
    timeouts[early] = c.local_ack_timeout_err;
    std::printf(
        "bulk WRITE, 5%% loss, timeout 14, early_retransmit=%d: %.1f virtual ms, %llu ACK "
        "timeouts, %llu early retransmits, %llu retransmitted pkts, %llu window cuts\n",
        early, double(link.now) / 1e6, (unsigned long long)c.local_ack_timeout_err,
        (unsigned long long)c.early_retransmits, (unsigned long long)c.retransmitted_pkts,
        (unsigned long long)c.send_window_cuts);
    RecordProperty(early ? "virtual_us_on" : "virtual_us_off", std::to_string(link.now / 1000));
  }
  EXPECT_LT(took[1] * 10, took[0]);
  EXPECT_LT(timeouts[1] * 10, timeouts[0] + 1);
}

}  // namespace
}  // namespace uroce::transport
