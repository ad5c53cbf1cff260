#include "qp_world.h"

#include <sys/mman.h>

#include <cstring>

namespace uroce::fuzz {

using transport::Qp;
using transport::RecvWqe;
using transport::SendWqe;
namespace t = transport::test;

uint8_t* fuzz_memory() {
  constexpr size_t kPage = QpWorld::kPage;
  static uint8_t* mem = [] {
    constexpr size_t kBytes = QpWorld::kRwBytes + QpWorld::kRoBytes + QpWorld::kOdpPages * kPage;
    void* p = mmap(reinterpret_cast<void*>(QpWorld::kMemBase), kBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != reinterpret_cast<void*>(QpWorld::kMemBase)) fail("cannot map the fuzz memory");
    // The on-demand region's hole and read-only page.
    auto* odp = reinterpret_cast<uint8_t*>(QpWorld::kOdpBase);
    // (The hole is PROT_NONE, not unmapped: another mmap could take an unmapped page.)
    if (mprotect(odp + kPage, kPage, PROT_NONE) != 0 ||
        mprotect(odp + 2 * kPage, kPage, PROT_READ) != 0)
      fail("cannot shape the on-demand region");
    return static_cast<uint8_t*>(p);
  }();
  // (A loop here would be instrumented and cost more than the rest of an input.)
  std::memset(mem, 0x5a, QpWorld::kRwBytes + QpWorld::kRoBytes + kPage);
  std::memset(reinterpret_cast<uint8_t*>(QpWorld::kOdpBase + 3 * kPage), 0x5a, kPage);
  return mem;
}

RingSink::RingSink() {
  // One ring per process, reused by every input: allocating 32 packet buffers per input would
  // cost more than the input itself.
  static auto* bufs = new transport::TxBuf[kBuffers];
  for (size_t i = 0; i < kBuffers; ++i) free_.push_back(&bufs[i]);
}

transport::TxBuf* RingSink::tx_alloc() {
  if (free_.empty() || budget == 0) return nullptr;
  if (budget > 0) --budget;
  transport::TxBuf* b = free_.back();
  free_.pop_back();
  b->len = 0;
  return b;
}

void RingSink::tx_commit(transport::TxBuf* buf) {
  if (buf->len < wire::kBthBytes || buf->len > transport::kMaxIbPacket)
    fail("the transport committed a packet of impossible length");
  // What a peer would parse: the transport's own packets must parse.
  wire::Packet p;
  if (wire::parse({buf->data, buf->len}, p) != wire::ParseError::kOk)
    fail("the transport sent a packet that does not parse");
  free_.push_back(buf);
  ++committed_;
}

size_t RingSink::tx_flush(transport::Time) {
  const size_t n = committed_;
  committed_ = 0;
  return n;
}

QpWorld::QpWorld(Transmitter& tx, RingSink* sink)
    : sink_(sink), dispatch_(tx, mem_, counters_, Dispatch::Limits{}) {
  uint8_t* m = fuzz_memory();
  constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                       IBV_ACCESS_REMOTE_ATOMIC;
  if (mem_.reg(kPd, m, kRwBytes, kAll) != kKeyRw ||
      mem_.reg(kPd, m + kRwBytes, kRoBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ) !=
          kKeyRo ||
      mem_.reg(kPd, reinterpret_cast<void*>(kOdpBase), kOdpPages * kPage,
               kAll | IBV_ACCESS_ON_DEMAND) != kKeyOdp)
    fail("FakeMemory numbers keys differently");
  transport::SrqInit si;
  si.max_wr = 16;
  si.max_sge = 2;
  si.srq_limit = 2;
  srq_ = std::make_unique<transport::Srq>(si);
  for (int i = 0; i < 4; ++i)
    srq_->post_recv(t::recv_wqe(next_wr_id_++, kMemBase + 4096 * i, 4096, kKeyRw));
  transport::SrqInit xi{.max_wr = 8, .max_sge = 2, .xrcd = kXrcd, .pd = kPd, .cq = &rcq_};
  xrc_.mine = std::make_unique<transport::Srq>(xi);
  xi.xrcd = kXrcd + 1;
  xrc_.foreign = std::make_unique<transport::Srq>(xi);
  for (int i = 0; i < 4; ++i) {
    xrc_.mine->post_recv(t::recv_wqe(next_wr_id_++, kMemBase + 4096 * i, 4096, kKeyRw));
    xrc_.foreign->post_recv(t::recv_wqe(next_wr_id_++, kMemBase + 4096 * i, 4096, kKeyRw));
  }

  for (int role = 0; role < kRoles; ++role) {
    int err = 0;
    qps_[role] = dispatch_.create_qp(init_for(role), &err);
    if (!qps_[role]) fail("cannot create a QP");
    if (role != kRcReset) connect(role);
  }
  // The requester situations.
  Qp* q = qps_[kRcReads];
  const uint64_t l = kMemBase + 8192;
  q->post_send(t::rdma_wqe(next_wr_id_++, IBV_WR_RDMA_READ, l, kReadBytes, kKeyRw, 0x9000, 0x77),
               now);
  q->post_send(
      t::atomic_wqe(next_wr_id_++, IBV_WR_ATOMIC_CMP_AND_SWP, l + 4096, kKeyRw, 0x9100, 0x77, 1, 2),
      now);
  q->post_send(
      t::atomic_wqe(next_wr_id_++, IBV_WR_ATOMIC_FETCH_AND_ADD, l + 4104, kKeyRw, 0x9108, 0x77, 5),
      now);
  q->post_send(t::rdma_wqe(next_wr_id_++, IBV_WR_RDMA_WRITE, l, 2000, kKeyRw, 0x9200, 0x77), now);
  q->post_send(t::send_wqe(next_wr_id_++, l, 100, kKeyRw), now);
  dispatch_.touch(q);
  Qp* sr = qps_[kRcSr];
  sr->post_send(t::rdma_wqe(next_wr_id_++, IBV_WR_RDMA_WRITE, l, 2000, kKeyRw, 0x9200, 0x77), now);
  sr->post_send(t::send_wqe(next_wr_id_++, l, 100, kKeyRw), now);
  dispatch_.touch(sr);
  Qp* rnr = qps_[kRcRnr];
  rnr->post_send(t::send_wqe(next_wr_id_++, kMemBase, 64, kKeyRw), now);
  dispatch_.touch(rnr);
  progress();
  auto nak = t::craft_ack(peer_qpn(kRcRnr), kSqPsn, t::rnr_syndrome(1));
  nak->pkt.bth.dest_qp = qpn(kRcRnr);
  transport::RxInfo rx;
  rx.src_ip = wire::IpAddr(kPeerIp);
  rx.dst_ip = wire::IpAddr(kLocalIp);
  RxPacket in{nak->pkt, rx, 0};
  dispatch_.receive({&in, 1}, now);
  qps_[kRcSqd]->post_send(t::send_wqe(next_wr_id_++, kMemBase, 64, kKeyRw), now);
  dispatch_.touch(qps_[kRcSqd]);
  progress();
  if (move(kRcSqd, IBV_QPS_SQD) || move(kRcErr, IBV_QPS_ERR)) fail("cannot reach SQD / ERR");
  check_and_clear();
}

QpWorld::~QpWorld() {
  for (Qp*& q : qps_)
    if (q) dispatch_.destroy_qp(q);
}

transport::QpInit QpWorld::init_for(int role) {
  transport::QpInit init;
  init.type = role == kUcRts     ? IBV_QPT_UC
              : role == kUdRts   ? IBV_QPT_UD
              : role == kXrcSend ? IBV_QPT_XRC_SEND
              : role == kXrcRecv ? IBV_QPT_XRC_RECV
                                 : IBV_QPT_RC;
  init.qpn = qpn(role);
  init.pd = kPd;
  init.local_ip = wire::IpAddr(kLocalIp);
  init.max_send_wr = init.max_recv_wr = 32;
  init.max_send_sge = init.max_recv_sge = transport::kMaxSge;
  init.max_inline_data = transport::kMaxInlineData;
  init.sq_sig_all = role % 2 == 0;
  init.send_cq = &scq_;
  init.recv_cq = &rcq_;
  init.events = &events_;
  init.port_mtu = kPathMtu;
  init.early_retransmit = role % 3 == 0;
  if (role == kRcSrq) init.srq = srq_.get();
  init.selective_repeat = role == kRcSr;
  if (role == kXrcSend) init.recv_cq = nullptr;
  if (role == kXrcRecv) {
    init.pd = 0;
    init.send_cq = init.recv_cq = nullptr;
    init.xrcd = kXrcd;
    init.xrc_srqs = &xrc_;
  }
  return init;
}

int QpWorld::move(int role, ibv_qp_state state) {
  Qp* q = qp(role);
  if (!q) return EINVAL;
  ibv_qp_attr a{};
  a.qp_state = state;
  int mask = IBV_QP_STATE;
  const ibv_qp_type type = q->type();
  switch (state) {
    case IBV_QPS_INIT:
      if (q->state() != IBV_QPS_RESET) break;  // INIT → INIT takes no attribute we need
      a.pkey_index = 0;
      a.port_num = 1;
      mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (type == IBV_QPT_UD) {
        a.qkey = kQkey;
        mask |= IBV_QP_QKEY;
      } else {
        a.qp_access_flags =
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        mask |= IBV_QP_ACCESS_FLAGS;
      }
      break;
    case IBV_QPS_RTR:
      if (type == IBV_QPT_UD) break;
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = peer_qpn(role);
      a.rq_psn = kRqPsn;
      a.ah_attr = t::ah_for(kPeerIp);
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      // XRC's halves take RC's masks and ignore the other half's attributes (the kernel's
      // modify_qp_mask, transport/qp_state.h).
      if (transport::is_reliable(type)) {
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = 1;  // 10 us
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
      break;
    case IBV_QPS_RTS:
      if (q->state() != IBV_QPS_RTR) break;  // SQD/SQE → RTS need nothing more
      a.sq_psn = kSqPsn;
      mask |= IBV_QP_SQ_PSN;
      if (transport::is_reliable(type)) {
        a.timeout = 8;  // 4.096 us * 2^8 = 1 ms
        a.retry_cnt = 3;
        a.rnr_retry = 3;
        a.max_rd_atomic = 4;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      break;
    default:
      break;
  }
  const int rc = q->modify(a, mask, now);
  dispatch_.touch(q);
  return rc;
}

void QpWorld::connect(int role) {
  Qp* q = qps_[role];
  const bool to_rtr = role != kRcInit, to_rts = role != kRcInit && role != kRcRtr;
  if (move(role, IBV_QPS_INIT) || (to_rtr && move(role, IBV_QPS_RTR)) ||
      (to_rts && move(role, IBV_QPS_RTS)))
    fail("cannot connect a QP");
  if (role == kRcSrq || role == kXrcSend || role == kXrcRecv) return;  // no receive queue
  // Receives of several sizes; UD's hold the 40-byte GRH in front of the payload.
  const uint64_t base = kMemBase + 16384 + 2048 * uint64_t(role);
  q->post_recv(t::recv_wqe(next_wr_id_++, base, 64, kKeyRw));
  q->post_recv(t::recv_wqe(next_wr_id_++, base, 2048, kKeyRw));
  RecvWqe two = t::recv_wqe(next_wr_id_++, base, 1000, kKeyRw);
  two.num_sge = 2;
  two.sge[1] = transport::Sge{kMemBase + 40000, 3000, kKeyRw};
  q->post_recv(two);
}

void QpWorld::deliver(std::span<const uint8_t> ib, uint32_t src_ip, uint8_t ecn) {
  RxPacket in;
  if (wire::parse(ib, in.pkt) != wire::ParseError::kOk) return;
  in.info.src_ip = wire::IpAddr(src_ip);
  in.info.dst_ip = wire::IpAddr(kLocalIp);
  in.info.src_port = 0xc000;
  in.info.ecn = ecn & 3;
  dispatch_.receive({&in, 1}, now);
}

void QpWorld::progress() {
  bool again = false;
  for (int i = 0; i < 16; ++i) {
    dispatch_.progress(now, &again);
    if (!again) break;
  }
}

void QpWorld::settle() {
  for (int i = 0; i < 64; ++i) {
    const transport::Time d = dispatch_.next_deadline();
    if (d == transport::kNever) break;
    if (d > now) now = d;
    progress();
    check_and_clear();
  }
}

void QpWorld::check_and_clear() {
  for (const auto* cq : {&scq_, &rcq_})
    for (const ibv_wc& wc : cq->wcs) {
      if (wc.qp_num < qpn(0) || wc.qp_num >= qpn(kRoles)) fail("completion for a QP not ours");
      if (wc.status > IBV_WC_TM_RNDV_INCOMPLETE) fail("completion status not an ibv_wc_status");
    }
  scq_.wcs.clear();
  scq_.solicited.clear();
  rcq_.wcs.clear();
  rcq_.solicited.clear();
  events_.events.clear();
}

void QpWorld::app_action(uint8_t op, Reader& r) {
  const int role = r.u8() % kRoles;
  Qp* q = qps_[role];
  switch (op & 7) {
    case 0: {  // post a receive
      const uint32_t len = r.u16();
      if (q) q->post_recv(t::recv_wqe(next_wr_id_++, kMemBase + 1024, len % 60000, kKeyRw));
      break;
    }
    case 1: {  // post a send of some opcode
      static constexpr ibv_wr_opcode kOps[] = {IBV_WR_SEND,
                                               IBV_WR_SEND_WITH_IMM,
                                               IBV_WR_RDMA_WRITE,
                                               IBV_WR_RDMA_READ,
                                               IBV_WR_RDMA_WRITE_WITH_IMM,
                                               IBV_WR_ATOMIC_CMP_AND_SWP,
                                               IBV_WR_ATOMIC_FETCH_AND_ADD,
                                               IBV_WR_SEND_WITH_INV};
      const ibv_wr_opcode opcode = kOps[r.u8() % 8];
      const uint32_t len = r.u16() % 10000;
      const uint8_t flags = r.u8();
      const uint64_t raddr = r.u16();
      if (!q) break;
      SendWqe w;
      if (opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
        w = t::atomic_wqe(next_wr_id_, opcode, kMemBase + 8 * (len % 64), kKeyRw, raddr, 0x77, len,
                          flags);
      else
        w = t::rdma_wqe(next_wr_id_, opcode, kMemBase + (len % 4096), len, kKeyRw, raddr, 0x77);
      ++next_wr_id_;
      w.send_flags = flags & (IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED);
      w.imm_be = 0x12345678;
      if ((flags & 0x80) && len <= transport::kMaxInlineData &&
          (opcode == IBV_WR_SEND || opcode == IBV_WR_RDMA_WRITE)) {
        w.send_flags |= IBV_SEND_INLINE;
        w.num_sge = 0;
        w.inline_len = len;
      }
      if (q->type() == IBV_QPT_XRC_SEND) w.xrc_srqn = kXrcSrq;
      if (q->type() == IBV_QPT_UD) {
        w.ud_dst_ip = wire::IpAddr(kPeerIp);
        w.ud_remote_qpn = peer_qpn(role);
        w.ud_remote_qkey = kQkey;
      }
      q->post_send(w, now);
      dispatch_.touch(q);
      break;
    }
    case 2:  // a well-formed state change
      move(role, ibv_qp_state(r.u8() % 7));
      break;
    case 3:  // destroy (packets for it then find no QP)
      if (q) dispatch_.destroy_qp(q);
      qps_[role] = nullptr;
      break;
    case 4:  // post to the shared receive queue
      srq_->post_recv(t::recv_wqe(next_wr_id_++, kMemBase + 2048, r.u16() % 8192, kKeyRw));
      break;
    case 5:  // transmit backpressure: only so many more buffers
      if (sink_) sink_->budget = (op & 8) ? -1 : int64_t(r.u8() % 8);
      break;
    default:  // a clock step long enough for the ACK timer
      now += transport::Time(r.u8()) * 1'000'000;
      progress();
      break;
  }
}

void QpWorld::packet_record(Writer& w, int role, const wire::Packet& headers,
                            std::span<const uint8_t> payload, uint8_t flags) {
  wire::Packet p = headers;
  p.bth.pad = wire::pad_for(payload.size());
  uint8_t buf[transport::kMaxIbPacket];
  const size_t h = wire::build_headers(p, buf);
  if (!payload.empty()) std::memcpy(buf + h, payload.data(), payload.size());
  std::memset(buf + h + payload.size(), 0, p.bth.pad);
  const size_t len = h + payload.size() + p.bth.pad;
  w.u8(uint8_t(flags | role)).u16(uint16_t(len)).bytes({buf, len});
}

void QpWorld::record(Reader& r) {
  const uint8_t op = r.u8();
  switch (op >> 6) {
    case 0:
    case 1: {
      // A packet: low 4 bits the role it is for (15: DestQP as given), bit 4 from a foreign
      // address, bit 5 marked CE; type 1 runs the timers and pumps after it.
      const int role = op & 15;
      const uint32_t len = r.u16() % (transport::kMaxIbPacket + 1);
      auto bytes = r.bytes(len);
      uint8_t pkt[transport::kMaxIbPacket];
      std::memcpy(pkt, bytes.data(), bytes.size());
      if (role < kRoles && bytes.size() >= wire::kBthBytes) {
        const uint32_t q = qpn(role);
        pkt[5] = uint8_t(q >> 16);
        pkt[6] = uint8_t(q >> 8);
        pkt[7] = uint8_t(q);
      }
      deliver({pkt, bytes.size()}, (op & 0x10) ? kForeignIp : kPeerIp,
              (op & 0x20) ? transport::kEcnCe : transport::kEcnNotEct);
      if (op >> 6) progress();
      break;
    }
    case 2:  // the clock moves by up to 65 ms
      now += transport::Time(r.u16()) * 1000;
      progress();
      break;
    default:
      app_action(op, r);
      break;
  }
  check_and_clear();
}

}  // namespace uroce::fuzz
