// Unreliable Datagram (IBTA Vol. 1 ch. 9.8.4 and 10.2.5): every message is one SEND ONLY packet
// with a DETH (Q_Key, source QPN) to the address of its work request; nothing is acknowledged or
// retransmitted. The receiver checks the Q_Key, needs a posted receive WQE, and writes a 40-byte
// GRH area before the payload: for RoCEv2 over IPv4 the IPv4 header sits in its last 20 bytes
// (what rxe and RoCE RNICs deliver, and what ibv_init_ah_from_wc reads back).
#pragma once

#include <cstdint>

#include "transport/context.h"
#include "transport/psn.h"
#include "transport/send_queue.h"
#include "transport/unreliable_common.h"
#include "wire/wire.h"

namespace uroce::transport {

// Bytes of the GRH area at the start of every UD receive buffer (IBTA 11.4.1.2, ibv_post_recv(3)).
inline constexpr uint32_t kGrhBytes = 40;
// Where the IPv4 header of a RoCEv2 packet goes inside those 40 bytes.
inline constexpr uint32_t kGrhIpv4Offset = 20;

// wc.sl of a UD receive: RoCE has no LRH and so no SL; mlx5 reports the received packet's L3
// header type there instead (its CQE's "roce_pkt_type": 0 GRH, i.e. RoCE v1; 1 IPv6; 2 IPv4), and
// consumers rely on it: UCX 1.13's ud_verbs reads an IPv4 packet's destination from the GRH
// area's last 4 bytes only when (wc.sl & 7) == 2, else compares 16 bytes of GID there and drops
// every RoCEv2/IPv4 datagram. uroce reports what mlx5 does (docs/middleware.md).
inline constexpr uint8_t kWcSlRoceV1 = 0;
inline constexpr uint8_t kWcSlRoceV2Ipv6 = 1;
inline constexpr uint8_t kWcSlRoceV2Ipv4 = 2;

// IBTA 10.2.5 (C10-15): a Q_Key in a work request with its high-order bit set is not used; the
// QP's own Q_Key goes into the DETH instead (so only privileged consumers can send controlled
// Q_Keys).
inline uint32_t ud_wire_qkey(uint32_t wr_qkey, uint32_t qp_qkey) {
  return (wr_qkey & 0x80000000u) ? qp_qkey : wr_qkey;
}

// Writes the 40-byte GRH area of a received RoCEv2/IPv4 packet: 20 zero bytes, then the IPv4
// header as it was on the wire as far as the socket datapath can tell (ID 0, DF, TTL 64: the
// kernel hides the real header) with a valid checksum. `ib_len` is the IB packet length
// without ICRC. A RoCE v1 packet's GRH, or a RoCEv2/IPv6 packet's IPv6 header (addresses not
// IPv4-mapped; no port hands one in yet), fills all 40 bytes.
void write_grh_area(const RxInfo& rx, uint32_t ib_len, uint8_t out[kGrhBytes]);

class UdSender {
 public:
  // RTR→RTS: the first PSN is sq_psn; UD PSNs count packets and are not checked (9.8.4).
  void reset(Psn sq_psn) { next_psn_ = sq_psn; }
  // Sends WQEs from the front of `sq`, one packet each, and completes each as it leaves (there is
  // no acknowledgement to wait for). A message longer than the port MTU completes with
  // IBV_WC_LOC_LEN_ERR without a packet (mlx5's behaviour; IBTA C10-93.1.1 forbids the packet),
  // an SGE that does not resolve with IBV_WC_LOC_PROT_ERR; either stops the pump and reports
  // send_error (the QP enters SQE). Each packet waits for `pacer` (congestion control: one rate
  // for the QP, whatever the destination) as it would for a transmit buffer.
  UnreliableOutcome pump(const QpContext& ctx, SendQueue& sq, PacketSink& tx, cc::Pacer& pacer,
                         Time now);

 private:
  Psn next_psn_;
};

// A UD packet for this QP (already checked: UD opcode, P_Key, QP state accepting). Checks the
// Q_Key (mismatch: qkey_violation), takes the front receive WQE of `rq` (none: out_of_buffer),
// writes GRH area and payload and completes it with IBV_WC_GRH, src_qp and the payload length
// plus 40. With an SRQ (`srq` non-null) the WQE is taken from it. A buffer too small completes
// the WQE with IBV_WC_LOC_LEN_ERR, a bad lkey with IBV_WC_LOC_PROT_ERR; the QP stays usable.
void ud_receive(const wire::Packet& pkt, const RxInfo& rx, const QpContext& ctx, RecvQueue& rq,
                Srq* srq);

}  // namespace uroce::transport
