// RoCEv2 wire format: the InfiniBand Base Transport Header and its extended headers (IBTA Vol. 1
// ch. 9.2-9.5), the opcode table that says which headers each opcode carries, and the parser and
// builder the transport uses. Everything the transport puts on or reads off the wire goes through
// this header; nothing else in the project switches on opcodes to find a header.
//
// An "IB packet" here is what a RoCEv2 UDP datagram carries between the UDP header and the ICRC:
// BTH, extended headers, payload and pad. The ICRC itself belongs to the port layer (see icrc.h),
// because it covers the IP and UDP headers that only the port knows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace uroce::wire {

inline constexpr uint16_t kRoceV2UdpPort = 4791;  // IANA, RoCEv2 Annex A17.
inline constexpr size_t kBthBytes = 12;
inline constexpr size_t kRethBytes = 16;
inline constexpr size_t kAethBytes = 4;
inline constexpr size_t kDethBytes = 8;
inline constexpr size_t kImmBytes = 4;
inline constexpr size_t kIethBytes = 4;
inline constexpr size_t kAtomicEthBytes = 28;
inline constexpr size_t kAtomicAckEthBytes = 8;
inline constexpr size_t kXrcethBytes = 4;   // XRCETH: reserved(1) XRCSRQ(3), IBTA 9.3.9
inline constexpr size_t kCnpPadBytes = 16;  // CNP: 16 reserved bytes after BTH (Annex A17.9.3).
inline constexpr size_t kIcrcBytes = 4;
inline constexpr uint32_t kQpnMask = 0x00ffffff;
inline constexpr uint16_t kDefaultPkey = 0xffff;

// Big-endian stores, byte by byte, for the fields of headers built in place (the GRH area of a
// UD receive, the ICRC's pseudo-headers, pcap's IPv4/UDP headers).
inline void put_be16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
inline void put_be32(uint8_t* p, uint32_t v) {
  put_be16(p, uint16_t(v >> 16));
  put_be16(p + 2, uint16_t(v));
}
// The IPv4 header checksum (RFC 791) of the `len`-byte header at `h`: the one's complement of
// the one's complement sum of its 16-bit words (compute it with the checksum field zero).
inline uint16_t ipv4_checksum(const uint8_t* h, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i < len; i += 2) sum += uint32_t(h[i]) << 8 | h[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// Opcodes, IBTA Table 38. The high 3 bits select the transport, the low 5 the operation.
enum class Opcode : uint8_t {
  // RC
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastImm = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyImm = 0x05,
  kRcWriteFirst = 0x06,
  kRcWriteMiddle = 0x07,
  kRcWriteLast = 0x08,
  kRcWriteLastImm = 0x09,
  kRcWriteOnly = 0x0a,
  kRcWriteOnlyImm = 0x0b,
  kRcReadRequest = 0x0c,
  kRcReadResponseFirst = 0x0d,
  kRcReadResponseMiddle = 0x0e,
  kRcReadResponseLast = 0x0f,
  kRcReadResponseOnly = 0x10,
  kRcAcknowledge = 0x11,
  kRcAtomicAcknowledge = 0x12,
  kRcCompareSwap = 0x13,
  kRcFetchAdd = 0x14,
  kRcSendLastInv = 0x16,
  kRcSendOnlyInv = 0x17,
  // IBTA 1.5 memory-placement extension: RC ATOMIC WRITE (as Linux rxe names it,
  // IB_OPCODE_RC_ATOMIC_WRITE, since Linux 6.2). RC FLUSH (0x1c) is not implemented.
  kRcAtomicWrite = 0x1d,
  // UC
  kUcSendFirst = 0x20,
  kUcSendMiddle = 0x21,
  kUcSendLast = 0x22,
  kUcSendLastImm = 0x23,
  kUcSendOnly = 0x24,
  kUcSendOnlyImm = 0x25,
  kUcWriteFirst = 0x26,
  kUcWriteMiddle = 0x27,
  kUcWriteLast = 0x28,
  kUcWriteLastImm = 0x29,
  kUcWriteOnly = 0x2a,
  kUcWriteOnlyImm = 0x2b,
  // UD
  kUdSendOnly = 0x64,
  kUdSendOnlyImm = 0x65,
  // XRC (IBTA Table 38, 101xxxxx): numbered as RC in the low five bits (wire_opcode()); named
  // here where the transport compares against them.
  kXrcSendFirst = 0xa0,
  kXrcSendMiddle = 0xa1,
  kXrcWriteFirst = 0xa6,
  kXrcWriteMiddle = 0xa7,
  kXrcWriteLast = 0xa8,
  kXrcWriteOnly = 0xaa,
  kXrcAcknowledge = 0xb1,
  // RoCEv2 Congestion Notification Packet (Annex A17.9.3).
  kCnp = 0x81,
};

// The operation an opcode names, in RC's numbering: the high three bits say the transport, the low
// five the operation, numbered alike for RC, UC, UD and XRC (IBTA Table 38; RC's transport bits
// are 000, so the result is RC's opcode).
inline constexpr Opcode rc_operation(uint8_t opcode) {
  return Opcode(opcode & 0x1f);
}

// An RC or XRC ACKNOWLEDGE: what the engine's batching treats as "only ACKs".
inline constexpr bool is_acknowledge(uint8_t opcode) {
  return opcode == uint8_t(Opcode::kRcAcknowledge) || opcode == uint8_t(Opcode::kXrcAcknowledge);
}

// What an opcode carries and means. Bit flags of OpcodeInfo::flags.
enum OpFlag : uint32_t {
  kHasReth = 1u << 0,
  kHasAeth = 1u << 1,
  kHasDeth = 1u << 2,
  kHasImm = 1u << 3,
  kHasIeth = 1u << 4,
  kHasAtomicEth = 1u << 5,
  kHasAtomicAckEth = 1u << 6,
  kHasPayload = 1u << 7,  // may carry payload (zero-length payload allowed)
  kFirst = 1u << 8,
  kMiddle = 1u << 9,
  kLast = 1u << 10,
  kOnly = kFirst | kLast,
  kRequest = 1u << 11,   // sent by a requester
  kResponse = 1u << 12,  // sent by a responder (ACK, read response, atomic ACK)
  kSend = 1u << 13,
  kWrite = 1u << 14,
  kRead = 1u << 15,
  kAtomic = 1u << 16,
  kConsumesRecv = 1u << 17,  // consumes a receive WQE (SEND*, WRITE*_IMM)
  kCnpFlag = 1u << 18,
  // IBTA 1.5 ATOMIC WRITE: BTH + RETH (DMA length 8) + an 8-byte payload the responder places
  // with one 8-byte store; answered like a READ of no data (transport/responder.h).
  kAtomicWrite = 1u << 19,
  // XRC requests: an XRCETH right after BTH names the XRC SRQ at the responder (IBTA 9.3.9,
  // 9.4: every XRC request packet carries it; XRC responses are laid out as RC's).
  kHasXrceth = 1u << 20,
};

// Transport service of an opcode (its top 3 bits).
enum class Service : uint8_t {
  kRc = 0,
  kUc = 1,
  kRd = 2,
  kUd = 3,
  kCnp = 4,
  kXrc = 5,
  kInvalid = 0xff
};

struct OpcodeInfo {
  const char* name;    // Wireshark-style name, e.g. "RC SEND FIRST"; nullptr for invalid opcodes
  uint32_t flags;      // OpFlag bits
  uint8_t header_len;  // BTH + all extended headers, bytes
  // Offsets from the start of BTH of each extended header it carries (0 = absent).
  uint8_t reth_off, aeth_off, deth_off, imm_off, ieth_off, atomic_eth_off, atomic_ack_off,
      xrceth_off;
};

// The 256-entry table; invalid opcodes have name == nullptr.
const OpcodeInfo& opcode_info(uint8_t opcode);
inline const OpcodeInfo& opcode_info(Opcode op) {
  return opcode_info(static_cast<uint8_t>(op));
}
Service service_of(uint8_t opcode);

// AETH syndromes, IBTA 9.7.5.2.1 (Table 44).
enum class AethType : uint8_t { kAck = 0, kRnrNak = 1, kReserved = 2, kNak = 3 };
enum class NakCode : uint8_t {
  kPsnSequenceError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};
inline constexpr uint8_t kAethCreditInvalid = 0x1f;  // "no credit count" syndrome 0b00011111
inline constexpr uint8_t aeth_syndrome(AethType t, uint8_t value5) {
  return static_cast<uint8_t>((static_cast<uint8_t>(t) << 5) | (value5 & 0x1f));
}
inline constexpr AethType aeth_type(uint8_t syndrome) {
  return AethType((syndrome >> 5) & 3);
}
inline constexpr uint8_t aeth_value(uint8_t syndrome) {
  return syndrome & 0x1f;
}

// Decoded header fields, host byte order (except imm_data, kept as on the wire like ibv_wc).
struct Bth {
  uint8_t opcode = 0;
  bool se = false;      // solicited event
  bool migreq = false;  // migration state (always 1 from uroce senders: migrated, no APM)
  uint8_t pad = 0;      // pad count 0..3
  uint8_t tver = 0;     // transport header version, must be 0
  uint16_t pkey = kDefaultPkey;
  bool fecn = false;  // RoCEv2 reuses resv8a bits: FECN = bit 7, BECN = bit 6
  bool becn = false;
  uint32_t dest_qp = 0;  // 24 bits
  bool ack_req = false;
  // The 7 bits after AckReq (IBTA 9.2: Resv7, zero from every other sender and ignored by
  // receivers): uroce's extension bits between two uroce ends (kBthExt*, docs/wire-format.md).
  uint8_t ext = 0;
  uint32_t psn = 0;  // 24 bits
};
// uroce's BTH extension bits (Bth::ext). Set only by QPs with selective repeat on; a peer that
// is not uroce sends zero there and ignores what it receives (IBTA 9.2 reserved fields), so
// neither bit changes anything for it (docs/selective-repeat.md, "The switch and the
// negotiation").
//   kBthExtSr: the sending QP speaks selective repeat. On every RC packet such a QP sends,
//     requests and responses; a QP that sees it from its peer uses selective repeat with it.
//   kBthExtPlace: this RC RDMA WRITE ONLY may be placed ahead of a PSN gap (requests only).
//     The requester leaves it off while an earlier SEND with invalidate is unacknowledged, so a
//     WRITE never lands before the invalidation PSN order puts ahead of it.
//   kBthExtRides: the sending QP takes ACKs riding on requests (its peer may send kBthExtAck
//     packets to it). On every RC packet of a QP with ACK riders on, like kBthExtSr.
//   kBthExtAck: this RC request carries an ACK of the opposite direction (an "ACK rider",
//     transport/ack_rider.h): kAckRiderBytes between the pad and the ICRC — the acknowledged PSN
//     (a byte of zero, 24 bits) and its AETH — which the receiver takes as the ACK packet it
//     replaces. Sent only to a QP that showed kBthExtRides.
inline constexpr uint8_t kBthExtSr = 0x01;
inline constexpr uint8_t kBthExtPlace = 0x02;
inline constexpr uint8_t kBthExtRides = 0x04;
inline constexpr uint8_t kBthExtAck = 0x08;
inline constexpr uint8_t kBthExtMask = 0x7f;
inline constexpr size_t kAckRiderBytes = 8;
struct Reth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t dma_len = 0;
};
struct Aeth {
  uint8_t syndrome = 0;
  uint32_t msn = 0;  // 24 bits
};
struct Deth {
  uint32_t qkey = 0;
  uint32_t src_qp = 0;  // 24 bits
};
struct AtomicEth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;
};

// A parsed IB packet. Extended headers are valid only when the opcode's flags say so. `payload`
// points into the buffer given to parse() and excludes the pad bytes.
struct Packet {
  Bth bth;
  const OpcodeInfo* info = nullptr;
  Reth reth;
  Aeth aeth;
  Deth deth;
  uint32_t imm_be = 0;     // ImmDt, network byte order as ibv_wc.imm_data wants it
  uint32_t ieth_rkey = 0;  // IETH (SEND with invalidate)
  AtomicEth atomic;
  uint64_t atomic_ack = 0;  // AtomicAckETH: original remote data
  uint32_t xrc_srqn = 0;    // XRCETH: the XRC SRQ at the responder, 24 bits
  std::span<const uint8_t> payload;
  // An ACK riding on this request (Bth::ext has kBthExtAck): the PSN and AETH of the RC
  // ACKNOWLEDGE packet it stands for. Not part of payload or ib_length().
  bool has_rider = false;
  uint32_t rider_psn = 0;  // 24 bits
  Aeth rider_aeth;
};

// The IB length of a parsed packet: BTH .. pad, without the ICRC (what TxBuf::ib_len() is for a
// packet built), and without an ACK rider's bytes. p.info must be set (parse() succeeded).
inline size_t ib_length(const Packet& p) {
  return size_t{p.info->header_len} + p.payload.size() + p.bth.pad;
}

// Why parse() refused a packet; each value is a counted drop at the receiver.
enum class ParseError : uint8_t {
  kOk = 0,
  kTooShort,    // shorter than BTH or than the opcode's headers, or pad larger than the payload
  kBadOpcode,   // opcode not in the table (e.g. RD, reserved)
  kBadVersion,  // BTH TVer != 0 (only version 0 is defined, IBTA 9.2): silently dropped
  kBadPad,      // pad on an opcode that carries no payload
  kBadLength,   // bytes after the headers of an opcode that carries no payload (ACK, READ
                // REQUEST, atomics, CNP)
  kBadRider,    // kBthExtAck on a packet that is not an RC or XRC request, too short for the
                // rider, or a rider whose AETH is not an ACK
};
const char* to_string(ParseError e);

// Parses BTH..payload (the UDP payload without its trailing ICRC). Never reads outside `ib`.
ParseError parse(std::span<const uint8_t> ib, Packet& out);

// Writes BTH and every extended header the opcode carries (taken from `p`; p.info and p.payload are
// ignored) into `out`, which must hold opcode_info(p.bth.opcode).header_len bytes. Returns the
// number of bytes written (0, writing nothing, for an opcode not in the table). Reserved bits
// (but Bth::ext, in Resv7) and the CNP's 16 reserved bytes are written as zero; 24-bit fields are
// masked to 24 bits. The caller appends payload and `p.bth.pad` zero bytes.
size_t build_headers(const Packet& p, uint8_t* out);

// ACK riders (transport/ack_rider.h). Writes the RC ACKNOWLEDGE packet `ack` (BTH + AETH, as
// built) as a rider after the request `req` of `req_len` bytes (BTH .. pad), which must have room
// for kAckRiderBytes more, and sets kBthExtAck in the request's BTH; the request is then
// req_len + kAckRiderBytes long (its ICRC, computed after, covers the rider).
void attach_ack_rider(uint8_t* req, size_t req_len, const uint8_t* ack);
// BTH DestQP of a packet as built (at least kBthBytes).
uint32_t bth_dest_qp(const uint8_t* bth);
// Bth::ext of a packet as built (at least kBthBytes).
uint8_t bth_ext(const uint8_t* bth);

// A RoCEv2 Congestion Notification Packet (IBTA Annex A17.9.3) for the QP `dest_qp`, which is
// the QP that sent the CE-marked packet (its peer's QPN, as the marked packet's sender knows
// it): BTH opcode 0x81, SE = M = PadCnt = TVer = 0, P_Key 0xFFFF, FECN 0, BECN 1, AckReq 0,
// PSN 0, then 16 reserved bytes (build_headers writes them as zero). kCnpBytes in all; the port
// adds the ICRC. A CNP is not ECN-capable and is never retransmitted.
Packet cnp_packet(uint32_t dest_qp);
inline constexpr size_t kCnpBytes = kBthBytes + kCnpPadBytes;

// Pad count for a payload so that payload + pad is a multiple of 4 (IBTA 9.2.2).
inline constexpr uint8_t pad_for(size_t payload_len) {
  return static_cast<uint8_t>((4 - (payload_len & 3)) & 3);
}

}  // namespace uroce::wire
