#include "sim/sim_port.h"

#include "wire/wire.h"

namespace uroce::sim {

SimPort::SimPort(uint32_t ip, uint32_t ring, FramePool& pool, NicQueue& nic, std::string name)
    : ip_(ip), ring_(ring), pool_(pool), nic_(nic), name_(std::move(name)) {
  caps_.ip_mtu = 9000;  // jumbo frames: every IB path MTU up to 4096 fits
  caps_.exact_icrc = true;
  caps_.ipv4_csum_offload = true;
  owned_.reserve(ring);
  for (uint32_t i = 0; i < ring; ++i) owned_.push_back(new transport::TxBuf);
  free_ = owned_;
}

SimPort::~SimPort() {
  for (Frame* f : rx_batch_) pool_.put(f);
  for (Frame* f : rx_pending_) pool_.put(f);
  for (transport::TxBuf* b : owned_) delete b;
}

std::span<const RxFrame> SimPort::rx_burst() {
  for (Frame* f : rx_batch_) pool_.put(f);
  rx_batch_.clear();
  rx_frames_.clear();
  rx_batch_.swap(rx_pending_);
  for (Frame* f : rx_batch_) {
    RxFrame& r = rx_frames_.emplace_back();
    r.data = f->payload.data();
    r.len = uint32_t(f->payload.size());
    r.src_ip = wire::IpAddr(f->src_ip);  // the simulated fabric is IPv4
    r.dst_ip = wire::IpAddr(f->dst_ip);
    r.src_port = f->src_port;
    r.dst_port = f->dst_port;
    r.tos = f->tos;
    r.ip_id_known = true;
    r.dont_fragment = f->dont_fragment;
    r.ip_id = f->ip_id;
  }
  return rx_frames_;
}

transport::TxBuf* SimPort::tx_alloc() {
  if (free_.empty() || ring_full()) return nullptr;
  transport::TxBuf* b = free_.back();
  free_.pop_back();
  ++allocated_;
  return b;
}

void SimPort::tx_free(transport::TxBuf* buf) {
  free_.push_back(buf);
  --allocated_;
}

size_t SimPort::tx_burst(std::span<transport::TxBuf* const> bufs) {
  for (transport::TxBuf* b : bufs) {
    Frame* f = pool_.get();
    f->kind = FrameKind::kRoce;
    f->src_ip = ip_;
    f->dst_ip = b->dst_ip.v4();  // IPv4-mapped: the engine drops any other (Datapath)
    f->src_port = b->src_port;
    f->dst_port = udp_dst_port();
    f->tos = uint8_t(b->dscp << 2 | (b->ecn & 3));
    f->prio = b->pcp != transport::kPcpPortDefault ? uint8_t(b->pcp & 7) : dscp_class(b->dscp);
    f->ip_id = b->ip_id;
    f->dont_fragment = true;
    f->payload.assign(b->data, b->data + b->len + wire::kIcrcBytes);
    if (counters_ != nullptr) {
      counters_->sent_pkts.add();
      counters_->sent_bytes.add(f->payload.size());
    }
    tx_free(b);
    nic_.transmit(f);
  }
  return bufs.size();
}

}  // namespace uroce::sim
