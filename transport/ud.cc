// Unreliable Datagram sender and receiver. See ud.h.
#include "transport/ud.h"

#include <algorithm>
#include <cstring>

#include "transport/dma.h"
#include "transport/srq.h"
#include "transport/wc.h"

namespace uroce::transport {
namespace {

// RFC 791 header checksum: one's complement of the one's complement sum of the 16-bit words.
// IPv4 (20) + UDP (8) around an IB packet and its ICRC.
constexpr uint32_t kUdpBytes = 8;
constexpr uint32_t kIpUdpBytes = 20 + kUdpBytes;

}  // namespace

void write_grh_area(const RxInfo& rx, uint32_t ib_len, uint8_t out[kGrhBytes]) {
  std::memset(out, 0, kGrhBytes);
  if (rx.roce_v1 || !rx.src_ip.is_v4() || !rx.dst_ip.is_v4()) {
    // RoCE v1 carried a real GRH (IBTA 8.3.1): version 6, the traffic class (its ECN bits are
    // what the port reports), PayLen (what followed the GRH, ICRC included), NxtHdr 0x1B (the
    // BTH), a hop limit, and the GIDs — uroce's v1 GIDs are IPv4-mapped (::ffff:a.b.c.d).
    // RoCEv2 over IPv6 leaves its IPv6 header there, laid out the same (Annex A17.4.5.2): the
    // payload is the UDP datagram, the next header UDP.
    const bool v6 = !rx.roce_v1;
    wire::put_be32(out, 6u << 28 | uint32_t(rx.ecn & 3) << 20);
    wire::put_be16(out + 4,
                   static_cast<uint16_t>((v6 ? kUdpBytes : 0) + ib_len + wire::kIcrcBytes));
    out[6] = v6 ? 17 : 0x1b;
    out[7] = 64;
    std::memcpy(out + 8, rx.src_ip.data(), 16);
    std::memcpy(out + 24, rx.dst_ip.data(), 16);
    return;
  }
  uint8_t* ip = out + kGrhIpv4Offset;
  ip[0] = 0x45;        // version 4, 5 words
  ip[1] = rx.ecn & 3;  // DSCP is not visible on the socket datapath; ECN is
  wire::put_be16(ip + 2, static_cast<uint16_t>(kIpUdpBytes + ib_len + wire::kIcrcBytes));
  wire::put_be16(ip + 6, 0x4000);           // DF, ID 0: what RoCEv2 senders put there (design.md)
  ip[8] = 64;                               // TTL: not visible either; the Linux default
  ip[9] = 17;                               // UDP
  wire::put_be32(ip + 12, rx.src_ip.v4());  // RoCEv2 over IPv4: the ports hand in no other yet
  wire::put_be32(ip + 16, rx.dst_ip.v4());
  wire::put_be16(ip + 10, wire::ipv4_checksum(ip, 20));
}

UnreliableOutcome UdSender::pump(const QpContext& ctx, SendQueue& sq, PacketSink& tx,
                                 cc::Pacer& pacer, Time now) {
  UnreliableOutcome out;
  while (!sq.empty()) {
    SendEntry& e = sq.front();
    const bool is_inline = e.wqe.send_flags & IBV_SEND_INLINE;
    if (e.length > ctx.init.port_mtu) {
      return fail_front_send(ctx, sq, IBV_WC_LOC_LEN_ERR, out);
    }
    MemPieces pieces;
    uint32_t npieces = 0;
    if (!is_inline && resolve_read(ctx.mem, ctx.init.pd, e.wqe.sge.data(), e.wqe.num_sge, 0,
                                   e.length, pieces, &npieces) != MemStatus::kOk) {
      return fail_front_send(ctx, sq, IBV_WC_LOC_PROT_ERR, out);
    }
    TxBuf* buf = alloc_paced(tx, pacer, now, out);
    if (buf == nullptr) return out;
    // A UD message is one packet: SEND ONLY, with or without immediate (IBTA 9.8.4).
    const WrOpcodeInfo& w = wr_opcode_info(e.wqe.opcode);
    wire::Packet p;
    p.bth.opcode = static_cast<uint8_t>(wire_opcode(w, wire::Service::kUd, true, true));
    p.bth.se = e.wqe.send_flags & IBV_SEND_SOLICITED;
    p.bth.migreq = true;
    p.bth.pad = wire::pad_for(e.length);
    p.bth.pkey = wire::kDefaultPkey;
    p.bth.dest_qp = e.wqe.ud_remote_qpn;
    p.bth.psn = next_psn_.value();
    p.deth.qkey = ud_wire_qkey(e.wqe.ud_remote_qkey, ctx.attr.qkey);
    p.deth.src_qp = ctx.init.qpn;
    if (w.flags & kWrImm) p.imm_be = e.wqe.imm_be;
    const size_t hdr = wire::build_headers(p, buf->data);
    uint8_t* payload = buf->data + hdr;
    if (is_inline) {
      std::memcpy(payload, e.wqe.inline_data.data(), e.length);
    } else {
      copy_pieces(pieces, npieces, payload);
    }
    std::memset(payload + e.length, 0, p.bth.pad);
    buf->len = static_cast<uint32_t>(hdr + e.length + p.bth.pad);
    // Each datagram goes where its AH says, with the AH's traffic class.
    stamp_route(buf, Route{.dst_ip = e.wqe.ud_dst_ip,
                           .src_port = ctx.src_port,
                           .ecn = kEcnEct0,
                           .dscp = dscp_of_traffic_class(e.wqe.ud_traffic_class),
                           .pcp = kPcpPortDefault,
                           .roce_v1 = e.wqe.ud_roce_v1});
    const uint32_t ib_len = buf->ib_len();
    commit_paced(tx, buf, pacer, now, out);
    count_sent(ctx.counters, ib_len);
    ++next_psn_;
    complete_front_send(ctx, sq, IBV_WC_SUCCESS);
  }
  return out;
}

void ud_receive(const wire::Packet& pkt, const RxInfo& rx, const QpContext& ctx, RecvQueue& rq,
                Srq* srq) {
  // IBTA C10-15 / 9.6.1.4: a datagram whose Q_Key is not the QP's is silently dropped.
  if (pkt.deth.qkey != ctx.attr.qkey) {
    ++ctx.counters.qkey_violation;
    ++ctx.counters.dropped_pkts;
    return;
  }
  if (rq.empty() && srq != nullptr) srq->take(rq);
  if (rq.empty()) {
    // No receive WQE: UD has no RNR NAK, the datagram is lost (IBTA 9.8.4).
    ++ctx.counters.out_of_buffer;
    ++ctx.counters.dropped_pkts;
    return;
  }
  count_rcvd(ctx.counters, wire::ib_length(pkt));
  const RecvWqe w = rq.front();
  rq.pop_front();
  const uint32_t len = static_cast<uint32_t>(pkt.payload.size());
  // The receive buffer starts with the GRH area, written below (IBV_WC_GRH); pkey_index 0.
  ibv_wc wc = make_recv_wc(w.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, ctx.init.qpn, pkt.deth.src_qp,
                           kGrhBytes + len, &pkt);
  wc.wc_flags |= IBV_WC_GRH;
  wc.sl = rx.roce_v1                               ? kWcSlRoceV1
          : rx.src_ip.is_v4() && rx.dst_ip.is_v4() ? kWcSlRoceV2Ipv4
                                                   : kWcSlRoceV2Ipv6;
  if (sge_total(w.sge.data(), w.num_sge) < uint64_t{kGrhBytes} + len) {
    wc.status = IBV_WC_LOC_LEN_ERR;
  } else {
    uint8_t grh[kGrhBytes];
    const uint32_t ib_len = pkt.info->header_len + len + pkt.bth.pad;
    write_grh_area(rx, ib_len, grh);
    if (scatter(ctx.mem, ctx.init.pd, w.sge.data(), w.num_sge, 0, grh, kGrhBytes) !=
            MemStatus::kOk ||
        scatter(ctx.mem, ctx.init.pd, w.sge.data(), w.num_sge, kGrhBytes, pkt.payload.data(),
                len) != MemStatus::kOk) {
      wc.status = IBV_WC_LOC_PROT_ERR;
    }
  }
  ctx.init.recv_cq->push(wc, pkt.bth.se);
}

}  // namespace uroce::transport
