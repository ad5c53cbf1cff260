// IBTA 1.5 ATOMIC WRITE across the transport's roles: the requester's exact bytes (RC opcode
// 0x1d, BTH with AckReq, RETH with DMA length 8, the 8 bytes), the posting checks, the
// responder's placement, checks and NAKs, its zero-length READ RESPONSE ONLY and its answer to a
// duplicate, the completer's IBV_WC_ATOMIC_WRITE, and recovery from a lost response over the
// virtual-time link. The behaviour follows Linux rxe (rxe_req.c, rxe_resp.c, rxe_comp.c,
// Linux >= 6.2), the only open implementation of the operation; transport/responder.h says which
// rule comes from where.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "harness.h"

namespace uroce::transport {
namespace {

using test::Link;
using test::Node;
using wire::NakCode;
using wire::Opcode;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;
constexpr uint32_t kSqPsn = 0x100, kRqPsn = 0x500;
constexpr Time kSecond = 1'000'000'000;
constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint8_t kValue[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};

// An ATOMIC WRITE of the 8 bytes at laddr (SGE under lkey) to raddr under rkey.
SendWqe aw_wqe(uint64_t wr_id, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey) {
  return test::rdma_wqe(wr_id, IBV_WR_ATOMIC_WRITE, laddr, 8, lkey, raddr, rkey);
}
// The same with the 8 bytes inline, as ibv_wr_atomic_write hands them over (src/verbs/wr_api.cc).
SendWqe aw_inline(uint64_t wr_id, const void* value, uint64_t raddr, uint32_t rkey) {
  SendWqe w;
  w.wr_id = wr_id;
  w.opcode = IBV_WR_ATOMIC_WRITE;
  w.send_flags = IBV_SEND_INLINE;
  std::memcpy(w.inline_data.data(), value, 8);
  w.inline_len = 8;
  w.remote_addr = raddr;
  w.rkey = rkey;
  return w;
}

// ---- Requester and completer ----

class AtomicWriteRequester : public ::testing::Test {
 protected:
  AtomicWriteRequester() {
    node.connect(kIpB, kQpnB, kSqPsn, 0);
    std::memcpy(local.data(), kValue, 8);
    lkey = node.mem.reg(node.pd, local.data(), local.size(), 0);
  }
  uint64_t l_at(uint64_t off) const { return reinterpret_cast<uint64_t>(local.data() + off); }
  Node node{kQpnA, kIpA};
  std::vector<uint8_t> local = std::vector<uint8_t>(64, 0);
  uint32_t lkey = 0;
};

TEST_F(AtomicWriteRequester, BuildsTheExactBytesFromAnSgeOrInline) {
  constexpr uint64_t kVa = 0x00007f0012345678;
  constexpr uint32_t kRkey = 0xabc;
  ASSERT_EQ(node.qp->post_send(aw_wqe(1, l_at(0), lkey, kVa, kRkey), 0), 0);
  ASSERT_EQ(node.qp->post_send(aw_inline(2, kValue, kVa, kRkey), 0), 0);
  // BTH: opcode 0x1d, M set (no APM), pad 0, P_Key 0xffff, dest QP, AckReq, PSN; RETH: VA,
  // R_Key, DMA length 8; then the 8 bytes as they lie in memory. No ICRC (the port's).
  const uint8_t want[36] = {0x1d, 0x40, 0xff, 0xff, 0x00, 0x00, 0x00, 0x22, 0x80, 0x00, 0x01, 0x00,
                            0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x0a, 0xbc,
                            0x00, 0x00, 0x00, 0x08, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
  // max_rd_atomic is 1 (the harness's default) and an ATOMIC WRITE takes a responder resource
  // (rxe_resp.c check_resource), so the second waits for the first's response.
  ASSERT_EQ(node.sink.sent.size(), 1u);
  const TxBuf& b = node.sink.sent[0];
  ASSERT_EQ(b.ib_len(), sizeof want);
  EXPECT_EQ(0, std::memcmp(b.data, want, sizeof want));
  EXPECT_EQ(b.dst_ip, wire::IpAddr(kIpB));

  // The responder's answer: READ RESPONSE ONLY, no payload, ACK AETH (rxe's
  // send_read_response_ack). It completes the WQE with IBV_WC_ATOMIC_WRITE.
  wire::Packet r;
  r.bth.opcode = uint8_t(Opcode::kRcReadResponseOnly);
  r.bth.dest_qp = kQpnA;
  r.bth.psn = kSqPsn;
  r.aeth = {test::ack_syndrome(), 1};
  test::deliver(node, *test::craft_headers(r), kIpB, 1);
  ASSERT_EQ(node.scq.wcs.size(), 1u);
  EXPECT_EQ(node.scq.wcs[0].wr_id, 1u);
  EXPECT_EQ(node.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(node.scq.wcs[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(node.scq.wcs[0].byte_len, 8u);

  // The inline one leaves now, byte for byte the same but for its PSN.
  ASSERT_EQ(node.sink.sent.size(), 2u);
  const TxBuf& c = node.sink.sent[1];
  ASSERT_EQ(c.ib_len(), sizeof want);
  uint8_t want2[36];
  std::memcpy(want2, want, sizeof want);
  want2[11] = 0x01;
  EXPECT_EQ(0, std::memcmp(c.data, want2, sizeof want2));

  // A later ACK completes it too (rxe_comp.c: it is not a READ or ATOMIC, whose data only their
  // own response brings).
  test::deliver(node, *test::craft_ack(kQpnA, kSqPsn + 1, test::ack_syndrome(), 2), kIpB, 2);
  ASSERT_EQ(node.scq.wcs.size(), 2u);
  EXPECT_EQ(node.scq.wcs[1].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(node.scq.wcs[1].status, IBV_WC_SUCCESS);
}

TEST_F(AtomicWriteRequester, AResponseWithDataOrANakSyndromeIsNotItsAnswer) {
  ASSERT_EQ(node.qp->post_send(aw_wqe(1, l_at(0), lkey, 0x1000, 5), 0), 0);
  wire::Packet r;
  r.bth.opcode = uint8_t(Opcode::kRcReadResponseOnly);
  r.bth.dest_qp = kQpnA;
  r.bth.psn = kSqPsn;
  r.aeth = {test::ack_syndrome(), 1};
  const std::vector<uint8_t> data(8, 1);
  test::deliver(node, *test::craft_headers(r, data), kIpB, 1);
  r.bth.opcode = uint8_t(Opcode::kRcReadResponseFirst);
  test::deliver(node, *test::craft_headers(r), kIpB, 2);
  EXPECT_TRUE(node.scq.wcs.empty());
  EXPECT_EQ(node.qp->counters().dropped_pkts, 2u);
}

TEST_F(AtomicWriteRequester, PostingChecks) {
  // Exactly 8 bytes (IBTA 1.5; rxe's DMA length), by SGE or inline.
  EXPECT_EQ(node.qp->post_send(test::rdma_wqe(1, IBV_WR_ATOMIC_WRITE, l_at(0), 7, lkey, 0, 5), 0),
            EINVAL);
  EXPECT_EQ(node.qp->post_send(test::rdma_wqe(1, IBV_WR_ATOMIC_WRITE, l_at(0), 9, lkey, 0, 5), 0),
            EINVAL);
  SendWqe w = aw_inline(1, kValue, 0, 5);
  w.inline_len = 16;
  EXPECT_EQ(node.qp->post_send(w, 0), EINVAL);
  // Its 8 inline bytes are the WR's operand: accepted whatever max_inline_data.
  node.init.max_inline_data = 0;
  node.rebuild();
  node.connect(kIpB, kQpnB, kSqPsn, 0);
  EXPECT_EQ(node.qp->post_send(aw_inline(2, kValue, 0, 5), 0), 0);
  EXPECT_TRUE(node.sink.sent.size() == 1);
  // A bad lkey fails locally before anything is sent.
  Node n2(0x33, kIpA);
  n2.connect(kIpB, kQpnB, kSqPsn, 0);
  ASSERT_EQ(n2.qp->post_send(aw_wqe(3, l_at(0), lkey + 1, 0, 5), 0), 0);
  ASSERT_EQ(n2.scq.wcs.size(), 1u);
  EXPECT_EQ(n2.scq.wcs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(n2.scq.wcs[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_TRUE(n2.sink.sent.empty());
}

// UD refuses it likewise (unreliable_wqe_ok, tests/transport/wr_opcode_test.cc).
TEST(AtomicWriteOnUnreliable, UcRefusesIt) {
  Node uc(0x33, kIpA);
  test::connect_uc(uc, kIpB, kQpnB, kSqPsn, 0);
  EXPECT_EQ(uc.qp->post_send(aw_inline(1, kValue, 0, 5), 0), EINVAL);
  EXPECT_TRUE(uc.sink.sent.empty());
}

// ---- Responder ----

class AtomicWriteResponder : public ::testing::Test {
 protected:
  AtomicWriteResponder() {
    test::PathParams p;
    p.mtu = IBV_MTU_256;
    p.rd_atomic = 2;
    node.connect(kIpA, kQpnA, 0, kRqPsn, p);
    mem.assign(4096, 0x5a);
    rkey = node.mem.reg(node.pd, mem.data(), mem.size(), kRemoteAll);
  }
  uint64_t at(uint64_t off) const { return reinterpret_cast<uint64_t>(mem.data()) + off; }
  void in(uint32_t psn, uint64_t va, std::vector<uint8_t> payload, uint32_t key = 0,
          uint32_t dma_len = 8, Opcode op = Opcode::kRcAtomicWrite) {
    wire::Packet p;
    p.bth.opcode = uint8_t(op);
    p.bth.dest_qp = kQpnB;
    p.bth.psn = psn;
    p.bth.ack_req = true;
    p.reth = {va, key ? key : rkey, dma_len};
    test::deliver(node, *test::craft_headers(p, payload), kIpA, now++);
  }
  static std::vector<uint8_t> value(uint8_t seed) {
    std::vector<uint8_t> v(8);
    for (int i = 0; i < 8; ++i) v[i] = uint8_t(seed + i);
    return v;
  }
  // The one response expected: a NAK of `code` at kRqPsn, the QP in ERR, memory untouched.
  void expect_nak(NakCode code) {
    const auto r = test::drain(node);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0]->pkt.bth.opcode, uint8_t(Opcode::kRcAcknowledge));
    EXPECT_EQ(r[0]->pkt.bth.psn, kRqPsn);
    EXPECT_EQ(r[0]->pkt.aeth.syndrome, test::nak_syndrome(code));
    EXPECT_EQ(node.qp->state(), IBV_QPS_ERR);
    EXPECT_TRUE(std::all_of(mem.begin(), mem.end(), [](uint8_t b) { return b == 0x5a; }));
  }
  Node node{kQpnB, kIpB};
  std::vector<uint8_t> mem;
  uint32_t rkey = 0;
  Time now = 1;
};

TEST_F(AtomicWriteResponder, PlacesTheEightBytesAndAnswersWithAnEmptyReadResponseOnly) {
  in(kRqPsn, at(64), value(1));
  EXPECT_TRUE(std::equal(mem.begin() + 64, mem.begin() + 72, value(1).begin()));
  EXPECT_EQ(mem[63], 0x5a);
  EXPECT_EQ(mem[72], 0x5a);
  const auto r = test::drain(node);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0]->pkt.bth.opcode, uint8_t(Opcode::kRcReadResponseOnly));
  EXPECT_EQ(r[0]->pkt.bth.psn, kRqPsn);
  EXPECT_EQ(r[0]->pkt.bth.dest_qp, kQpnA);
  EXPECT_EQ(r[0]->pkt.bth.pad, 0);
  EXPECT_TRUE(r[0]->pkt.payload.empty());
  EXPECT_EQ(r[0]->pkt.aeth.syndrome, test::ack_syndrome());
  EXPECT_EQ(r[0]->pkt.aeth.msn, 1u);
  // One PSN: the next request is expected at kRqPsn + 1.
  in(kRqPsn + 1, at(8), value(9));
  EXPECT_TRUE(std::equal(mem.begin() + 8, mem.begin() + 16, value(9).begin()));
  ASSERT_EQ(test::drain(node).size(), 1u);
  EXPECT_EQ(node.qp->counters().duplicate_request, 0u);
  EXPECT_EQ(node.qp->state(), IBV_QPS_RTS);
}

TEST_F(AtomicWriteResponder, RemoteWriteAccessIsWhatTheKeyNeeds) {
  // rxe checks IB_ACCESS_REMOTE_WRITE for it (check_rkey), not REMOTE_ATOMIC: a region that
  // allows remote write only takes it.
  std::vector<uint8_t> w(64, 0);
  const uint32_t k =
      node.mem.reg(node.pd, w.data(), w.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  in(kRqPsn, reinterpret_cast<uint64_t>(w.data()) + 16, value(3), k);
  EXPECT_TRUE(std::equal(w.begin() + 16, w.begin() + 24, value(3).begin()));
  EXPECT_EQ(test::drain(node).size(), 1u);
}

TEST_F(AtomicWriteResponder, KeyWithoutRemoteWriteIsRemoteAccessError) {
  const uint32_t k =
      node.mem.reg(node.pd, mem.data(), mem.size(),
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  in(kRqPsn, at(64), value(1), k);
  expect_nak(NakCode::kRemoteAccessError);
}

TEST_F(AtomicWriteResponder, BadRkeyIsRemoteAccessError) {
  in(kRqPsn, at(64), value(1), rkey + 1);
  expect_nak(NakCode::kRemoteAccessError);
}

TEST_F(AtomicWriteResponder, OutOfBoundsIsRemoteAccessError) {
  in(kRqPsn, at(4096 - 4), value(1));
  expect_nak(NakCode::kRemoteAccessError);
}

TEST_F(AtomicWriteResponder, MisalignedIsInvalidRequest) {
  in(kRqPsn, at(68), value(1));
  expect_nak(NakCode::kInvalidRequest);
}

TEST_F(AtomicWriteResponder, BadKeyIsCheckedBeforeAlignment) {
  in(kRqPsn, at(68), value(1), rkey + 1);  // rxe: check_rkey comes before the alignment check
  expect_nak(NakCode::kRemoteAccessError);
}

TEST_F(AtomicWriteResponder, QpWithoutRemoteWriteIsRemoteAccessError) {
  Node n(0x44, kIpB);
  test::PathParams p;
  p.access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  n.connect(kIpA, kQpnA, 0, kRqPsn, p);
  std::vector<uint8_t> w(64, 0x5a);
  const uint32_t k = n.mem.reg(n.pd, w.data(), w.size(), kRemoteAll);
  wire::Packet pk;
  pk.bth.opcode = uint8_t(Opcode::kRcAtomicWrite);
  pk.bth.dest_qp = 0x44;
  pk.bth.psn = kRqPsn;
  pk.bth.ack_req = true;
  pk.reth = {reinterpret_cast<uint64_t>(w.data()), k, 8};
  test::deliver(n, *test::craft_headers(pk, value(1)), kIpA, 1);
  const auto r = test::drain(n);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0]->pkt.aeth.syndrome, test::nak_syndrome(NakCode::kRemoteAccessError));
  EXPECT_TRUE(std::all_of(w.begin(), w.end(), [](uint8_t b) { return b == 0x5a; }));
}

TEST_F(AtomicWriteResponder, LengthOtherThanEightIsInvalidRequest) {
  in(kRqPsn, at(64), value(1), 0, 16);  // RETH says 16
  expect_nak(NakCode::kInvalidRequest);
}

TEST_F(AtomicWriteResponder, PayloadOtherThanEightIsInvalidRequest) {
  in(kRqPsn, at(64), std::vector<uint8_t>(4, 1));
  expect_nak(NakCode::kInvalidRequest);
}

TEST_F(AtomicWriteResponder, ADuplicateIsAnsweredAgainNeverPlacedAgain) {
  in(kRqPsn, at(64), value(1));
  // A WRITE after it overwrites the word; then the ATOMIC WRITE comes again (its response was
  // lost). Placing it again would undo the WRITE: it is answered from its resource instead.
  in(kRqPsn + 1, at(64), value(40), 0, 8, Opcode::kRcWriteOnly);
  in(kRqPsn, at(64), value(1));
  EXPECT_TRUE(std::equal(mem.begin() + 64, mem.begin() + 72, value(40).begin()));
  const auto r = test::drain(node);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0]->pkt.bth.opcode, uint8_t(Opcode::kRcReadResponseOnly));
  EXPECT_EQ(r[1]->pkt.bth.opcode, uint8_t(Opcode::kRcAcknowledge));
  EXPECT_EQ(r[2]->pkt.bth.opcode, uint8_t(Opcode::kRcReadResponseOnly));
  EXPECT_EQ(r[2]->pkt.bth.psn, kRqPsn);
  EXPECT_TRUE(r[2]->pkt.payload.empty());
  EXPECT_EQ(node.qp->counters().duplicate_request, 1u);
  // Once the resources (max_dest_rd_atomic 2) have moved on, a duplicate is too old to answer
  // and is dropped silently (Class D), as rxe's duplicate_request does.
  in(kRqPsn + 2, at(128), value(2));
  in(kRqPsn + 3, at(136), value(3));
  ASSERT_EQ(test::drain(node).size(), 2u);
  in(kRqPsn, at(64), value(1));
  EXPECT_TRUE(test::drain(node).empty());
  EXPECT_TRUE(std::equal(mem.begin() + 64, mem.begin() + 72, value(40).begin()));
  EXPECT_EQ(node.qp->state(), IBV_QPS_RTS);
}

TEST_F(AtomicWriteResponder, MoreThanMaxDestRdAtomicQueuedIsInvalidRequest) {
  node.sink.budget = 0;  // the port pushes back: responses wait in the responder
  in(kRqPsn, at(0), value(1));
  in(kRqPsn + 1, at(8), value(2));
  in(kRqPsn + 2, at(16), value(3));  // a third beyond max_dest_rd_atomic 2
  EXPECT_EQ(node.qp->state(), IBV_QPS_ERR);
  EXPECT_TRUE(std::all_of(mem.begin() + 16, mem.begin() + 24, [](uint8_t b) { return b == 0x5a; }));
}

// ---- Both sides over the link ----

struct AwPair {
  explicit AwPair(test::PathParams p = {}) : a(kQpnA, kIpA), b(kQpnB, kIpB) {
    a.connect(kIpB, kQpnB, kSqPsn, kRqPsn, p);
    b.connect(kIpA, kQpnA, kRqPsn, kSqPsn, p);
    rmem.assign(4096, 0);
    rkey = b.mem.reg(b.pd, rmem.data(), rmem.size(), kRemoteAll);
    lmem.assign(4096, 0);
    for (size_t i = 0; i < lmem.size(); ++i) lmem[i] = uint8_t(i * 7 + 3);
    lkey = a.mem.reg(a.pd, lmem.data(), lmem.size(), 0);
  }
  void post(uint64_t id, uint32_t loff, uint32_t roff) {
    ASSERT_EQ(a.qp->post_send(aw_wqe(id, reinterpret_cast<uint64_t>(lmem.data() + loff), lkey,
                                     reinterpret_cast<uint64_t>(rmem.data() + roff), rkey),
                              0),
              0);
  }
  bool placed(uint32_t loff, uint32_t roff) const {
    return std::equal(lmem.begin() + loff, lmem.begin() + loff + 8, rmem.begin() + roff);
  }
  Node a, b;
  std::vector<uint8_t> rmem, lmem;
  uint32_t rkey = 0, lkey = 0;
};

TEST(AtomicWriteLink, ManyCompleteInOrderWithinMaxRdAtomic) {
  test::PathParams pp;
  pp.rd_atomic = 4;
  AwPair p(pp);
  for (uint32_t i = 0; i < 32; ++i) p.post(i, i * 8, i * 8);
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 32; }, kSecond));
  for (uint32_t i = 0; i < 32; ++i) {
    EXPECT_EQ(p.a.scq.wcs[i].wr_id, i);
    EXPECT_EQ(p.a.scq.wcs[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(p.a.scq.wcs[i].opcode, IBV_WC_ATOMIC_WRITE);
    EXPECT_TRUE(p.placed(i * 8, i * 8)) << i;
  }
  EXPECT_EQ(p.b.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(p.a.qp->counters().retransmitted_pkts, 0u);
}

TEST(AtomicWriteLink, LostResponseIsResentAndAnsweredFromTheResource) {
  test::PathParams pp;
  pp.timeout = 8;
  AwPair p(pp);
  Link link(p.a, p.b);
  int responses = 0;
  link.drop_if = [&](int from, const wire::Packet& pkt) {
    return from == 1 && pkt.bth.opcode == uint8_t(Opcode::kRcReadResponseOnly) && responses++ == 0;
  };
  p.post(1, 0, 64);
  ASSERT_TRUE(link.run_until([&] { return !p.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.a.scq.wcs[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(responses, 2);                              // the lost one and the replay
  EXPECT_EQ(p.b.qp->counters().duplicate_request, 1u);  // the resent request
  EXPECT_GE(p.a.qp->counters().retransmitted_pkts, 1u);
  EXPECT_TRUE(p.placed(0, 64));
}

TEST(AtomicWriteLink, NaksFailTheWqeAndFlushTheRest) {
  AwPair p;
  p.post(1, 0, 68);  // misaligned: invalid request
  p.post(2, 0, 64);
  Link link(p.a, p.b);
  ASSERT_TRUE(link.run_until([&] { return p.a.scq.wcs.size() == 2; }, kSecond));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(p.a.scq.wcs[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(p.a.scq.wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(p.a.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(p.b.qp->state(), IBV_QPS_ERR);
  EXPECT_TRUE(std::all_of(p.rmem.begin(), p.rmem.end(), [](uint8_t v) { return v == 0; }));

  AwPair q;
  ASSERT_EQ(q.a.qp->post_send(aw_wqe(1, reinterpret_cast<uint64_t>(q.lmem.data()), q.lkey,
                                     reinterpret_cast<uint64_t>(q.rmem.data()), q.rkey + 1),
                              0),
            0);
  Link link2(q.a, q.b);
  ASSERT_TRUE(link2.run_until([&] { return !q.a.scq.wcs.empty(); }, kSecond));
  EXPECT_EQ(q.a.scq.wcs[0].status, IBV_WC_REM_ACCESS_ERR);
}

}  // namespace
}  // namespace uroce::transport
