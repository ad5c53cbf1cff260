#include "harness.h"

#include <arpa/inet.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace uroce::transport::test {

uint32_t FakeMemory::reg(uint32_t pd, void* addr, size_t len, int access) {
  const uint32_t key = next_key_++;
  MemoryTable::Region r;
  r.pd = pd;
  r.host = static_cast<uint8_t*>(addr);
  r.iova = reinterpret_cast<uint64_t>(addr);
  r.len = len;
  r.access = access;
  table_.add_region(key, r);
  return key;
}

TxBuf* CaptureSink::tx_alloc() {
  if (budget == 0) return nullptr;
  if (budget > 0) --budget;
  scratch_.len = 0;
  scratch_.ext = nullptr;
  scratch_.ext_len = 0;
  return &scratch_;
}

size_t CaptureSink::tx_flush(Time) {
  const size_t n = unflushed_;
  unflushed_ = 0;
  return n;
}

void CaptureSink::tx_commit(TxBuf* buf) {
  ++unflushed_;
  // Copy only the used bytes' worth of struct (the rest is irrelevant).
  sent.emplace_back();
  TxBuf& t = sent.back();
  t.dst_ip = buf->dst_ip;
  t.src_port = buf->src_port;
  t.ecn = buf->ecn;
  t.dscp = buf->dscp;
  t.pcp = buf->pcp;
  t.roce_v1 = buf->roce_v1;
  t.acks_ride = buf->acks_ride;
  t.len = buf->len;
  std::memcpy(t.data, buf->data, buf->len);
  // A payload by reference only where the sink offered it, and only when big enough.
  EXPECT_TRUE(buf->ext_len == 0 || (tx_gather_min() != 0 && buf->ext_len >= tx_gather_min()));
  ASSERT_LE(buf->ib_len(), kMaxIbPacket);
  if (buf->ext_len != 0) {
    t.ext = buf->ext;  // a record only: ext_len stays 0, the bytes are in data
    ++gathered;
    std::memcpy(t.data + t.len, buf->ext, buf->ext_len);
    t.len += buf->ext_len;
  }
}

wire::Packet parsed(const TxBuf& buf) {
  wire::Packet p;
  const wire::ParseError e = wire::parse(std::span<const uint8_t>(buf.data, buf.len), p);
  EXPECT_EQ(e, wire::ParseError::kOk) << wire::to_string(e);
  return p;
}

ibv_ah_attr ah_for(uint32_t ip) {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = 1;
  ah.grh.dgid.raw[10] = 0xff;
  ah.grh.dgid.raw[11] = 0xff;
  const uint32_t be = htonl(ip);
  std::memcpy(&ah.grh.dgid.raw[12], &be, 4);
  return ah;
}

Node::Node(uint32_t qpn, uint32_t ip_, bool sq_sig_all)
    : ip(ip_), dispatch(sink, memory_ref_, counters, Dispatch::Limits{}) {
  init.type = IBV_QPT_RC;
  init.qpn = qpn;
  init.pd = pd;
  init.local_ip = wire::IpAddr(ip);
  init.max_send_wr = init.max_recv_wr = 4096;
  init.max_send_sge = init.max_recv_sge = kMaxSge;
  init.max_inline_data = kMaxInlineData;
  init.sq_sig_all = sq_sig_all;
  init.send_cq = &scq;
  init.recv_cq = &rcq;
  init.events = &events;
  rebuild();
}

void Node::rebuild() {
  if (qp) dispatch.destroy_qp(qp);
  int err = 0;
  qp = dispatch.create_qp(init, &err);
  if (!qp) throw std::runtime_error("test node: cannot create QP: errno " + std::to_string(err));
}

void Node::connect(uint32_t remote_ip, uint32_t remote_qpn, uint32_t sq_psn, uint32_t rq_psn,
                   const PathParams& p) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = p.access;
  ASSERT_EQ(qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0),
            0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p.mtu;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = p.rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  a.ah_attr = ah_for(remote_ip);
  a.ah_attr.grh.traffic_class = p.traffic_class;
  a.ah_attr.static_rate = p.static_rate;
  ASSERT_EQ(qp->modify(a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                       0),
            0);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = sq_psn;
  a.timeout = p.timeout;
  a.retry_cnt = p.retry_cnt;
  a.rnr_retry = p.rnr_retry;
  a.max_rd_atomic = p.rd_atomic;
  a.rate_limit = p.rate_limit;
  ASSERT_EQ(qp->modify(a,
                       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
                           (p.rate_limit ? IBV_QP_RATE_LIMIT : 0),
                       0),
            0);
}

uint32_t Node::buffer(std::vector<uint8_t>& storage, size_t len, uint8_t fill) {
  storage.assign(len, fill);
  return mem.reg(pd, storage.data(), len, IBV_ACCESS_LOCAL_WRITE);
}

SendWqe send_wqe(uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey, ibv_wr_opcode op) {
  SendWqe w;
  w.wr_id = wr_id;
  w.opcode = op;
  w.num_sge = 1;
  w.sge[0] = Sge{addr, len, lkey};
  return w;
}

RecvWqe recv_wqe(uint64_t wr_id, uint64_t addr, uint32_t len, uint32_t lkey) {
  RecvWqe w;
  w.wr_id = wr_id;
  w.num_sge = 1;
  w.sge[0] = Sge{addr, len, lkey};
  return w;
}

SendWqe rdma_wqe(uint64_t wr_id, ibv_wr_opcode op, uint64_t laddr, uint32_t len, uint32_t lkey,
                 uint64_t raddr, uint32_t rkey) {
  SendWqe w = send_wqe(wr_id, laddr, len, lkey, op);
  w.remote_addr = raddr;
  w.rkey = rkey;
  return w;
}

SendWqe atomic_wqe(uint64_t wr_id, ibv_wr_opcode op, uint64_t laddr, uint32_t lkey, uint64_t raddr,
                   uint32_t rkey, uint64_t compare_add, uint64_t swap) {
  SendWqe w = send_wqe(wr_id, laddr, 8, lkey, op);
  w.remote_addr = raddr;
  w.rkey = rkey;
  w.compare_add = compare_add;
  w.swap = swap;
  return w;
}

Link::Link(Node& a, Node& b, LinkParams p, Time start) : nodes_{&a, &b}, rng_(p.seed) {
  const sim::ChannelParams cp{
      .delay = p.latency, .loss = p.loss, .dup = p.dup, .reorder = p.reorder};
  for (int i = 0; i < 2; ++i) {
    ends_[i].link = this;
    ends_[i].idx = i;
    detours_[i].link = this;
    detours_[i].idx = i;
    to_[i] = std::make_unique<sim::Channel>(q_, pool_, rng_, cp, &ends_[i]);
    // Frames towards node i were sent by node 1 - i.
    to_[i]->drop_if = [this, from = 1 - i](const sim::Frame& f) {
      if (!drop_if) return false;
      wire::Packet pkt;
      return wire::parse(f.payload, pkt) == wire::ParseError::kOk && drop_if(from, pkt);
    };
    wake_[i] = std::make_unique<sim::Timer>(q_, &ends_[i]);
  }
  if (start != 0) {
    // The event queue's clock moves only by running an event: one no-op event at `start`.
    q_.schedule(start, sim::EventClass::kSample, &ends_[0]);
    q_.run_until(start);
    now = start;
  }
}

void Link::End::on_frame(sim::Frame* f, Time now) {
  Node& dst = *link->nodes_[idx];
  RxPacket p;
  if (wire::parse(f->payload, p.pkt) == wire::ParseError::kOk) {
    p.info.src_ip = wire::IpAddr(link->nodes_[1 - idx]->ip);
    p.info.dst_ip = wire::IpAddr(dst.ip);
    p.info.src_port = f->src_port;
    p.info.ecn = f->tos & 3;
    dst.dispatch.receive({&p, 1}, now);
    ++link->delivered;
  }
  link->pool_.put(f);
}

void Link::collect() {
  for (int from = 0; from < 2; ++from) {
    auto& sent = nodes_[from]->sink.sent;
    while (!sent.empty()) {
      const TxBuf& b = sent.front();
      wire::Packet pkt;
      if (wire::parse(std::span<const uint8_t>(b.data, b.len), pkt) != wire::ParseError::kOk) {
        ++parse_errors;
      } else {
        sim::Frame* f = pool_.get();
        f->src_ip = nodes_[from]->ip;
        f->dst_ip = b.dst_ip.v4();
        f->src_port = b.src_port;
        f->tos = b.ecn;
        if (ce_if && (b.ecn & 3) != 0 && ce_if(from, b.src_port)) f->tos |= 3;  // ECT only
        f->payload.assign(b.data, b.data + b.len);
        const Time extra =
            (path_delay ? path_delay(from, b.src_port) : 0) + (delay_if ? delay_if(from, pkt) : 0);
        if (extra == kNever) {
          ++path_lost;
          pool_.put(f);
        } else if (extra == 0) {
          to_[1 - from]->send(f);
        } else {
          q_.schedule(q_.now() + extra, sim::EventClass::kArrival, &detours_[1 - from],
                      reinterpret_cast<uint64_t>(f));
        }
      }
      sent.pop_front();
    }
  }
  lost = to_[0]->counters().lost + to_[1]->counters().lost + path_lost;
  duplicated = to_[0]->counters().duplicated + to_[1]->counters().duplicated;
}

bool Link::step(Time limit) {
  collect();
  if (++steps_ > kMaxSteps) {
    ADD_FAILURE() << "link did not settle after " << kMaxSteps << " events";
    return false;
  }
  // Tests call their QPs directly (post_send, modify…): let each dispatch see what changed.
  for (int i = 0; i < 2; ++i) {
    Node& n = *nodes_[i];
    n.dispatch.touch(n.qp);
    const Time d = n.dispatch.next_deadline();
    if (d == kNever) {
      wake_[i]->cancel();
    } else {
      wake_[i]->arm(d);
    }
  }
  // The earliest event: an arrival (delivered by its End), or a node's deadline.
  if (!q_.step(limit)) return false;
  now = q_.now();
  // Due timers and pumping, as an engine pass does them.
  for (Node* n : nodes_) {
    bool again = false;
    n->dispatch.progress(now, &again);
  }
  return true;
}

bool Link::run_until(const std::function<bool()>& done, Time limit) {
  while (!done() && step(limit)) {
  }
  return done();
}

}  // namespace uroce::transport::test

namespace uroce::transport::test {

std::unique_ptr<Crafted> craft(wire::Opcode op, uint32_t dest_qpn, uint32_t psn, bool ack_req,
                               std::span<const uint8_t> payload, uint32_t imm_be) {
  auto c = std::make_unique<Crafted>();
  wire::Packet p;
  p.bth.opcode = static_cast<uint8_t>(op);
  p.bth.migreq = true;
  p.bth.pkey = wire::kDefaultPkey;
  p.bth.dest_qp = dest_qpn;
  p.bth.ack_req = ack_req;
  p.bth.psn = psn & 0xffffff;
  p.bth.pad = wire::pad_for(payload.size());
  p.imm_be = imm_be;
  const size_t h = wire::build_headers(p, c->buf.data);
  if (!payload.empty()) std::memcpy(c->buf.data + h, payload.data(), payload.size());
  std::memset(c->buf.data + h + payload.size(), 0, p.bth.pad);
  c->buf.len = static_cast<uint32_t>(h + payload.size() + p.bth.pad);
  c->pkt = parsed(c->buf);
  return c;
}

std::unique_ptr<Crafted> craft_headers(wire::Packet p, std::span<const uint8_t> payload) {
  auto c = std::make_unique<Crafted>();
  p.bth.pad = wire::pad_for(payload.size());
  const size_t h = wire::build_headers(p, c->buf.data);
  if (!payload.empty()) std::memcpy(c->buf.data + h, payload.data(), payload.size());
  std::memset(c->buf.data + h + payload.size(), 0, p.bth.pad);
  c->buf.len = static_cast<uint32_t>(h + payload.size() + p.bth.pad);
  c->pkt = parsed(c->buf);
  return c;
}

std::unique_ptr<Crafted> craft_ack(uint32_t dest_qpn, uint32_t psn, uint8_t syndrome,
                                   uint32_t msn) {
  auto c = std::make_unique<Crafted>();
  wire::Packet p;
  p.bth.opcode = static_cast<uint8_t>(wire::Opcode::kRcAcknowledge);
  p.bth.pkey = wire::kDefaultPkey;
  p.bth.dest_qp = dest_qpn;
  p.bth.psn = psn & 0xffffff;
  p.aeth.syndrome = syndrome;
  p.aeth.msn = msn;
  c->buf.len = static_cast<uint32_t>(wire::build_headers(p, c->buf.data));
  c->pkt = parsed(c->buf);
  return c;
}

void deliver(Node& n, const Crafted& c, uint32_t src_ip, Time now) {
  RxInfo rx;
  rx.src_ip = wire::IpAddr(src_ip);
  rx.dst_ip = wire::IpAddr(n.ip);
  n.qp->receive(c.pkt, rx, now);
}

std::vector<std::unique_ptr<Crafted>> drain(Node& n) {
  std::vector<std::unique_ptr<Crafted>> out;
  for (const TxBuf& b : n.sink.sent) {
    auto c = std::make_unique<Crafted>();
    c->buf.len = b.len;
    c->buf.dst_ip = b.dst_ip;
    c->buf.src_port = b.src_port;
    c->buf.ecn = b.ecn;
    c->buf.dscp = b.dscp;
    c->buf.pcp = b.pcp;
    c->buf.roce_v1 = b.roce_v1;
    c->buf.acks_ride = b.acks_ride;
    std::memcpy(c->buf.data, b.data, b.len);
    c->pkt = parsed(c->buf);
    out.push_back(std::move(c));
  }
  n.sink.sent.clear();
  return out;
}

void connect_uc(Node& n, uint32_t remote_ip, uint32_t remote_qpn, uint32_t sq_psn,
                uint32_t rq_psn) {
  n.init.type = IBV_QPT_UC;
  n.rebuild();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ASSERT_EQ(
      n.qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0), 0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = rq_psn;
  a.ah_attr = ah_for(remote_ip);
  ASSERT_EQ(n.qp->modify(
                a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN, 0),
            0);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = sq_psn;
  ASSERT_EQ(n.qp->modify(a, IBV_QP_STATE | IBV_QP_SQ_PSN, 0), 0);
}

}  // namespace uroce::transport::test
