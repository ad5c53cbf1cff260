// Shared plumbing for the uroce examples: plain libibverbs, nothing uroce-specific, so the examples
// run unchanged on a real RoCE NIC. Each example is a server and a client that connect one RC QP
// and swap its coordinates over a TCP socket, the way ibv_rc_pingpong and perftest do.
#pragma once

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "tcp_setup.h"

namespace example {

struct Options {
  std::string device;  // empty: the first device libibverbs lists
  std::string server;  // empty: run as the server
  uint16_t tcp_port = 18515;
  int ib_port = 1;    // an int, not uint8_t: CLI11 would read a uint8_t as a character
  int gid_index = 0;  // RoCEv2 (IBTA Annex A17) addresses by GID: a GRH is a must
  size_t size = 65536;
  int iters = 16;
  bool is_server() const { return server.empty(); }
};

inline void add_common_options(CLI::App& app, Options& o) {
  app.add_option("-d,--device", o.device, "RDMA device (default: the first one)");
  app.add_option("-p,--port", o.tcp_port, "TCP port for the connection set-up")
      ->capture_default_str();
  app.add_option("-i,--ib-port", o.ib_port, "port of the RDMA device")
      ->check(CLI::Range(1, 255))
      ->capture_default_str();
  app.add_option("-g,--gid-index", o.gid_index, "local GID index")->capture_default_str();
  app.add_option("server", o.server, "server address (omit to run as the server)");
}

// Expected byte at offset i of a test buffer: never zero (so an unwritten byte shows) and with a
// prime period (so a block landing at the wrong power-of-two offset shows too).
inline uint8_t pattern(size_t i) {
  return static_cast<uint8_t>(i % 251 + 1);
}

// ---- TCP: connection set-up only (tcp_setup.h); the data moves over RDMA
inline int tcp_connect(const Options& o) {
  return tcp_connect(o.server, o.tcp_port);
}

// ---- Verbs resources
// ------------------------------------------------------------------------------ One RC QP with its
// CQ and one registered buffer. Failures end the process (see die()), which releases everything; a
// normal run tears down in reverse order of creation.
struct Rdma {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;
  Endpoint local;

  Rdma(const Options& o, size_t size, int access) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list || n == 0) die("no RDMA devices (with uroce: run under uroce-run)");
    for (int i = 0; i < n && !ctx; ++i)
      if (o.device.empty() || o.device == ibv_get_device_name(list[i]))
        ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (!ctx) die("device '%s' not found or cannot be opened", o.device.c_str());
    pd = ibv_alloc_pd(ctx);
    cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
    if (!pd || !cq) die("cannot allocate a PD or CQ");
    // Page aligned, so an atomic's 8-byte target is naturally aligned as the verbs require.
    buf = static_cast<uint8_t*>(std::aligned_alloc(4096, (size + 4095) / 4096 * 4096));
    std::memset(buf, 0, size);
    mr = ibv_reg_mr(pd, buf, size, access);
    if (!mr) die("ibv_reg_mr(%zu bytes): %s", size, std::strerror(errno));
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 1;  // every send WR completes, so the examples can check each one
    init.cap = {.max_send_wr = 32,
                .max_recv_wr = 32,
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = 0};
    qp = ibv_create_qp(pd, &init);
    if (!qp) die("ibv_create_qp: %s", std::strerror(errno));
    // INIT already, so a receive can be posted before the peer learns our QPN and sends.
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = static_cast<uint8_t>(o.ib_port);
    a.qp_access_flags = access & ~IBV_ACCESS_LOCAL_WRITE;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      die("QP RESET->INIT failed");
    local.qpn = qp->qp_num;
    local.psn = std::random_device{}() & 0xffffff;
    local.rkey = mr->rkey;
    local.addr = reinterpret_cast<uintptr_t>(buf);
    local.len = size;
    if (ibv_query_gid(ctx, o.ib_port, o.gid_index, &local.gid))
      die("no GID at index %d on port %d", o.gid_index, o.ib_port);
  }

  ~Rdma() {
    ibv_destroy_qp(qp);
    ibv_dereg_mr(mr);
    std::free(buf);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
  }
  Rdma(const Rdma&) = delete;
  Rdma& operator=(const Rdma&) = delete;

  // INIT -> RTR -> RTS towards `remote`. Both sides allow a few outstanding READs/atomics.
  void connect(const Options& o, const Endpoint& remote) {
    ibv_port_attr port{};
    if (ibv_query_port(ctx, static_cast<uint8_t>(o.ib_port), &port)) die("ibv_query_port failed");
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = port.active_mtu;
    a.dest_qp_num = remote.qpn;
    a.rq_psn = remote.psn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = static_cast<uint8_t>(o.ib_port);
    a.ah_attr.grh.dgid = remote.gid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(o.gid_index);
    a.ah_attr.grh.hop_limit = 64;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      die("QP INIT->RTR failed");
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = local.psn;
    a.timeout = 14;  // 4.096 us * 2^14 = 67 ms local ACK timeout
    a.retry_cnt = 7;
    a.rnr_retry = 7;  // 7 = retry forever on receiver-not-ready
    a.max_rd_atomic = 4;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
      die("QP RTR->RTS failed");
  }

  // Waits for one completion; a bad status ends the program with the reason spelled out.
  ibv_wc poll(const char* what) const {
    ibv_wc wc{};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    int n;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
      if (std::chrono::steady_clock::now() > deadline) die("%s: no completion in 30 s", what);
    if (n < 0) die("%s: ibv_poll_cq failed", what);
    if (wc.status != IBV_WC_SUCCESS)
      die("%s: completion status %s (%d), vendor error 0x%x", what, ibv_wc_status_str(wc.status),
          wc.status, wc.vendor_err);
    return wc;
  }
};

// Connects over TCP, swaps endpoints and brings the QP to RTS, then waits until the peer's QP is
// in RTS too, so that no request reaches a QP that is not yet ready for it.
struct Peer {
  int fd;
  Endpoint remote;
};
inline Peer handshake(const Options& o, Rdma& r) {
  Peer p{tcp_connect(o), {}};
  p.remote = tcp_exchange(p.fd, r.local);
  r.connect(o, p.remote);
  tcp_exchange_byte(p.fd, 0);
  std::printf("connected: local QPN 0x%06x, remote QPN 0x%06x\n", r.local.qpn, p.remote.qpn);
  return p;
}

}  // namespace example
