// What every role of a QP reads from its QP: identity, the connected path, the memory and the
// counters. Roles get this, never each other.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "transport/env.h"
#include "transport/qp.h"
#include "wire/wire.h"

namespace uroce::transport {

struct QpContext {
  const QpInit& init;
  const ibv_qp_attr& attr;  // attributes as last modified (masked fields only ever set)
  MemoryAccess& mem;
  QpCounters& counters;
  // The service of its packets: RC, or XRC for XRC send and receive QPs (IBTA Table 38).
  wire::Service service = wire::Service::kRc;
  // The PD the responder checks memory against: the QP's, or for an XRC receive QP the PD of the
  // XRC SRQ the current request names (IBTA 9.4, XRC: the SRQ's PD governs).
  uint32_t pd = 0;
  // XRC receive QPs: the request at hand names no XRC SRQ of the QP's domain (or another SRQ
  // than its message started with). The responder refuses it (NAK invalid request).
  bool xrc_refused = false;
  // Derived from `attr` at modify time.
  wire::IpAddr remote_ip{};  // ah_attr.grh.dgid (IPv4-mapped: check_modify refuses others)
  uint32_t mtu = 256;        // path MTU, bytes
  uint16_t src_port = 0;     // UDP source port of every packet of this QP
  // DSCP of this QP's packets: the DSCP bits of the AV's GRH traffic class when one is set (as
  // RNICs map it, traffic_class = DSCP << 2), else kDscpPortDefault (the port's configured one).
  uint8_t dscp = kDscpPortDefault;
  // The AV names the RoCE v1 GID (sgid_index kRoceV1GidIndex): the QP's packets go as RoCE v1.
  bool roce_v1 = false;
  // Selective repeat: a packet from the peer carried wire::kBthExtSr (the peer QP speaks it).
  // Learned on receipt, cleared by a reset; see sr().
  bool peer_sr = false;
  // ACK riders: a packet from the peer carried wire::kBthExtRides (it takes ACKs riding on
  // requests). Learned on receipt, cleared by a reset; see rides().
  bool peer_rides = false;

  // Both ends speak selective repeat: SACKs, split WRITEs and placement ahead are on. The peer
  // marks its first request, so a responder knows before its first ACK, and a requester learns
  // it from that ACK — before any loss it could recover from selectively.
  bool sr() const { return init.selective_repeat && peer_sr; }
  // Both ends take ACK riders: this QP's ACKs may ride on its requests (TxBuf::acks_ride).
  bool rides() const { return init.ack_riders && peer_rides; }
  // The extension bits of every RC packet this QP sends.
  uint8_t bth_ext() const {
    return static_cast<uint8_t>((init.selective_repeat ? wire::kBthExtSr : 0) |
                                (init.ack_riders ? wire::kBthExtRides : 0));
  }
};

// The route of a connected QP's packets (RC requests and responses, UC): to the peer of its AV,
// with its DSCP and the port's priority, ECN-capable (Annex A17.9: DCQCN needs the marks). ACKs
// too, as ConnectX sends them (even its CNPs carry ECT(0), docs/congestion-control.md): a switch
// marks a congested reverse path as well, and an ACK then shares a UDP GSO send with data going
// the same way (the reply of a ping-pong).
inline Route data_route(const QpContext& ctx) {
  return Route{.dst_ip = ctx.remote_ip,
               .src_port = ctx.src_port,
               .ecn = kEcnEct0,
               .dscp = ctx.dscp,
               .pcp = kPcpPortDefault,
               .roce_v1 = ctx.roce_v1,
               .acks_ride = ctx.rides()};
}

// UDP source port for a QPN: RoCEv2 leaves it free for ECMP entropy (Annex A17.5.1.2); the top
// two bits set keep it in the dynamic range 0xC000..0xFFFF, as rxe and NICs do.
inline uint16_t src_port_for_qpn(uint32_t qpn) {
  const uint32_t h = (qpn & 0xffffff) * 2654435761u;  // Fibonacci hashing spreads nearby QPNs
  return static_cast<uint16_t>(0xC000 | ((h >> 18) & 0x3fff));
}

}  // namespace uroce::transport
