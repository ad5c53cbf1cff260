// ACK riders: see ack_rider.h.
#include "transport/ack_rider.h"

#include <algorithm>

#include "wire/wire.h"

namespace uroce::transport {

namespace {

// The same QP's packets: destination, the peer's QPN and the QP's own UDP source port.
bool same_qp(const TxBuf& a, const TxBuf& b) {
  return a.dst_ip == b.dst_ip && a.src_port == b.src_port && a.roce_v1 == b.roce_v1 &&
         wire::bth_dest_qp(a.data) == wire::bth_dest_qp(b.data);
}

bool rides(const TxBuf& b) {
  return b.acks_ride && b.ext_len == 0 && b.len == wire::kBthBytes + wire::kAethBytes &&
         b.data[0] == uint8_t(wire::Opcode::kRcAcknowledge) &&
         wire::aeth_type(b.data[wire::kBthBytes]) == wire::AethType::kAck;
}

bool carries(const TxBuf& b) {
  if (!b.acks_ride || b.ext_len != 0) return false;
  const uint8_t op = b.data[0];
  if (wire::service_of(op) != wire::Service::kRc) return false;
  const wire::OpcodeInfo& info = wire::opcode_info(op);
  return info.name != nullptr && (info.flags & wire::kRequest) && b.len >= info.header_len &&
         b.len - info.header_len <= kMaxRiderCarrierPayload &&
         !(wire::bth_ext(b.data) & wire::kBthExtAck);
}

}  // namespace

size_t ride_acks(std::span<TxBuf*> queue, std::vector<TxBuf*>& freed) {
  if (queue.size() < 2) return queue.size();
  bool any = false;
  for (size_t i = 0; i < queue.size(); ++i) {
    TxBuf* a = queue[i];
    if (a == nullptr || !rides(*a)) continue;
    TxBuf* carrier = nullptr;
    bool alone = true;
    for (size_t j = 0; j < queue.size() && alone; ++j) {
      TxBuf* b = queue[j];
      if (j == i || b == nullptr || !same_qp(*a, *b)) continue;
      if (!(wire::opcode_info(b->data[0]).flags & wire::kRequest))
        alone = false;  // another response of the QP: keep the order of the two
      else if (carrier == nullptr && carries(*b))
        carrier = b;
    }
    if (!alone || carrier == nullptr) continue;
    wire::attach_ack_rider(carrier->data, carrier->len, a->data);
    carrier->len += static_cast<uint32_t>(wire::kAckRiderBytes);
    freed.push_back(a);
    queue[i] = nullptr;
    any = true;
  }
  if (!any) return queue.size();
  return static_cast<size_t>(std::remove(queue.begin(), queue.end(), nullptr) - queue.begin());
}

}  // namespace uroce::transport
