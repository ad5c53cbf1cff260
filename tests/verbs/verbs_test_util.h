// Helpers shared by the verbs tests, which link liburoce directly and drive the public verbs API:
// the device configuration each test executable uses, opening a device by name, polling a CQ with
// a bound, and the set-up of a two-device test (one device's PD and buffer, RC and UD QPs brought
// to RTS, address handles, receives). Set-up bugs are fixed here once for every suite.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace uroce::test {

// Sets UROCE_DEVICES before the first ibv_get_device_list, which reads the configuration once.
// Each executable names addresses of its own, so the suites can run in parallel.
class DevicesEnv : public ::testing::Environment {
 public:
  explicit DevicesEnv(const char* spec) : spec_(spec) {}
  void SetUp() override { setenv("UROCE_DEVICES", spec_, 1); }

 private:
  const char* spec_;
};

inline ibv_context* open_named(const char* name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  return ctx;
}

// Polls until `want` completions arrived or `ms` milliseconds passed.
inline std::vector<ibv_wc> poll_n(ibv_cq* cq, size_t want, int ms = 2000) {
  std::vector<ibv_wc> out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (out.size() < want && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[8];
    int n = ibv_poll_cq(cq, 8, wc);
    EXPECT_GE(n, 0);
    for (int i = 0; i < n; ++i) out.push_back(wc[i]);
    if (n == 0) usleep(100);
  }
  return out;
}

// Waits up to `ms` for the context's async event fd to become readable and takes one event.
inline bool next_event(ibv_context* ctx, ibv_async_event* ev, int ms = 5000) {
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  if (poll(&pfd, 1, ms) != 1) return false;
  return ibv_get_async_event(ctx, ev) == 0;
}

// One device of a two-device test: its context, a PD, one registered buffer and GID 0. Each suite
// derives its Side from this and adds the CQs and QPs it needs.
struct Dev {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  std::vector<char> buf;
  ibv_mr* mr = nullptr;
  ibv_gid gid{};
};

// Opens device `name`, allocates a PD, registers a zeroed buffer of `size` bytes with `access` and
// reads GID 0.
inline void open_dev(Dev& d, const char* name, unsigned access = IBV_ACCESS_LOCAL_WRITE,
                     size_t size = 65536) {
  d.ctx = open_named(name);
  ASSERT_NE(d.ctx, nullptr);
  d.pd = ibv_alloc_pd(d.ctx);
  ASSERT_NE(d.pd, nullptr);
  d.buf.assign(size, 0);
  d.mr = ibv_reg_mr(d.pd, d.buf.data(), d.buf.size(), static_cast<int>(access));
  ASSERT_NE(d.mr, nullptr) << std::strerror(errno);
  ASSERT_EQ(ibv_query_gid(d.ctx, 1, 0, &d.gid), 0);
}

// Releases what open_dev made; the caller destroyed its QPs and CQs first. With `check`, each
// step must succeed; without, teardown only frees what a failed test may have left in use.
inline void close_dev(Dev& d, bool check = true) {
  auto done = [check](int rc) {
    if (check) {
      EXPECT_EQ(rc, 0);
    }
  };
  if (d.mr) done(ibv_dereg_mr(d.mr));
  if (d.pd) done(ibv_dealloc_pd(d.pd));
  if (d.ctx) done(ibv_close_device(d.ctx));
}

// A device with one RC QP, its send and receive CQs and, if the suite wants one, the completion
// channel of its CQs. The suite creates these; close_rc releases them and the device.
struct RcSide : Dev {
  ibv_comp_channel* ch = nullptr;
  ibv_cq* scq = nullptr;
  ibv_cq* rcq = nullptr;
  ibv_qp* qp = nullptr;
};

inline void close_rc(RcSide& s) {
  if (s.qp) {
    EXPECT_EQ(ibv_destroy_qp(s.qp), 0);
  }
  if (s.scq) {
    EXPECT_EQ(ibv_destroy_cq(s.scq), 0);
  }
  if (s.rcq) {
    EXPECT_EQ(ibv_destroy_cq(s.rcq), 0);
  }
  if (s.ch) {
    EXPECT_EQ(ibv_destroy_comp_channel(s.ch), 0);
  }
  close_dev(s);
}

// Gives `s` its send and receive CQs (`depth` entries each) and an RC QP on them of `depth` WRs
// and one SGE per queue, every send signaled.
inline void create_rc_qp(RcSide& s, int depth = 32) {
  s.scq = ibv_create_cq(s.ctx, depth, nullptr, nullptr, 0);
  s.rcq = ibv_create_cq(s.ctx, depth, nullptr, nullptr, 0);
  ASSERT_NE(s.scq, nullptr);
  ASSERT_NE(s.rcq, nullptr);
  ibv_qp_init_attr ia{};
  ia.send_cq = s.scq;
  ia.recv_cq = s.rcq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = static_cast<uint32_t>(depth);
  ia.cap.max_recv_wr = static_cast<uint32_t>(depth);
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.sq_sig_all = 1;
  s.qp = ibv_create_qp(s.pd, &ia);
  ASSERT_NE(s.qp, nullptr) << std::strerror(errno);
}

// Posts one receive of buf[off, off + len) of `d` on `qp`.
inline void post_recv_at(ibv_qp* qp, const Dev& d, uint64_t wr_id, size_t off, uint32_t len) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(d.buf.data() + off), len, d.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_recv(qp, &wr, &bad), 0);
}

// Posts one IBV_WR_SEND of buf[off, off + len) of `d` on `qp`; returns ibv_post_send's result.
inline int post_send_at(ibv_qp* qp, const Dev& d, size_t off, uint32_t len, uint64_t wr_id = 0,
                        unsigned send_flags = 0) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(d.buf.data() + off), len, d.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = send_flags;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// Posts one signaled UD SEND (wr_id 99) of buf[off, off + len) of `d` on `qp` to QP `qpn` (or a
// multicast group) behind `ah`, with Q_Key `qkey`; returns ibv_post_send's result.
inline int post_ud_send(ibv_qp* qp, const Dev& d, size_t off, uint32_t len, ibv_ah* ah,
                        uint32_t qpn, uint32_t qkey) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(d.buf.data() + off), len, d.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 99;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = qpn;
  wr.wr.ud.remote_qkey = qkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// RC connection: the attributes of each transition (IBTA 10.3.1: RESET -> INIT -> RTR -> RTS),
// kept separate so that tests can also feed the transitions bad attributes.
inline constexpr int kRcInitMask =
    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
inline constexpr int kRcRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
inline constexpr int kRcRtsMask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;

// Where the suites' RC set-ups differ: the remote access the QP grants, the PSNs, the RNR timer.
struct RcOpts {
  unsigned access = 0;
  uint32_t psn = 100;
  uint8_t min_rnr_timer = 12;
};

inline ibv_qp_attr rc_init_attr(const RcOpts& o = {}) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = o.access;
  return a;
}

// RoCE addresses the peer by its GID, so the address vector always carries a GRH.
inline ibv_qp_attr rc_rtr_attr(uint32_t dest_qpn, const ibv_gid& dgid, const RcOpts& o = {}) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = o.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = o.min_rnr_timer;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = dgid;
  a.ah_attr.grh.sgid_index = 0;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  return a;
}

inline ibv_qp_attr rc_rts_attr(const RcOpts& o = {}) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = o.psn;
  a.max_rd_atomic = 1;
  return a;
}

// Brings RC `qp` from RESET to RTS, connected to QP `dest_qpn` of the device with GID `dgid`.
inline void connect_rc(ibv_qp* qp, uint32_t dest_qpn, const ibv_gid& dgid, const RcOpts& o = {}) {
  ibv_qp_attr a = rc_init_attr(o);
  ASSERT_EQ(ibv_modify_qp(qp, &a, kRcInitMask), 0);
  EXPECT_EQ(qp->state, IBV_QPS_INIT);
  a = rc_rtr_attr(dest_qpn, dgid, o);
  ASSERT_EQ(ibv_modify_qp(qp, &a, kRcRtrMask), 0);
  EXPECT_EQ(qp->state, IBV_QPS_RTR);
  a = rc_rts_attr(o);
  ASSERT_EQ(ibv_modify_qp(qp, &a, kRcRtsMask), 0);
  EXPECT_EQ(qp->state, IBV_QPS_RTS);
}

// Connects the RC QPs of `a` and `b` to each other.
inline void connect_pair(RcSide& a, RcSide& b, const RcOpts& o = {}) {
  connect_rc(a.qp, b.qp->qp_num, b.gid, o);
  connect_rc(b.qp, a.qp->qp_num, a.gid, o);
}

// A UD QP on `cq` for both queues, 16 WRs of one SGE each; nullptr if creation failed.
inline ibv_qp* create_ud_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_UD;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &ia);
}

// Brings UD `qp` from RESET to RTR with Q_Key `qkey`, ready to receive: a UD QP needs no peer.
inline void ud_to_rtr(ibv_qp* qp, uint32_t qkey) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = qkey;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
}

// Brings UD `qp` from RESET to RTS, ready to send as well.
inline void ud_to_rts(ibv_qp* qp, uint32_t qkey, uint32_t sq_psn = 0) {
  ASSERT_NO_FATAL_FAILURE(ud_to_rtr(qp, qkey));
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = sq_psn;
  ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
}

// An address handle to GID `dgid` (a unicast peer or a multicast group) on port 1, with the GRH
// RoCE needs.
inline ibv_ah* create_ah(ibv_pd* pd, const ibv_gid& dgid) {
  ibv_ah_attr at{};
  at.is_global = 1;
  at.port_num = 1;
  at.grh.dgid = dgid;
  at.grh.hop_limit = 1;
  return ibv_create_ah(pd, &at);
}

}  // namespace uroce::test
