#include "cm/gsi.h"

#include <cerrno>
#include <cstring>

namespace uroce::cm {
namespace {

uint32_t get32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

Gsi::Gsi(std::shared_ptr<Device> dev)
    : dev_(std::move(dev)),
      send_cq_(256, nullptr, nullptr),
      recv_cq_(kRecvSlots * 2, &channel_, this),
      bufs_(kRecvSlots * kSlotBytes) {}

std::unique_ptr<Gsi> Gsi::open(std::shared_ptr<Device> dev, int* err) {
  std::unique_ptr<Gsi> g(new Gsi(std::move(dev)));
  g->pd_ = g->dev_->alloc_pd();
  uint32_t rkey = 0;
  int rc = g->dev_->reg_mr(g->pd_, g->bufs_.data(), g->bufs_.size(), IBV_ACCESS_LOCAL_WRITE,
                           &g->lkey_, &rkey);
  if (rc != 0) {
    *err = rc;
    return nullptr;
  }
  g->have_mr_ = true;
  transport::QpInit init;
  init.type = IBV_QPT_UD;
  init.qpn = kGsiQpn;
  init.pd = g->pd_;
  init.max_send_wr = 256;
  init.max_recv_wr = kRecvSlots;
  init.max_send_sge = 1;
  init.max_recv_sge = 1;
  init.max_inline_data = kMadBytes;
  init.send_cq = &g->send_cq_;
  init.recv_cq = &g->recv_cq_;
  init.port_mtu = g->dev_->mtu_bytes();
  g->qp_ = g->dev_->create_qp(init, &rc);
  if (!g->qp_) {
    *err = rc;
    return nullptr;
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qkey = kGsiQkey;
  rc = g->dev_->modify_qp(g->qp_, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  if (rc == 0) {
    a = {};
    a.qp_state = IBV_QPS_RTR;
    rc = g->dev_->modify_qp(g->qp_, a, IBV_QP_STATE);
  }
  if (rc == 0) {
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    rc = g->dev_->modify_qp(g->qp_, a, IBV_QP_STATE | IBV_QP_SQ_PSN);
  }
  for (size_t i = 0; rc == 0 && i < kRecvSlots; ++i) rc = g->post_recv(i);
  if (rc != 0) {
    *err = rc;
    return nullptr;
  }
  g->rearm();
  return g;
}

Gsi::~Gsi() {
  if (qp_) dev_->destroy_qp(qp_);
  if (have_mr_) dev_->dereg_mr(lkey_);
  if (pd_) dev_->dealloc_pd(pd_);
}

int Gsi::post_recv(size_t slot) {
  transport::RecvWqe w;
  w.wr_id = slot;
  w.num_sge = 1;
  w.sge[0] = {reinterpret_cast<uintptr_t>(bufs_.data() + slot * kSlotBytes),
              static_cast<uint32_t>(kSlotBytes), lkey_};
  size_t bad;
  return dev_->post_recv(qp_, &w, 1, &bad);
}

int Gsi::send(const wire::IpAddr& dst_ip, const Mad& mad) {
  transport::SendWqe w;
  w.opcode = IBV_WR_SEND;
  w.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
  w.ud_dst_ip = dst_ip;
  w.ud_remote_qpn = kGsiQpn;
  w.ud_remote_qkey = kGsiQkey;
  w.inline_len = kMadBytes;
  std::memcpy(w.inline_data.data(), mad.data(), kMadBytes);
  size_t bad;
  int rc = dev_->post_send(qp_, &w, 1, &bad);
  if (rc != 0) {
    ++counters_.send_errors;
    return rc;
  }
  ++counters_.sent;
  return 0;
}

size_t Gsi::poll(const std::function<void(const wire::IpAddr&, std::span<const uint8_t>)>& fn) {
  ibv_wc wc[16];
  for (int n; (n = send_cq_.poll(16, wc)) > 0;)
    for (int i = 0; i < n; ++i)
      if (wc[i].status != IBV_WC_SUCCESS) ++counters_.send_errors;
  // A completion channel event per armed notification: consume them (the fd is a semaphore).
  while (channel_.pending() > 0) {
    void* cookie;
    if (channel_.get_event(&cookie) != 0) break;
  }
  size_t delivered = 0;
  for (int n; (n = recv_cq_.poll(16, wc)) > 0;) {
    for (int i = 0; i < n; ++i) {
      const size_t slot = wc[i].wr_id;
      if (slot >= kRecvSlots) continue;
      const uint8_t* b = bufs_.data() + slot * kSlotBytes;
      if (wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len >= kSlotBytes) {
        ++counters_.received;
        ++delivered;
        // The GRH area holds the IPv4 header in its last 20 bytes (RoCEv2, IBTA A17.4.5.1),
        // the source address at offset 12 of it; over IPv6 the IPv6 header fills all 40 bytes
        // (A17.4.5.2), the source address at offset 8. The IP version nibble tells them apart
        // (an IPv4 packet's GRH area starts with 20 zero bytes).
        const wire::IpAddr src =
            (b[0] >> 4) == 6 ? wire::IpAddr::from_bytes(b + 8) : wire::IpAddr(get32(b + 20 + 12));
        fn(src, std::span<const uint8_t>(b + kGrhBytes, kMadBytes));
      } else {
        ++counters_.bad_receives;
      }
      post_recv(slot);
    }
  }
  return delivered;
}

void Gsi::rearm() {
  recv_cq_.req_notify(false);
}

}  // namespace uroce::cm
