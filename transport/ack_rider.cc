// ACK riders: see ack_rider.h.
#include "transport/ack_rider.h"

#include "wire/wire.h"

namespace uroce::transport {

namespace {

// The same QP's packets: destination, the peer's QPN and the QP's own UDP source port.
bool same_qp(const TxBuf& a, uint32_t a_dest_qp, const TxBuf& b) {
  return a.src_port == b.src_port && wire::bth_dest_qp(b.data) == a_dest_qp &&
         a.dst_ip == b.dst_ip && a.roce_v1 == b.roce_v1;
}

// A positive RC ACK of a QP whose peer takes riders.
bool rides(const TxBuf& b) {
  return b.acks_ride && b.data[0] == uint8_t(wire::Opcode::kRcAcknowledge) &&
         b.len == wire::kBthBytes + wire::kAethBytes && b.ext_len == 0 &&
         wire::aeth_type(b.data[wire::kBthBytes]) == wire::AethType::kAck;
}

bool carries(const TxBuf& b, const wire::OpcodeInfo& info) {
  return b.acks_ride && b.ext_len == 0 && wire::service_of(b.data[0]) == wire::Service::kRc &&
         b.len >= info.header_len && b.len - info.header_len <= kMaxRiderCarrierPayload &&
         !(wire::bth_ext(b.data) & wire::kBthExtAck);
}

// Where the ACK at queue[i] rides: the first request of its QP that can carry it, or null when
// none can or another response of the QP is in the queue.
TxBuf* carrier_for(std::span<TxBuf*> queue, size_t i) {
  const TxBuf& a = *queue[i];
  const uint32_t qp = wire::bth_dest_qp(a.data);
  TxBuf* carrier = nullptr;
  for (size_t j = 0; j < queue.size(); ++j) {
    TxBuf* b = queue[j];
    if (j == i || b == nullptr || !same_qp(a, qp, *b)) continue;
    const wire::OpcodeInfo& info = wire::opcode_info(b->data[0]);
    if (!(info.flags & wire::kRequest)) return nullptr;  // keep the order of two responses
    if (carrier == nullptr && carries(*b, info)) carrier = b;
  }
  return carrier;
}

}  // namespace

size_t ride_acks(std::span<TxBuf*> queue, std::vector<TxBuf*>& freed) {
  const size_t n = queue.size();
  if (n < 2) return n;
  size_t rode = 0;
  for (size_t i = 0; i < n; ++i) {
    if (queue[i] == nullptr || !rides(*queue[i])) continue;
    TxBuf* carrier = carrier_for(queue, i);
    if (carrier == nullptr) continue;
    wire::attach_ack_rider(carrier->data, carrier->len, queue[i]->data);
    carrier->len += static_cast<uint32_t>(wire::kAckRiderBytes);
    freed.push_back(queue[i]);
    queue[i] = nullptr;
    ++rode;
  }
  if (rode == 0) return n;
  size_t out = 0;
  for (size_t i = 0; i < n; ++i)
    if (queue[i] != nullptr) queue[out++] = queue[i];
  return out;
}

}  // namespace uroce::transport
