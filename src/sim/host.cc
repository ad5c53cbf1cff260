#include "sim/host.h"

#include <arpa/inet.h>

#include <cstring>
#include <stdexcept>

#include "transport/responder.h"

namespace uroce::sim {

Host::Host(EventQueue& q, FramePool& pool, std::string name, uint32_t id, uint32_t ip,
           const HostConfig& c, const Window* window)
    : q_(q),
      pool_(pool),
      name_(std::move(name)),
      id_(id),
      ip_(ip),
      c_(c),
      window_(window),
      now_(q, this),
      wake_(q, this) {
  auto port = std::make_unique<SimPort>(ip, c.ring, pool, *this, name_);
  port_ = port.get();
  port_->set_counters(&counters_.port);
  DatapathOptions opt;
  opt.data_dscp = c.data_dscp;
  std::string err;
  dp_ = Datapath::open(std::move(port), opt, counters_, &err);
  if (!dp_) throw std::runtime_error("sim host " + name_ + ": " + err);
  dispatch_ = std::make_unique<Dispatch>(*dp_, mem_, counters_, Dispatch::Limits{});
}

Host::~Host() = default;

void Host::attach(std::unique_ptr<Channel> out, const std::string& peer) {
  out_ = std::move(out);
  peer_ = peer;
  nic_ = std::make_unique<EgressPort>(q_, c_.rate_bps, out_.get(), this, 0, window_, nullptr,
                                      RedConfig{});
}

transport::Qp* Host::create_qp(uint32_t qpn, QpUser* user) {
  transport::QpInit init;
  init.type = IBV_QPT_RC;
  init.qpn = qpn;
  init.pd = kPd;
  init.local_ip = wire::IpAddr(ip_);
  init.max_send_wr = init.max_recv_wr = 1024;
  init.max_send_sge = init.max_recv_sge = 1;
  init.send_cq = init.recv_cq = &cq_;
  init.early_retransmit = c_.qp.early_retransmit;
  init.selective_repeat = c_.qp.selective_repeat;
  init.paths = c_.qp.paths;
  init.cc = c_.cc;
  init.line_rate_bps = c_.rate_bps;
  int err = 0;
  transport::Qp* qp = dispatch_->create_qp(init, &err);
  if (qp != nullptr && user != nullptr) users_[qp->qpn()] = user;
  return qp;
}

bool Host::connect(transport::Qp* qp, uint32_t remote_ip, uint32_t remote_qpn, uint32_t sq_psn,
                   uint32_t rq_psn) {
  const Time now = q_.now();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (qp->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, now))
    return false;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = c_.qp.mtu;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.dgid.raw[10] = 0xff;
  a.ah_attr.grh.dgid.raw[11] = 0xff;
  const uint32_t be = htonl(remote_ip);
  std::memcpy(&a.ah_attr.grh.dgid.raw[12], &be, 4);
  if (qp->modify(a,
                 IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                 now))
    return false;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = sq_psn;
  a.timeout = c_.qp.timeout;
  a.retry_cnt = c_.qp.retry_cnt;
  a.rnr_retry = c_.qp.rnr_retry;
  a.max_rd_atomic = 1;
  if (qp->modify(a,
                 IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
                 now))
    return false;
  dispatch_->touch(qp);
  return true;
}

int Host::post(transport::Qp* qp, const transport::SendWqe& wqe) {
  const Time now = q_.now();
  const int rc = qp->post_send(wqe, now);
  bool more = false;
  const Time d = dispatch_->after_call(qp, now, &more);
  if (!in_pass_) {
    if (more || port_->ring_full()) waiting_for_ring_ = true;
    if (more) now_.arm_by(now);
    wake_.arm_by(d);
  }
  return rc;
}

GoodputTap& Host::tap(uint32_t qpn, uint32_t rq_psn) {
  GoodputTap& t = taps_[qpn];
  t.expected_psn = rq_psn & 0xffffff;
  t.selective_repeat = c_.qp.selective_repeat;
  return t;
}

void Host::on_frame(Frame* f, Time now) {
  if (f->kind == FrameKind::kPause) {
    if (nic_) nic_->on_pause_frame(*f);
    pool_.put(f);
    return;
  }
  port_->deliver(f);
  now_.arm_by(now);
}

void Host::on_dequeue(uint32_t, const Frame&, Time now) {
  if (waiting_for_ring_) {
    waiting_for_ring_ = false;
    now_.arm_by(now);
  }
}

void Host::on_event(Time now, uint64_t) {
  pass(now);
}

void Host::count_goodput(std::span<const RxPacket> rx) {
  if (taps_.empty()) return;
  for (const RxPacket& p : rx) {
    if (p.pkt.info == nullptr || !(p.pkt.info->flags & wire::kRequest)) continue;
    auto it = taps_.find(p.pkt.bth.dest_qp);
    if (it == taps_.end()) continue;
    GoodputTap& t = it->second;
    const uint32_t ahead = (p.pkt.bth.psn - t.expected_psn) & 0xffffff;
    if (ahead != 0) {
      if (t.selective_repeat && ahead < transport::kSrWindowPkts)
        t.ahead.emplace(p.pkt.bth.psn, uint32_t(p.pkt.payload.size()));
      continue;
    }
    t.bytes += p.pkt.payload.size();
    t.expected_psn = (t.expected_psn + 1) & 0xffffff;
    // The packets placed ahead that this one was the gap before.
    for (auto a = t.ahead.find(t.expected_psn); a != t.ahead.end();
         a = t.ahead.find(t.expected_psn)) {
      t.bytes += a->second;
      t.expected_psn = (t.expected_psn + 1) & 0xffffff;
      t.ahead.erase(a);
    }
  }
}

void Host::pass(Time now) {
  ++passes_;
  in_pass_ = true;
  std::span<const RxPacket> rx = dp_->rx_burst(now);
  if (!rx.empty()) {
    count_goodput(rx);
    dispatch_->receive(rx, now);
  }
  bool again = false;
  dispatch_->progress(now, &again);
  dp_->tx_flush(now);
  // Completions to their QPs' users, who may post more (Host::post), until none are left.
  while (!cq_.wcs.empty()) {
    completions_.swap(cq_.wcs);
    for (const ibv_wc& wc : completions_) {
      auto it = users_.find(wc.qp_num);
      if (it != users_.end()) it->second->on_completion(wc, now);
    }
    completions_.clear();
  }
  in_pass_ = false;
  // The ring fills only during a pass (nothing leaves while time stands still): full now means
  // a QP may have been refused a buffer, so the next frame that leaves wakes the host.
  waiting_for_ring_ = port_->ring_full();
  Time next = std::min(dispatch_->next_deadline(), dp_->fault_deadline());
  if (port_->rx_pending() || again) {
    // Another pass at this instant; it re-arms `wake_` for whatever deadline it leaves, so a
    // deadline at `now` is no overdue one here.
    now_.arm(now);
    if (next <= now) {
      wake_.cancel();
      return;
    }
  } else if (next <= now) {
    // A deadline the pass did not move past `now` (a transport bug): one pass per nanosecond,
    // counted, rather than a simulation stuck at one instant (the engine bounds it likewise).
    ++overdue_passes_;
    next = now + 1;
  }
  if (next == kNever) {
    wake_.cancel();
  } else {
    wake_.arm(next);
  }
}

}  // namespace uroce::sim
