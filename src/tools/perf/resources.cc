#include "tools/perf/resources.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "transport/wr_opcode.h"

namespace uroce::perf {

void fatal(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("uroce-perf: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::exit(1);
}

ibv_wr_opcode test_opcode(Verb v, AtomicOp a) {
  if (v == Verb::kAtomic)
    return a == AtomicOp::kCmpAndSwap ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
  return v == Verb::kSend ? IBV_WR_SEND : v == Verb::kWrite ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
}

namespace {

size_t round_up(size_t v, size_t to) {
  return (v + to - 1) / to * to;
}

ibv_mtu mtu_enum(int bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    default:
      return IBV_MTU_4096;
  }
}

bool gid_zero(const ibv_gid& g) {
  for (uint8_t b : g.raw)
    if (b) return false;
  return true;
}

ibv_qp_type qp_type(Conn c) {
  switch (c) {
    case Conn::kUC:
      return IBV_QPT_UC;
    case Conn::kUD:
      return IBV_QPT_UD;
    default:
      return IBV_QPT_RC;
  }
}

}  // namespace

Resources::Resources(const Options& o) : o_(o), opcode_(test_opcode(o.verb, o.atomic_op)) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    if (list) ibv_free_device_list(list);
    fatal("no RDMA devices found (for uroce, run under uroce-run: uroce-run uroce-perf …)");
  }
  ibv_device* dev = nullptr;
  std::string names;
  for (int i = 0; i < n; ++i) {
    const char* name = ibv_get_device_name(list[i]);
    names += (names.empty() ? "" : ", ") + std::string(name);
    if (o.device.empty() ? i == 0 : o.device == name) dev = list[i];
  }
  if (!dev) {
    ibv_free_device_list(list);
    fatal("no device named '%s' (devices: %s)", o.device.c_str(), names.c_str());
  }
  info_.name = ibv_get_device_name(dev);
  info_.transport = dev->transport_type;
  ctx_ = ibv_open_device(dev);
  ibv_free_device_list(list);
  if (!ctx_) fatal("cannot open %s: %s", info_.name.c_str(), std::strerror(errno));
  if (ibv_query_device(ctx_, &info_.attr))
    fatal("ibv_query_device(%s) failed: %s", info_.name.c_str(), std::strerror(errno));
  if (ibv_query_port(ctx_, static_cast<uint8_t>(o.ib_port), &info_.port))
    fatal("%s has no port %d", info_.name.c_str(), o.ib_port);
  if (info_.port.state != IBV_PORT_ACTIVE)
    fatal("port %d of %s is not active (state %s)", o.ib_port, info_.name.c_str(),
          ibv_port_state_str(info_.port.state));
  info_.ethernet = info_.port.link_layer == IBV_LINK_LAYER_ETHERNET;

  if (o.gid_index >= 0) {
    info_.gid_index = o.gid_index;
  } else if (info_.ethernet) {
    // RoCE needs a GID: the first RoCE v2 one (perftest picks the best the port has), else 0.
    info_.gid_index = 0;
    for (int i = 0; i < info_.port.gid_tbl_len; ++i) {
      ibv_gid_entry e{};
      if (ibv_query_gid_ex(ctx_, static_cast<uint32_t>(o.ib_port), static_cast<uint32_t>(i), &e,
                           0) == 0 &&
          e.gid_type == IBV_GID_TYPE_ROCE_V2) {
        info_.gid_index = i;
        break;
      }
    }
  }
  if (info_.gid_index >= 0) {
    if (ibv_query_gid(ctx_, static_cast<uint8_t>(o.ib_port), info_.gid_index, &info_.gid) ||
        gid_zero(info_.gid))
      fatal("%s port %d has no GID at index %d (-x)", info_.name.c_str(), o.ib_port,
            info_.gid_index);
  }
  if (transport::wr_opcode_info(opcode_).flags & transport::kWrReadOrAtomic) {
    int dev_max = std::max(1, info_.attr.max_qp_rd_atom);
    out_reads_ = o.out_reads ? std::min(o.out_reads, dev_max) : dev_max;
  }
  if (o.verb == Verb::kAtomic && info_.attr.atomic_cap == IBV_ATOMIC_NONE)
    fatal("%s does not support atomics (atomic_cap is ATOMIC_NONE)", info_.name.c_str());
}

Resources::~Resources() {
  for (QpCtx& q : qps_) {
    if (q.ah) ibv_destroy_ah(q.ah);
    if (q.qp) ibv_destroy_qp(q.qp);
  }
  for (CqCtx& c : cqs_) {
    if (c.cq && c.unacked_events) ibv_ack_cq_events(c.cq, c.unacked_events);
    if (c.cq) ibv_destroy_cq(c.cq);
    if (c.channel) ibv_destroy_comp_channel(c.channel);
  }
  if (mr_) ibv_dereg_mr(mr_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (ctx_) ibv_close_device(ctx_);
  std::free(buf_);
}

ibv_mtu Resources::local_mtu() const {
  const ibv_mtu active = info_.port.active_mtu;
  if (o_.mtu == 0) return active;
  ibv_mtu want = mtu_enum(o_.mtu);
  if (want > active) {
    std::fprintf(stderr, "uroce-perf: -m %d is above the port's active MTU (%d); using %d\n",
                 o_.mtu, 128 << active, 128 << active);
    return active;
  }
  return want;
}

ibv_qp* Resources::create_qp(CqCtx& cq, int sq, int rq, bool* new_api) {
  ibv_qp_init_attr_ex a{};
  a.send_cq = cq.cq;
  a.recv_cq = cq.cq;
  a.qp_type = qp_type(o_.conn);
  a.cap.max_send_wr = static_cast<uint32_t>(sq);
  a.cap.max_recv_wr = static_cast<uint32_t>(rq);
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = static_cast<uint32_t>(o_.inline_size);
  a.pd = pd_;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  if (*new_api) {
    a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = transport::wr_opcode_info(opcode_).qp_ex_flag;
    if (ibv_qp* qp = ibv_create_qp_ex(ctx_, &a)) return qp;
    // Devices without the extended API (perftest uses it on mlx5 and EFA only) take the old one.
    std::fprintf(stderr,
                 "uroce-perf: %s cannot create a QP for the ibv_wr_* API (%s); posting with "
                 "ibv_post_send\n",
                 info_.name.c_str(), std::strerror(errno));
    *new_api = false;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.send_ops_flags = 0;
  }
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &a);
  if (!qp) {
    ibv_qp_init_attr plain{};
    plain.send_cq = a.send_cq;
    plain.recv_cq = a.recv_cq;
    plain.qp_type = a.qp_type;
    plain.cap = a.cap;
    qp = ibv_create_qp(pd_, &plain);
  }
  if (!qp)
    fatal("cannot create a %s QP on %s (send queue %d, receive queue %d, inline %d): %s",
          conn_name(o_.conn), info_.name.c_str(), sq, rq, o_.inline_size, std::strerror(errno));
  return qp;
}

void Resources::modify_init(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = static_cast<uint16_t>(o_.pkey_index);
  a.port_num = static_cast<uint8_t>(o_.ib_port);
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (o_.conn == Conn::kUD) {
    a.qkey = kQkey;
    mask |= IBV_QP_QKEY;
  } else {
    // Both sides grant what the test's operation needs; in a bidirectional run each is the
    // other's target too.
    switch (o_.verb) {
      case Verb::kSend:
      case Verb::kWrite:
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        break;
      case Verb::kRead:
        a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
        break;
      case Verb::kAtomic:
        a.qp_access_flags = IBV_ACCESS_REMOTE_ATOMIC;
        break;
    }
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  if (int rc = ibv_modify_qp(qp, &a, mask)) fatal("QP to INIT failed: %s", std::strerror(rc));
}

void Resources::create(uint64_t max_msg, uint32_t cycle_buffer, uint32_t cache_line) {
  const size_t grh = o_.conn == Conn::kUD ? kUdGrh : 0;
  const size_t line = std::max<size_t>(cache_line, 8);
  region_ = round_up(std::max<size_t>(max_msg + grh, cycle_buffer), line);
  const size_t q = static_cast<size_t>(o_.qps);
  size_t len = 2 * q * region_;
  size_t slot = 0;
  int slots = 0;
  if (o_.verb == Verb::kSend) {
    // A slot per posted receive, up to 64 MiB for all of them; beyond that receives share
    // slots (every message of a run carries the same bytes, so sharing never mixes data).
    slot = round_up(max_msg + grh, line);
    const size_t cap = (size_t{64} << 20) / (q * slot);
    slots = static_cast<int>(std::clamp<size_t>(cap, 1, static_cast<size_t>(o_.rx_depth)));
    len += q * static_cast<size_t>(slots) * slot;
  }
  buf_len_ = round_up(len, 4096);
  buf_ = static_cast<uint8_t*>(std::aligned_alloc(4096, buf_len_));
  if (!buf_) fatal("cannot allocate %zu bytes of buffer", buf_len_);
  std::memset(buf_, 0, buf_len_);

  pd_ = ibv_alloc_pd(ctx_);
  if (!pd_) fatal("ibv_alloc_pd failed: %s", std::strerror(errno));
  int access = IBV_ACCESS_LOCAL_WRITE;
  if (o_.verb == Verb::kWrite || o_.verb == Verb::kSend) access |= IBV_ACCESS_REMOTE_WRITE;
  if (o_.verb == Verb::kRead) access |= IBV_ACCESS_REMOTE_READ;
  if (o_.verb == Verb::kAtomic) access |= IBV_ACCESS_REMOTE_ATOMIC;
  mr_ = ibv_reg_mr(pd_, buf_, buf_len_, access);
  if (!mr_) fatal("ibv_reg_mr of %zu bytes failed: %s", buf_len_, std::strerror(errno));

  const int sq = std::min(std::max({o_.tx_depth, o_.cq_mod, o_.post_list}) + 16,
                          std::max(1, info_.attr.max_qp_wr));
  const int rq = o_.verb == Verb::kSend ? std::min(o_.rx_depth, info_.attr.max_qp_wr) : 1;
  std::vector<int> per_thread(static_cast<size_t>(o_.threads), 0);
  for (int i = 0; i < o_.qps; ++i) per_thread[static_cast<size_t>(i % o_.threads)] += sq + rq;
  cqs_.resize(static_cast<size_t>(o_.threads));
  for (int t = 0; t < o_.threads; ++t) {
    CqCtx& c = cqs_[static_cast<size_t>(t)];
    if (o_.events) {
      c.channel = ibv_create_comp_channel(ctx_);
      if (!c.channel) fatal("ibv_create_comp_channel failed: %s", std::strerror(errno));
    }
    int cqe = std::min(per_thread[static_cast<size_t>(t)] + 16, std::max(1, info_.attr.max_cqe));
    c.cq = ibv_create_cq(ctx_, cqe, nullptr, c.channel, 0);
    if (!c.cq) fatal("ibv_create_cq(%d) failed: %s", cqe, std::strerror(errno));
  }

  std::random_device rd;
  new_api_ = !o_.old_post_send;
  qps_.resize(q);
  old_wr_.resize(q);
  uint8_t* recv_base = buf_ + 2 * q * region_;
  for (int i = 0; i < o_.qps; ++i) {
    QpCtx& c = qps_[static_cast<size_t>(i)];
    c.index = i;
    c.thread = i % o_.threads;
    c.qp = create_qp(cqs_[static_cast<size_t>(c.thread)], sq, rq, &new_api_);
    if (new_api_) {
      c.qpx = ibv_qp_to_qp_ex(c.qp);
      if (!c.qpx) fatal("ibv_qp_to_qp_ex failed");
    }
    modify_init(c.qp);
    c.sq_depth = sq;
    c.rq_depth = rq;
    c.lkey = mr_->lkey;
    c.src = buf_ + static_cast<size_t>(i) * region_;
    c.target = buf_ + (q + static_cast<size_t>(i)) * region_;
    if (slots) {
      c.recv = recv_base + static_cast<size_t>(i) * static_cast<size_t>(slots) * slot;
      c.recv_slot_size = slot;
      c.recv_slots = slots;
    }
    c.local.lid = info_.port.lid;
    c.local.out_reads = static_cast<uint32_t>(out_reads_);
    c.local.qpn = c.qp->qp_num;
    c.local.psn = rd() & 0xffffff;
    c.local.rkey = mr_->rkey;
    c.local.vaddr = reinterpret_cast<uintptr_t>(c.target);
    c.local.gid = info_.gid;
    OldWr& w = old_wr_[static_cast<size_t>(i)];
    w.wr.resize(static_cast<size_t>(o_.post_list));
    w.sge.resize(static_cast<size_t>(o_.post_list));
  }
  // The extended API is all or nothing: a QP created before a fallback must not use it.
  if (!new_api_)
    for (QpCtx& c : qps_) c.qpx = nullptr;
}

void Resources::connect(const std::vector<Dest>& remote, ibv_mtu mtu) {
  for (QpCtx& c : qps_) {
    c.remote = remote[static_cast<size_t>(c.index)];
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.ah_attr.dlid = static_cast<uint16_t>(c.remote.lid);
    a.ah_attr.sl = static_cast<uint8_t>(o_.sl);
    a.ah_attr.port_num = static_cast<uint8_t>(o_.ib_port);
    if (uses_gid()) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = c.remote.gid;
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(info_.gid_index);
      a.ah_attr.grh.hop_limit = 0xff;
    }
    int mask = IBV_QP_STATE;
    if (o_.conn != Conn::kUD) {
      a.path_mtu = mtu;
      a.dest_qp_num = c.remote.qpn;
      a.rq_psn = c.remote.psn;
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (o_.conn == Conn::kRC) {
        a.max_dest_rd_atomic = static_cast<uint8_t>(out_reads_);
        a.min_rnr_timer = kMinRnrTimer;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
    }
    if (int rc = ibv_modify_qp(c.qp, &a, mask))
      fatal("QP 0x%x to RTR failed: %s", c.qp->qp_num, std::strerror(rc));
    ibv_ah_attr ah = a.ah_attr;

    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = c.local.psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (o_.conn == Conn::kRC) {
      a.timeout = static_cast<uint8_t>(o_.qp_timeout);
      a.retry_cnt = 7;
      a.rnr_retry = 7;  // retry for ever, as perftest
      // The initiator depth: what the peer's responder offers, within this device's limit.
      a.max_rd_atomic = static_cast<uint8_t>(
          std::min<uint32_t>(c.remote.out_reads, std::max(0, info_.attr.max_qp_init_rd_atom)));
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    if (int rc = ibv_modify_qp(c.qp, &a, mask))
      fatal("QP 0x%x to RTS failed: %s", c.qp->qp_num, std::strerror(rc));
    if (o_.conn == Conn::kUD) {
      c.ah = ibv_create_ah(pd_, &ah);
      if (!c.ah) fatal("ibv_create_ah failed: %s", std::strerror(errno));
    }
  }
}

int Resources::post(QpCtx& q, const SendWr* wrs, int n) {
  const transport::WrOpcodeInfo& op = transport::wr_opcode_info(opcode_);
  const bool can_inline = o_.inline_size > 0 && (op.flags & transport::kWrInline);
  if (q.qpx) {
    ibv_qp_ex* x = q.qpx;
    ibv_wr_start(x);
    for (int i = 0; i < n; ++i) {
      const SendWr& w = wrs[i];
      const bool inl = can_inline && w.length <= static_cast<uint32_t>(o_.inline_size);
      x->wr_id = w.wr_id;
      x->wr_flags = (w.signaled ? IBV_SEND_SIGNALED : 0) | (inl ? IBV_SEND_INLINE : 0);
      switch (o_.verb) {
        case Verb::kSend:
          ibv_wr_send(x);
          break;
        case Verb::kWrite:
          ibv_wr_rdma_write(x, q.remote.rkey, w.remote_addr);
          break;
        case Verb::kRead:
          ibv_wr_rdma_read(x, q.remote.rkey, w.remote_addr);
          break;
        case Verb::kAtomic:
          if (o_.atomic_op == AtomicOp::kCmpAndSwap)
            ibv_wr_atomic_cmp_swp(x, q.remote.rkey, w.remote_addr, w.compare_add, w.swap);
          else
            ibv_wr_atomic_fetch_add(x, q.remote.rkey, w.remote_addr, w.compare_add);
          break;
      }
      if (q.ah) ibv_wr_set_ud_addr(x, q.ah, q.remote.qpn, kQkey);
      if (inl)
        ibv_wr_set_inline_data(x, reinterpret_cast<void*>(w.local_addr), w.length);
      else
        ibv_wr_set_sge(x, q.lkey, w.local_addr, w.length);
    }
    return ibv_wr_complete(x);
  }
  OldWr& ow = old_wr_[static_cast<size_t>(q.index)];
  for (int i = 0; i < n; ++i) {
    const SendWr& w = wrs[i];
    ibv_send_wr& r = ow.wr[static_cast<size_t>(i)];
    ibv_sge& s = ow.sge[static_cast<size_t>(i)];
    s.addr = w.local_addr;
    s.length = w.length;
    s.lkey = q.lkey;
    r = {};
    r.wr_id = w.wr_id;
    r.sg_list = &s;
    r.num_sge = 1;
    r.next = i + 1 < n ? &ow.wr[static_cast<size_t>(i) + 1] : nullptr;
    r.send_flags = w.signaled ? IBV_SEND_SIGNALED : 0;
    if (can_inline && w.length <= static_cast<uint32_t>(o_.inline_size))
      r.send_flags |= IBV_SEND_INLINE;
    r.opcode = opcode_;
    if (q.ah) {  // UD: SEND only
      r.wr.ud.ah = q.ah;
      r.wr.ud.remote_qpn = q.remote.qpn;
      r.wr.ud.remote_qkey = kQkey;
    }
    if (op.flags & transport::kWrRdma) {
      r.wr.rdma.remote_addr = w.remote_addr;
      r.wr.rdma.rkey = q.remote.rkey;
    }
    if (op.flags & transport::kWrAtomic) {
      r.wr.atomic.remote_addr = w.remote_addr;
      r.wr.atomic.compare_add = w.compare_add;
      r.wr.atomic.swap = w.swap;
      r.wr.atomic.rkey = q.remote.rkey;
    }
  }
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(q.qp, ow.wr.data(), &bad);
}

int Resources::post_recv(QpCtx& q, int slot) {
  ibv_sge s{};
  s.addr = reinterpret_cast<uintptr_t>(q.recv + static_cast<size_t>(slot) * q.recv_slot_size);
  s.length = static_cast<uint32_t>(q.recv_slot_size);
  s.lkey = q.lkey;
  ibv_recv_wr r{};
  r.wr_id = make_wr_id(q.index, WrTag::kRecv, static_cast<uint32_t>(slot));
  r.sg_list = &s;
  r.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(q.qp, &r, &bad);
}

}  // namespace uroce::perf
