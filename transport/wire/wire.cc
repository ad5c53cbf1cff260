// RoCEv2 header codecs and the opcode table (IBTA Vol. 1 ch. 9.2-9.5, Table 38; Annex A17).
//
// The table is the single place that knows which extended headers an opcode carries and where they
// sit; parse() and build_headers() only walk the offsets it records, so adding an opcode is one
// table entry and nothing else.
#include "transport/wire/wire.h"

#include <array>
#include <cstring>

namespace uroce::wire {
namespace {

// Big-endian field access. Every multi-byte IB header field is big-endian (IBTA 9.2: "most
// significant byte first"); the only little-endian value on the wire is the ICRC (icrc.h).
inline uint16_t load_be16(const uint8_t* p) {
  return uint16_t(uint16_t(p[0]) << 8 | p[1]);
}
inline uint32_t load_be24(const uint8_t* p) {
  return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | uint32_t(p[2]);
}
inline uint32_t load_be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}
inline uint64_t load_be64(const uint8_t* p) {
  return uint64_t(load_be32(p)) << 32 | uint64_t(load_be32(p + 4));
}
inline void store_be16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
inline void store_be24(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 16);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v);
}
inline void store_be32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24);
  p[1] = uint8_t(v >> 16);
  p[2] = uint8_t(v >> 8);
  p[3] = uint8_t(v);
}
inline void store_be64(uint8_t* p, uint64_t v) {
  store_be32(p, uint32_t(v >> 32));
  store_be32(p + 4, uint32_t(v));
}

// BTH layout (IBTA 9.2), byte offsets from the start of BTH.
constexpr size_t kBthOpcode = 0;
constexpr size_t kBthFlags = 1;  // SE(7) M(6) PadCnt(5:4) TVer(3:0)
constexpr size_t kBthPkey = 2;
// resv8a: RoCEv2 puts FECN in bit 7 and BECN in bit 6, the rest is reserved (Annex A17,
// congestion management). The ICRC masks this byte.
constexpr size_t kBthResv8a = 4;
constexpr size_t kBthDestQp = 5;
constexpr size_t kBthAckReq = 8;  // AckReq(7), rest reserved
constexpr size_t kBthPsn = 9;
constexpr uint8_t kSeBit = 0x80, kMigReqBit = 0x40, kPadShift = 4, kTverMask = 0x0f;
constexpr uint8_t kFecnBit = 0x80, kBecnBit = 0x40, kAckReqBit = 0x80;

// Extended-header layouts (IBTA 9.3).
// RETH: VA(8) R_Key(4) DMA Length(4). AETH: Syndrome(1) MSN(3). DETH: Q_Key(4) resv(1) SrcQP(3).
// AtomicETH: VA(8) R_Key(4) Swap/Add(8) Compare(8). AtomicAckETH: original data(8).
// ImmDt: 4 bytes. IETH: R_Key(4).

// Builds one table entry, laying the named extended headers out after BTH in the order IBTA
// Table 38 lists them (RETH/AETH/DETH/AtomicETH first, then ImmDt/IETH/AtomicAckETH).
constexpr OpcodeInfo entry(const char* name, uint32_t flags) {
  OpcodeInfo i{};
  i.name = name;
  i.flags = flags;
  uint8_t off = kBthBytes;
  auto place = [&](uint32_t bit, uint8_t& field, size_t bytes) {
    if (flags & bit) {
      field = off;
      off = uint8_t(off + bytes);
    }
  };
  place(kHasXrceth, i.xrceth_off, kXrcethBytes);  // XRCETH follows BTH (IBTA 9.3.9)
  place(kHasReth, i.reth_off, kRethBytes);
  place(kHasDeth, i.deth_off, kDethBytes);
  place(kHasAeth, i.aeth_off, kAethBytes);
  place(kHasAtomicEth, i.atomic_eth_off, kAtomicEthBytes);
  place(kHasAtomicAckEth, i.atomic_ack_off, kAtomicAckEthBytes);
  place(kHasImm, i.imm_off, kImmBytes);
  place(kHasIeth, i.ieth_off, kIethBytes);
  if (flags & kCnpFlag) off = uint8_t(off + kCnpPadBytes);
  i.header_len = off;
  return i;
}

// RC and UC share the SEND/WRITE rows; the low 5 bits are the operation, the top 3 the service.
constexpr uint32_t kSendReq = kRequest | kSend | kHasPayload | kConsumesRecv;
constexpr uint32_t kWriteReq = kRequest | kWrite | kHasPayload;
constexpr uint32_t kReadResp = kResponse | kRead | kHasPayload;

constexpr void add_send_write(std::array<OpcodeInfo, 256>& t, uint8_t base, const char* const* n) {
  t[base | 0x00] = entry(n[0], kSendReq | kFirst);
  t[base | 0x01] = entry(n[1], kSendReq | kMiddle);
  t[base | 0x02] = entry(n[2], kSendReq | kLast);
  t[base | 0x03] = entry(n[3], kSendReq | kLast | kHasImm);
  t[base | 0x04] = entry(n[4], kSendReq | kOnly);
  t[base | 0x05] = entry(n[5], kSendReq | kOnly | kHasImm);
  t[base | 0x06] = entry(n[6], kWriteReq | kFirst | kHasReth);
  t[base | 0x07] = entry(n[7], kWriteReq | kMiddle);
  t[base | 0x08] = entry(n[8], kWriteReq | kLast);
  t[base | 0x09] = entry(n[9], kWriteReq | kLast | kHasImm | kConsumesRecv);
  t[base | 0x0a] = entry(n[10], kWriteReq | kOnly | kHasReth);
  t[base | 0x0b] = entry(n[11], kWriteReq | kOnly | kHasReth | kHasImm | kConsumesRecv);
}

constexpr const char* kRcNames[] = {
    "RC SEND FIRST",       "RC SEND MIDDLE",
    "RC SEND LAST",        "RC SEND LAST WITH IMMEDIATE",
    "RC SEND ONLY",        "RC SEND ONLY WITH IMMEDIATE",
    "RC RDMA WRITE FIRST", "RC RDMA WRITE MIDDLE",
    "RC RDMA WRITE LAST",  "RC RDMA WRITE LAST WITH IMMEDIATE",
    "RC RDMA WRITE ONLY",  "RC RDMA WRITE ONLY WITH IMMEDIATE",
};
constexpr const char* kUcNames[] = {
    "UC SEND FIRST",       "UC SEND MIDDLE",
    "UC SEND LAST",        "UC SEND LAST WITH IMMEDIATE",
    "UC SEND ONLY",        "UC SEND ONLY WITH IMMEDIATE",
    "UC RDMA WRITE FIRST", "UC RDMA WRITE MIDDLE",
    "UC RDMA WRITE LAST",  "UC RDMA WRITE LAST WITH IMMEDIATE",
    "UC RDMA WRITE ONLY",  "UC RDMA WRITE ONLY WITH IMMEDIATE",
};

// XRC's operations, by their low five bits (IBTA Table 38: 0xa0 | the RC operation). No XRC
// ATOMIC WRITE or FLUSH: IBTA 1.5 defines them for RC (and RD) as rxe and ConnectX carry them.
constexpr std::array<const char*, 32> kXrcNames = {
    "XRC SEND FIRST",
    "XRC SEND MIDDLE",
    "XRC SEND LAST",
    "XRC SEND LAST WITH IMMEDIATE",
    "XRC SEND ONLY",
    "XRC SEND ONLY WITH IMMEDIATE",
    "XRC RDMA WRITE FIRST",
    "XRC RDMA WRITE MIDDLE",
    "XRC RDMA WRITE LAST",
    "XRC RDMA WRITE LAST WITH IMMEDIATE",
    "XRC RDMA WRITE ONLY",
    "XRC RDMA WRITE ONLY WITH IMMEDIATE",
    "XRC RDMA READ REQUEST",
    "XRC RDMA READ RESPONSE FIRST",
    "XRC RDMA READ RESPONSE MIDDLE",
    "XRC RDMA READ RESPONSE LAST",
    "XRC RDMA READ RESPONSE ONLY",
    "XRC ACKNOWLEDGE",
    "XRC ATOMIC ACKNOWLEDGE",
    "XRC CMP SWAP",
    "XRC FETCH ADD",
    nullptr,
    "XRC SEND LAST WITH INVALIDATE",
    "XRC SEND ONLY WITH INVALIDATE",
};

// XRC (IBTA 9.4, Table 38): each RC operation again, every request packet with an XRCETH right
// after BTH (it names the XRC SRQ that receives, and whose PD checks the memory it reaches);
// responses — ACKs, READ responses, ATOMIC ACKs — carry none and are laid out as RC's.
constexpr void add_xrc(std::array<OpcodeInfo, 256>& t) {
  for (uint8_t op = 0; op < kXrcNames.size(); ++op) {
    if (kXrcNames[op] == nullptr || t[op].name == nullptr) continue;
    const uint32_t f = t[op].flags;
    t[0xa0 | op] = entry(kXrcNames[op], (f & kRequest) ? f | kHasXrceth : f);
  }
}

// RD (0x40-0x5f) and the IBTA 1.5 RC FLUSH (0x1c) are not implemented and stay invalid, so
// parse() drops them as kBadOpcode. IBTA 1.5's RC ATOMIC WRITE (0x1d) is a
// single-packet request laid out as rxe lays out IB_OPCODE_RC_ATOMIC_WRITE (rxe_opcode.c): BTH,
// RETH, then its 8-byte payload.
constexpr std::array<OpcodeInfo, 256> make_table() {
  std::array<OpcodeInfo, 256> t{};
  add_send_write(t, 0x00, kRcNames);
  t[0x0c] = entry("RC RDMA READ REQUEST", kRequest | kRead | kHasReth);
  t[0x0d] = entry("RC RDMA READ RESPONSE FIRST", kReadResp | kFirst | kHasAeth);
  t[0x0e] = entry("RC RDMA READ RESPONSE MIDDLE", kReadResp | kMiddle);
  t[0x0f] = entry("RC RDMA READ RESPONSE LAST", kReadResp | kLast | kHasAeth);
  t[0x10] = entry("RC RDMA READ RESPONSE ONLY", kReadResp | kOnly | kHasAeth);
  t[0x11] = entry("RC ACKNOWLEDGE", kResponse | kHasAeth);
  t[0x12] = entry("RC ATOMIC ACKNOWLEDGE", kResponse | kAtomic | kHasAeth | kHasAtomicAckEth);
  t[0x13] = entry("RC CMP SWAP", kRequest | kAtomic | kHasAtomicEth);
  t[0x14] = entry("RC FETCH ADD", kRequest | kAtomic | kHasAtomicEth);
  t[0x16] = entry("RC SEND LAST WITH INVALIDATE", kSendReq | kLast | kHasIeth);
  t[0x17] = entry("RC SEND ONLY WITH INVALIDATE", kSendReq | kOnly | kHasIeth);
  t[0x1d] = entry("RC ATOMIC WRITE", kRequest | kAtomicWrite | kHasPayload | kOnly | kHasReth);
  add_send_write(t, 0x20, kUcNames);
  t[0x64] = entry("UD SEND ONLY", kSendReq | kOnly | kHasDeth);
  t[0x65] = entry("UD SEND ONLY WITH IMMEDIATE", kSendReq | kOnly | kHasDeth | kHasImm);
  t[0x81] = entry("CNP", kCnpFlag);
  add_xrc(t);
  return t;
}

constexpr std::array<OpcodeInfo, 256> kTable = make_table();

// Spot checks of the layouts the transport depends on (IBTA Table 38).
static_assert(kTable[0x0b].reth_off == 12 && kTable[0x0b].imm_off == 28 &&
              kTable[0x0b].header_len == 32);
static_assert(kTable[0x0c].header_len == 28 && !(kTable[0x0c].flags & kHasPayload));
static_assert(kTable[0x0e].header_len == 12 && kTable[0x0e].aeth_off == 0);
static_assert(kTable[0x12].aeth_off == 12 && kTable[0x12].atomic_ack_off == 16 &&
              kTable[0x12].header_len == 24);
static_assert(kTable[0x13].atomic_eth_off == 12 && kTable[0x13].header_len == 40);
static_assert(kTable[0x65].deth_off == 12 && kTable[0x65].imm_off == 20 &&
              kTable[0x65].header_len == 24);
static_assert(kTable[0x81].header_len == 28);
static_assert(kTable[0x1d].reth_off == 12 && kTable[0x1d].header_len == 28 &&
              (kTable[0x1d].flags & kHasPayload));
// XRC: XRCETH after BTH, before RETH/AtomicETH/ImmDt (IBTA Table 38; as rxe's proposed XRC
// opcode table lays them out); responses as RC's.
static_assert(kTable[0xab].xrceth_off == 12 && kTable[0xab].reth_off == 16 &&
              kTable[0xab].imm_off == 32 && kTable[0xab].header_len == 36);
static_assert(kTable[0xa4].xrceth_off == 12 && kTable[0xa4].header_len == 16);
static_assert(kTable[0xb3].atomic_eth_off == 16 && kTable[0xb3].header_len == 44);
static_assert(kTable[0xb7].ieth_off == 16 && kTable[0xb7].header_len == 20);
static_assert(kTable[0xb1].xrceth_off == 0 && kTable[0xb1].aeth_off == 12 &&
              kTable[0xad].aeth_off == 12 && kTable[0xae].header_len == 12);
static_assert(kTable[0xb5].name == nullptr && kTable[0xbd].name == nullptr);
static_assert(kTable[0x15].name == nullptr && kTable[0x1c].name == nullptr &&
              kTable[0x40].name == nullptr);

}  // namespace

const OpcodeInfo& opcode_info(uint8_t opcode) {
  return kTable[opcode];
}

Service service_of(uint8_t opcode) {
  switch (opcode >> 5) {
    case 0:
      return Service::kRc;
    case 1:
      return Service::kUc;
    case 2:
      return Service::kRd;
    case 3:
      return Service::kUd;
    case 4:
      return Service::kCnp;
    case 5:
      return Service::kXrc;
    default:
      return Service::kInvalid;  // 6-7 = manufacturer specific
  }
}

const char* to_string(ParseError e) {
  switch (e) {
    case ParseError::kOk:
      return "ok";
    case ParseError::kTooShort:
      return "too short";
    case ParseError::kBadOpcode:
      return "bad opcode";
    case ParseError::kBadVersion:
      return "bad transport version";
    case ParseError::kBadPad:
      return "bad pad count";
    case ParseError::kBadLength:
      return "payload on an opcode that carries none";
    case ParseError::kBadRider:
      return "bad ACK rider";
  }
  return "unknown parse error";
}

ParseError parse(std::span<const uint8_t> ib, Packet& out) {
  // Cheapest checks first; every length is checked against ib.size() before the bytes are read.
  if (ib.size() < kBthBytes) return ParseError::kTooShort;
  const uint8_t* p = ib.data();
  const OpcodeInfo& info = kTable[p[kBthOpcode]];
  if (info.name == nullptr) return ParseError::kBadOpcode;
  const uint8_t flags = p[kBthFlags];
  // BTH TVer (IBTA 9.2): only version 0 is defined; other versions are dropped.
  if ((flags & kTverMask) != 0) return ParseError::kBadVersion;
  if (ib.size() < info.header_len) return ParseError::kTooShort;
  // An ACK rider (kBthExtAck) lies between the pad and the ICRC: it comes off first, and the rest
  // parses as the request it rides on. Only RC and XRC requests carry one, and only an ACK rides.
  bool rider = false;
  uint32_t rider_psn = 0;
  Aeth rider_aeth;
  if (p[kBthAckReq] & kBthExtAck) {
    const Service svc = service_of(p[kBthOpcode]);
    if (!(info.flags & kRequest) || (svc != Service::kRc && svc != Service::kXrc) ||
        ib.size() < size_t{info.header_len} + kAckRiderBytes)
      return ParseError::kBadRider;
    const uint8_t* t = p + ib.size() - kAckRiderBytes;
    if (t[0] != 0 || aeth_type(t[4]) != AethType::kAck) return ParseError::kBadRider;
    rider = true;
    rider_psn = load_be24(t + 1);
    rider_aeth = {t[4], load_be24(t + 5)};
    ib = ib.first(ib.size() - kAckRiderBytes);
  }
  const uint8_t pad = uint8_t((flags >> kPadShift) & 3);
  const size_t rest = ib.size() - info.header_len;
  if (!(info.flags & kHasPayload)) {
    if (pad != 0) return ParseError::kBadPad;
    // An ACK, READ REQUEST, atomic request/ACK or CNP is exactly its headers; trailing bytes mean
    // a malformed (or misparsed) packet, not a payload to ignore.
    if (rest != 0) return ParseError::kBadLength;
  } else if (pad > rest) {
    return ParseError::kTooShort;
  }

  out = Packet{};
  Bth& b = out.bth;
  b.opcode = p[kBthOpcode];
  b.se = flags & kSeBit;
  b.migreq = flags & kMigReqBit;
  b.pad = pad;
  b.tver = flags & kTverMask;
  b.pkey = load_be16(p + kBthPkey);
  b.fecn = p[kBthResv8a] & kFecnBit;
  b.becn = p[kBthResv8a] & kBecnBit;
  b.dest_qp = load_be24(p + kBthDestQp);
  b.ack_req = p[kBthAckReq] & kAckReqBit;
  b.ext = p[kBthAckReq] & kBthExtMask;
  b.psn = load_be24(p + kBthPsn);
  out.info = &info;

  if (info.reth_off) {
    const uint8_t* h = p + info.reth_off;
    out.reth = {load_be64(h), load_be32(h + 8), load_be32(h + 12)};
  }
  if (info.aeth_off) {
    const uint8_t* h = p + info.aeth_off;
    out.aeth = {h[0], load_be24(h + 1)};
  }
  if (info.deth_off) {
    const uint8_t* h = p + info.deth_off;
    out.deth = {load_be32(h), load_be24(h + 5)};
  }
  if (info.imm_off) std::memcpy(&out.imm_be, p + info.imm_off, kImmBytes);
  if (info.ieth_off) out.ieth_rkey = load_be32(p + info.ieth_off);
  if (info.atomic_eth_off) {
    const uint8_t* h = p + info.atomic_eth_off;
    out.atomic = {load_be64(h), load_be32(h + 8), load_be64(h + 12), load_be64(h + 20)};
  }
  if (info.atomic_ack_off) out.atomic_ack = load_be64(p + info.atomic_ack_off);
  if (info.xrceth_off) out.xrc_srqn = load_be24(p + info.xrceth_off + 1);
  out.payload = ib.subspan(info.header_len, rest - pad);
  out.has_rider = rider;
  out.rider_psn = rider_psn;
  out.rider_aeth = rider_aeth;
  return ParseError::kOk;
}

void attach_ack_rider(uint8_t* req, size_t req_len, const uint8_t* ack) {
  uint8_t* t = req + req_len;
  t[0] = 0;
  std::memcpy(t + 1, ack + kBthPsn, 3);             // the PSN the ACK acknowledges
  std::memcpy(t + 4, ack + kBthBytes, kAethBytes);  // its AETH: syndrome, MSN
  req[kBthAckReq] |= kBthExtAck;
}

uint32_t bth_dest_qp(const uint8_t* bth) {
  return load_be24(bth + kBthDestQp);
}

uint8_t bth_ext(const uint8_t* bth) {
  return bth[kBthAckReq] & kBthExtMask;
}

Packet cnp_packet(uint32_t dest_qp) {
  Packet p;
  p.bth.opcode = static_cast<uint8_t>(Opcode::kCnp);
  p.bth.migreq = false;  // M = 0, as ConnectX sends it (tests/wire/vectors/cnp_cx4lx.hex)
  p.bth.pkey = kDefaultPkey;
  p.bth.becn = true;
  p.bth.dest_qp = dest_qp & kQpnMask;
  p.bth.psn = 0;
  return p;
}

size_t build_headers(const Packet& p, uint8_t* out) {
  const OpcodeInfo& info = kTable[p.bth.opcode];
  // An invalid opcode has header_len 0: nothing is written and the caller sees 0 bytes.
  if (info.name == nullptr) return 0;
  // Every byte is written below, reserved ones as zero (Resv7: uroce's extension bits), rather than
  // the header cleared first: a memset of a variable length became a `rep stos`, two thirds of this
  // function's time on a sending application thread (perf, 64 KiB ib_write_bw over memif).
  const Bth& b = p.bth;
  out[kBthOpcode] = b.opcode;
  out[kBthFlags] = uint8_t((b.se ? kSeBit : 0) | (b.migreq ? kMigReqBit : 0) |
                           (b.pad & 3) << kPadShift | (b.tver & kTverMask));
  store_be16(out + kBthPkey, b.pkey);
  out[kBthResv8a] = uint8_t((b.fecn ? kFecnBit : 0) | (b.becn ? kBecnBit : 0));
  store_be24(out + kBthDestQp, b.dest_qp & kQpnMask);
  out[kBthAckReq] = uint8_t((b.ack_req ? kAckReqBit : 0) | (b.ext & kBthExtMask));
  store_be24(out + kBthPsn, b.psn & 0xffffff);

  if (info.reth_off) {
    uint8_t* h = out + info.reth_off;
    store_be64(h, p.reth.va);
    store_be32(h + 8, p.reth.rkey);
    store_be32(h + 12, p.reth.dma_len);
  }
  if (info.aeth_off) {
    uint8_t* h = out + info.aeth_off;
    h[0] = p.aeth.syndrome;
    store_be24(h + 1, p.aeth.msn & 0xffffff);
  }
  if (info.deth_off) {
    uint8_t* h = out + info.deth_off;
    store_be32(h, p.deth.qkey);
    h[4] = 0;  // reserved
    store_be24(h + 5, p.deth.src_qp & kQpnMask);
  }
  if (info.imm_off) std::memcpy(out + info.imm_off, &p.imm_be, kImmBytes);
  if (info.ieth_off) store_be32(out + info.ieth_off, p.ieth_rkey);
  if (info.atomic_eth_off) {
    uint8_t* h = out + info.atomic_eth_off;
    store_be64(h, p.atomic.va);
    store_be32(h + 8, p.atomic.rkey);
    store_be64(h + 12, p.atomic.swap_add);
    store_be64(h + 20, p.atomic.compare);
  }
  if (info.atomic_ack_off) store_be64(out + info.atomic_ack_off, p.atomic_ack);
  if (info.xrceth_off) {
    out[info.xrceth_off] = 0;  // reserved
    store_be24(out + info.xrceth_off + 1, p.xrc_srqn & kQpnMask);
  }
  if (info.flags & kCnpFlag) std::memset(out + info.header_len - kCnpPadBytes, 0, kCnpPadBytes);
  return info.header_len;
}

}  // namespace uroce::wire
