// The responder of errno_test.cc's exit test, in a process of its own: an application that exits
// the moment it polls an error completion, with its device still open (as ibv_rc_pingpong does
// on a failed receive). Protocol on stdin/stdout, one line each:
//   it prints   "<qpn> <gid as 32 hex digits>"   its RC QP, in RESET
//   it reads    "<qpn> <gid>"                    the peer's
//   it prints   "ready"                          RTR, <count> receives of <recv_len> bytes posted
// then waits on a completion channel for the first receive's completion, prints its status and
// calls exit(0) at once. Arguments: recv_len (default 64), count (default 1). The receives after
// the first are flushed when the QP enters ERR — after the completion that wakes this program
// and before the NAK leaves, as in ibv_rc_pingpong, whose server posts 500. Device: the last of
// UROCE_DEVICES.
#include <infiniband/verbs.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "exit_peer: %s\n", what);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t recv_len = argc > 1 ? static_cast<uint32_t>(std::atoi(argv[1])) : 64;
  const int count = argc > 2 ? std::atoi(argv[2]) : 1;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) die("no device");
  ibv_context* ctx = ibv_open_device(list[n - 1]);  // uroce devices come last
  if (!ctx) die("open");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  std::vector<char> buf(1 << 16);
  // int(…): rdma-core's ibv_reg_mr macro ANDs the access flags with IBV_ACCESS_OPTIONAL_RANGE, an
  // enumerator of another enum, which C++20 deprecates for an enumerator (clang:
  // -Wdeprecated-enum-enum-conversion); a combination of flags is an int already.
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), int(IBV_ACCESS_LOCAL_WRITE));
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, count + 1, nullptr, ch, 0);
  if (!pd || !mr || !ch || !cq) die("resources");
  ibv_qp_init_attr ia{};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 4;
  ia.cap.max_recv_wr = static_cast<uint32_t>(count);
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd, &ia);
  if (!qp) die("create_qp");
  ibv_gid gid{};
  if (ibv_query_gid(ctx, 1, 0, &gid) != 0) die("gid");
  std::printf("%u ", qp->qp_num);
  for (uint8_t b : gid.raw) std::printf("%02x", b);
  std::printf("\n");
  std::fflush(stdout);

  unsigned peer_qpn = 0;
  char hex[33] = {};
  if (std::scanf("%u %32s", &peer_qpn, hex) != 2) die("peer");
  ibv_gid dgid{};
  for (int i = 0; i < 16; ++i) {
    unsigned v;
    std::sscanf(hex + 2 * i, "%2x", &v);
    dgid.raw[i] = static_cast<uint8_t>(v);
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("init");
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = 100;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = dgid;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("rtr");
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), recv_len, mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  for (int i = 0; i < count; ++i) {
    wr.wr_id = 1 + static_cast<uint64_t>(i);
    if (ibv_post_recv(qp, &wr, &bad)) die("post_recv");
  }
  if (ibv_req_notify_cq(cq, 0)) die("notify");
  std::printf("ready\n");
  std::fflush(stdout);

  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx)) die("get_cq_event");
  ibv_wc wc{};
  if (ibv_poll_cq(cq, 1, &wc) != 1) die("poll");
  std::printf("%d\n", static_cast<int>(wc.status));
  std::fflush(stdout);
  std::exit(0);  // at once, everything still open
}
