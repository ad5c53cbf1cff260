// ACK riders: between two uroce QPs that both take them (wire::kBthExtRides), an RC ACK that
// leaves in the same flush as a request of its QP rides on that request — the acknowledged PSN
// and the AETH appended after the request's pad (wire::kBthExtAck, docs/wire-format.md) — instead
// of going as a datagram of its own: TCP's piggybacked ACK. IB has none (IBTA 9.7.5.1: responses
// and requests of a QP are separate packets), so a ping-pong moves two datagrams each way per
// message where raw UDP moves one; the ACK cannot be dropped (the sender's work request
// completes only with it, and ibv_rc_pingpong waits for that before its next message), but it
// can share the reply's datagram. With a peer that never marks (rxe, an RNIC) nothing rides.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "transport/env.h"
#include "wire/wire.h"

namespace uroce::transport {

// The largest payload (with pad) a request may carry and still take a rider: the fused packet's
// payload and rider together fit in the smallest IB MTU (256), so the packet is never longer
// than a full packet of its own opcode on any path (IBTA 9.2.2: MTUs 256..4096).
inline constexpr size_t kMaxRiderCarrierPayload = 256 - wire::kAckRiderBytes;

// Fuses the packets of one flush, `queue` in the order they were queued: each RC ACK
// (TxBuf::acks_ride) that is the only response of its QP in the queue rides on the first
// request of that QP in it (same destination, DestQP and UDP source port; its payload held in
// the buffer, at most kMaxRiderCarrierPayload, carrying no rider yet). Only a positive ACK rides
// (a NAK keeps its own packet). Requests and responses of a QP have PSN spaces of their own, so
// the ACK may move ahead of or behind other packets; it is never reordered against another
// response of its QP (a READ response it must not overtake, an ACK it must not pass), hence
// "the only response". Compacts `queue` in place, keeping the order of what is left, and returns
// its new length; the ACK buffers that now ride are appended to `freed` (the port takes them
// back: Port::tx_free). Runs before the ICRC is computed.
size_t ride_acks(std::span<TxBuf*> queue, std::vector<TxBuf*>& freed);

}  // namespace uroce::transport
