// transport/qp_state.cc: every transition of the IBTA QP state table, its required and optional
// attributes per QP type, attribute value checks, and the effect of modify() on a Qp.
#include "transport/qp_state.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "harness.h"

namespace uroce::transport {
namespace {

constexpr int kAllAttrs = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_QKEY |
                          IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
                          IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_ALT_PATH | IBV_QP_CUR_STATE |
                          IBV_QP_PATH_MIG_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY;

// Attribute values that are valid for every field.
ibv_qp_attr valid_attr(ibv_qp_state cur, ibv_qp_state next) {
  ibv_qp_attr a{};
  a.qp_state = next;
  a.cur_qp_state = cur;
  a.port_num = 1;
  a.path_mtu = IBV_MTU_1024;
  a.ah_attr = test::ah_for(0x0a000002);
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  a.max_dest_rd_atomic = 1;
  a.path_mig_state = IBV_MIG_MIGRATED;
  return a;
}

struct Case {
  ibv_qp_type type;
  ibv_qp_state cur, next;
  int required, optional;
};

// The table as ibv_modify_qp(3) prints it, restated independently of qp_state.cc.
const Case kCases[] = {
    {IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
     0},
    {IBV_QPT_UD, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0},
    {IBV_QPT_UC, IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
     0},
    {IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_INIT, 0,
     IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS},
    {IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY},
    {IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
         IBV_QP_MIN_RNR_TIMER,
     IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX},
    {IBV_QPT_UC, IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
     IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX},
    {IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY},
    {IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS,
     IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_UC, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_SQ_PSN,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY},
    {IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_RTS, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_UD, IBV_QPS_RTS, IBV_QPS_RTS, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY},
    {IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_SQD, 0, IBV_QP_EN_SQD_ASYNC_NOTIFY},
    {IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_RTS, 0,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_RC, IBV_QPS_SQD, IBV_QPS_SQD, 0,
     IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
         IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ACCESS_FLAGS |
         IBV_QP_PKEY_INDEX | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE},
    {IBV_QPT_RC, IBV_QPS_RTS, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_ERR, 0, 0},
    {IBV_QPT_RC, IBV_QPS_ERR, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RESET, 0, 0},
    {IBV_QPT_UD, IBV_QPS_SQD, IBV_QPS_ERR, 0, 0},
};

TEST(QpState, EveryListedTransitionAcceptsExactlyItsMasks) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::string(to_string(c.cur)) + "->" + to_string(c.next) + " type " +
                 std::to_string(c.type));
    const ibv_qp_attr a = valid_attr(c.cur, c.next);
    // Required only, and required + all optional: accepted.
    ModifyCheck r = check_modify(c.type, c.cur, a, IBV_QP_STATE | c.required);
    EXPECT_EQ(r.err, 0);
    EXPECT_EQ(r.next, c.next);
    EXPECT_EQ(check_modify(c.type, c.cur, a, IBV_QP_STATE | c.required | c.optional).err, 0);
    // Each required attribute missing: EINVAL.
    for (int bit = 1; bit <= c.required; bit <<= 1) {
      if (!(c.required & bit)) continue;
      EXPECT_EQ(check_modify(c.type, c.cur, a, IBV_QP_STATE | (c.required & ~bit)).err, EINVAL)
          << "without required bit " << bit;
    }
    // Each attribute neither required nor optional: EINVAL.
    for (int bit = 1; bit <= kAllAttrs; bit <<= 1) {
      if (!(kAllAttrs & bit) || ((c.required | c.optional) & bit)) continue;
      EXPECT_EQ(check_modify(c.type, c.cur, a, IBV_QP_STATE | c.required | bit).err, EINVAL)
          << "with extra bit " << bit;
    }
  }
}

TEST(QpState, TransitionsNotInTheTableAreRefused) {
  const ibv_qp_state states[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
                                 IBV_QPS_RTS,   IBV_QPS_SQD,  IBV_QPS_ERR};
  int valid = 0;
  for (ibv_qp_state cur : states) {
    for (ibv_qp_state next : states) {
      const TransitionMasks m = transition_masks(IBV_QPT_RC, cur, next);
      valid += m.valid;
      if (!m.valid) {
        EXPECT_EQ(
            check_modify(IBV_QPT_RC, cur, valid_attr(cur, next), IBV_QP_STATE | kAllAttrs).err,
            EINVAL);
        EXPECT_EQ(check_modify(IBV_QPT_RC, cur, valid_attr(cur, next), IBV_QP_STATE).err, EINVAL);
      }
    }
  }
  // RESET→{RESET,INIT}; INIT→{RESET,INIT,RTR,ERR}; RTR→{RESET,RTS,ERR};
  // RTS→{RESET,RTS,SQD,ERR}; SQD→{RESET,RTS,SQD,ERR}; ERR→{RESET,ERR}.
  EXPECT_EQ(valid, 2 + 4 + 3 + 4 + 4 + 2);
  EXPECT_FALSE(transition_masks(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_ERR).valid);
  EXPECT_FALSE(transition_masks(IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_RTR).valid);
  EXPECT_FALSE(transition_masks(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTS).valid);
  EXPECT_FALSE(transition_masks(IBV_QPT_RAW_PACKET, IBV_QPS_RESET, IBV_QPS_INIT).valid);
}

TEST(QpState, NoStateBitMeansSameState) {
  const ibv_qp_attr a = valid_attr(IBV_QPS_RTS, IBV_QPS_RESET);  // qp_state ignored
  const ModifyCheck r = check_modify(IBV_QPT_RC, IBV_QPS_RTS, a, IBV_QP_MIN_RNR_TIMER);
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(r.next, IBV_QPS_RTS);
  EXPECT_EQ(check_modify(IBV_QPT_RC, IBV_QPS_RTS, a, IBV_QP_SQ_PSN).err, EINVAL);
}

TEST(QpState, CurStateMustMatch) {
  ibv_qp_attr a = valid_attr(IBV_QPS_RTS, IBV_QPS_RTS);
  EXPECT_EQ(check_modify(IBV_QPT_RC, IBV_QPS_RTS, a, IBV_QP_STATE | IBV_QP_CUR_STATE).err, 0);
  a.cur_qp_state = IBV_QPS_RTR;
  EXPECT_EQ(check_modify(IBV_QPT_RC, IBV_QPS_RTS, a, IBV_QP_STATE | IBV_QP_CUR_STATE).err, EINVAL);
}

TEST(QpState, AttributeValuesAreChecked) {
  const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  const ibv_qp_attr good = valid_attr(IBV_QPS_INIT, IBV_QPS_RTR);
  ASSERT_EQ(check_modify(IBV_QPT_RC, IBV_QPS_INIT, good, rtr).err, 0);
  auto bad = [&](auto mutate) {
    ibv_qp_attr a = good;
    mutate(a);
    return check_modify(IBV_QPT_RC, IBV_QPS_INIT, a, rtr).err;
  };
  EXPECT_EQ(bad([](ibv_qp_attr& a) { a.path_mtu = ibv_mtu(0); }), EINVAL);
  EXPECT_EQ(bad([](ibv_qp_attr& a) { a.path_mtu = ibv_mtu(6); }), EINVAL);
  EXPECT_EQ(bad([](ibv_qp_attr& a) { a.ah_attr.is_global = 0; }), EINVAL);
  EXPECT_EQ(bad([](ibv_qp_attr& a) { a.ah_attr.grh.dgid.raw[10] = 0; }), EINVAL);  // not v4
  EXPECT_EQ(bad([](ibv_qp_attr& a) { a.dest_qp_num = 0x1000000; }), EINVAL);
  EXPECT_EQ(bad([](ibv_qp_attr& a) { a.min_rnr_timer = 32; }), EINVAL);
  EXPECT_EQ(bad([](ibv_qp_attr& a) { a.max_dest_rd_atomic = kMaxRdAtomic + 1; }), EINVAL);
  EXPECT_EQ(bad([](ibv_qp_attr& a) { a.max_dest_rd_atomic = kMaxRdAtomic; }), 0);

  const int rts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  auto bad_rts = [&](auto mutate) {
    ibv_qp_attr a = valid_attr(IBV_QPS_RTR, IBV_QPS_RTS);
    mutate(a);
    return check_modify(IBV_QPT_RC, IBV_QPS_RTR, a, rts).err;
  };
  EXPECT_EQ(bad_rts([](ibv_qp_attr&) {}), 0);
  EXPECT_EQ(bad_rts([](ibv_qp_attr& a) { a.timeout = 32; }), EINVAL);
  EXPECT_EQ(bad_rts([](ibv_qp_attr& a) { a.retry_cnt = 8; }), EINVAL);
  EXPECT_EQ(bad_rts([](ibv_qp_attr& a) { a.rnr_retry = 8; }), EINVAL);
  EXPECT_EQ(bad_rts([](ibv_qp_attr& a) { a.max_rd_atomic = kMaxRdAtomic + 1; }), EINVAL);
  EXPECT_EQ(bad_rts([](ibv_qp_attr& a) { a.max_rd_atomic = kMaxRdAtomic; }), 0);

  const int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  auto bad_init = [&](auto mutate) {
    ibv_qp_attr a = valid_attr(IBV_QPS_RESET, IBV_QPS_INIT);
    mutate(a);
    return check_modify(IBV_QPT_RC, IBV_QPS_RESET, a, init).err;
  };
  EXPECT_EQ(bad_init([](ibv_qp_attr&) {}), 0);
  EXPECT_EQ(bad_init([](ibv_qp_attr& a) { a.port_num = 2; }), EINVAL);
  EXPECT_EQ(bad_init([](ibv_qp_attr& a) { a.pkey_index = 1; }), EINVAL);
  EXPECT_EQ(bad_init([](ibv_qp_attr& a) { a.qp_access_flags = IBV_ACCESS_ZERO_BASED; }), EINVAL);
}

// A refusal says why and which attributes, for the log line of ibv_modify_qp (src/verbs/qp.cc).
TEST(QpState, RefusalsNameTheAttribute) {
  const ibv_qp_attr rtr = valid_attr(IBV_QPS_INIT, IBV_QPS_RTR);
  const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  ModifyCheck c = check_modify(IBV_QPT_RC, IBV_QPS_INIT, rtr, rtr_mask & ~IBV_QP_RQ_PSN);
  EXPECT_EQ(c.err, EINVAL);
  EXPECT_EQ(c.attrs, IBV_QP_RQ_PSN);
  ASSERT_NE(c.why, nullptr);
  c = check_modify(IBV_QPT_RC, IBV_QPS_INIT, rtr, rtr_mask | IBV_QP_SQ_PSN);
  EXPECT_EQ(c.attrs, IBV_QP_SQ_PSN);
  ibv_qp_attr bad = rtr;
  bad.max_dest_rd_atomic = kMaxRdAtomic + 1;
  c = check_modify(IBV_QPT_RC, IBV_QPS_INIT, bad, rtr_mask);
  EXPECT_EQ(c.attrs, IBV_QP_MAX_DEST_RD_ATOMIC);
  bad = rtr;
  bad.ah_attr.is_global = 0;
  c = check_modify(IBV_QPT_RC, IBV_QPS_INIT, bad, rtr_mask);
  EXPECT_EQ(c.attrs, IBV_QP_AV);
  c = check_modify(IBV_QPT_RC, IBV_QPS_RESET, rtr, rtr_mask);  // RESET -> RTR: no such transition
  EXPECT_EQ(c.attrs, 0);
  ASSERT_NE(c.why, nullptr);
  c = check_modify(IBV_QPT_RC, IBV_QPS_INIT, rtr, rtr_mask);
  EXPECT_EQ(c.err, 0);
  EXPECT_EQ(c.why, nullptr);
  EXPECT_EQ(attr_mask_to_string(IBV_QP_SQ_PSN | IBV_QP_TIMEOUT), "IBV_QP_TIMEOUT|IBV_QP_SQ_PSN");
  EXPECT_EQ(attr_mask_to_string(0), "0");
  EXPECT_EQ(attr_mask_to_string(IBV_QP_STATE | (1 << 30)), "IBV_QP_STATE|0x40000000");
}

TEST(QpState, Units) {
  EXPECT_EQ(mtu_bytes(IBV_MTU_256), 256u);
  EXPECT_EQ(mtu_bytes(IBV_MTU_4096), 4096u);
  EXPECT_EQ(ack_timeout_ns(0), kNever);
  EXPECT_EQ(ack_timeout_ns(1), 8192u);
  EXPECT_EQ(ack_timeout_ns(14), 4096ull << 14);
  EXPECT_EQ(rnr_timer_ns(0), 655'360'000u);   // Table 45: 655.36 ms
  EXPECT_EQ(rnr_timer_ns(1), 10'000u);        // 0.01 ms
  EXPECT_EQ(rnr_timer_ns(14), 1'280'000u);    // 1.28 ms
  EXPECT_EQ(rnr_timer_ns(31), 491'520'000u);  // 491.52 ms
  // A RoCEv2 GID is its address: the AV's DGID, IPv4-mapped, is the peer's IPv4 address.
  const wire::IpAddr ip = wire::IpAddr::from_bytes(test::ah_for(0xc0a80102).grh.dgid.raw);
  EXPECT_TRUE(ip.is_v4());
  EXPECT_EQ(ip.v4(), 0xc0a80102u);
}

// modify() on a Qp: the state it reports, query(), and what each transition does to the queues.
TEST(QpStateOnQp, WalksToRtsAndReportsAttributes) {
  test::Node n(0x11, 0x0a000001);
  EXPECT_EQ(n.qp->state(), IBV_QPS_RESET);
  n.connect(0x0a000002, 0x22, 0xabc, 0xdef);
  EXPECT_EQ(n.qp->state(), IBV_QPS_RTS);
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  n.qp->query(a, ia);
  EXPECT_EQ(a.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(a.dest_qp_num, 0x22u);
  EXPECT_EQ(a.sq_psn, 0xabcu);
  EXPECT_EQ(a.rq_psn, 0xdefu);
  EXPECT_EQ(a.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(a.cap.max_send_wr, 4096u);
  EXPECT_EQ(ia.qp_type, IBV_QPT_RC);
  // An invalid modify leaves everything unchanged.
  ibv_qp_attr bad{};
  bad.qp_state = IBV_QPS_INIT;
  EXPECT_EQ(n.qp->modify(bad, IBV_QP_STATE, 0), EINVAL);
  EXPECT_EQ(n.qp->state(), IBV_QPS_RTS);
}

TEST(QpStateOnQp, PostingIsRefusedBeforeRtsAndFlushedInErr) {
  test::Node n(0x11, 0x0a000001);
  std::vector<uint8_t> buf;
  const uint32_t key = n.buffer(buf, 64);
  const SendWqe s = test::send_wqe(1, reinterpret_cast<uint64_t>(buf.data()), 64, key);
  const RecvWqe r = test::recv_wqe(2, reinterpret_cast<uint64_t>(buf.data()), 64, key);
  EXPECT_EQ(n.qp->post_send(s, 0), EINVAL);  // RESET
  EXPECT_EQ(n.qp->post_recv(r), EINVAL);     // RESET
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  ASSERT_EQ(
      n.qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0), 0);
  EXPECT_EQ(n.qp->post_send(s, 0), EINVAL);  // INIT
  EXPECT_EQ(n.qp->post_recv(r), 0);          // receives may be posted from INIT on
  a = {};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(n.qp->modify(a, IBV_QP_STATE, 0), 0);
  ASSERT_EQ(n.rcq.wcs.size(), 1u);  // the queued receive was flushed
  EXPECT_EQ(n.rcq.wcs[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(n.rcq.wcs[0].wr_id, 2u);
  EXPECT_EQ(n.qp->post_send(s, 0), 0);
  EXPECT_EQ(n.qp->post_recv(r), 0);
  ASSERT_EQ(n.scq.wcs.size(), 1u);
  EXPECT_EQ(n.scq.wcs[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(n.rcq.wcs.size(), 2u);
  // RESET empties silently; the QP can be brought up again.
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(n.qp->modify(a, IBV_QP_STATE, 0), 0);
  EXPECT_EQ(n.qp->state(), IBV_QPS_RESET);
  n.connect(0x0a000002, 0x22, 0, 0);
  EXPECT_EQ(n.qp->state(), IBV_QPS_RTS);
  EXPECT_EQ(n.qp->post_send(s, 0), 0);
}

TEST(QpStateOnQp, SendQueueFullIsEnomem) {
  test::Node n(0x11, 0x0a000001);
  n.init.max_send_wr = 2;
  n.rebuild();
  n.connect(0x0a000002, 0x22, 0, 0);
  n.sink.budget = 0;  // nothing leaves, nothing completes
  std::vector<uint8_t> buf;
  const uint32_t key = n.buffer(buf, 64);
  const SendWqe s = test::send_wqe(1, reinterpret_cast<uint64_t>(buf.data()), 64, key);
  EXPECT_EQ(n.qp->post_send(s, 0), 0);
  EXPECT_EQ(n.qp->post_send(s, 0), 0);
  EXPECT_EQ(n.qp->post_send(s, 0), ENOMEM);
}

TEST(QpStateOnQp, UnsupportedWorkRequestsAreEinval) {
  test::Node n(0x11, 0x0a000001);
  n.connect(0x0a000002, 0x22, 0, 0);
  std::vector<uint8_t> buf;
  const uint32_t key = n.buffer(buf, 64);
  SendWqe s = test::send_wqe(1, reinterpret_cast<uint64_t>(buf.data()), 64, key);
  s.opcode = IBV_WR_TSO;  // raw packet QPs only
  EXPECT_EQ(n.qp->post_send(s, 0), EINVAL);
  s.opcode = IBV_WR_LOCAL_INV;  // a local operation carries no data
  EXPECT_EQ(n.qp->post_send(s, 0), EINVAL);
  s.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;  // the result must be one 8-byte SGE
  EXPECT_EQ(n.qp->post_send(s, 0), EINVAL);
  s.sge[0].length = 8;
  s.num_sge = 2;
  EXPECT_EQ(n.qp->post_send(s, 0), EINVAL);
  s.num_sge = 1;
  s.opcode = IBV_WR_RDMA_READ;  // READ/ATOMIC write their SGEs: no inline
  s.send_flags = IBV_SEND_INLINE;
  s.inline_len = 8;
  EXPECT_EQ(n.qp->post_send(s, 0), EINVAL);
  s.send_flags = 0;
  s.opcode = IBV_WR_SEND;
  s.sge[0].length = 64;
  s.num_sge = kMaxSge + 1;
  EXPECT_EQ(n.qp->post_send(s, 0), EINVAL);
  s.num_sge = 1;
  s.send_flags = IBV_SEND_INLINE;
  s.inline_len = kMaxInlineData + 1;
  EXPECT_EQ(n.qp->post_send(s, 0), EINVAL);
  EXPECT_TRUE(n.sink.sent.empty());
}

TEST(QpStateOnQp, SqdStopsNewWqesAndReportsDrained) {
  test::Node n(0x11, 0x0a000001);
  n.connect(0x0a000002, 0x22, 0, 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_SQD;
  a.en_sqd_async_notify = 1;
  ASSERT_EQ(n.qp->modify(a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY, 0), 0);
  ASSERT_EQ(n.events.events.size(), 1u);
  EXPECT_EQ(n.events.events[0], IBV_EVENT_SQ_DRAINED);
  std::vector<uint8_t> buf;
  const uint32_t key = n.buffer(buf, 64);
  EXPECT_EQ(n.qp->post_send(test::send_wqe(1, reinterpret_cast<uint64_t>(buf.data()), 64, key), 0),
            0);
  EXPECT_TRUE(n.sink.sent.empty());  // queued, not started in SQD
  a.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(n.qp->modify(a, IBV_QP_STATE, 0), 0);
  EXPECT_EQ(n.sink.sent.size(), 1u);
}

// A QP that failed (its WQEs flushed), reset and connected again carries traffic again, as
// rdma-core's tests do it (test_mr's rereg cases): RESET starts the queues over.
TEST(QpStateOnQp, ResetAfterAnErrorAndConnectedAgainWorks) {
  constexpr uint32_t kIpA = 0x0a000001, kIpB = 0x0a000002;
  test::Node a(0x11, kIpA), b(0x22, kIpB);
  a.connect(kIpB, 0x22, 100, 200);
  b.connect(kIpA, 0x11, 200, 100);
  std::vector<uint8_t> src, dst;
  const uint32_t skey = a.buffer(src, 4096, 0x3c), dkey = b.buffer(dst, 4096);
  const auto send = [&](uint64_t id) {
    ASSERT_EQ(
        a.qp->post_send(test::send_wqe(id, reinterpret_cast<uint64_t>(src.data()), 64, skey), 0),
        0);
  };
  const auto recv = [&](uint64_t id) {
    ASSERT_EQ(
        b.qp->post_recv(test::recv_wqe(id, reinterpret_cast<uint64_t>(dst.data()), 4096, dkey)), 0);
  };
  test::Link link(a, b);
  for (int round = 0; round < 3; ++round) {
    a.scq.wcs.clear();
    recv(1);
    send(1);
    send(2);  // no receive for it: RNR until the QP is moved to ERR
    ASSERT_TRUE(link.run_until([&] { return !a.scq.wcs.empty(); }, 1'000'000'000));
    EXPECT_EQ(a.scq.wcs[0].status, IBV_WC_SUCCESS);
    ibv_qp_attr err{};
    err.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(a.qp->modify(err, IBV_QP_STATE, link.now), 0);
    ASSERT_EQ(a.scq.wcs.size(), 2u);
    EXPECT_EQ(a.scq.wcs[1].status, IBV_WC_WR_FLUSH_ERR);
    ibv_qp_attr reset{};
    reset.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(a.qp->modify(reset, IBV_QP_STATE, link.now), 0);
    ASSERT_EQ(b.qp->modify(reset, IBV_QP_STATE, link.now), 0);
    const uint32_t psn = 1000 * (round + 1);
    a.connect(kIpB, 0x22, psn, psn + 500);
    b.connect(kIpA, 0x11, psn + 500, psn);
    link.run_idle(link.now + 1'000'000'000);
  }
  a.scq.wcs.clear();
  recv(7);
  send(7);
  ASSERT_TRUE(link.run_until([&] { return !a.scq.wcs.empty(); }, link.now + 1'000'000'000));
  EXPECT_EQ(a.scq.wcs[0].wr_id, 7u);
  EXPECT_EQ(a.scq.wcs[0].status, IBV_WC_SUCCESS);
}

}  // namespace
}  // namespace uroce::transport
