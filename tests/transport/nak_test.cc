// Every request the responder refuses is answered with the NAK IBTA 9.7.5.2 names for it —
// invalid request (Class B, 9.9.3.1.2), remote access error (Class C, 9.9.3.1.3) or remote
// operational error — never by silence: in each state a responder answers requests in (RTR, RTS,
// SQD), for SEND, WRITE, READ and ATOMIC, and also when the port cannot take the NAK at once. The
// requester then completes the refused WQE at once with the matching remote error (9.9.3.1,
// ibv_poll_cq(3)), without a retry, and both QPs are in ERR.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"

namespace uroce::transport {
namespace {

using test::Link;
using test::Node;
using wire::NakCode;
using wire::Opcode;

constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
constexpr uint32_t kQpnA = 0x11, kQpnB = 0x22;
constexpr uint32_t kPsnAB = 0x100, kPsnBA = 0x200;
constexpr Time kSecond = 1'000'000'000;
constexpr int kRemoteRwa =
    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// Brings `n` from RESET to `state` (RTR, RTS or SQD) towards the peer, as Node::connect does.
void bring_to(Node& n, uint32_t remote_ip, uint32_t remote_qpn, uint32_t sq_psn, uint32_t rq_psn,
              const test::PathParams& p, ibv_qp_state state) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = p.access;
  ASSERT_EQ(
      n.qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0), 0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p.mtu;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = p.rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  a.ah_attr = test::ah_for(remote_ip);
  ASSERT_EQ(n.qp->modify(a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                         0),
            0);
  if (state == IBV_QPS_RTR) return;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = sq_psn;
  a.timeout = p.timeout;
  a.retry_cnt = p.retry_cnt;
  a.rnr_retry = p.rnr_retry;
  a.max_rd_atomic = p.rd_atomic;
  ASSERT_EQ(n.qp->modify(a,
                         IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
                         0),
            0);
  if (state == IBV_QPS_RTS) return;
  a = {};
  a.qp_state = IBV_QPS_SQD;
  ASSERT_EQ(n.qp->modify(a, IBV_QP_STATE, 0), 0);
}

// Requester a (RTS) and responder b (in the state under test), b's memory: `target`, registered
// with the case's access, and a receive buffer.
struct Env {
  Env(int qp_access, int mr_access, ibv_qp_state b_state) {
    test::PathParams pa;
    pa.mtu = IBV_MTU_1024;
    test::PathParams pb = pa;
    pb.access = qp_access;
    a.connect(kIpB, kQpnB, kPsnAB, kPsnBA, pa);
    bring_to(b, kIpA, kQpnA, kPsnBA, kPsnAB, pb, b_state);
    src.resize(8192);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 13 + 1);
    skey = a.mem.reg(a.pd, src.data(), src.size(), IBV_ACCESS_LOCAL_WRITE);
    target.assign(4096, 0x77);
    tkey = b.mem.reg(b.pd, target.data(), target.size(), IBV_ACCESS_LOCAL_WRITE | mr_access);
    rbuf.assign(4096, 0);
    rbkey = b.mem.reg(b.pd, rbuf.data(), rbuf.size(), IBV_ACCESS_LOCAL_WRITE);
  }
  uint64_t s_at(size_t off) { return reinterpret_cast<uint64_t>(src.data() + off); }
  uint64_t t_at(size_t off) { return reinterpret_cast<uint64_t>(target.data() + off); }
  void post(const SendWqe& w) { ASSERT_EQ(a.qp->post_send(w, 0), 0); }
  void recv(uint32_t len, uint32_t lkey = 0) {
    ASSERT_EQ(b.qp->post_recv(test::recv_wqe(9, reinterpret_cast<uint64_t>(rbuf.data()), len,
                                             lkey ? lkey : rbkey)),
              0);
  }
  Node a{kQpnA, kIpA}, b{kQpnB, kIpB};
  std::vector<uint8_t> src, target, rbuf;
  uint32_t skey = 0, tkey = 0, rbkey = 0;
};

// One way a request is refused, posted as an application would post it.
struct Refusal {
  const char* name;
  int qp_access;  // b's qp_access_flags
  int mr_access;  // the remote access `target` is registered with
  std::function<void(Env&)> post;
  NakCode nak;
  uint32_t nak_psn;           // the PSN the NAK names: the refused packet's
  ibv_wc_status send_status;  // a's completion of the refused WQE
  int recv_status;            // b's completion of its receive WQE, -1: none
};

const std::vector<Refusal>& refusals() {
  static const std::vector<Refusal> all = {
      {"SendLongerThanTheReceive", kRemoteRwa, 0,
       [](Env& e) {
         e.recv(100);
         e.post(test::send_wqe(1, e.s_at(0), 3000, e.skey));
       },
       NakCode::kInvalidRequest, kPsnAB, IBV_WC_REM_INV_REQ_ERR, IBV_WC_LOC_LEN_ERR},
      {"SendOverflowingTheReceiveAtItsSecondPacket", kRemoteRwa, 0,
       [](Env& e) {
         e.recv(1500);
         e.post(test::send_wqe(1, e.s_at(0), 3000, e.skey));
       },
       NakCode::kInvalidRequest, kPsnAB + 1, IBV_WC_REM_INV_REQ_ERR, IBV_WC_LOC_LEN_ERR},
      {"SendIntoAReceiveWithABadLkey", kRemoteRwa, 0,
       [](Env& e) {
         e.recv(100, 0xbad);
         e.post(test::send_wqe(1, e.s_at(0), 64, e.skey));
       },
       NakCode::kRemoteOperationalError, kPsnAB, IBV_WC_REM_OP_ERR, IBV_WC_LOC_PROT_ERR},
      {"SendWithInvalidateOfAKeyThatCannotBeInvalidated", kRemoteRwa, 0,
       [](Env& e) {
         e.recv(100);
         SendWqe w = test::send_wqe(1, e.s_at(0), 64, e.skey, IBV_WR_SEND_WITH_INV);
         w.imm_be = e.tkey;
         e.post(w);
       },
       NakCode::kInvalidRequest, kPsnAB, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_INV_REQ_ERR},
      {"WriteToAQpWithoutRemoteWrite", IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE,
       [](Env& e) {
         e.post(test::rdma_wqe(1, IBV_WR_RDMA_WRITE, e.s_at(0), 64, e.skey, e.t_at(0), e.tkey));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"WriteWithAnUnknownRkey", kRemoteRwa, IBV_ACCESS_REMOTE_WRITE,
       [](Env& e) {
         e.post(
             test::rdma_wqe(1, IBV_WR_RDMA_WRITE, e.s_at(0), 64, e.skey, e.t_at(0), e.tkey + 1000));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"WritePastTheRegion", kRemoteRwa, IBV_ACCESS_REMOTE_WRITE,
       [](Env& e) {
         e.post(
             test::rdma_wqe(1, IBV_WR_RDMA_WRITE, e.s_at(0), 2000, e.skey, e.t_at(3000), e.tkey));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"WriteToAReadOnlyRegion", kRemoteRwa, IBV_ACCESS_REMOTE_READ,
       [](Env& e) {
         e.post(test::rdma_wqe(1, IBV_WR_RDMA_WRITE, e.s_at(0), 64, e.skey, e.t_at(0), e.tkey));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"WriteWithImmediateToAQpWithoutRemoteWrite", 0, IBV_ACCESS_REMOTE_WRITE,
       [](Env& e) {
         e.recv(100);
         e.post(test::rdma_wqe(1, IBV_WR_RDMA_WRITE_WITH_IMM, e.s_at(0), 64, e.skey, e.t_at(0),
                               e.tkey));
       },
       // The receive WQE was never taken: it is flushed, not failed.
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, IBV_WC_WR_FLUSH_ERR},
      {"ReadFromAQpWithoutRemoteRead", IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ,
       [](Env& e) {
         e.post(test::rdma_wqe(1, IBV_WR_RDMA_READ, e.s_at(0), 64, e.skey, e.t_at(0), e.tkey));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"ReadWithAnUnknownRkey", kRemoteRwa, IBV_ACCESS_REMOTE_READ,
       [](Env& e) {
         e.post(
             test::rdma_wqe(1, IBV_WR_RDMA_READ, e.s_at(0), 64, e.skey, e.t_at(0), e.tkey + 1000));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"ReadPastTheRegion", kRemoteRwa, IBV_ACCESS_REMOTE_READ,
       [](Env& e) {
         e.post(test::rdma_wqe(1, IBV_WR_RDMA_READ, e.s_at(0), 3000, e.skey, e.t_at(2000), e.tkey));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"ReadFromAWriteOnlyRegion", kRemoteRwa, IBV_ACCESS_REMOTE_WRITE,
       [](Env& e) {
         e.post(test::rdma_wqe(1, IBV_WR_RDMA_READ, e.s_at(0), 64, e.skey, e.t_at(0), e.tkey));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"AtomicOnAQpWithoutRemoteAtomic", IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
       IBV_ACCESS_REMOTE_ATOMIC,
       [](Env& e) {
         e.post(test::atomic_wqe(1, IBV_WR_ATOMIC_FETCH_AND_ADD, e.s_at(0), e.skey, e.t_at(0),
                                 e.tkey, 1));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"AtomicWithAnUnknownRkey", kRemoteRwa, IBV_ACCESS_REMOTE_ATOMIC,
       [](Env& e) {
         e.post(test::atomic_wqe(1, IBV_WR_ATOMIC_CMP_AND_SWP, e.s_at(0), e.skey, e.t_at(0),
                                 e.tkey + 1000, 0, 1));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"AtomicOnANonAtomicRegion", kRemoteRwa, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
       [](Env& e) {
         e.post(test::atomic_wqe(1, IBV_WR_ATOMIC_FETCH_AND_ADD, e.s_at(0), e.skey, e.t_at(0),
                                 e.tkey, 1));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"AtomicPastTheRegion", kRemoteRwa, IBV_ACCESS_REMOTE_ATOMIC,
       [](Env& e) {
         e.post(test::atomic_wqe(1, IBV_WR_ATOMIC_FETCH_AND_ADD, e.s_at(0), e.skey, e.t_at(4096),
                                 e.tkey, 1));
       },
       NakCode::kRemoteAccessError, kPsnAB, IBV_WC_REM_ACCESS_ERR, -1},
      {"MisalignedAtomic", kRemoteRwa, IBV_ACCESS_REMOTE_ATOMIC,
       [](Env& e) {
         e.post(test::atomic_wqe(1, IBV_WR_ATOMIC_FETCH_AND_ADD, e.s_at(0), e.skey, e.t_at(4),
                                 e.tkey, 1));
       },
       NakCode::kInvalidRequest, kPsnAB, IBV_WC_REM_INV_REQ_ERR, -1},
  };
  return all;
}

const char* state_name(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_RTR:
      return "Rtr";
    case IBV_QPS_RTS:
      return "Rts";
    default:
      return "Sqd";
  }
}

using Param = std::tuple<size_t, ibv_qp_state, bool>;

class RefusedRequest : public ::testing::TestWithParam<Param> {};

TEST_P(RefusedRequest, IsNakedAndCompletesAtOnceWithTheMatchingRemoteError) {
  const auto [index, state, pushback] = GetParam();
  const Refusal& c = refusals()[index];
  Env e(c.qp_access, c.mr_access, state);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  const std::vector<uint8_t> before = e.target;
  // The NAKs b sends, as they cross the link.
  std::vector<std::pair<uint32_t, uint8_t>> naks;
  Link link(e.a, e.b);
  link.drop_if = [&](int from, const wire::Packet& pkt) {
    if (from == 1 && pkt.bth.opcode == uint8_t(Opcode::kRcAcknowledge) &&
        wire::aeth_type(pkt.aeth.syndrome) != wire::AethType::kAck) {
      naks.emplace_back(pkt.bth.psn, pkt.aeth.syndrome);
    }
    return false;
  };
  if (pushback) e.b.sink.budget = 0;  // the port takes nothing when the request is refused
  c.post(e);
  ASSERT_TRUE(link.run_until([&] { return e.b.qp->state() == IBV_QPS_ERR; }, kSecond))
      << "the responder did not refuse it";
  if (pushback) {
    // What the engine relies on to send the NAK later: the QP says it has something to send.
    EXPECT_TRUE(e.b.qp->wants_pump());
    e.b.sink.budget = -1;
    e.b.qp->pump(link.now);
  }
  ASSERT_TRUE(link.run_until([&] { return !e.a.scq.wcs.empty(); }, kSecond));
  const Time done = link.now;
  ASSERT_EQ(naks.size(), 1u) << "exactly one NAK";
  EXPECT_EQ(naks[0].first, c.nak_psn);
  EXPECT_EQ(naks[0].second, test::nak_syndrome(c.nak));
  ASSERT_EQ(e.a.scq.wcs.size(), 1u);
  EXPECT_EQ(e.a.scq.wcs[0].wr_id, 1u);
  EXPECT_EQ(e.a.scq.wcs[0].status, c.send_status);
  // At once: no retransmission, well before the first ACK timeout (67 ms).
  EXPECT_EQ(e.a.qp->counters().retransmitted_pkts, 0u);
  EXPECT_EQ(e.a.qp->counters().local_ack_timeout_err, 0u);
  EXPECT_LT(done, 1'000'000u);
  EXPECT_EQ(e.a.qp->state(), IBV_QPS_ERR);
  EXPECT_EQ(e.b.qp->state(), IBV_QPS_ERR);
  if (c.recv_status >= 0) {
    ASSERT_EQ(e.b.rcq.wcs.size(), 1u);
    EXPECT_EQ(e.b.rcq.wcs[0].status, ibv_wc_status(c.recv_status));
  } else {
    EXPECT_TRUE(e.b.rcq.wcs.empty());
  }
  EXPECT_TRUE(e.target == before) << "a refused request changed memory";
  link.run_idle(kSecond);  // nothing more: the requester stops, the responder stays silent
  EXPECT_EQ(naks.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Ibta, RefusedRequest,
    ::testing::Combine(::testing::Range<size_t>(0, refusals().size()),
                       ::testing::Values(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD), ::testing::Bool()),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::string(refusals()[std::get<0>(info.param)].name) + "_In" +
             state_name(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_PortPushingBack" : "");
    });

// Malformed requests no uroce requester sends, crafted: opcode sequence and length errors are
// invalid requests (9.7.4.1.4, 9.7.4.1.6), NAKed at their PSN in every responder state.
struct Crafted {
  const char* name;
  // Delivers the packets to b (a responder expecting kPsnAB); returns the refused PSN.
  std::function<uint32_t(Env&, Time&)> deliver;
};

void in(Env& e, Time& now, wire::Packet p, size_t payload = 0) {
  p.bth.dest_qp = kQpnB;
  p.bth.pkey = wire::kDefaultPkey;
  std::vector<uint8_t> bytes(payload, 0x5c);
  test::deliver(e.b, *test::craft_headers(p, bytes), kIpA, now++);
}

wire::Packet request(Opcode op, uint32_t psn) {
  wire::Packet p;
  p.bth.opcode = uint8_t(op);
  p.bth.psn = psn;
  p.bth.ack_req = true;
  return p;
}

const std::vector<Crafted>& crafted() {
  static const std::vector<Crafted> all = {
      {"SendMiddleWithoutFirst",
       [](Env& e, Time& now) {
         e.recv(4096);
         in(e, now, request(Opcode::kRcSendMiddle, kPsnAB), 1024);
         return kPsnAB;
       }},
      {"SendLastWithoutFirst",
       [](Env& e, Time& now) {
         e.recv(4096);
         in(e, now, request(Opcode::kRcSendLast, kPsnAB), 10);
         return kPsnAB;
       }},
      {"SendFirstShorterThanThePmtu",
       [](Env& e, Time& now) {
         e.recv(4096);
         in(e, now, request(Opcode::kRcSendFirst, kPsnAB), 100);
         return kPsnAB;
       }},
      {"SendOnlyLongerThanThePmtu",
       [](Env& e, Time& now) {
         e.recv(4096);
         in(e, now, request(Opcode::kRcSendOnly, kPsnAB), 1028);
         return kPsnAB;
       }},
      {"SendFirstInsideAnOpenSend",
       [](Env& e, Time& now) {
         e.recv(4096);
         in(e, now, request(Opcode::kRcSendFirst, kPsnAB), 1024);
         in(e, now, request(Opcode::kRcSendFirst, kPsnAB + 1), 1024);
         return kPsnAB + 1;
       }},
      {"WriteMiddleWithoutFirst",
       [](Env& e, Time& now) {
         in(e, now, request(Opcode::kRcWriteMiddle, kPsnAB), 1024);
         return kPsnAB;
       }},
      {"WritePayloadShorterThanItsDmaLength",
       [](Env& e, Time& now) {
         wire::Packet p = request(Opcode::kRcWriteOnly, kPsnAB);
         p.reth = {e.t_at(0), e.tkey, 200};
         in(e, now, p, 100);
         return kPsnAB;
       }},
      {"WriteLastPastItsDmaLength",
       [](Env& e, Time& now) {
         wire::Packet p = request(Opcode::kRcWriteFirst, kPsnAB);
         p.reth = {e.t_at(0), e.tkey, 1100};
         in(e, now, p, 1024);
         in(e, now, request(Opcode::kRcWriteLast, kPsnAB + 1), 200);
         return kPsnAB + 1;
       }},
      {"WriteInsideAnOpenSend",
       [](Env& e, Time& now) {
         e.recv(4096);
         in(e, now, request(Opcode::kRcSendFirst, kPsnAB), 1024);
         wire::Packet p = request(Opcode::kRcWriteOnly, kPsnAB + 1);
         p.reth = {e.t_at(0), e.tkey, 8};
         in(e, now, p, 8);
         return kPsnAB + 1;
       }},
      {"ReadInsideAnOpenWrite",
       [](Env& e, Time& now) {
         wire::Packet w = request(Opcode::kRcWriteFirst, kPsnAB);
         w.reth = {e.t_at(0), e.tkey, 2048};
         in(e, now, w, 1024);
         wire::Packet r = request(Opcode::kRcReadRequest, kPsnAB + 1);
         r.reth = {e.t_at(0), e.tkey, 8};
         in(e, now, r);
         return kPsnAB + 1;
       }},
      {"AtomicInsideAnOpenSend",
       [](Env& e, Time& now) {
         e.recv(4096);
         in(e, now, request(Opcode::kRcSendFirst, kPsnAB), 1024);
         wire::Packet p = request(Opcode::kRcFetchAdd, kPsnAB + 1);
         p.atomic = {e.t_at(0), e.tkey, 1, 0};
         in(e, now, p);
         return kPsnAB + 1;
       }},
  };
  return all;
}

using CraftedParam = std::tuple<size_t, ibv_qp_state>;
class MalformedRequest : public ::testing::TestWithParam<CraftedParam> {};

TEST_P(MalformedRequest, IsNakedInvalidRequest) {
  const auto [index, state] = GetParam();
  Env e(kRemoteRwa, kRemoteRwa, state);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  Time now = 1;
  const uint32_t refused = crafted()[index].deliver(e, now);
  EXPECT_EQ(e.b.qp->state(), IBV_QPS_ERR);
  const auto out = test::drain(e.b);
  ASSERT_FALSE(out.empty());
  const wire::Packet& nak = out.back()->pkt;
  EXPECT_EQ(nak.bth.opcode, uint8_t(Opcode::kRcAcknowledge));
  EXPECT_EQ(nak.bth.psn, refused);
  EXPECT_EQ(nak.aeth.syndrome, test::nak_syndrome(NakCode::kInvalidRequest));
  for (size_t i = 0; i + 1 < out.size(); ++i) {
    EXPECT_EQ(wire::aeth_type(out[i]->pkt.aeth.syndrome), wire::AethType::kAck)
        << "only the refusal is a NAK";
  }
}

INSTANTIATE_TEST_SUITE_P(Ibta, MalformedRequest,
                         ::testing::Combine(::testing::Range<size_t>(0, crafted().size()),
                                            ::testing::Values(IBV_QPS_RTR, IBV_QPS_RTS,
                                                              IBV_QPS_SQD)),
                         [](const ::testing::TestParamInfo<CraftedParam>& info) {
                           return std::string(crafted()[std::get<0>(info.param)].name) + "_In" +
                                  state_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace uroce::transport
