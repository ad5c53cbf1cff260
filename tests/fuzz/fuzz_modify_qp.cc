// Fuzzes ibv_modify_qp's attribute sets as the transport receives them (transport::Qp::modify):
// any attribute mask with any bytes in ibv_qp_attr — the enums included, as a C caller may store
// any int there — on RC, UC and UD QPs in every state (qp_world.h). After each call the QP is
// queried, given a send and a packet at the PSN it now expects, and its timers run, so that an
// attribute accepted but not applied consistently shows up in what follows.
//
// Input: records of  role:u8 mask:u32 attr:sizeof(ibv_qp_attr) bytes.
#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "qp_world.h"

using uroce::fuzz::QpWorld;
using uroce::fuzz::Reader;
using uroce::fuzz::Writer;
namespace wire = uroce::wire;

namespace {

void exercise(QpWorld& w, int role) {
  uroce::transport::Qp* q = w.qp(role);
  if (!q) return;
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  q->query(a, init);
  if (q->state() < IBV_QPS_RESET || q->state() > IBV_QPS_ERR) uroce::fuzz::fail("QP state");
  // A send of the QP's kind and a request at the PSN it expects.
  Writer act;
  act.u8(0xc1).u8(uint8_t(role)).u8(0).u16(1500).u8(2).u16(0);
  Reader ar(act.out.data(), act.out.size());
  w.app_action(ar.u8(), ar);
  wire::Packet p;
  const uroce::wire::Opcode op = q->type() == IBV_QPT_UD   ? wire::Opcode::kUdSendOnly
                                 : q->type() == IBV_QPT_UC ? wire::Opcode::kUcSendOnly
                                                           : wire::Opcode::kRcSendOnly;
  p.bth.opcode = uint8_t(op);
  p.bth.pkey = wire::kDefaultPkey;
  p.bth.dest_qp = q->qpn();
  p.bth.psn = a.rq_psn & 0xffffff;
  p.bth.ack_req = true;
  p.deth = {a.qkey, 0x333};
  uint8_t buf[128] = {};
  const size_t h = wire::build_headers(p, buf);
  w.deliver({buf, h + 64}, QpWorld::kPeerIp, 0);
  w.now += 2'000'000;
  w.progress();
  w.check_and_clear();
}

void write_seeds(const std::string& dir) {
  int n = 0;
  auto rec = [](Writer& w, int role, int mask, const ibv_qp_attr& a) {
    w.u8(uint8_t(role)).u32(uint32_t(mask)).raw(a);
  };
  ibv_qp_attr init{}, rtr{}, rts{}, sqd{}, err{}, reset{}, opt{};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = 1;
  init.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  init.qkey = QpWorld::kQkey;
  rtr.qp_state = IBV_QPS_RTR;
  rtr.path_mtu = IBV_MTU_2048;
  rtr.dest_qp_num = 0x777;
  rtr.rq_psn = 0x123456;
  rtr.max_dest_rd_atomic = 16;
  rtr.min_rnr_timer = 12;
  rtr.ah_attr = uroce::transport::test::ah_for(QpWorld::kPeerIp);
  rts.qp_state = IBV_QPS_RTS;
  rts.sq_psn = 0xfffff0;
  rts.timeout = 14;
  rts.retry_cnt = 7;
  rts.rnr_retry = 7;
  rts.max_rd_atomic = 128;
  sqd.qp_state = IBV_QPS_SQD;
  sqd.en_sqd_async_notify = 1;
  err.qp_state = IBV_QPS_ERR;
  reset.qp_state = IBV_QPS_RESET;
  opt.qp_access_flags = IBV_ACCESS_REMOTE_ATOMIC;
  opt.min_rnr_timer = 31;
  opt.timeout = 31;
  opt.path_mig_state = IBV_MIG_MIGRATED;
  opt.qkey = 0x80000001;
  const int kInitRc = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  const int kInitUd = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
  const int kRtrRc = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  const int kRtrUc = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  const int kRtsRc = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  for (int role = 0; role < QpWorld::kRoles; ++role) {
    const bool ud = role == QpWorld::kUdRts, uc = role == QpWorld::kUcRts;
    Writer w;  // the QP through its whole life again: RESET, INIT, RTR, RTS, SQD, RTS, ERR
    rec(w, role, IBV_QP_STATE, reset);
    rec(w, role, ud ? kInitUd : kInitRc, init);
    rec(w, role, ud ? IBV_QP_STATE : uc ? kRtrUc : kRtrRc, rtr);
    rec(w, role, ud || uc ? IBV_QP_STATE | IBV_QP_SQ_PSN : kRtsRc, rts);
    rec(w, role, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY, sqd);
    rec(w, role, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT, rts);
    rec(w, role, IBV_QP_STATE, err);
    uroce::fuzz::write_seed(dir, "seed-" + std::to_string(n++), w.out);
    Writer o;  // optional attributes in the QP's own state
    rec(o, role,
        IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT | IBV_QP_PATH_MIG_STATE |
            (ud ? IBV_QP_QKEY : 0),
        opt);
    ibv_qp_attr cur = opt;
    cur.cur_qp_state = IBV_QPS_RTS;
    cur.qp_state = IBV_QPS_RTS;
    rec(o, role, IBV_QP_STATE | IBV_QP_CUR_STATE, cur);
    uroce::fuzz::write_seed(dir, "seed-" + std::to_string(n++), o.out);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const std::string dir = uroce::fuzz::seed_dir(); !dir.empty()) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uroce::fuzz::RingSink sink;
  QpWorld w(sink, &sink);
  Reader r(data, size);
  while (!r.empty()) {
    const int role = r.u8() % QpWorld::kRoles;
    const int mask = int(r.u32());
    ibv_qp_attr attr{};
    r.raw(&attr);
    if (uroce::transport::Qp* q = w.qp(role)) {
      q->modify(attr, mask, w.now);
      w.dispatch().touch(q);
    }
    exercise(w, role);
  }
  w.settle();
  return 0;
}
