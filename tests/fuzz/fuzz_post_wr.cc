// Fuzzes the verbs layer's work-request validation (src/verbs/qp.cc, srq.cc) through the public
// API, as a C program calls it: ibv_post_send / ibv_post_recv / ibv_post_srq_recv chains whose
// every field comes from the input — opcodes and flags outside the enums, negative and oversized
// num_sge, NULL lists, SGEs with any address, length and key, UD address handles, memory-window
// binds — on RC, UC and UD QPs in RESET, INIT, RTS and ERR, and ibv_modify_qp with any attribute
// bytes. Two devices on 127.0.61.1/2 (liburoce linked in, as the verbs tests do); the RC and UC
// QPs point at a QPN nobody has, so what they send is dropped and their queues fill.
//
// Memory a WR names is the application's business: an SGE of an IBV_SEND_INLINE WR (whose bytes
// are copied at post time) is kept inside the harness's buffer, as a correct program's would be;
// every other address is anything — the key table decides.
//
// Input: records
//   0 qp:u8 n:u8 WR…    ibv_post_send of a chain of n % 4 + 1 WRs
//   1 qp:u8 n:u8 WR…    ibv_post_recv
//   2 n:u8 WR…          ibv_post_srq_recv
//   3 qp:u8 mask:u32 attr  ibv_modify_qp
// Every input starts from the same QP states (they are reset and reconnected).
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"

namespace {

using uroce::fuzz::fail;
using uroce::fuzz::Reader;
using uroce::fuzz::Writer;

constexpr size_t kBuf = 65536, kSlack = 4096;
constexpr int kMaxSge = 4, kMaxInline = 64;
constexpr size_t kSges = 40;  // what sg_list points at: more than max_sge, fewer than 127

enum Role { kRcReset, kRcInit, kRcRts, kUcRts, kUdRts, kRcErr, kRcSrq, kRoles };

ibv_context* open_named(const char* name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  return ctx;
}

ibv_gid gid_of(uint32_t ip) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  const uint32_t be = htonl(ip);
  std::memcpy(&g.raw[12], &be, 4);
  return g;
}

struct World {
  ibv_context *ctx = nullptr, *peer = nullptr;
  ibv_pd* pd = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kBuf + kSlack);
  ibv_mr* mr = nullptr;
  ibv_cq* cq = nullptr;
  ibv_srq* srq = nullptr;
  ibv_qp* qps[kRoles] = {};
  ibv_ah* ah = nullptr;
  ibv_mw *mw1 = nullptr, *mw2 = nullptr;

  World() {
    setenv("UROCE_DEVICES", "fz0=127.0.61.1,fz1=127.0.61.2", 1);
    ctx = open_named("fz0");
    peer = open_named("fz1");
    if (!ctx || !peer) fail("cannot open the uroce devices fz0/fz1 (127.0.61.1/2)");
    pd = ibv_alloc_pd(ctx);
    mr = ibv_reg_mr(pd, buf.data(), kBuf,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND);
    cq = ibv_create_cq(ctx, 4096, nullptr, nullptr, 0);
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 64;
    sa.attr.max_sge = kMaxSge;
    srq = ibv_create_srq(pd, &sa);
    for (int r = 0; r < kRoles; ++r) {
      ibv_qp_init_attr a{};
      a.send_cq = a.recv_cq = cq;
      a.qp_type = r == kUcRts ? IBV_QPT_UC : r == kUdRts ? IBV_QPT_UD : IBV_QPT_RC;
      a.cap.max_send_wr = a.cap.max_recv_wr = 64;
      a.cap.max_send_sge = a.cap.max_recv_sge = kMaxSge;
      a.cap.max_inline_data = kMaxInline;
      if (r == kRcSrq) a.srq = srq;
      qps[r] = ibv_create_qp(pd, &a);
      if (!qps[r]) fail("ibv_create_qp");
    }
    ibv_ah_attr ah_attr{};
    ah_attr.is_global = 1;
    ah_attr.port_num = 1;
    ah_attr.grh.dgid = gid_of(0x7f003d02);
    ah = ibv_create_ah(pd, &ah_attr);
    mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
    mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    if (!pd || !mr || !cq || !srq || !ah || !mw1 || !mw2) fail("set-up");
  }

  // Every QP back to its role's state, queues empty.
  void reset() {
    for (int r = 0; r < kRoles; ++r) {
      ibv_qp* q = qps[r];
      ibv_qp_attr a{};
      a.qp_state = IBV_QPS_RESET;
      if (ibv_modify_qp(q, &a, IBV_QP_STATE)) fail("to RESET");
      if (r == kRcReset) continue;
      a = {};
      a.qp_state = IBV_QPS_INIT;
      a.port_num = 1;
      int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (q->qp_type == IBV_QPT_UD) {
        a.qkey = 0x11111111;
        mask |= IBV_QP_QKEY;
      } else {
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        mask |= IBV_QP_ACCESS_FLAGS;
      }
      if (ibv_modify_qp(q, &a, mask)) fail("to INIT");
      if (r == kRcInit) continue;
      a = {};
      a.qp_state = IBV_QPS_RTR;
      mask = IBV_QP_STATE;
      if (q->qp_type != IBV_QPT_UD) {
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = 0xabcd;  // nobody's
        a.rq_psn = 1;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        a.ah_attr.grh.dgid = gid_of(0x7f003d02);
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if (q->qp_type == IBV_QPT_RC) {
          a.max_dest_rd_atomic = 4;
          a.min_rnr_timer = 1;
          mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
      }
      if (ibv_modify_qp(q, &a, mask)) fail("to RTR");
      a = {};
      a.qp_state = IBV_QPS_RTS;
      a.sq_psn = 1;
      mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (q->qp_type == IBV_QPT_RC) {
        a.timeout = 10;
        a.retry_cnt = 1;
        a.rnr_retry = 1;
        a.max_rd_atomic = 4;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      if (ibv_modify_qp(q, &a, mask)) fail("to RTS");
      if (r == kRcErr) {
        a = {};
        a.qp_state = IBV_QPS_ERR;
        if (ibv_modify_qp(q, &a, IBV_QP_STATE)) fail("to ERR");
      }
    }
    drain();
  }

  void drain() {
    ibv_wc wc[64];
    for (int n; (n = ibv_poll_cq(cq, 64, wc)) > 0;)
      for (int i = 0; i < n; ++i)
        if (wc[i].status > IBV_WC_TM_RNDV_INCOMPLETE)
          fail("completion status not an ibv_wc_status");
  }
};

World& world() {
  static World* w = new World;  // never destroyed: the devices live as long as the process
  return *w;
}

// Reads one SGE list's worth of entries (all kSges, so that a num_sge the checks let through
// beyond max_sge would read valid memory only up to kSges: ASan catches the rest).
void read_sges(Reader& r, World& w, std::vector<ibv_sge>& sges, bool inline_data) {
  const auto base = reinterpret_cast<uint64_t>(w.buf.data());
  const int n = r.u8() % 6;  // the rest stay as the previous input left them: zero
  for (int i = 0; i < n && i < int(kSges); ++i) {
    ibv_sge& s = sges[i];
    const uint8_t how = r.u8();
    s.addr = (how & 1) ? r.u64() : base + r.u16();
    s.length = (how & 2) ? r.u32() : r.u8();
    s.lkey = (how & 4) ? r.u32() : w.mr->lkey;
  }
  if (inline_data)
    for (ibv_sge& s : sges) {  // an inline SGE's bytes are read at post: keep them readable
      s.addr = base + (s.addr % kBuf);
      if (s.length > kSlack) s.length = uint32_t(kSlack) + (s.length & 0xff);
    }
}

template <typename E>
void store_int(E* field, uint32_t v) {
  static_assert(sizeof(E) == sizeof(uint32_t));
  std::memcpy(static_cast<void*>(field), &v, sizeof v);  // any int, as C may store
}

void read_send_wr(Reader& r, World& w, ibv_qp* q, ibv_send_wr& wr, std::vector<ibv_sge>& sges) {
  wr.wr_id = r.u8();
  const uint8_t op = r.u8();
  const uint32_t opcode = op < 0xf0 ? op % 17 : r.u32();
  store_int(&wr.opcode, opcode);
  const uint8_t fl = r.u8();
  wr.send_flags = fl < 0xf0 ? fl & 0x1f : r.u32();
  wr.num_sge = int8_t(r.u8());
  const uint8_t list = r.u8();
  wr.sg_list = (list & 1) ? nullptr : sges.data();
  read_sges(r, w, sges, wr.send_flags & IBV_SEND_INLINE);
  wr.imm_data = r.u32();
  r.raw(&wr.wr);
  if (q->qp_type == IBV_QPT_UD) {
    wr.wr.ud.ah = (list & 2) ? nullptr : w.ah;
  } else if (list & 4) {
    wr.wr.rdma.rkey = w.mr->rkey;
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(w.buf.data()) + (r.u16() & ~7u);
  }
  if (opcode == IBV_WR_BIND_MW) {
    wr.bind_mw.mw = (list & 8) ? nullptr : (list & 16) ? w.mw2 : w.mw1;
    wr.bind_mw.rkey = r.u32();
    wr.bind_mw.bind_info.mr = (list & 32) ? nullptr : w.mr;
    wr.bind_mw.bind_info.addr = reinterpret_cast<uint64_t>(w.buf.data()) + r.u16();
    wr.bind_mw.bind_info.length = r.u32();
    wr.bind_mw.bind_info.mw_access_flags = r.u32();
  }
}

void read_recv_wr(Reader& r, World& w, ibv_recv_wr& wr, std::vector<ibv_sge>& sges) {
  wr.wr_id = r.u8();
  wr.num_sge = int8_t(r.u8());
  wr.sg_list = (r.u8() & 1) ? nullptr : sges.data();
  read_sges(r, w, sges, false);
}

void write_seeds(const std::string& dir) {
  int n = 0;
  auto save = [&](const Writer& w) {
    uroce::fuzz::write_seed(dir, "seed-" + std::to_string(n++), w.out);
  };
  // A SEND, a WRITE, a READ, an inline SEND, an atomic, a LOCAL_INV and a BIND_MW on each QP.
  for (uint8_t q = 0; q < kRoles; ++q) {
    Writer w;
    for (uint8_t op : {uint8_t(IBV_WR_SEND), uint8_t(IBV_WR_RDMA_WRITE), uint8_t(IBV_WR_RDMA_READ),
                       uint8_t(IBV_WR_ATOMIC_FETCH_AND_ADD), uint8_t(IBV_WR_LOCAL_INV),
                       uint8_t(IBV_WR_BIND_MW), uint8_t(IBV_WR_SEND_WITH_IMM)}) {
      const bool atomic = op == IBV_WR_ATOMIC_FETCH_AND_ADD;
      const uint8_t flags =
          op == IBV_WR_SEND_WITH_IMM ? IBV_SEND_INLINE | IBV_SEND_SIGNALED : IBV_SEND_SIGNALED;
      w.u8(0).u8(q).u8(0);                   // post_send, one WR
      w.u8(1).u8(op).u8(flags).u8(1).u8(4);  // wr_id, opcode, flags, num_sge, rkey=mr
      w.u8(1).u8(0).u16(atomic ? 64 : 0).u8(atomic ? 8 : 100);  // one SGE in the MR
      w.u32(0x01020304);                                        // imm
      for (size_t i = 0; i < sizeof(ibv_send_wr::wr); ++i) w.u8(0);
      w.u16(256);  // remote offset
      if (op == IBV_WR_BIND_MW) w.u32(0x1234).u16(0).u32(4096).u32(IBV_ACCESS_REMOTE_WRITE);
    }
    w.u8(1).u8(q).u8(1).u8(9).u8(2).u8(0).u8(1).u8(0).u16(0).u8(200);  // two receives
    save(w);
  }
  Writer s;
  s.u8(2).u8(0).u8(5).u8(1).u8(0).u8(1).u8(0).u16(512).u8(64);
  save(s);
  Writer m;  // ibv_modify_qp: the UD QP to SQD and back; the RC QP to ERR
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_SQD;
  m.u8(3).u8(kUdRts).u32(IBV_QP_STATE).raw(a);
  a.qp_state = IBV_QPS_RTS;
  m.u8(3).u8(kUdRts).u32(IBV_QP_STATE).raw(a);
  a.qp_state = IBV_QPS_ERR;
  m.u8(3).u8(kRcRts).u32(IBV_QP_STATE).raw(a);
  save(m);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const std::string dir = uroce::fuzz::seed_dir(); !dir.empty()) {
    write_seeds(dir);
    std::exit(0);
  }
  world();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  w.reset();
  Reader r(data, size);
  // Each WR of a chain has its own list of exactly kSges entries on the heap: a read past them is
  // an ASan report.
  std::vector<std::vector<ibv_sge>> lists(4, std::vector<ibv_sge>(kSges));
  while (!r.empty()) {
    const uint8_t kind = r.u8() % 4;
    switch (kind) {
      case 0: {
        ibv_qp* q = w.qps[r.u8() % kRoles];
        std::vector<ibv_send_wr> wrs(r.u8() % 4 + 1);
        for (size_t i = 0; i < wrs.size(); ++i) {
          wrs[i] = {};
          read_send_wr(r, w, q, wrs[i], lists[i]);
          wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
        }
        ibv_send_wr* bad = nullptr;
        const int rc = ibv_post_send(q, wrs.data(), &bad);
        if (rc < 0) fail("ibv_post_send returned a negative value");
        if (rc && (bad < wrs.data() || bad >= wrs.data() + wrs.size()))
          fail("ibv_post_send failed without pointing bad_wr at a WR of the chain");
        break;
      }
      case 1:
      case 2: {
        ibv_qp* q = w.qps[kind == 1 ? r.u8() % kRoles : kRcSrq];
        std::vector<ibv_recv_wr> wrs(r.u8() % 4 + 1);
        for (size_t i = 0; i < wrs.size(); ++i) {
          wrs[i] = {};
          read_recv_wr(r, w, wrs[i], lists[i]);
          wrs[i].next = i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
        }
        ibv_recv_wr* bad = nullptr;
        const int rc = kind == 1 ? ibv_post_recv(q, wrs.data(), &bad)
                                 : ibv_post_srq_recv(w.srq, wrs.data(), &bad);
        if (rc < 0) fail("a post returned a negative value");
        if (rc && (bad < wrs.data() || bad >= wrs.data() + wrs.size()))
          fail("a post failed without pointing bad_wr at a WR of the chain");
        break;
      }
      default: {
        ibv_qp* q = w.qps[r.u8() % kRoles];
        const int mask = int(r.u32());
        ibv_qp_attr a{};
        r.raw(&a);
        ibv_modify_qp(q, &a, mask);
        break;
      }
    }
  }
  w.drain();
  return 0;
}
