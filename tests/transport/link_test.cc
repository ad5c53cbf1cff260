// Two QPs over the virtual-time link (harness.h): end-to-end reliability of the requester,
// responder and completer together, with targeted and random loss, duplication and reordering.
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "harness.h"
#include "transport/send_queue.h"

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
    rmem.resize(2 << 20);
    for (size_t i = 0; i < rmem.size(); ++i) rmem[i] = uint8_t(i * 17 + (i >> 9) + 5);
    rkey = b.mem.reg(b.pd, rmem.data(), rmem.size(), kRemoteAll);
    lbuf.assign(1 << 20, 0);
    lkey = a.mem.reg(a.pd, lbuf.data(), lbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  }
  static constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  uint64_t src_at(uint64_t off) const { return reinterpret_cast<uint64_t>(src.data() + off); }
  uint64_t r_at(uint64_t off) const { return reinterpret_cast<uint64_t>(rmem.data() + off); }
  uint64_t l_at(uint64_t off) const { return reinterpret_cast<uint64_t>(lbuf.data() + off); }
  // a WRITEs `len` bytes from src[soff] to rmem[roff].
  void write(uint64_t id, uint32_t soff, uint32_t roff, uint32_t len, Time now,
             ibv_wr_opcode op = IBV_WR_RDMA_WRITE, uint32_t imm = 0) {
    SendWqe w = test::rdma_wqe(id, op, src_at(soff), len, skey, r_at(roff), rkey);
    w.imm_be = imm;
    ASSERT_EQ(a.qp->post_send(w, now), 0);
  }
  // a READs `len` bytes of rmem[roff] into lbuf[loff].
  void read(uint64_t id, uint32_t roff, uint32_t loff, uint32_t len, Time now, unsigned flags = 0) {
    SendWqe w = test::rdma_wqe(id, IBV_WR_RDMA_READ, l_at(loff), len, lkey, r_at(roff), rkey);
    w.send_flags = flags;
    ASSERT_EQ(a.qp->post_send(w, now), 0);
  }
  void atomic(uint64_t id, ibv_wr_opcode op, uint32_t roff, uint32_t loff, uint64_t cmp_add,
              uint64_t swap, Time now) {
    ASSERT_EQ(a.qp->post_send(
                  test::atomic_wqe(id, op, l_at(loff), lkey, r_at(roff), rkey, cmp_add, swap), now),
              0);
  }
  uint64_t r64(uint64_t off) const {
    uint64_t v;
    std::memcpy(&v, rmem.data() + off, 8);
    return v;
  }
  uint64_t l64(uint64_t off) const {
    uint64_t v;
    std::memcpy(&v, lbuf.data() + off, 8);
    return v;
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
  std::vector<uint8_t> rmem, lbuf;  // b's RDMA target; a's READ/ATOMIC result buffer
  uint32_t rkey = 0, lkey = 0;
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

// Both sides take payloads by reference (as over memif): WRITE and SEND packets and READ
// responses leave from the memory regions, and so do their resends after loss.
TEST(Link, PayloadsByReferenceSurviveLossAndResends) {
  Pair p;
  p.a.sink.gather_from(512);
  p.b.sink.gather_from(512);
  p.recv(1, 0, 9000);
  Link link(p.a, p.b, LinkParams{.loss = 0.05, .dup = 0.03, .reorder = 0.1, .seed = 3});
  p.write(1, 0, 4096, 65536, 0);
  p.read(2, 100000, 0, 65536, 0);
  p.send(3, 70000, 8000, 0);
  ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 3; }, 10 * kSecond));
  for (const ibv_wc& wc : p.a.scq.wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
  EXPECT_TRUE(std::equal(p.src.begin(), p.src.begin() + 65536, p.rmem.begin() + 4096));
  EXPECT_TRUE(std::equal(p.rmem.begin() + 100000, p.rmem.begin() + 165536, p.lbuf.begin()));
  EXPECT_TRUE(std::equal(p.src.begin() + 70000, p.src.begin() + 78000, p.dst.begin()));
  EXPECT_GT(link.lost, 0u);
  EXPECT_GT(p.a.qp->counters().retransmitted_pkts + p.b.qp->counters().duplicate_request, 0u);
  EXPECT_GE(p.a.sink.gathered, 64u + 7u);  // every WRITE packet, the SEND's full ones
  EXPECT_GE(p.b.sink.gathered, 64u);       // every READ response
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

// RNR grace (QpInit::rnr_grace_ns): b's QP rebuilt with a grace, both connected with `pp`.
void with_rnr_grace(Pair& p, Time grace, const test::PathParams& pp) {
  p.b.init.rnr_grace_ns = grace;
  p.b.rebuild();
  p.b.connect(kIpA, kQpnA, 0x20, 0x10, pp);
}
// A receive posted at b at `now`, and the progress pass Device::post_recv wakes the engine for
// when messages wait for one.
void recv_and_wake(Pair& p, uint64_t id, uint64_t off, uint32_t len, Time now) {
  const bool waits = p.b.qp->waits_for_recv();
  p.recv(id, off, len);
  if (!waits) return;
  bool again = false;
  p.b.dispatch.touch(p.b.qp);
  p.b.dispatch.progress(now, &again);
}

TEST(Link, RnrGraceLetsTheMessageInWhenAReceiveIsPosted) {
  test::PathParams pp;
  pp.rnr_retry = 0;       // fio's: the first RNR NAK fails the WQE
  pp.min_rnr_timer = 20;  // 10.24 ms, uroce's rdma_cm
  Pair p(pp);
  with_rnr_grace(p, 10'000'000, pp);
  p.send(1, 0, 2500, 0);  // three packets at MTU 1024
  Link link(p.a, p.b);
  link.run_until([] { return false; }, 2'000'000);
  EXPECT_TRUE(p.a.scq.wcs.empty());
  EXPECT_TRUE(p.b.qp->waits_for_recv());
  EXPECT_EQ(p.b.qp->counters().rnr_waits, 1u);
  EXPECT_EQ(p.b.qp->counters().send_rnr_err, 0u);
  recv_and_wake(p, 9, 0, 4096, link.now);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_LT(link.now, 3'000'000u);  // let in when the receive came, not at the grace's end
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.b.rcq.wcs[0].wr_id, 9u);
  EXPECT_EQ(p.b.rcq.wcs[0].byte_len, 2500u);
  EXPECT_TRUE(std::equal(p.src.begin(), p.src.begin() + 2500, p.dst.begin()));
  EXPECT_FALSE(p.b.qp->waits_for_recv());
  EXPECT_EQ(p.a.qp->counters().rcvd_rnr_err, 0u);
}

TEST(Link, RnrGraceEndsWithTheRnrNakAfterMinRnrTimer) {
  test::PathParams pp;
  pp.rnr_retry = 0;
  pp.min_rnr_timer = 14;  // 1.28 ms: shorter than the grace, so it bounds the wait
  Pair p(pp);
  with_rnr_grace(p, 10'000'000, pp);
  p.send(1, 0, 100, 0);
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_GE(link.now, 1'280'000u);
  EXPECT_LT(link.now, 2'000'000u);
  EXPECT_EQ(p.b.qp->counters().rnr_waits, 1u);
  EXPECT_EQ(p.b.qp->counters().send_rnr_err, 1u);
  EXPECT_TRUE(p.b.rcq.wcs.empty());
}

TEST(Link, RequestsBehindAWaitingMessageKeepTheirOrder) {
  test::PathParams pp;
  pp.rnr_retry = 0;
  pp.min_rnr_timer = 20;
  Pair p(pp);
  with_rnr_grace(p, 10'000'000, pp);
  p.send(1, 0, 2500, 0);
  p.write(2, 10000, 0, 3000, 0);
  p.send(3, 20000, 1500, 0);
  p.send(4, 30000, 10, 0);
  Link link(p.a, p.b);
  link.run_until([] { return false; }, 1'000'000);
  EXPECT_TRUE(p.a.scq.wcs.empty());
  // One receive: the first SEND and the WRITE go in; the next SEND waits for its own.
  recv_and_wake(p, 11, 0, 4096, link.now);
  link.run_until([] { return false; }, 2'000'000);
  ASSERT_EQ(p.a.scq.wcs.size(), 2u);
  EXPECT_EQ(p.b.qp->counters().rnr_waits, 2u);
  recv_and_wake(p, 12, 4096, 4096, link.now);
  recv_and_wake(p, 13, 8192, 4096, link.now);
  ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 4; }, kSecond));
  for (const ibv_wc& wc : p.a.scq.wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
  ASSERT_EQ(p.b.rcq.wcs.size(), 3u);
  EXPECT_EQ(p.b.rcq.wcs[0].byte_len, 2500u);
  EXPECT_EQ(p.b.rcq.wcs[1].byte_len, 1500u);
  EXPECT_EQ(p.b.rcq.wcs[2].byte_len, 10u);
  EXPECT_TRUE(std::equal(p.src.begin(), p.src.begin() + 2500, p.dst.begin()));
  EXPECT_TRUE(std::equal(p.src.begin() + 10000, p.src.begin() + 13000, p.rmem.begin()));
  EXPECT_TRUE(std::equal(p.src.begin() + 20000, p.src.begin() + 21500, p.dst.begin() + 4096));
  EXPECT_TRUE(std::equal(p.src.begin() + 30000, p.src.begin() + 30010, p.dst.begin() + 8192));
  EXPECT_EQ(p.b.qp->counters().send_rnr_err, 0u);
  EXPECT_EQ(p.b.qp->counters().out_of_seq_request, 0u);
}

TEST(Link, WaitingRequestsAreDroppedWhenTheQpFails) {
  test::PathParams pp;
  pp.min_rnr_timer = 20;
  Pair p(pp);
  with_rnr_grace(p, 10'000'000, pp);
  p.send(1, 0, 100, 0);
  Link link(p.a, p.b);
  link.run_until([] { return false; }, 1'000'000);
  ASSERT_TRUE(p.b.qp->waits_for_recv());
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(p.b.qp->modify(a, IBV_QP_STATE, link.now), 0);
  EXPECT_FALSE(p.b.qp->waits_for_recv());
  EXPECT_EQ(p.b.qp->counters().dropped_pkts, 1u);
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

// ---- RDMA WRITE / READ / ATOMIC end to end ----

TEST(Link, WriteMultiPacketAcrossThePsnWrap) {
  test::PathParams pp;
  pp.mtu = IBV_MTU_256;
  Pair p(pp, 0xfffffa, 0x20);
  const std::vector<uint8_t> before = p.rmem;
  p.write(1, 7, 100, 10 * 256 + 17, 0);  // 11 packets: PSNs 0xfffffa .. 0x000004
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.a.scq.wcs[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_TRUE(std::equal(p.src.begin() + 7, p.src.begin() + 7 + 2577, p.rmem.begin() + 100));
  EXPECT_TRUE(std::equal(before.begin(), before.begin() + 100, p.rmem.begin()));
  EXPECT_TRUE(std::equal(before.begin() + 2677, before.end(), p.rmem.begin() + 2677));
  EXPECT_TRUE(p.b.rcq.wcs.empty());              // a WRITE consumes no receive
  EXPECT_EQ(p.a.qp->counters().sent_pkts, 11u);  // no loss: each packet once
}

TEST(Link, WriteWithImmConsumesAReceiveAndWaitsForOne) {
  test::PathParams pp;
  pp.min_rnr_timer = 14;  // 1.28 ms
  Pair p(pp);
  p.write(1, 0, 64, 3000, 0, IBV_WR_RDMA_WRITE_WITH_IMM, htonl(0xabcd));
  Link link(p.a, p.b);
  link.run_until([] { return false; }, 2'000'000);  // no receive yet: RNR NAKs
  EXPECT_GE(p.b.qp->counters().send_rnr_err, 1u);
  EXPECT_TRUE(p.a.scq.wcs.empty());
  p.recv(9, 0, 16);  // the receive's buffer is not written: the data went to rmem
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  const ibv_wc& wc = p.b.rcq.wcs[0];
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wc.wr_id, 9u);
  EXPECT_EQ(wc.byte_len, 3000u);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(wc.imm_data, htonl(0xabcd));
  EXPECT_TRUE(std::equal(p.src.begin(), p.src.begin() + 3000, p.rmem.begin() + 64));
  EXPECT_TRUE(std::all_of(p.dst.begin(), p.dst.begin() + 16, [](uint8_t v) { return v == 0; }));
}

TEST(Link, ReadMultiPacketAcrossThePsnWrap) {
  test::PathParams pp;
  pp.mtu = IBV_MTU_256;
  Pair p(pp, 0xfffffc, 0x20);
  p.read(1, 1000, 8, 10 * 256 + 5, 0);  // 11 response PSNs: 0xfffffc .. 0x000006
  p.send(2, 0, 10, 0);                  // after the READ's PSNs
  p.recv(1, 0, 64);
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 2; }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].wr_id, 1u);
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.a.scq.wcs[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(p.a.scq.wcs[0].byte_len, 2565u);
  EXPECT_EQ(p.a.scq.wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(std::equal(p.rmem.begin() + 1000, p.rmem.begin() + 3565, p.lbuf.begin() + 8));
  EXPECT_EQ(p.lbuf[7], 0);
  EXPECT_EQ(p.lbuf[2573], 0);
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  // Only the READ request and the SEND went out: a READ is one request packet.
  EXPECT_EQ(p.a.qp->counters().sent_pkts, 2u);
}

TEST(Link, LostReadResponseIsReRequestedFromTheMiddle) {
  test::PathParams pp;
  pp.mtu = IBV_MTU_256;
  Pair p(pp, 0x100, 0x20);
  Link link(p.a, p.b);
  bool dropped = false;
  std::vector<wire::Reth> requests;
  std::vector<uint32_t> request_psns;
  link.drop_if = [&](int from, const wire::Packet& pkt) {
    if (from == 0 && pkt.bth.opcode == uint8_t(wire::Opcode::kRcReadRequest)) {
      requests.push_back(pkt.reth);
      request_psns.push_back(pkt.bth.psn);
    }
    if (from == 1 && pkt.bth.psn == 0x103 && !dropped) return dropped = true;
    return false;
  };
  p.read(1, 0, 0, 8 * 256 - 10, 0);  // PSNs 0x100 .. 0x107
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(std::equal(p.rmem.begin(), p.rmem.begin() + 8 * 256 - 10, p.lbuf.begin()));
  ASSERT_EQ(requests.size(), 2u);
  // The second request asks for the rest from the lost packet on (IBTA 9.7.4.1.3.2).
  EXPECT_EQ(request_psns[1], 0x103u);
  EXPECT_EQ(requests[1].va, p.r_at(3 * 256));
  EXPECT_EQ(requests[1].dma_len, 5u * 256 - 10);
  EXPECT_EQ(requests[1].rkey, p.rkey);
  EXPECT_EQ(p.a.qp->counters().local_ack_timeout_err, 0u);  // the next response told us
  EXPECT_EQ(p.b.qp->counters().duplicate_request, 1u);
}

TEST(Link, LostLastReadResponseIsRecoveredByTheTimer) {
  test::PathParams pp;
  pp.mtu = IBV_MTU_256;
  pp.timeout = 8;
  Pair p(pp, 0x100, 0x20);
  Link link(p.a, p.b);
  bool dropped = false;
  link.drop_if = [&](int from, const wire::Packet& pkt) {
    return from == 1 && pkt.bth.psn == 0x103 && !dropped && (dropped = true);
  };
  p.read(1, 0, 0, 4 * 256, 0);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.a.qp->counters().local_ack_timeout_err, 1u);
  EXPECT_TRUE(std::equal(p.rmem.begin(), p.rmem.begin() + 1024, p.lbuf.begin()));
}

TEST(Link, AtomicsReturnTheOriginalValue) {
  Pair p;
  uint64_t v = 40;
  std::memcpy(p.rmem.data() + 64, &v, 8);
  p.atomic(1, IBV_WR_ATOMIC_FETCH_AND_ADD, 64, 0, 2, 0, 0);
  p.atomic(2, IBV_WR_ATOMIC_CMP_AND_SWP, 64, 8, 42, 1000, 0);  // matches: swaps
  p.atomic(3, IBV_WR_ATOMIC_CMP_AND_SWP, 64, 16, 42, 7, 0);    // no longer matches
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 3; }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].opcode, IBV_WC_FETCH_ADD);
  EXPECT_EQ(p.a.scq.wcs[1].opcode, IBV_WC_COMP_SWAP);
  for (const ibv_wc& wc : p.a.scq.wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, 8u);
  }
  EXPECT_EQ(p.l64(0), 40u);
  EXPECT_EQ(p.l64(8), 42u);
  EXPECT_EQ(p.l64(16), 1000u);
  EXPECT_EQ(p.r64(64), 1000u);
}

TEST(Link, DuplicatedAtomicIsExecutedOnce) {
  test::PathParams pp;
  pp.timeout = 8;
  Pair p(pp);
  Link link(p.a, p.b);
  int acks = 0;
  link.drop_if = [&](int from, const wire::Packet& pkt) {
    return from == 1 && pkt.bth.opcode == uint8_t(wire::Opcode::kRcAtomicAcknowledge) &&
           acks++ == 0;
  };
  const uint64_t before = p.r64(128);
  p.atomic(1, IBV_WR_ATOMIC_FETCH_AND_ADD, 128, 0, 5, 0, 0);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.b.qp->counters().duplicate_request, 1u);  // the resent request
  EXPECT_EQ(p.r64(128), before + 5);                    // added once
  EXPECT_EQ(p.l64(0), before);                          // the saved original value
}

TEST(Link, MisalignedAtomicIsRemoteInvalidRequest) {
  Pair p;
  const std::vector<uint8_t> before = p.rmem;
  p.atomic(1, IBV_WR_ATOMIC_FETCH_AND_ADD, 68, 0, 1, 0, 0);
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(p.b.qp->state(), IBV_QPS_ERR);
  EXPECT_TRUE(p.rmem == before);
}

TEST(Link, SolicitedEventReachesTheReceiveCq) {
  Pair p;
  for (int i = 0; i < 4; ++i) p.recv(i, 4096 * i, 4096);
  SendWqe s = test::send_wqe(1, p.src_at(0), 10, p.skey);
  ASSERT_EQ(p.a.qp->post_send(s, 0), 0);
  s.send_flags = IBV_SEND_SOLICITED;
  ASSERT_EQ(p.a.qp->post_send(s, 0), 0);
  p.write(3, 0, 0, 2000, 0, IBV_WR_RDMA_WRITE_WITH_IMM, 5);
  SendWqe w =
      test::rdma_wqe(4, IBV_WR_RDMA_WRITE_WITH_IMM, p.src_at(0), 2000, p.skey, p.r_at(0), p.rkey);
  w.send_flags = IBV_SEND_SOLICITED;
  ASSERT_EQ(p.a.qp->post_send(w, 0), 0);
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return p.b.rcq.wcs.size() == 4; }, kSecond));
  EXPECT_EQ(p.b.rcq.solicited, (std::vector<bool>{false, true, false, true}));
}

// Every way a remote access can be refused: memory unchanged, REM_ACCESS_ERR at the requester,
// both QPs in ERR, later WQEs flushed.
struct AccessCase {
  const char* name;
  ibv_wr_opcode op;
  int mr_access;  // of the target region
  int qp_access;  // the responder's qp_access_flags
  int64_t rkey_delta = 0, offset = 0;
  uint32_t len = 600;
};
class RemoteAccess : public ::testing::TestWithParam<AccessCase> {};

TEST_P(RemoteAccess, RefusedWithoutTouchingMemory) {
  const AccessCase& c = GetParam();
  test::PathParams pa, pb;
  pb.access = c.qp_access;
  Node a(kQpnA, kIpA), b(kQpnB, kIpB);
  a.connect(kIpB, kQpnB, 0x10, 0x20, pa);
  b.connect(kIpA, kQpnA, 0x20, 0x10, pb);
  std::vector<uint8_t> target(4096, 0x77), local(4096, 0x11);
  const uint32_t rkey = b.mem.reg(b.pd, target.data(), target.size(), c.mr_access);
  const uint32_t lkey = a.mem.reg(a.pd, local.data(), local.size(), IBV_ACCESS_LOCAL_WRITE);
  const uint64_t raddr = reinterpret_cast<uint64_t>(target.data()) + c.offset;
  const uint32_t key = static_cast<uint32_t>(rkey + c.rkey_delta);
  SendWqe w = is_atomic(c.op) ? test::atomic_wqe(1, c.op, reinterpret_cast<uint64_t>(local.data()),
                                                 lkey, raddr, key, 1, 2)
                              : test::rdma_wqe(1, c.op, reinterpret_cast<uint64_t>(local.data()),
                                               c.len, lkey, raddr, key);
  ASSERT_EQ(a.qp->post_send(w, 0), 0);
  w.wr_id = 2;
  ASSERT_EQ(a.qp->post_send(w, 0), 0);
  Link link(a, b);
  ASSERT_TRUE(link.run_until([&] { return a.scq.wcs.size() == 2; }, kSecond));
  EXPECT_EQ(a.scq.wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(a.scq.wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(b.qp->state(), IBV_QPS_ERR);
  EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](uint8_t v) { return v == 0x77; }));
  EXPECT_TRUE(std::all_of(local.begin(), local.end(), [](uint8_t v) { return v == 0x11; }));
}

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                     IBV_ACCESS_REMOTE_ATOMIC;
constexpr int kQpAll = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
INSTANTIATE_TEST_SUITE_P(
    Cases, RemoteAccess,
    ::testing::Values(
        AccessCase{"WriteBadRkey", IBV_WR_RDMA_WRITE, kAll, kQpAll, 1},
        AccessCase{"WriteOutOfBounds", IBV_WR_RDMA_WRITE, kAll, kQpAll, 0, 4096 - 599, 600},
        AccessCase{"WriteMultiPacketOutOfBounds", IBV_WR_RDMA_WRITE, kAll, kQpAll, 0, 100, 4096},
        AccessCase{"WriteMrNotRemoteWrite", IBV_WR_RDMA_WRITE, kAll & ~IBV_ACCESS_REMOTE_WRITE,
                   kQpAll},
        AccessCase{"WriteQpNotRemoteWrite", IBV_WR_RDMA_WRITE, kAll,
                   kQpAll & ~IBV_ACCESS_REMOTE_WRITE},
        AccessCase{"WriteImmBadRkey", IBV_WR_RDMA_WRITE_WITH_IMM, kAll, kQpAll, 1},
        AccessCase{"ReadBadRkey", IBV_WR_RDMA_READ, kAll, kQpAll, 1},
        AccessCase{"ReadOutOfBounds", IBV_WR_RDMA_READ, kAll, kQpAll, 0, 4000, 600},
        AccessCase{"ReadMrNotRemoteRead", IBV_WR_RDMA_READ, kAll & ~IBV_ACCESS_REMOTE_READ, kQpAll},
        AccessCase{"ReadQpNotRemoteRead", IBV_WR_RDMA_READ, kAll, kQpAll & ~IBV_ACCESS_REMOTE_READ},
        AccessCase{"AtomicBadRkey", IBV_WR_ATOMIC_FETCH_AND_ADD, kAll, kQpAll, 1},
        AccessCase{"AtomicOutOfBounds", IBV_WR_ATOMIC_CMP_AND_SWP, kAll, kQpAll, 0, 4096},
        AccessCase{"AtomicMrNotRemoteAtomic", IBV_WR_ATOMIC_FETCH_AND_ADD,
                   kAll & ~IBV_ACCESS_REMOTE_ATOMIC, kQpAll},
        AccessCase{"AtomicQpNotRemoteAtomic", IBV_WR_ATOMIC_CMP_AND_SWP, kAll,
                   kQpAll & ~IBV_ACCESS_REMOTE_ATOMIC}),
    [](const ::testing::TestParamInfo<AccessCase>& i) { return std::string(i.param.name); });

TEST(Link, ReadAtomicLimitAndFenceAreRespected) {
  test::PathParams pp;
  pp.rd_atomic = 2;
  Pair p(pp);
  p.recv(1, 0, 64);
  Link link(p.a, p.b);
  // Outstanding READ/ATOMICs seen by the wire: requests sent minus READ/ATOMIC completions.
  int requests = 0, max_outstanding = 0;
  bool fenced_send_early = false;
  auto rd_done = [&] {
    return int(std::count_if(p.a.scq.wcs.begin(), p.a.scq.wcs.end(),
                             [](const ibv_wc& wc) { return wc.opcode != IBV_WC_SEND; }));
  };
  link.drop_if = [&](int from, const wire::Packet& pkt) {
    if (from != 0) return false;
    const uint32_t f = pkt.info->flags;
    if ((f & (wire::kRead | wire::kAtomic)) && pkt.bth.psn >= 0x10) {
      ++requests;
      max_outstanding = std::max(max_outstanding, requests - rd_done());
    }
    // The fenced SEND (WQE 7) may leave only when every earlier READ/ATOMIC completed.
    if ((f & wire::kSend) && rd_done() < 6) fenced_send_early = true;
    return false;
  };
  for (int i = 0; i < 5; ++i) p.read(i, 4096 * i, 4096 * i, 3000, 0);
  p.atomic(5, IBV_WR_ATOMIC_FETCH_AND_ADD, 40000, 40000, 1, 0, 0);
  SendWqe s = test::send_wqe(6, p.src_at(0), 10, p.skey);
  s.send_flags = IBV_SEND_FENCE;
  ASSERT_EQ(p.a.qp->post_send(s, 0), 0);
  ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 7; }, kSecond));
  for (const ibv_wc& wc : p.a.scq.wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(requests, 6);
  EXPECT_EQ(max_outstanding, 2);
  EXPECT_FALSE(fenced_send_early);
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(std::equal(p.rmem.begin() + 4096 * i, p.rmem.begin() + 4096 * i + 3000,
                           p.lbuf.begin() + 4096 * i));
  }
}

TEST(Link, ResponderRefusesMoreReadsThanMaxDestRdAtomic) {
  // The requester may have 4 outstanding; the responder was given 1 resource.
  test::PathParams pa, pb;
  pa.rd_atomic = 4;
  pb.rd_atomic = 1;
  Node a(kQpnA, kIpA), b(kQpnB, kIpB);
  a.connect(kIpB, kQpnB, 0x10, 0x20, pa);
  b.connect(kIpA, kQpnA, 0x20, 0x10, pb);
  std::vector<uint8_t> target(1 << 16, 1), local(1 << 16, 0);
  const uint32_t rkey = b.mem.reg(b.pd, target.data(), target.size(), kAll);
  const uint32_t lkey = a.mem.reg(a.pd, local.data(), local.size(), IBV_ACCESS_LOCAL_WRITE);
  b.sink.budget = 0;  // b cannot answer yet: the first READ's responses stay queued
  for (uint64_t i = 0; i < 2; ++i) {
    ASSERT_EQ(a.qp->post_send(
                  test::rdma_wqe(i, IBV_WR_RDMA_READ, reinterpret_cast<uint64_t>(local.data()),
                                 8000, lkey, reinterpret_cast<uint64_t>(target.data()), rkey),
                  0),
              0);
  }
  ASSERT_EQ(a.sink.sent.size(), 2u);  // both requests left (max_rd_atomic 4)
  for (auto& c : test::drain(a)) test::deliver(b, *c, kIpA, 1);
  EXPECT_EQ(b.qp->state(), IBV_QPS_ERR);
  b.sink.budget = -1;
  Link link(a, b);
  ASSERT_TRUE(link.run_until([&] { return a.scq.wcs.size() == 2; }, kSecond));
  EXPECT_EQ(a.scq.wcs[0].status, IBV_WC_SUCCESS);  // answered before the NAK
  EXPECT_EQ(a.scq.wcs[1].status, IBV_WC_REM_INV_REQ_ERR);
}

// Mixed SEND / WRITE / WRITE_IMM / READ / ATOMIC traffic over a link that loses 5%, duplicates
// and reorders: every byte written, read and received checked, every ATOMIC's original value
// checked against the order of execution, the counter's final value exact.
class LossyRdmaLink : public ::testing::TestWithParam<uint64_t> {};

TEST_P(LossyRdmaLink, MixedOperationsExactlyOnce) {
  test::PathParams pp;
  pp.mtu = IBV_MTU_1024;
  pp.timeout = 8;  // ~1 ms
  pp.rd_atomic = 4;
  Pair p(pp, 0xffff00, 0xfffe00);
  enum Kind { kSendOp, kWriteOp, kWriteImmOp, kReadOp, kFaaOp, kCasOp };
  struct Op {
    Kind kind;
    uint32_t len = 0, soff = 0;
    uint64_t arg = 0, swap = 0;
    uint64_t expect_orig = 0;  // ATOMICs
    int recv = -1;             // receive index it consumes (SEND, WRITE_IMM)
  };
  constexpr int kOps = 2000;
  constexpr uint32_t kCounter = 600000;              // in rmem, 8-byte aligned
  constexpr uint32_t kReadBase = 1 << 20;            // rmem's never-written half
  constexpr uint32_t kWSlot = 9216, kWSlots = 64;    // WRITE targets in rmem
  constexpr uint32_t kRSlot = 4096, kRSlots = 128;   // READ targets in lbuf
  constexpr uint32_t kASlots = 64, kABase = 600000;  // ATOMIC results in lbuf
  constexpr uint32_t kRecvSlot = 8192;
  std::mt19937_64 rng(GetParam());
  std::vector<Op> ops;
  uint64_t counter = p.r64(kCounter);
  int recvs = 0;
  for (int i = 0; i < kOps; ++i) {
    Op o;
    o.kind = Kind(rng() % 6);
    o.soff = uint32_t(rng() % (p.src.size() - 10000));
    switch (o.kind) {
      case kSendOp:
        o.len = uint32_t(rng() % 5000);
        o.recv = recvs++;
        break;
      case kWriteOp:
        o.len = uint32_t(rng() % 9000);
        break;
      case kWriteImmOp:
        o.len = uint32_t(rng() % 9000);
        o.recv = recvs++;
        break;
      case kReadOp:
        o.len = uint32_t(rng() % kRSlot);
        o.soff = uint32_t(rng() % ((1 << 20) - kRSlot));  // offset in the read-only half
        break;
      case kFaaOp:
        o.arg = rng() % 1000;
        o.expect_orig = counter;
        counter += o.arg;
        break;
      case kCasOp:
        o.arg = rng() % 2 ? counter : counter + 1;  // half of them must not swap
        o.swap = rng();
        o.expect_orig = counter;
        if (o.arg == counter) counter = o.swap;
        break;
    }
    ops.push_back(o);
  }
  Link link(p.a, p.b, LinkParams{.loss = 0.05, .dup = 0.03, .reorder = 0.1, .seed = GetParam()});
  const size_t recv_slots = p.dst.size() / kRecvSlot;
  int posted_ops = 0, posted_recvs = 0;
  auto top_up = [&] {
    while (posted_recvs < recvs && posted_recvs - int(p.b.rcq.wcs.size()) < 64) {
      p.recv(posted_recvs, (posted_recvs % recv_slots) * kRecvSlot, kRecvSlot);
      ++posted_recvs;
    }
    while (posted_ops < kOps && posted_ops - int(p.a.scq.wcs.size()) < 64) {
      const int i = posted_ops++;
      const Op& o = ops[i];
      switch (o.kind) {
        case kSendOp:
          p.send(i, o.soff, o.len, link.now);
          break;
        case kWriteOp:
          p.write(i, o.soff, (i % kWSlots) * kWSlot, o.len, link.now);
          break;
        case kWriteImmOp:
          p.write(i, o.soff, (i % kWSlots) * kWSlot, o.len, link.now, IBV_WR_RDMA_WRITE_WITH_IMM,
                  htonl(i));
          break;
        case kReadOp:
          p.read(i, kReadBase + o.soff, (i % kRSlots) * kRSlot, o.len, link.now);
          break;
        case kFaaOp:
          p.atomic(i, IBV_WR_ATOMIC_FETCH_AND_ADD, kCounter, kABase + (i % kASlots) * 8, o.arg, 0,
                   link.now);
          break;
        case kCasOp:
          p.atomic(i, IBV_WR_ATOMIC_CMP_AND_SWP, kCounter, kABase + (i % kASlots) * 8, o.arg,
                   o.swap, link.now);
          break;
      }
    }
  };
  std::vector<int> recv_op(recvs);
  for (int i = 0; i < kOps; ++i) {
    if (ops[i].recv >= 0) recv_op[ops[i].recv] = i;
  }
  top_up();
  size_t checked_s = 0, checked_r = 0;
  const bool ok = link.run_until(
      [&] {
        // Each completion is checked before its slot can be reused (at most 64 outstanding).
        for (; checked_s < p.a.scq.wcs.size(); ++checked_s) {
          const ibv_wc& wc = p.a.scq.wcs[checked_s];
          const Op& o = ops[checked_s];
          EXPECT_EQ(wc.wr_id, checked_s);
          EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << "op " << checked_s;
          if (o.kind == kReadOp) {
            const uint8_t* got = p.lbuf.data() + (checked_s % kRSlots) * kRSlot;
            const uint8_t* want = p.rmem.data() + kReadBase + o.soff;
            if (!std::equal(want, want + o.len, got)) ADD_FAILURE() << "READ " << checked_s;
          } else if (o.kind == kFaaOp || o.kind == kCasOp) {
            EXPECT_EQ(p.l64(kABase + (checked_s % kASlots) * 8), o.expect_orig)
                << "ATOMIC " << checked_s;
          }
        }
        for (; checked_r < p.b.rcq.wcs.size(); ++checked_r) {
          const ibv_wc& wc = p.b.rcq.wcs[checked_r];
          const int i = recv_op[checked_r];
          const Op& o = ops[i];
          EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
          EXPECT_EQ(wc.wr_id, checked_r);
          EXPECT_EQ(wc.byte_len, o.len);
          if (o.kind == kSendOp) {
            EXPECT_EQ(wc.opcode, IBV_WC_RECV);
            const uint8_t* got = p.dst.data() + (checked_r % recv_slots) * kRecvSlot;
            if (!std::equal(p.src.begin() + o.soff, p.src.begin() + o.soff + o.len, got)) {
              ADD_FAILURE() << "SEND " << i;
            }
          } else {
            EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
            EXPECT_EQ(wc.imm_data, htonl(i));
          }
        }
        top_up();
        return p.a.scq.wcs.size() == kOps;
      },
      600 * kSecond);
  ASSERT_TRUE(ok) << "posted " << posted_ops << " completed " << p.a.scq.wcs.size();
  link.run_idle(link.now + kSecond);
  EXPECT_EQ(p.b.rcq.wcs.size(), size_t(recvs));
  EXPECT_EQ(p.r64(kCounter), counter);
  // Each WRITE slot holds its last WRITE.
  std::vector<int> last(kWSlots, -1);
  for (int i = 0; i < kOps; ++i) {
    if (ops[i].kind == kWriteOp || ops[i].kind == kWriteImmOp) last[i % kWSlots] = i;
  }
  for (uint32_t s = 0; s < kWSlots; ++s) {
    if (last[s] < 0) continue;
    const Op& o = ops[last[s]];
    EXPECT_TRUE(std::equal(p.src.begin() + o.soff, p.src.begin() + o.soff + o.len,
                           p.rmem.begin() + s * kWSlot))
        << "WRITE slot " << s;
  }
  EXPECT_TRUE(std::equal(p.rmem.begin() + kReadBase, p.rmem.end(),
                         Pair(pp).rmem.begin() + kReadBase));  // READs changed nothing
  EXPECT_GT(link.lost, 0u);
  EXPECT_GT(link.duplicated, 0u);
  EXPECT_GT(p.b.qp->counters().duplicate_request, 0u);
  EXPECT_EQ(p.a.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(p.b.qp->state(), IBV_QPS_RTS);
  RecordProperty("lost", std::to_string(link.lost));
  RecordProperty("timeouts", std::to_string(p.a.qp->counters().local_ack_timeout_err));
  RecordProperty("virtual_ms", std::to_string(link.now / 1'000'000));
}

INSTANTIATE_TEST_SUITE_P(Seeds, LossyRdmaLink, ::testing::Values(1, 2, 3, 4));

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
