// XRC in the transport (IBTA 9.4, 10.2.9.4): an XRC send QP and an XRC receive QP over the
// virtual-time link. Every request carries an XRCETH naming the XRC SRQ it goes to; the receive QP
// takes each message's WQE from that SRQ, checks memory against the SRQ's PD and completes into
// the SRQ's CQ; an SRQ of another domain, an unknown one, or a change of SRQ inside a message is
// an invalid request. Responses carry XRC opcodes and no XRCETH.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>
#include <vector>

#include "harness.h"
#include "transport/qp_state.h"
#include "transport/srq.h"

namespace uroce::transport {
namespace {

using test::Link;
using test::Node;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnIni = 0x11, kQpnTgt = 0x22;
constexpr uint32_t kSqPsn = 0x100, kRqPsn = 0x500;
constexpr uint32_t kXrcd = 5, kOtherXrcd = 6;
constexpr uint32_t kSrqPd = 9;  // the SRQs' PD at the receiver (the QP has none)
constexpr Time kSecond = 1'000'000'000;

class Table : public XrcSrqs {
 public:
  Srq* find(uint32_t srqn) override {
    auto it = srqs.find(srqn);
    return it == srqs.end() ? nullptr : it->second;
  }
  std::map<uint32_t, Srq*> srqs;
};

// INIT → RTR → RTS with the masks ibv_xsrq_pingpong uses (the kernel's XRC columns).
void connect_ini(Qp& qp, uint32_t remote_ip, uint32_t remote_qpn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(qp.modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0),
            0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = 0;
  a.ah_attr = test::ah_for(remote_ip);
  ASSERT_EQ(
      qp.modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN, 0),
      0);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = kSqPsn;
  a.max_rd_atomic = 4;
  ASSERT_EQ(qp.modify(a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
                      0),
            0);
}

void connect_tgt(Qp& qp, uint32_t remote_ip, uint32_t remote_qpn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  ASSERT_EQ(qp.modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0),
            0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = kSqPsn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah_attr = test::ah_for(remote_ip);
  ASSERT_EQ(qp.modify(a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                      0),
            0);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.sq_psn = kRqPsn;
  ASSERT_EQ(qp.modify(a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN, 0), 0);
}

class XrcTest : public ::testing::Test {
 protected:
  XrcTest() {
    ini.init.type = IBV_QPT_XRC_SEND;
    ini.init.recv_cq = nullptr;
    ini.rebuild();
    tgt.init.type = IBV_QPT_XRC_RECV;
    tgt.init.pd = 0;
    tgt.init.send_cq = tgt.init.recv_cq = nullptr;
    tgt.init.xrcd = kXrcd;
    tgt.init.xrc_srqs = &table;
    tgt.rebuild();
    table.srqs = {{1, &srq1}, {2, &srq2}, {3, &foreign}};
    connect_ini(*ini.qp, kIpB, kQpnTgt);
    connect_tgt(*tgt.qp, kIpA, kQpnIni);
    src.resize(8192);
    std::iota(src.begin(), src.end(), uint8_t{1});
    lkey = ini.mem.reg(ini.pd, src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    dst.assign(8192, 0);
    dst_key = tgt.mem.reg(kSrqPd, dst.data(), dst.size(),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  }
  uint64_t at(std::vector<uint8_t>& v, size_t off = 0) {
    return reinterpret_cast<uint64_t>(v.data() + off);
  }
  SendWqe xrc(SendWqe w, uint32_t srqn) {
    w.xrc_srqn = srqn;
    return w;
  }
  bool run(size_t send_wcs) {
    return link.run_until([&] { return ini.scq.wcs.size() >= send_wcs; }, 10 * kSecond);
  }

  Node ini{kQpnIni, kIpA};
  Node tgt{kQpnTgt, kIpB};
  Table table;
  test::CqRecorder cq1, cq2, cq3;
  Srq srq1{{.max_wr = 16, .max_sge = 1, .xrcd = kXrcd, .pd = kSrqPd, .cq = &cq1}};
  Srq srq2{{.max_wr = 16, .max_sge = 1, .xrcd = kXrcd, .pd = kSrqPd, .cq = &cq2}};
  Srq foreign{{.max_wr = 16, .max_sge = 1, .xrcd = kOtherXrcd, .pd = kSrqPd, .cq = &cq3}};
  std::vector<uint8_t> src, dst;
  uint32_t lkey = 0, dst_key = 0;
  Link link{ini, tgt};
};

TEST_F(XrcTest, SendsLandInTheSrqTheirXrcethNamesAndCompleteIntoItsCq) {
  ASSERT_EQ(srq1.post_recv(test::recv_wqe(101, at(dst), 4096, dst_key)), 0);
  ASSERT_EQ(srq2.post_recv(test::recv_wqe(201, at(dst, 4096), 4096, dst_key)), 0);
  // A three-packet SEND into SRQ 2, then a small one into SRQ 1.
  ASSERT_EQ(ini.qp->post_send(xrc(test::send_wqe(1, at(src), 3000, lkey), 2), 0), 0);
  ASSERT_EQ(ini.qp->post_send(xrc(test::send_wqe(2, at(src, 3000), 100, lkey), 1), 0), 0);
  ASSERT_TRUE(run(2));
  ASSERT_EQ(ini.scq.wcs.size(), 2u);
  EXPECT_EQ(ini.scq.wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(ini.scq.wcs[1].status, IBV_WC_SUCCESS);
  ASSERT_EQ(cq2.wcs.size(), 1u);
  EXPECT_EQ(cq2.wcs[0].wr_id, 201u);
  EXPECT_EQ(cq2.wcs[0].byte_len, 3000u);
  EXPECT_EQ(cq2.wcs[0].qp_num, kQpnTgt) << "an XRC SRQ completion names the receive QP";
  EXPECT_EQ(cq2.wcs[0].opcode, IBV_WC_RECV);
  ASSERT_EQ(cq1.wcs.size(), 1u);
  EXPECT_EQ(cq1.wcs[0].wr_id, 101u);
  EXPECT_EQ(cq1.wcs[0].byte_len, 100u);
  EXPECT_EQ(std::memcmp(dst.data() + 4096, src.data(), 3000), 0);
  EXPECT_EQ(std::memcmp(dst.data(), src.data() + 3000, 100), 0);
  EXPECT_TRUE(cq3.wcs.empty());
}

TEST_F(XrcTest, PacketsCarryXrcOpcodesTheXrcethRequestsOnly) {
  ASSERT_EQ(srq1.post_recv(test::recv_wqe(101, at(dst), 4096, dst_key)), 0);
  ASSERT_EQ(ini.qp->post_send(xrc(test::send_wqe(1, at(src), 2000, lkey), 1), 0), 0);
  // The two request packets, straight off the send QP.
  std::vector<std::unique_ptr<test::Crafted>> sent = test::drain(ini);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0]->pkt.bth.opcode, 0xa0) << "XRC SEND FIRST";
  EXPECT_EQ(sent[1]->pkt.bth.opcode, 0xa2) << "XRC SEND LAST";
  for (const auto& c : sent) {
    EXPECT_EQ(c->pkt.xrc_srqn, 1u);
    EXPECT_EQ(c->pkt.bth.dest_qp, kQpnTgt);
    // BTH, then the XRCETH: one reserved byte and the 24-bit SRQ number.
    EXPECT_EQ(c->buf.data[12], 0);
    EXPECT_EQ(c->buf.data[15], 1);
    EXPECT_EQ(c->pkt.payload.size(), c == sent[0] ? 1024u : 976u);
    test::deliver(tgt, *c, kIpA, 0);
  }
  std::vector<std::unique_ptr<test::Crafted>> back = test::drain(tgt);
  ASSERT_FALSE(back.empty());
  EXPECT_EQ(back.back()->pkt.bth.opcode, 0xb1) << "XRC ACKNOWLEDGE";
  EXPECT_EQ(wire::aeth_type(back.back()->pkt.aeth.syndrome), wire::AethType::kAck);
  EXPECT_EQ(back.back()->buf.ib_len(), wire::kBthBytes + wire::kAethBytes);
  ASSERT_EQ(cq1.wcs.size(), 1u);
  EXPECT_EQ(cq1.wcs[0].byte_len, 2000u);
}

TEST_F(XrcTest, WriteReadAndAtomicsUseTheSrqsPd) {
  // WRITE with immediate consumes a WQE of the SRQ it names; READ and FETCH_ADD reach the memory
  // registered under the SRQs' PD.
  ASSERT_EQ(srq1.post_recv(test::recv_wqe(101, at(dst), 0, dst_key)), 0);
  SendWqe w = xrc(
      test::rdma_wqe(1, IBV_WR_RDMA_WRITE_WITH_IMM, at(src), 2500, lkey, at(dst, 100), dst_key), 1);
  w.imm_be = 0x12345678;
  ASSERT_EQ(ini.qp->post_send(w, 0), 0);
  std::memset(dst.data() + 5000, 0x5a, 64);
  ASSERT_EQ(ini.qp->post_send(xrc(test::rdma_wqe(2, IBV_WR_RDMA_READ, at(src, 6000), 64, lkey,
                                                 at(dst, 5000), dst_key),
                                  2),
                              0),
            0);
  uint64_t counter = 40;
  std::memcpy(dst.data() + 7000 - 7000 % 8, &counter, 8);
  const uint64_t target = at(dst, 7000 - 7000 % 8);
  ASSERT_EQ(ini.qp->post_send(xrc(test::atomic_wqe(3, IBV_WR_ATOMIC_FETCH_AND_ADD, at(src, 7000),
                                                   lkey, target, dst_key, 2),
                                  1),
                              0),
            0);
  ASSERT_TRUE(run(3));
  for (const ibv_wc& wc : ini.scq.wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
  EXPECT_EQ(std::memcmp(dst.data() + 100, src.data(), 2500), 0);
  ASSERT_EQ(cq1.wcs.size(), 1u);
  EXPECT_EQ(cq1.wcs[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(cq1.wcs[0].imm_data, 0x12345678u);
  EXPECT_TRUE(
      std::all_of(src.begin() + 6000, src.begin() + 6064, [](uint8_t b) { return b == 0x5a; }));
  uint64_t orig = 0, now = 0;
  std::memcpy(&orig, src.data() + 7000, 8);
  std::memcpy(&now, dst.data() + 7000 - 7000 % 8, 8);
  EXPECT_EQ(orig, 40u);
  EXPECT_EQ(now, 42u);
}

TEST_F(XrcTest, CompareAndSwapSwapsOnEqual) {
  // XRC CMP SWAP (0xb3) is a compare-and-swap, not a FETCH ADD: the responder tells them apart by
  // the operation bits alone.
  const uint64_t target = at(dst, 64);
  uint64_t v = 42;
  std::memcpy(dst.data() + 64, &v, 8);
  ASSERT_EQ(ini.qp->post_send(xrc(test::atomic_wqe(1, IBV_WR_ATOMIC_CMP_AND_SWP, at(src, 0), lkey,
                                                   target, dst_key, 42, 7),
                                  1),
                              0),
            0);
  ASSERT_TRUE(run(1));
  EXPECT_EQ(ini.scq.wcs[0].status, IBV_WC_SUCCESS);
  uint64_t orig = 0, now = 0;
  std::memcpy(&orig, src.data(), 8);
  std::memcpy(&now, dst.data() + 64, 8);
  EXPECT_EQ(orig, 42u);
  EXPECT_EQ(now, 7u);
}

TEST_F(XrcTest, MemoryOfAnotherPdIsARemoteAccessError) {
  std::vector<uint8_t> other(256, 0);
  const uint32_t other_key = tgt.mem.reg(kSrqPd + 1, other.data(), other.size(),
                                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_EQ(
      ini.qp->post_send(
          xrc(test::rdma_wqe(1, IBV_WR_RDMA_WRITE, at(src), 64, lkey, at(other), other_key), 1), 0),
      0);
  ASSERT_TRUE(run(1));
  EXPECT_EQ(ini.scq.wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_TRUE(std::all_of(other.begin(), other.end(), [](uint8_t b) { return b == 0; }));
}

TEST_F(XrcTest, AnUnknownSrqOrOneOfAnotherDomainIsAnInvalidRequest) {
  for (uint32_t srqn : {3u, 77u}) {
    SCOPED_TRACE(srqn);
    Node a{kQpnIni, kIpA};
    a.init.type = IBV_QPT_XRC_SEND;
    a.init.recv_cq = nullptr;
    a.rebuild();
    Node b{kQpnTgt, kIpB};
    b.init.type = IBV_QPT_XRC_RECV;
    b.init.send_cq = b.init.recv_cq = nullptr;
    b.init.xrcd = kXrcd;
    b.init.xrc_srqs = &table;
    b.rebuild();
    connect_ini(*a.qp, kIpB, kQpnTgt);
    connect_tgt(*b.qp, kIpA, kQpnIni);
    const uint32_t key = a.mem.reg(a.pd, src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    if (foreign.size() == 0) {
      ASSERT_EQ(foreign.post_recv(test::recv_wqe(301, at(dst), 4096, dst_key)), 0);
    }
    ASSERT_EQ(a.qp->post_send(xrc(test::send_wqe(1, at(src), 64, key), srqn), 0), 0);
    Link l{a, b};
    ASSERT_TRUE(l.run_until([&] { return !a.scq.wcs.empty(); }, 10 * kSecond));
    EXPECT_EQ(a.scq.wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
    EXPECT_EQ(a.qp->state(), IBV_QPS_ERR);
    EXPECT_TRUE(cq3.wcs.empty()) << "nothing lands in another domain's SRQ";
    EXPECT_EQ(b.qp->counters().xrc_srq_invalid, 1u);
    EXPECT_EQ(foreign.size(), 1u);
  }
}

TEST_F(XrcTest, AMessageThatChangesSrqMidwayIsRefused) {
  ASSERT_EQ(srq1.post_recv(test::recv_wqe(101, at(dst), 4096, dst_key)), 0);
  ASSERT_EQ(srq2.post_recv(test::recv_wqe(201, at(dst), 4096, dst_key)), 0);
  ASSERT_EQ(ini.qp->post_send(xrc(test::send_wqe(1, at(src), 2000, lkey), 1), 0), 0);
  std::vector<std::unique_ptr<test::Crafted>> sent = test::drain(ini);
  ASSERT_EQ(sent.size(), 2u);
  test::deliver(tgt, *sent[0], kIpA, 0);
  // The LAST packet, rewritten to name SRQ 2.
  wire::Packet last = sent[1]->pkt;
  last.xrc_srqn = 2;
  std::vector<uint8_t> payload(last.payload.begin(), last.payload.end());
  auto forged = test::craft_headers(last, payload);
  test::deliver(tgt, *forged, kIpA, 0);
  std::vector<std::unique_ptr<test::Crafted>> back = test::drain(tgt);
  ASSERT_FALSE(back.empty());
  EXPECT_EQ(back.back()->pkt.aeth.syndrome, test::nak_syndrome(wire::NakCode::kInvalidRequest));
  // The WQE the message took from SRQ 1 completes in error there; SRQ 2 keeps its own.
  ASSERT_EQ(cq1.wcs.size(), 1u);
  EXPECT_EQ(cq1.wcs[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_TRUE(cq2.wcs.empty());
  EXPECT_EQ(srq2.size(), 1u);
}

TEST_F(XrcTest, AnSrqDestroyedMidMessageDropsItsWqeAndRefusesTheRest) {
  ASSERT_EQ(srq1.post_recv(test::recv_wqe(101, at(dst), 4096, dst_key)), 0);
  ASSERT_EQ(ini.qp->post_send(xrc(test::send_wqe(1, at(src), 2000, lkey), 1), 0), 0);
  std::vector<std::unique_ptr<test::Crafted>> sent = test::drain(ini);
  ASSERT_EQ(sent.size(), 2u);
  test::deliver(tgt, *sent[0], kIpA, 0);
  table.srqs.erase(1);
  tgt.qp->xrc_srq_gone(&srq1);
  test::deliver(tgt, *sent[1], kIpA, 0);
  std::vector<std::unique_ptr<test::Crafted>> back = test::drain(tgt);
  ASSERT_FALSE(back.empty());
  EXPECT_EQ(back.back()->pkt.aeth.syndrome, test::nak_syndrome(wire::NakCode::kInvalidRequest));
  EXPECT_TRUE(cq1.wcs.empty()) << "the WQE went with its SRQ";
}

TEST_F(XrcTest, NoReceiveQueueOnEitherHalfAndNoSendQueueOnTheReceiveQp) {
  EXPECT_EQ(ini.qp->post_recv(test::recv_wqe(1, at(dst), 64, dst_key)), EINVAL);
  EXPECT_EQ(tgt.qp->post_recv(test::recv_wqe(1, at(dst), 64, dst_key)), EINVAL);
  EXPECT_EQ(tgt.qp->post_send(test::send_wqe(1, at(src), 64, lkey), 0), EINVAL);
  // ATOMIC WRITE is RC's alone (IBTA 1.5).
  SendWqe aw = test::rdma_wqe(2, IBV_WR_ATOMIC_WRITE, at(src), 8, lkey, at(dst), dst_key);
  EXPECT_EQ(ini.qp->post_send(xrc(aw, 1), 0), EINVAL);
}

TEST(XrcQpState, TheKernelsXrcColumns) {
  // The send QP enters RTR without responder attributes and RTS with requester ones; the receive
  // QP the other way round (ib_modify_qp_is_ok's XRC_INI / XRC_TGT columns).
  const int rtr_uc = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.ah_attr = test::ah_for(kIpB);
  EXPECT_EQ(check_modify(IBV_QPT_XRC_SEND, IBV_QPS_INIT, a, rtr_uc).err, 0);
  EXPECT_NE(check_modify(IBV_QPT_XRC_RECV, IBV_QPS_INIT, a, rtr_uc).err, 0);
  EXPECT_EQ(check_modify(IBV_QPT_XRC_RECV, IBV_QPS_INIT, a,
                         rtr_uc | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
                .err,
            0);
  // RC's masks on both halves, as perftest -c XRC passes them: each half ignores the other's
  // attributes (the kernel's modify_qp_mask).
  EXPECT_EQ(check_modify(IBV_QPT_XRC_SEND, IBV_QPS_INIT, a,
                         rtr_uc | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
                .err,
            0);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  const int rts_tgt = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
  EXPECT_EQ(check_modify(IBV_QPT_XRC_RECV, IBV_QPS_RTR, a,
                         rts_tgt | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)
                .err,
            0);
  EXPECT_EQ(check_modify(IBV_QPT_XRC_RECV, IBV_QPS_RTR, a, rts_tgt).err, 0);
  EXPECT_NE(check_modify(IBV_QPT_XRC_SEND, IBV_QPS_RTR, a, rts_tgt).err, 0);
  EXPECT_EQ(check_modify(IBV_QPT_XRC_SEND, IBV_QPS_RTR, a,
                         rts_tgt | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)
                .err,
            0);
}

}  // namespace
}  // namespace uroce::transport
