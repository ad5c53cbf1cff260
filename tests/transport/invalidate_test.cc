// Memory windows and invalidation through the transport: BIND_MW and LOCAL_INV as local send
// queue operations (requester/completer), SEND with invalidate at the responder, and remote
// access through window R_Keys. The QPs use the engine's key table (src/engine/key_table.cc),
// which holds the window state, over the virtual-time link of harness.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "engine/key_table.h"
#include "harness.h"

namespace uroce::transport {
namespace {

using test::Link;
using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;
constexpr Time kSecond = 1'000'000'000;
constexpr unsigned kRw = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

// a and b, each on its own key table. b's region `rmem` allows no remote access by itself (only
// through windows bound to it); a has a source buffer and a READ target.
struct MwPair {
  MwPair() : a(kQpnA, kIpA), b(kQpnB, kIpB) {
    attach(a, ka);
    attach(b, kb);
    a.connect(kIpB, kQpnB, 0x10, 0x20);
    b.connect(kIpA, kQpnA, 0x20, 0x10);
    src.resize(8192);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + 3);
    lbuf.assign(8192, 0);
    dst.assign(8192, 0);
    rmem.assign(8192, 0xee);
    uint32_t rk;
    EXPECT_EQ(ka.reg_mr(a.init.pd, src.data(), src.size(), at(src, 0), 0, &skey, &rk), 0);
    EXPECT_EQ(ka.reg_mr(a.init.pd, lbuf.data(), lbuf.size(), at(lbuf, 0), IBV_ACCESS_LOCAL_WRITE,
                        &lkey, &rk),
              0);
    EXPECT_EQ(kb.reg_mr(b.init.pd, dst.data(), dst.size(), at(dst, 0), IBV_ACCESS_LOCAL_WRITE,
                        &dkey, &rk),
              0);
    EXPECT_EQ(kb.reg_mr(b.init.pd, rmem.data(), rmem.size(), at(rmem, 0),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, &mkey, &rk),
              0);
  }
  // Gives `n` a PD of `kt` and rebuilds its QP over `kt` (still in RESET).
  static void attach(Node& n, KeyTable& kt) {
    n.pd = n.init.pd = kt.alloc_pd();
    n.memory = &kt;
    n.rebuild();
  }
  static uint64_t at(const std::vector<uint8_t>& v, size_t off) {
    return reinterpret_cast<uint64_t>(v.data() + off);
  }
  // Allocates a window on b and returns its handle; *rkey gets its initial R_Key.
  uint32_t alloc(ibv_mw_type type, uint32_t* rkey) {
    uint32_t h = 0;
    EXPECT_EQ(kb.alloc_mw(b.init.pd, type, &h, rkey), 0);
    return h;
  }
  // Posts a BIND_MW on b's QP: rmem[off, off + len) under (rkey & ~0xff) | key.
  SendWqe bind_wqe(uint64_t id, uint32_t mw, uint32_t new_rkey, size_t off, uint64_t len,
                   unsigned access, uint32_t mr = 0) {
    SendWqe w;
    w.wr_id = id;
    w.opcode = IBV_WR_BIND_MW;
    w.bind.mw = mw;
    w.bind.new_rkey = new_rkey;
    w.bind.mr_lkey = mr ? mr : mkey;
    w.bind.addr = at(rmem, off);
    w.bind.length = len;
    w.bind.access = access;
    return w;
  }
  // A binds a type 2 window over rmem[64, 64 + 1024) with remote read and write; returns its key.
  uint32_t bound_window() {
    uint32_t rkey;
    const uint32_t h = alloc(IBV_MW_TYPE_2, &rkey);
    rkey = (rkey & ~0xffu) | 0x5a;
    EXPECT_EQ(b.qp->post_send(bind_wqe(50, h, rkey, 64, 1024, kRw), 0), 0);
    EXPECT_EQ(b.scq.wcs.size(), 1u);
    EXPECT_EQ(b.scq.wcs.back().status, IBV_WC_SUCCESS);
    EXPECT_EQ(b.scq.wcs.back().opcode, IBV_WC_BIND_MW);
    b.scq.wcs.clear();
    return rkey;
  }
  void write(uint64_t id, size_t roff, uint32_t len, uint32_t rkey, Time now = 0) {
    ASSERT_EQ(a.qp->post_send(test::rdma_wqe(id, IBV_WR_RDMA_WRITE, at(src, 0), len, skey,
                                             at(rmem, roff), rkey),
                              now),
              0);
  }
  void read(uint64_t id, size_t roff, uint32_t len, uint32_t rkey, Time now = 0) {
    ASSERT_EQ(a.qp->post_send(test::rdma_wqe(id, IBV_WR_RDMA_READ, at(lbuf, 0), len, lkey,
                                             at(rmem, roff), rkey),
                              now),
              0);
  }
  void send_inv(uint64_t id, uint32_t len, uint32_t inv_rkey, Time now = 0) {
    SendWqe w = test::send_wqe(id, at(src, 0), len, skey, IBV_WR_SEND_WITH_INV);
    w.imm_be = inv_rkey;  // host order (qp.h)
    ASSERT_EQ(a.qp->post_send(w, now), 0);
  }
  void recv(uint64_t id) {
    ASSERT_EQ(b.qp->post_recv(test::recv_wqe(id, at(dst, 0), 4096, dkey)), 0);
  }
  // Runs the link until a has `n` send completions.
  bool run_a(Link& link, size_t n) {
    return link.run_until([&] { return a.scq.wcs.size() >= n; }, kSecond);
  }

  KeyTable ka, kb;
  Node a, b;
  std::vector<uint8_t> src, lbuf, dst, rmem;
  uint32_t skey = 0, lkey = 0, dkey = 0, mkey = 0;
};

TEST(MemoryWindow, WriteAndReadWithinTheWindow) {
  MwPair p;
  const uint32_t rkey = p.bound_window();
  Link link(p.a, p.b);
  p.write(1, 64, 1024, rkey);
  p.read(2, 64 + 100, 200, rkey);
  ASSERT_TRUE(p.run_a(link, 2));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.a.scq.wcs[1].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(std::equal(p.src.begin(), p.src.begin() + 1024, p.rmem.begin() + 64));
  EXPECT_EQ(p.rmem[63], 0xee);  // nothing outside the window
  EXPECT_EQ(p.rmem[64 + 1024], 0xee);
  EXPECT_TRUE(std::equal(p.lbuf.begin(), p.lbuf.begin() + 200, p.src.begin() + 100));
}

TEST(MemoryWindow, WriteBeyondTheWindowIsRemoteAccessError) {
  MwPair p;
  const uint32_t rkey = p.bound_window();
  Link link(p.a, p.b);
  p.write(1, 64 + 1000, 100, rkey);  // crosses the window's end, inside the MR
  ASSERT_TRUE(p.run_a(link, 1));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(p.a.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(p.rmem[64 + 1000], 0xee);
}

TEST(MemoryWindow, TheMrKeyGrantsNoRemoteAccessAndAStaleKeyNoneEither) {
  MwPair p;
  const uint32_t rkey = p.bound_window();
  Link link(p.a, p.b);
  p.write(1, 64, 16, p.mkey);  // the MR itself has no remote rights
  ASSERT_TRUE(p.run_a(link, 1));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_REM_ACCESS_ERR);

  MwPair q;
  const uint32_t rkey2 = q.bound_window();
  Link link2(q.a, q.b);
  q.write(1, 64, 16, rkey2 ^ 0x01);  // right window, wrong key byte
  ASSERT_TRUE(q.run_a(link2, 1));
  EXPECT_EQ(q.a.scq.wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  (void)rkey;
}

TEST(MemoryWindow, ReadNeedsTheWindowsReadRight) {
  MwPair p;
  uint32_t rkey;
  const uint32_t h = p.alloc(IBV_MW_TYPE_2, &rkey);
  ASSERT_EQ(p.b.qp->post_send(p.bind_wqe(50, h, rkey, 0, 512, IBV_ACCESS_REMOTE_WRITE), 0), 0);
  ASSERT_EQ(p.b.scq.wcs.size(), 1u);
  ASSERT_EQ(p.b.scq.wcs[0].status, IBV_WC_SUCCESS);
  Link link(p.a, p.b);
  p.read(1, 0, 64, rkey);
  ASSERT_TRUE(p.run_a(link, 1));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_REM_ACCESS_ERR);
}

TEST(SendWithInvalidate, InvalidatesTheWindowAndReportsItInTheReceive) {
  MwPair p;
  const uint32_t rkey = p.bound_window();
  Link link(p.a, p.b);
  p.recv(9);
  p.send_inv(1, 300, rkey);
  ASSERT_TRUE(p.run_a(link, 1));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.a.scq.wcs[0].opcode, IBV_WC_SEND);
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  const ibv_wc& wc = p.b.rcq.wcs[0];
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV);
  EXPECT_EQ(wc.byte_len, 300u);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_INV);
  EXPECT_FALSE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(wc.invalidated_rkey, rkey);
  EXPECT_TRUE(std::equal(p.src.begin(), p.src.begin() + 300, p.dst.begin()));
  // The key is dead now: a WRITE through it is refused.
  p.write(2, 64, 16, rkey, link.now);
  ASSERT_TRUE(p.run_a(link, 2));
  EXPECT_EQ(p.a.scq.wcs[1].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(p.rmem[64], 0xee);
}

TEST(SendWithInvalidate, MultiPacketMessageCarriesTheIethInItsLastPacket) {
  MwPair p;
  const uint32_t rkey = p.bound_window();
  Link link(p.a, p.b);
  p.recv(9);
  p.send_inv(1, 2500, rkey);  // 3 packets at 1024 B
  ASSERT_TRUE(p.run_a(link, 1));
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.b.rcq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.b.rcq.wcs[0].byte_len, 2500u);
  EXPECT_EQ(p.b.rcq.wcs[0].invalidated_rkey, rkey);
  EXPECT_EQ(p.kb.invalidate(rkey, p.b.init.pd), MemStatus::kBadKey);  // already invalid
}

TEST(SendWithInvalidate, DuplicateAfterALostAckIsNotInvalidatedTwice) {
  MwPair p;
  const uint32_t rkey = p.bound_window();
  Link link(p.a, p.b);
  bool dropped = false;
  link.drop_if = [&](int from, const wire::Packet&) {
    if (from != 1 || dropped) return false;
    dropped = true;  // b's first ACK
    return true;
  };
  p.recv(9);
  p.send_inv(1, 100, rkey);
  ASSERT_TRUE(p.run_a(link, 1));
  EXPECT_TRUE(dropped);
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_SUCCESS);  // the resend was re-ACKed, not refused
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.b.qp->counters().duplicate_request, 1u);
  EXPECT_EQ(p.b.qp->state(), IBV_QPS_RTS);
}

// Keys that may not be invalidated remotely: NAK invalid request, both sides complete in error.
void expect_refused(MwPair& p, uint32_t key) {
  Link link(p.a, p.b);
  p.recv(9);
  p.send_inv(1, 100, key);
  ASSERT_TRUE(p.run_a(link, 1));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
  ASSERT_EQ(p.b.rcq.wcs.size(), 1u);
  EXPECT_EQ(p.b.rcq.wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(p.a.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(p.b.qp->state(), IBV_QPS_ERR);
}

TEST(SendWithInvalidate, AnMrKeyIsRefused) {
  MwPair p;
  expect_refused(p, p.mkey);
  EXPECT_EQ(p.kb.mr_count(), 2u);  // still registered
}

TEST(SendWithInvalidate, AnUnknownKeyIsRefused) {
  MwPair p;
  expect_refused(p, KeyTable::kMwKeyBit | 0x7700);
}

TEST(SendWithInvalidate, AnUnboundWindowIsRefused) {
  MwPair p;
  uint32_t rkey;
  p.alloc(IBV_MW_TYPE_2, &rkey);
  expect_refused(p, rkey);
}

TEST(SendWithInvalidate, ATypeOneWindowIsRefusedAndStaysValid) {
  MwPair p;
  uint32_t rkey;
  const uint32_t h = p.alloc(IBV_MW_TYPE_1, &rkey);
  rkey = (rkey & ~0xffu) | 1;
  ASSERT_EQ(p.b.qp->post_send(p.bind_wqe(50, h, rkey, 0, 256, kRw), 0), 0);
  ASSERT_EQ(p.b.scq.wcs.at(0).status, IBV_WC_SUCCESS);
  expect_refused(p, rkey);
  EXPECT_EQ(p.kb.resolve_remote(rkey, p.b.init.pd, MwPair::at(p.rmem, 0), 8, IBV_ACCESS_REMOTE_READ)
                .status,
            MemStatus::kOk);
}

TEST(SendWithInvalidate, AWindowOfAnotherPdIsRefused) {
  MwPair p;
  const uint32_t other_pd = p.kb.alloc_pd();
  uint32_t h, rkey, mr, rk;
  ASSERT_EQ(p.kb.alloc_mw(other_pd, IBV_MW_TYPE_2, &h, &rkey), 0);
  ASSERT_EQ(p.kb.reg_mr(other_pd, p.rmem.data(), 64, MwPair::at(p.rmem, 0),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, &mr, &rk),
            0);
  MwBind b;
  b.mw = h;
  b.new_rkey = rkey;
  b.mr_lkey = mr;
  b.addr = MwPair::at(p.rmem, 0);
  b.length = 64;
  b.access = kRw;
  ASSERT_EQ(p.kb.bind_mw(b, other_pd), MemStatus::kOk);
  expect_refused(p, rkey);
}

TEST(LocalInvalidate, KillsTheKeyAndCompletesInOrder) {
  MwPair p;
  const uint32_t rkey = p.bound_window();
  SendWqe inv;
  inv.wr_id = 60;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.imm_be = rkey;
  ASSERT_EQ(p.b.qp->post_send(inv, 0), 0);
  ASSERT_EQ(p.b.scq.wcs.size(), 1u);
  EXPECT_EQ(p.b.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.b.scq.wcs[0].opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(p.b.scq.wcs[0].wr_id, 60u);
  Link link(p.a, p.b);
  p.write(1, 64, 16, rkey);
  ASSERT_TRUE(p.run_a(link, 1));
  EXPECT_EQ(p.a.scq.wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  // Free again: the window can be bound anew, with a new key.
  uint32_t h = (rkey & ~KeyTable::kMwKeyBit) >> 8;
  MwBind b;
  b.mw = h;
  b.new_rkey = (rkey & ~0xffu) | 0x5b;
  b.mr_lkey = p.mkey;
  b.addr = MwPair::at(p.rmem, 0);
  b.length = 8;
  b.access = IBV_ACCESS_REMOTE_READ;
  EXPECT_EQ(p.kb.bind_mw(b, p.b.init.pd), MemStatus::kOk);
}

TEST(LocalInvalidate, OfAnMrKeyIsALocalQpOperationError) {
  MwPair p;
  SendWqe inv;
  inv.wr_id = 60;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.imm_be = p.mkey;
  ASSERT_EQ(p.b.qp->post_send(inv, 0), 0);
  ASSERT_EQ(p.b.scq.wcs.size(), 1u);
  EXPECT_EQ(p.b.scq.wcs[0].status, IBV_WC_LOC_QP_OP_ERR);
  EXPECT_EQ(p.b.scq.wcs[0].opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(p.b.qp->state(), IBV_QPS_ERR);
}

TEST(LocalOperation, WaitsForTheRequestsBeforeItToComplete) {
  MwPair p;
  Link link(p.a, p.b);
  // a: SEND, then a LOCAL_INV of a's own window. The invalidation executes when the requester
  // reaches it, but completes only after the SEND is acknowledged (in order).
  uint32_t h, rkey, mr, rk;
  const uint32_t pd = p.a.init.pd;
  ASSERT_EQ(p.ka.alloc_mw(pd, IBV_MW_TYPE_2, &h, &rkey), 0);
  ASSERT_EQ(p.ka.reg_mr(pd, p.lbuf.data(), 64, MwPair::at(p.lbuf, 0),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, &mr, &rk),
            0);
  MwBind b{h, rkey, mr, MwPair::at(p.lbuf, 0), 64, IBV_ACCESS_REMOTE_READ};
  ASSERT_EQ(p.ka.bind_mw(b, pd), MemStatus::kOk);
  p.recv(9);
  ASSERT_EQ(p.a.qp->post_send(test::send_wqe(1, MwPair::at(p.src, 0), 64, p.skey), 0), 0);
  SendWqe inv;
  inv.wr_id = 2;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.imm_be = rkey;
  ASSERT_EQ(p.a.qp->post_send(inv, 0), 0);
  EXPECT_TRUE(p.a.scq.wcs.empty());
  EXPECT_EQ(p.ka.invalidate(rkey, pd), MemStatus::kBadKey);  // already executed
  ASSERT_TRUE(p.run_a(link, 2));
  EXPECT_EQ(p.a.scq.wcs[0].wr_id, 1u);
  EXPECT_EQ(p.a.scq.wcs[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(p.a.scq.wcs[1].wr_id, 2u);
  EXPECT_EQ(p.a.scq.wcs[1].opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(p.a.scq.wcs[1].status, IBV_WC_SUCCESS);
  // The QP goes on.
  p.recv(10);
  ASSERT_EQ(p.a.qp->post_send(test::send_wqe(3, MwPair::at(p.src, 0), 64, p.skey), link.now), 0);
  ASSERT_TRUE(p.run_a(link, 3));
  EXPECT_EQ(p.a.scq.wcs[2].status, IBV_WC_SUCCESS);
}

TEST(BindMw, RulesAreEnforcedWithMwBindError) {
  struct Case {
    const char* what;
    size_t off;
    uint64_t len;
    unsigned access;
    bool mr_without_bind;
    bool mr_without_local_write;
  };
  const Case cases[] = {
      {"MR without IBV_ACCESS_MW_BIND", 0, 64, kRw, true, false},
      {"window beyond the MR", 8192 - 32, 64, kRw, false, false},
      {"remote write on an MR without local write", 0, 64, IBV_ACCESS_REMOTE_WRITE, false, true},
      {"zero-based window", 0, 64, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED, false, false},
      {"zero length type 2", 0, 0, kRw, false, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    MwPair p;
    uint32_t mr = p.mkey, rk;
    if (c.mr_without_bind) {
      ASSERT_EQ(p.kb.reg_mr(p.b.init.pd, p.rmem.data(), p.rmem.size(), MwPair::at(p.rmem, 0),
                            IBV_ACCESS_LOCAL_WRITE, &mr, &rk),
                0);
    } else if (c.mr_without_local_write) {
      ASSERT_EQ(p.kb.reg_mr(p.b.init.pd, p.rmem.data(), p.rmem.size(), MwPair::at(p.rmem, 0),
                            IBV_ACCESS_MW_BIND, &mr, &rk),
                0);
    }
    uint32_t rkey;
    const uint32_t h = p.alloc(IBV_MW_TYPE_2, &rkey);
    ASSERT_EQ(p.b.qp->post_send(p.bind_wqe(50, h, rkey, c.off, c.len, c.access, mr), 0), 0);
    ASSERT_EQ(p.b.scq.wcs.size(), 1u);
    EXPECT_EQ(p.b.scq.wcs[0].status, IBV_WC_MW_BIND_ERR);
    EXPECT_EQ(p.b.scq.wcs[0].opcode, IBV_WC_BIND_MW);
    EXPECT_EQ(p.b.qp->state(), IBV_QPS_ERR);
  }
}

TEST(BindMw, ABoundTypeTwoWindowMustBeInvalidatedBeforeRebinding) {
  MwPair p;
  const uint32_t rkey = p.bound_window();
  const uint32_t h = (rkey & ~KeyTable::kMwKeyBit) >> 8;
  ASSERT_EQ(p.b.qp->post_send(p.bind_wqe(51, h, rkey + 1, 0, 64, kRw), 0), 0);
  ASSERT_EQ(p.b.scq.wcs.size(), 1u);
  EXPECT_EQ(p.b.scq.wcs[0].status, IBV_WC_MW_BIND_ERR);
}

TEST(KeyTableMw, TypeOneRebindMovesTheWindowAndRetiresTheOldKey) {
  KeyTable kt;
  const uint32_t pd = kt.alloc_pd();
  std::vector<uint8_t> buf(4096);
  const uint64_t base = reinterpret_cast<uint64_t>(buf.data());
  uint32_t mr, rk, h, key0;
  ASSERT_EQ(kt.reg_mr(pd, buf.data(), buf.size(), base, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND,
                      &mr, &rk),
            0);
  ASSERT_EQ(kt.alloc_mw(pd, IBV_MW_TYPE_1, &h, &key0), 0);
  EXPECT_TRUE(key0 & KeyTable::kMwKeyBit);
  EXPECT_NE(key0, mr);
  EXPECT_EQ(kt.resolve_remote(key0, pd, base, 8, IBV_ACCESS_REMOTE_READ).status,
            MemStatus::kBadKey);  // not bound yet
  MwBind b{h, key0 + 1, mr, base, 128, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE};
  ASSERT_EQ(kt.bind_mw(b, pd), MemStatus::kOk);  // LOCAL_WRITE means nothing for a window
  EXPECT_EQ(kt.resolve_remote(key0 + 1, pd, base + 120, 8, IBV_ACCESS_REMOTE_READ).status,
            MemStatus::kOk);
  EXPECT_EQ(kt.resolve_remote(key0 + 1, pd, base + 124, 8, IBV_ACCESS_REMOTE_READ).status,
            MemStatus::kOutOfBounds);
  EXPECT_EQ(kt.resolve_remote(key0 + 1, pd, base, 8, IBV_ACCESS_REMOTE_WRITE).status,
            MemStatus::kNoAccess);
  EXPECT_EQ(kt.resolve_local(key0 + 1, pd, base, 8, 0).status, MemStatus::kBadKey);
  EXPECT_EQ(kt.dereg_mr(mr), EBUSY);  // a window is bound to it
  b = MwBind{h, key0 + 2, mr, base + 1024, 64, IBV_ACCESS_REMOTE_READ};
  ASSERT_EQ(kt.bind_mw(b, pd), MemStatus::kOk);
  EXPECT_EQ(kt.resolve_remote(key0 + 1, pd, base + 1024, 8, IBV_ACCESS_REMOTE_READ).status,
            MemStatus::kBadKey);
  const MemRef r = kt.resolve_remote(key0 + 2, pd, base + 1024, 8, IBV_ACCESS_REMOTE_READ);
  ASSERT_EQ(r.status, MemStatus::kOk);
  EXPECT_EQ(r.ptr, buf.data() + 1024);
  EXPECT_EQ(kt.invalidate(key0 + 2, pd), MemStatus::kNoAccess);  // type 1: bind to unbind
  b = MwBind{h, key0 + 3, 0, 0, 0, 0};
  ASSERT_EQ(kt.bind_mw(b, pd), MemStatus::kOk);  // zero length: unbind
  EXPECT_EQ(kt.resolve_remote(key0 + 3, pd, base, 8, IBV_ACCESS_REMOTE_READ).status,
            MemStatus::kBadKey);
  EXPECT_EQ(kt.dereg_mr(mr), 0);
  EXPECT_EQ(kt.dealloc_pd(pd), EBUSY);  // the window holds it
  EXPECT_EQ(kt.dealloc_mw(h), 0);
  EXPECT_EQ(kt.dealloc_mw(h), EINVAL);
  EXPECT_EQ(kt.dealloc_pd(pd), 0);
}

TEST(KeyTableMw, DeallocatingABoundWindowReleasesItsRegion) {
  KeyTable kt;
  const uint32_t pd = kt.alloc_pd();
  std::vector<uint8_t> buf(256);
  const uint64_t base = reinterpret_cast<uint64_t>(buf.data());
  uint32_t mr, rk, h, key;
  ASSERT_EQ(kt.reg_mr(pd, buf.data(), buf.size(), base, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND,
                      &mr, &rk),
            0);
  ASSERT_EQ(kt.alloc_mw(pd, IBV_MW_TYPE_2, &h, &key), 0);
  EXPECT_EQ(kt.alloc_mw(pd, static_cast<ibv_mw_type>(3), &h, &key), EINVAL);
  MwBind b{h, key | 0x42, mr, base, 256, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC};
  EXPECT_EQ(kt.bind_mw(b, pd + 1), MemStatus::kBadPd);  // the QP's PD must be the window's
  b.new_rkey = key + 0x100;                             // another window's index
  EXPECT_EQ(kt.bind_mw(b, pd), MemStatus::kBadKey);
  b.new_rkey = key | 0x42;
  ASSERT_EQ(kt.bind_mw(b, pd), MemStatus::kOk);
  EXPECT_EQ(kt.resolve_remote(key | 0x42, pd, base + 8, 8, IBV_ACCESS_REMOTE_ATOMIC).status,
            MemStatus::kOk);
  EXPECT_EQ(kt.resolve_remote(key | 0x42, pd + 1, base + 8, 8, IBV_ACCESS_REMOTE_ATOMIC).status,
            MemStatus::kBadPd);
  EXPECT_EQ(kt.dereg_mr(mr), EBUSY);
  EXPECT_EQ(kt.dealloc_mw(h), 0);
  EXPECT_EQ(kt.dereg_mr(mr), 0);
}

}  // namespace
}  // namespace uroce::transport
