// Tests of the opcode table, parse() and build_headers() (transport/wire/wire.cc).
#include "transport/wire/wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "frame_util.h"

namespace uroce::wire {
namespace {

// IBTA Table 38 layouts, written out independently of wire.cc's table builder: opcode, header
// length, and the offset of each extended header (0 = absent), and whether it carries payload.
struct Layout {
  uint8_t op, hlen, reth, aeth, deth, imm, ieth, atomic_eth, atomic_ack;
  bool payload;
  uint8_t xrceth = 0;
};
constexpr Layout kLayouts[] = {
    // RC and UC SEND / RDMA WRITE (same layout, service in the top 3 bits)
    {0x00, 12, 0, 0, 0, 0, 0, 0, 0, true},    // SEND FIRST
    {0x01, 12, 0, 0, 0, 0, 0, 0, 0, true},    // SEND MIDDLE
    {0x02, 12, 0, 0, 0, 0, 0, 0, 0, true},    // SEND LAST
    {0x03, 16, 0, 0, 0, 12, 0, 0, 0, true},   // SEND LAST IMM
    {0x04, 12, 0, 0, 0, 0, 0, 0, 0, true},    // SEND ONLY
    {0x05, 16, 0, 0, 0, 12, 0, 0, 0, true},   // SEND ONLY IMM
    {0x06, 28, 12, 0, 0, 0, 0, 0, 0, true},   // WRITE FIRST
    {0x07, 12, 0, 0, 0, 0, 0, 0, 0, true},    // WRITE MIDDLE
    {0x08, 12, 0, 0, 0, 0, 0, 0, 0, true},    // WRITE LAST
    {0x09, 16, 0, 0, 0, 12, 0, 0, 0, true},   // WRITE LAST IMM
    {0x0a, 28, 12, 0, 0, 0, 0, 0, 0, true},   // WRITE ONLY
    {0x0b, 32, 12, 0, 0, 28, 0, 0, 0, true},  // WRITE ONLY IMM
    {0x20, 12, 0, 0, 0, 0, 0, 0, 0, true},
    {0x21, 12, 0, 0, 0, 0, 0, 0, 0, true},
    {0x22, 12, 0, 0, 0, 0, 0, 0, 0, true},
    {0x23, 16, 0, 0, 0, 12, 0, 0, 0, true},
    {0x24, 12, 0, 0, 0, 0, 0, 0, 0, true},
    {0x25, 16, 0, 0, 0, 12, 0, 0, 0, true},
    {0x26, 28, 12, 0, 0, 0, 0, 0, 0, true},
    {0x27, 12, 0, 0, 0, 0, 0, 0, 0, true},
    {0x28, 12, 0, 0, 0, 0, 0, 0, 0, true},
    {0x29, 16, 0, 0, 0, 12, 0, 0, 0, true},
    {0x2a, 28, 12, 0, 0, 0, 0, 0, 0, true},
    {0x2b, 32, 12, 0, 0, 28, 0, 0, 0, true},
    // RC only
    {0x0c, 28, 12, 0, 0, 0, 0, 0, 0, false},   // READ REQUEST
    {0x0d, 16, 0, 12, 0, 0, 0, 0, 0, true},    // READ RESPONSE FIRST
    {0x0e, 12, 0, 0, 0, 0, 0, 0, 0, true},     // READ RESPONSE MIDDLE
    {0x0f, 16, 0, 12, 0, 0, 0, 0, 0, true},    // READ RESPONSE LAST
    {0x10, 16, 0, 12, 0, 0, 0, 0, 0, true},    // READ RESPONSE ONLY
    {0x11, 16, 0, 12, 0, 0, 0, 0, 0, false},   // ACKNOWLEDGE
    {0x12, 24, 0, 12, 0, 0, 0, 0, 16, false},  // ATOMIC ACKNOWLEDGE
    {0x13, 40, 0, 0, 0, 0, 0, 12, 0, false},   // CMP SWAP
    {0x14, 40, 0, 0, 0, 0, 0, 12, 0, false},   // FETCH ADD
    {0x16, 16, 0, 0, 0, 0, 12, 0, 0, true},    // SEND LAST WITH INVALIDATE
    {0x17, 16, 0, 0, 0, 0, 12, 0, 0, true},    // SEND ONLY WITH INVALIDATE
    {0x1d, 28, 12, 0, 0, 0, 0, 0, 0, true},    // ATOMIC WRITE (IBTA 1.5; rxe_opcode.c)
    // UD
    {0x64, 20, 0, 0, 12, 0, 0, 0, 0, true},   // SEND ONLY
    {0x65, 24, 0, 0, 12, 20, 0, 0, 0, true},  // SEND ONLY IMM
    // RoCEv2 CNP: BTH + 16 reserved bytes
    {0x81, 28, 0, 0, 0, 0, 0, 0, 0, false},
    // XRC: every request with an XRCETH right after BTH, the rest behind it; responses as RC's
    // (IBTA Table 38; as rxe's proposed XRC opcode table lays them out).
    {0xa0, 16, 0, 0, 0, 0, 0, 0, 0, true, 12},    // SEND FIRST
    {0xa1, 16, 0, 0, 0, 0, 0, 0, 0, true, 12},    // SEND MIDDLE
    {0xa2, 16, 0, 0, 0, 0, 0, 0, 0, true, 12},    // SEND LAST
    {0xa3, 20, 0, 0, 0, 16, 0, 0, 0, true, 12},   // SEND LAST IMM
    {0xa4, 16, 0, 0, 0, 0, 0, 0, 0, true, 12},    // SEND ONLY
    {0xa5, 20, 0, 0, 0, 16, 0, 0, 0, true, 12},   // SEND ONLY IMM
    {0xa6, 32, 16, 0, 0, 0, 0, 0, 0, true, 12},   // WRITE FIRST
    {0xa7, 16, 0, 0, 0, 0, 0, 0, 0, true, 12},    // WRITE MIDDLE
    {0xa8, 16, 0, 0, 0, 0, 0, 0, 0, true, 12},    // WRITE LAST
    {0xa9, 20, 0, 0, 0, 16, 0, 0, 0, true, 12},   // WRITE LAST IMM
    {0xaa, 32, 16, 0, 0, 0, 0, 0, 0, true, 12},   // WRITE ONLY
    {0xab, 36, 16, 0, 0, 32, 0, 0, 0, true, 12},  // WRITE ONLY IMM
    {0xac, 32, 16, 0, 0, 0, 0, 0, 0, false, 12},  // READ REQUEST
    {0xad, 16, 0, 12, 0, 0, 0, 0, 0, true},       // READ RESPONSE FIRST
    {0xae, 12, 0, 0, 0, 0, 0, 0, 0, true},        // READ RESPONSE MIDDLE
    {0xaf, 16, 0, 12, 0, 0, 0, 0, 0, true},       // READ RESPONSE LAST
    {0xb0, 16, 0, 12, 0, 0, 0, 0, 0, true},       // READ RESPONSE ONLY
    {0xb1, 16, 0, 12, 0, 0, 0, 0, 0, false},      // ACKNOWLEDGE
    {0xb2, 24, 0, 12, 0, 0, 0, 0, 16, false},     // ATOMIC ACKNOWLEDGE
    {0xb3, 44, 0, 0, 0, 0, 0, 16, 0, false, 12},  // CMP SWAP
    {0xb4, 44, 0, 0, 0, 0, 0, 16, 0, false, 12},  // FETCH ADD
    {0xb6, 20, 0, 0, 0, 0, 16, 0, 0, true, 12},   // SEND LAST WITH INVALIDATE
    {0xb7, 20, 0, 0, 0, 0, 16, 0, 0, true, 12},   // SEND ONLY WITH INVALIDATE
};

TEST(OpcodeTable, MatchesIbtaTable38) {
  std::set<int> listed;
  for (const Layout& l : kLayouts) {
    SCOPED_TRACE(::testing::Message() << "opcode 0x" << std::hex << int(l.op));
    listed.insert(l.op);
    const OpcodeInfo& i = opcode_info(l.op);
    ASSERT_NE(i.name, nullptr);
    EXPECT_EQ(i.header_len, l.hlen);
    EXPECT_EQ(i.reth_off, l.reth);
    EXPECT_EQ(i.aeth_off, l.aeth);
    EXPECT_EQ(i.deth_off, l.deth);
    EXPECT_EQ(i.imm_off, l.imm);
    EXPECT_EQ(i.ieth_off, l.ieth);
    EXPECT_EQ(i.atomic_eth_off, l.atomic_eth);
    EXPECT_EQ(i.atomic_ack_off, l.atomic_ack);
    EXPECT_EQ(i.xrceth_off, l.xrceth);
    EXPECT_EQ(bool(i.flags & kHasXrceth), l.xrceth != 0);
    EXPECT_EQ(bool(i.flags & kHasPayload), l.payload);
    // Each presence flag agrees with its offset.
    EXPECT_EQ(bool(i.flags & kHasReth), l.reth != 0);
    EXPECT_EQ(bool(i.flags & kHasAeth), l.aeth != 0);
    EXPECT_EQ(bool(i.flags & kHasDeth), l.deth != 0);
    EXPECT_EQ(bool(i.flags & kHasImm), l.imm != 0);
    EXPECT_EQ(bool(i.flags & kHasIeth), l.ieth != 0);
    EXPECT_EQ(bool(i.flags & kHasAtomicEth), l.atomic_eth != 0);
    EXPECT_EQ(bool(i.flags & kHasAtomicAckEth), l.atomic_ack != 0);
  }
  // Every other opcode (RD, XRC ATOMIC WRITE and FLUSH, reserved, manufacturer-specific) is
  // invalid.
  for (int op = 0; op < 256; ++op) {
    if (!listed.count(op)) {
      EXPECT_EQ(opcode_info(uint8_t(op)).name, nullptr) << op;
    }
  }
  EXPECT_EQ(listed.size(), 62u);
}

TEST(OpcodeTable, SemanticFlags) {
  EXPECT_STREQ(opcode_info(Opcode::kRcSendFirst).name, "RC SEND FIRST");
  EXPECT_STREQ(opcode_info(Opcode::kCnp).name, "CNP");
  EXPECT_TRUE(opcode_info(Opcode::kRcSendOnly).flags & kFirst);
  EXPECT_TRUE(opcode_info(Opcode::kRcSendOnly).flags & kLast);
  EXPECT_TRUE(opcode_info(Opcode::kRcSendMiddle).flags & kMiddle);
  EXPECT_TRUE(opcode_info(Opcode::kRcWriteOnlyImm).flags & kConsumesRecv);
  EXPECT_FALSE(opcode_info(Opcode::kRcWriteOnly).flags & kConsumesRecv);
  EXPECT_TRUE(opcode_info(Opcode::kUdSendOnly).flags & kConsumesRecv);
  EXPECT_TRUE(opcode_info(Opcode::kRcAcknowledge).flags & kResponse);
  EXPECT_TRUE(opcode_info(Opcode::kRcReadResponseMiddle).flags & kResponse);
  EXPECT_TRUE(opcode_info(Opcode::kRcReadRequest).flags & kRequest);
  EXPECT_TRUE(opcode_info(Opcode::kRcFetchAdd).flags & kAtomic);
  // ATOMIC WRITE is one request packet, neither a WRITE nor an ATOMIC to the responder's dispatch.
  EXPECT_TRUE(opcode_info(Opcode::kRcAtomicWrite).flags & kAtomicWrite);
  EXPECT_EQ(opcode_info(Opcode::kRcAtomicWrite).flags & (kWrite | kAtomic | kConsumesRecv), 0u);
  EXPECT_EQ(opcode_info(Opcode::kRcAtomicWrite).flags & kOnly, uint32_t(kOnly));
  EXPECT_TRUE(opcode_info(Opcode::kCnp).flags & kCnpFlag);
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& i = opcode_info(uint8_t(op));
    if (!i.name) continue;
    // Requests and responses are disjoint, and only the CNP is neither.
    EXPECT_NE(bool(i.flags & kRequest), bool(i.flags & kResponse) || (i.flags & kCnpFlag)) << op;
  }
}

TEST(OpcodeTable, ServiceOf) {
  EXPECT_EQ(service_of(0x04), Service::kRc);
  EXPECT_EQ(service_of(0x2b), Service::kUc);
  EXPECT_EQ(service_of(0x40), Service::kRd);
  EXPECT_EQ(service_of(0x64), Service::kUd);
  EXPECT_EQ(service_of(0x81), Service::kCnp);
  EXPECT_EQ(service_of(0xa0), Service::kXrc);
  EXPECT_EQ(service_of(0xc0), Service::kInvalid);
  EXPECT_EQ(service_of(0xff), Service::kInvalid);
}

TEST(ParseError, ToStringIsDistinct) {
  std::set<std::string> seen;
  for (auto e :
       {ParseError::kOk, ParseError::kTooShort, ParseError::kBadOpcode, ParseError::kBadVersion,
        ParseError::kBadPad, ParseError::kBadLength, ParseError::kBadRider}) {
    ASSERT_NE(to_string(e), nullptr);
    EXPECT_TRUE(seen.insert(to_string(e)).second) << to_string(e);
  }
}

// A packet with every field random, for opcode `op`.
Packet random_packet(uint8_t op, std::mt19937_64& rng) {
  Packet p;
  p.bth.opcode = op;
  p.bth.se = rng() & 1;
  p.bth.migreq = rng() & 1;
  p.bth.pkey = uint16_t(rng());
  p.bth.fecn = rng() & 1;
  p.bth.becn = rng() & 1;
  p.bth.dest_qp = uint32_t(rng()) & kQpnMask;
  p.bth.ack_req = rng() & 1;
  p.bth.psn = uint32_t(rng()) & 0xffffff;
  p.reth = {rng(), uint32_t(rng()), uint32_t(rng())};
  p.aeth = {uint8_t(rng()), uint32_t(rng()) & 0xffffff};
  p.deth = {uint32_t(rng()), uint32_t(rng()) & kQpnMask};
  p.imm_be = uint32_t(rng());
  p.ieth_rkey = uint32_t(rng());
  p.atomic = {rng(), uint32_t(rng()), rng(), rng()};
  p.atomic_ack = rng();
  p.xrc_srqn = uint32_t(rng()) & kQpnMask;
  return p;
}

// Builds a whole IB packet: headers, payload, pad.
std::vector<uint8_t> build(Packet p, std::span<const uint8_t> payload) {
  const OpcodeInfo& i = opcode_info(p.bth.opcode);
  p.bth.pad = (i.flags & kHasPayload) ? pad_for(payload.size()) : 0;
  std::vector<uint8_t> out(i.header_len + payload.size() + p.bth.pad, 0xee);
  EXPECT_EQ(build_headers(p, out.data()), i.header_len);
  std::copy(payload.begin(), payload.end(), out.begin() + i.header_len);
  std::fill_n(out.begin() + i.header_len + payload.size(), p.bth.pad, 0);
  return out;
}

TEST(ParseBuild, RoundTripEveryValidOpcode) {
  std::mt19937_64 rng(42);
  int tested = 0;
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& info = opcode_info(uint8_t(op));
    if (!info.name) continue;
    ++tested;
    for (int iter = 0; iter < 20; ++iter) {
      SCOPED_TRACE(::testing::Message() << info.name << " iter " << iter);
      const Packet in = random_packet(uint8_t(op), rng);
      std::vector<uint8_t> payload;
      if (info.flags & kHasPayload) payload.resize(iter == 0 ? 0 : rng() % 70);
      for (auto& b : payload) b = uint8_t(rng());
      const std::vector<uint8_t> wire = build(in, payload);
      Packet out;
      ASSERT_EQ(parse(wire, out), ParseError::kOk);
      EXPECT_EQ(out.info, &info);
      EXPECT_EQ(out.bth.opcode, op);
      EXPECT_EQ(out.bth.se, in.bth.se);
      EXPECT_EQ(out.bth.migreq, in.bth.migreq);
      EXPECT_EQ(out.bth.pad, pad_for(payload.size()) * bool(info.flags & kHasPayload));
      EXPECT_EQ(out.bth.tver, 0);
      EXPECT_EQ(out.bth.pkey, in.bth.pkey);
      EXPECT_EQ(out.bth.fecn, in.bth.fecn);
      EXPECT_EQ(out.bth.becn, in.bth.becn);
      EXPECT_EQ(out.bth.dest_qp, in.bth.dest_qp);
      EXPECT_EQ(out.bth.ack_req, in.bth.ack_req);
      EXPECT_EQ(out.bth.psn, in.bth.psn);
      if (info.flags & kHasReth) {
        EXPECT_EQ(out.reth.va, in.reth.va);
        EXPECT_EQ(out.reth.rkey, in.reth.rkey);
        EXPECT_EQ(out.reth.dma_len, in.reth.dma_len);
      }
      if (info.flags & kHasAeth) {
        EXPECT_EQ(out.aeth.syndrome, in.aeth.syndrome);
        EXPECT_EQ(out.aeth.msn, in.aeth.msn);
      }
      if (info.flags & kHasDeth) {
        EXPECT_EQ(out.deth.qkey, in.deth.qkey);
        EXPECT_EQ(out.deth.src_qp, in.deth.src_qp);
      }
      if (info.flags & kHasImm) {
        EXPECT_EQ(out.imm_be, in.imm_be);
      }
      if (info.flags & kHasIeth) {
        EXPECT_EQ(out.ieth_rkey, in.ieth_rkey);
      }
      if (info.flags & kHasAtomicEth) {
        EXPECT_EQ(out.atomic.va, in.atomic.va);
        EXPECT_EQ(out.atomic.rkey, in.atomic.rkey);
        EXPECT_EQ(out.atomic.swap_add, in.atomic.swap_add);
        EXPECT_EQ(out.atomic.compare, in.atomic.compare);
      }
      if (info.flags & kHasAtomicAckEth) {
        EXPECT_EQ(out.atomic_ack, in.atomic_ack);
      }
      if (info.flags & kHasXrceth) {
        EXPECT_EQ(out.xrc_srqn, in.xrc_srqn);
        EXPECT_EQ(wire[info.xrceth_off], 0) << "XRCETH's reserved byte";
      }
      ASSERT_EQ(out.payload.size(), payload.size());
      EXPECT_TRUE(std::equal(payload.begin(), payload.end(), out.payload.begin()));
      EXPECT_EQ(out.payload.data(), wire.data() + info.header_len);
    }
  }
  EXPECT_EQ(tested, 62);
}

// Exact bytes for two packets, checking field placement and big-endian order by hand.
TEST(ParseBuild, ExactBytes) {
  Packet p;
  p.bth = {.opcode = 0x0b,
           .se = true,
           .migreq = true,
           .pad = 3,
           .tver = 0,
           .pkey = 0x1234,
           .fecn = true,
           .becn = false,
           .dest_qp = 0xabcdef,
           .ack_req = true,
           .psn = 0x010203};
  p.reth = {0x1122334455667788ull, 0x99aabbcc, 0x00000105};
  p.imm_be = 0xdeadbeef;  // kept in memory order
  uint8_t out[32];
  ASSERT_EQ(build_headers(p, out), 32u);
  uint8_t imm_bytes[4];
  std::memcpy(imm_bytes, &p.imm_be, 4);
  const uint8_t want[32] = {0x0b,         0xf0,         0x12,         0x34,        0x80, 0xab, 0xcd,
                            0xef,         0x80,         0x01,         0x02,        0x03, 0x11, 0x22,
                            0x33,         0x44,         0x55,         0x66,        0x77, 0x88, 0x99,
                            0xaa,         0xbb,         0xcc,         0x00,        0x00, 0x01, 0x05,
                            imm_bytes[0], imm_bytes[1], imm_bytes[2], imm_bytes[3]};
  EXPECT_EQ(0, std::memcmp(out, want, 32));

  Packet d;
  d.bth.opcode = 0x65;
  d.bth.dest_qp = 0x1000001;  // 25 bits: masked to 24 on the wire
  d.deth = {0x11111111, 0x00fedcba};
  uint8_t ud[24];
  ASSERT_EQ(build_headers(d, ud), 24u);
  EXPECT_EQ(ud[5], 0x00);
  EXPECT_EQ(ud[7], 0x01);
  const uint8_t deth[8] = {0x11, 0x11, 0x11, 0x11, 0x00, 0xfe, 0xdc, 0xba};
  EXPECT_EQ(0, std::memcmp(ud + 12, deth, 8));

  Packet c;
  c.bth.opcode = 0x81;
  c.bth.becn = true;
  uint8_t cnp[28];
  std::memset(cnp, 0xaa, sizeof cnp);
  ASSERT_EQ(build_headers(c, cnp), 28u);
  EXPECT_EQ(cnp[4], 0x40);
  for (int i = 12; i < 28; ++i) EXPECT_EQ(cnp[i], 0) << i;

  // RC ATOMIC WRITE (IBTA 1.5, rxe's IB_OPCODE_RC_ATOMIC_WRITE): BTH with AckReq, then RETH
  // whose DMA length is the 8 bytes of the payload.
  Packet aw;
  aw.bth.opcode = 0x1d;
  aw.bth.migreq = true;
  aw.bth.dest_qp = 0x000011;
  aw.bth.ack_req = true;
  aw.bth.psn = 0x000102;
  aw.reth = {0x00007f0012345678ull, 0x00000abc, 8};
  uint8_t awb[28];
  ASSERT_EQ(build_headers(aw, awb), 28u);
  const uint8_t aw_want[28] = {0x1d, 0x40, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00,
                               0x01, 0x02, 0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x56, 0x78,
                               0x00, 0x00, 0x0a, 0xbc, 0x00, 0x00, 0x00, 0x08};
  EXPECT_EQ(0, std::memcmp(awb, aw_want, 28));

  Packet bad;
  bad.bth.opcode = 0x15;
  uint8_t untouched = 0x5a;
  EXPECT_EQ(build_headers(bad, &untouched), 0u);
  EXPECT_EQ(untouched, 0x5a);
}

// build_headers writes every byte of the headers, reserved ones as zero: what was in the buffer
// before never shows.
TEST(ParseBuild, EveryHeaderByteIsWritten) {
  std::mt19937_64 rng(11);
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& info = opcode_info(uint8_t(op));
    if (!info.name) continue;
    SCOPED_TRACE(op);
    Packet p;
    p.bth.opcode = uint8_t(op);
    p.bth.dest_qp = uint32_t(rng());
    p.bth.psn = uint32_t(rng());
    p.reth.va = rng();
    p.deth.qkey = uint32_t(rng());
    p.deth.src_qp = uint32_t(rng());
    p.aeth.msn = uint32_t(rng());
    p.atomic.swap_add = rng();
    uint8_t zeros[64], ones[64];
    std::memset(zeros, 0, sizeof zeros);
    std::memset(ones, 0xff, sizeof ones);
    const size_t n = build_headers(p, zeros);
    ASSERT_EQ(n, info.header_len);
    ASSERT_LE(n, sizeof zeros);
    ASSERT_EQ(build_headers(p, ones), n);
    EXPECT_EQ(0, std::memcmp(zeros, ones, n));
  }
}

TEST(Parse, RejectsEveryTruncation) {
  std::mt19937_64 rng(7);
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& info = opcode_info(uint8_t(op));
    if (!info.name) continue;
    const std::vector<uint8_t> payload(5, 0x33);  // pad 3
    const std::vector<uint8_t> wire =
        build(random_packet(uint8_t(op), rng),
              (info.flags & kHasPayload) ? payload : std::span<const uint8_t>{});
    for (size_t len = 0; len < info.header_len; ++len) {
      // Copy into an exact-size buffer so ASan would see any read past the span.
      std::vector<uint8_t> cut(wire.begin(), wire.begin() + len);
      Packet out;
      EXPECT_EQ(parse(cut, out), ParseError::kTooShort) << info.name << " len " << len;
    }
    if (info.flags & kHasPayload) {
      // Headers plus fewer bytes than the pad count: pad larger than what follows the headers.
      for (size_t extra = 0; extra < 3; ++extra) {
        std::vector<uint8_t> cut(wire.begin(), wire.begin() + info.header_len + extra);
        Packet out;
        EXPECT_EQ(parse(cut, out), ParseError::kTooShort) << info.name << " extra " << extra;
      }
      // Exactly the pad: zero-length payload.
      std::vector<uint8_t> cut(wire.begin(), wire.begin() + info.header_len + 3);
      Packet out;
      ASSERT_EQ(parse(cut, out), ParseError::kOk) << info.name;
      EXPECT_EQ(out.payload.size(), 0u);
    }
  }
}

TEST(Parse, RejectsBadOpcodeVersionPadAndLength) {
  std::mt19937_64 rng(9);
  for (int op = 0; op < 256; ++op) {
    std::vector<uint8_t> b(64, 0);
    b[0] = uint8_t(op);
    Packet out;
    if (!opcode_info(uint8_t(op)).name) {
      EXPECT_EQ(parse(b, out), ParseError::kBadOpcode) << op;
      continue;
    }
    const OpcodeInfo& info = opcode_info(uint8_t(op));
    std::vector<uint8_t> w = build(random_packet(uint8_t(op), rng), {});
    for (int tver = 1; tver < 16; ++tver) {
      std::vector<uint8_t> v = w;
      v[1] = uint8_t((v[1] & 0xf0) | tver);
      EXPECT_EQ(parse(v, out), ParseError::kBadVersion) << info.name << " tver " << tver;
    }
    if (!(info.flags & kHasPayload)) {
      for (int pad = 1; pad < 4; ++pad) {
        std::vector<uint8_t> v = w;
        v[1] = uint8_t((v[1] & 0xcf) | pad << 4);
        EXPECT_EQ(parse(v, out), ParseError::kBadPad) << info.name;
      }
      for (size_t extra = 1; extra <= 8; ++extra) {
        std::vector<uint8_t> v = w;
        v.resize(v.size() + extra);
        EXPECT_EQ(parse(v, out), ParseError::kBadLength) << info.name;
      }
    }
  }
}

// An ACK rider (wire-format.md, "ACK riders") comes off before the request parses: every RC and
// XRC request, with and without payload and pad, parses as it would without it.
TEST(Parse, AnAckRiderComesOffBeforeTheRequest) {
  std::mt19937_64 rng(11);
  Packet ack;
  ack.bth.opcode = uint8_t(Opcode::kRcAcknowledge);
  ack.bth.psn = 0xabcdef;
  ack.aeth = {aeth_syndrome(AethType::kAck, kAethCreditInvalid), 0x123456};
  const std::vector<uint8_t> a = build(ack, {});
  int requests = 0;
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo& info = opcode_info(uint8_t(op));
    const Service svc = service_of(uint8_t(op));
    if (!info.name || !(info.flags & kRequest) || (svc != Service::kRc && svc != Service::kXrc))
      continue;
    ++requests;
    for (size_t len : {0, 1, 3, 8}) {
      if (len != 0 && !(info.flags & kHasPayload)) continue;
      Packet p = random_packet(uint8_t(op), rng);
      p.bth.ext = 0;
      std::vector<uint8_t> payload(len);
      for (auto& x : payload) x = uint8_t(rng());
      std::vector<uint8_t> w = build(p, payload);
      Packet plain;
      ASSERT_EQ(parse(w, plain), ParseError::kOk) << info.name;
      const size_t n = w.size();
      w.resize(n + kAckRiderBytes);
      attach_ack_rider(w.data(), n, a.data());
      Packet out;
      ASSERT_EQ(parse(w, out), ParseError::kOk) << info.name << " " << len;
      EXPECT_TRUE(out.has_rider);
      EXPECT_EQ(out.rider_psn, 0xabcdefu);
      EXPECT_EQ(out.rider_aeth.syndrome, ack.aeth.syndrome);
      EXPECT_EQ(out.rider_aeth.msn, 0x123456u);
      EXPECT_EQ(out.bth.ext, kBthExtAck);
      EXPECT_EQ(out.bth.psn, plain.bth.psn);
      EXPECT_EQ(out.bth.pad, plain.bth.pad);
      ASSERT_EQ(out.payload.size(), len);
      EXPECT_TRUE(std::equal(payload.begin(), payload.end(), out.payload.begin()));
      EXPECT_EQ(ib_length(out), n);
    }
  }
  EXPECT_GT(requests, 20);
}

TEST(Parse, RefusesABadAckRider) {
  Packet ack;
  ack.bth.opcode = uint8_t(Opcode::kRcAcknowledge);
  ack.aeth = {aeth_syndrome(AethType::kAck, kAethCreditInvalid), 1};
  const std::vector<uint8_t> a = build(ack, {});
  const auto with_rider = [&](Opcode op, std::vector<uint8_t> payload) {
    Packet p;
    p.bth.opcode = uint8_t(op);
    std::vector<uint8_t> w = build(p, payload);
    const size_t n = w.size();
    w.resize(n + kAckRiderBytes);
    attach_ack_rider(w.data(), n, a.data());
    return w;
  };
  Packet out;
  // On a response, a UD or UC request, a CNP: the bit means nothing there.
  for (Opcode op : {Opcode::kRcAcknowledge, Opcode::kRcReadResponseOnly, Opcode::kUdSendOnly,
                    Opcode::kUcSendOnly}) {
    const std::vector<uint8_t> w = with_rider(op, {});
    EXPECT_EQ(parse(w, out), ParseError::kBadRider) << opcode_info(op).name;
  }
  // Too short to hold one.
  std::vector<uint8_t> w = with_rider(Opcode::kRcSendOnly, {});
  w.resize(w.size() - 1);
  EXPECT_EQ(parse(w, out), ParseError::kBadRider);
  // A NAK does not ride; nor does a rider whose first byte is not zero.
  w = with_rider(Opcode::kRcSendOnly, {1, 2, 3, 4});
  ASSERT_EQ(parse(w, out), ParseError::kOk);
  std::vector<uint8_t> v = w;
  v[v.size() - 4] = aeth_syndrome(AethType::kNak, 0);
  EXPECT_EQ(parse(v, out), ParseError::kBadRider);
  v = w;
  v[v.size() - kAckRiderBytes] = 1;
  EXPECT_EQ(parse(v, out), ParseError::kBadRider);
}

// Random bytes, random lengths, with opcodes steered towards valid ones half of the time: parse
// must never crash or read outside the span (run under ASan to check the latter), and whatever it
// accepts must be self-consistent.
TEST(Parse, FuzzRandomBytes) {
  std::mt19937_64 rng(1234);
  std::vector<uint8_t> valid;
  for (int op = 0; op < 256; ++op)
    if (opcode_info(uint8_t(op)).name) valid.push_back(uint8_t(op));
  int ok = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    std::vector<uint8_t> b(rng() % 72);
    for (auto& x : b) x = uint8_t(rng());
    if (!b.empty() && (iter & 1)) b[0] = valid[rng() % valid.size()];
    if (b.size() > 1 && (iter & 2)) b[1] &= 0xf0;  // TVer 0
    Packet out;
    const ParseError e = parse(b, out);
    if (e != ParseError::kOk) continue;
    ++ok;
    ASSERT_NE(out.info, nullptr);
    ASSERT_EQ(out.info, &opcode_info(b[0]));
    ASSERT_EQ(out.info->header_len + out.payload.size() + out.bth.pad +
                  (out.has_rider ? kAckRiderBytes : 0),
              b.size());
    ASSERT_EQ(out.payload.data(), b.data() + out.info->header_len);
    ASSERT_LE(out.bth.dest_qp, kQpnMask);
    ASSERT_LE(out.bth.psn, 0xffffffu);
  }
  // The steering makes acceptance common; a parser that rejected everything would fail here.
  EXPECT_GT(ok, 10000);
}

// The captured frames parse to the fields their README describes.
struct Captured {
  testing::Frame frame;
  Packet p;  // payload points into frame.bytes
};
std::unique_ptr<Captured> parse_vector(const std::string& name) {
  auto c = std::make_unique<Captured>(Captured{testing::Frame::load(name), {}});
  EXPECT_EQ(parse(c->frame.ib(), c->p), ParseError::kOk) << name;
  return c;
}

TEST(KnownAnswer, RxeAcksAndNaks) {
  const auto ack = parse_vector("rxe_rc_ack.hex");
  EXPECT_EQ(ack->p.bth.opcode, 0x11);
  EXPECT_EQ(ack->p.aeth.syndrome, 0x1f);
  EXPECT_EQ(aeth_type(ack->p.aeth.syndrome), AethType::kAck);
  EXPECT_EQ(aeth_value(ack->p.aeth.syndrome), kAethCreditInvalid);
  EXPECT_EQ(ack->p.aeth.msn, 1u);
  EXPECT_EQ(ack->p.bth.psn, 0x123456u);
  EXPECT_EQ(ack->p.bth.dest_qp, 0x000100u);
  EXPECT_EQ(ack->p.bth.pkey, 0xffff);
  EXPECT_EQ(ack->p.payload.size(), 0u);

  const auto seq = parse_vector("rxe_rc_nak_psn_seq_err.hex");
  EXPECT_EQ(seq->p.bth.opcode, 0x11);
  EXPECT_EQ(seq->p.aeth.syndrome, 0x60);
  EXPECT_EQ(seq->p.aeth.syndrome,
            aeth_syndrome(AethType::kNak, uint8_t(NakCode::kPsnSequenceError)));
  EXPECT_EQ(seq->p.bth.psn, 0xfffffdu);  // the PSN the responder expects
  EXPECT_EQ(seq->p.bth.dest_qp, 0x000102u);

  const auto rnr = parse_vector("rxe_rc_rnr_nak.hex");
  EXPECT_EQ(rnr->p.aeth.syndrome, 0x2c);
  EXPECT_EQ(aeth_type(rnr->p.aeth.syndrome), AethType::kRnrNak);
  EXPECT_EQ(aeth_value(rnr->p.aeth.syndrome), 12);  // RNR timer code 12: 0.64 ms
  EXPECT_EQ(rnr->p.aeth.msn, 1u);
  EXPECT_EQ(rnr->p.bth.dest_qp, 0x000112u);

  const auto inv = parse_vector("rxe_rc_nak_invalid_request.hex");
  EXPECT_EQ(inv->p.aeth.syndrome, 0x61);
  EXPECT_EQ(inv->p.aeth.syndrome, aeth_syndrome(AethType::kNak, uint8_t(NakCode::kInvalidRequest)));
  EXPECT_EQ(inv->p.bth.psn, 0x000010u);
  EXPECT_EQ(inv->p.bth.dest_qp, 0x000105u);
}

TEST(KnownAnswer, RxeSendSegments) {
  const auto first = parse_vector("rxe_rc_send_first.hex");
  const auto middle = parse_vector("rxe_rc_send_middle.hex");
  const auto last = parse_vector("rxe_rc_send_last.hex");
  EXPECT_EQ(first->p.bth.opcode, 0x00);
  EXPECT_EQ(middle->p.bth.opcode, 0x01);
  EXPECT_EQ(last->p.bth.opcode, 0x02);
  for (const Captured* c : {first.get(), middle.get(), last.get()}) {
    EXPECT_EQ(c->p.payload.size(), 1024u);  // path MTU 1024, 4096-byte message
    EXPECT_EQ(c->p.bth.pad, 0);
    EXPECT_EQ(c->p.bth.dest_qp, 0x00010du);
    EXPECT_EQ(c->p.bth.pkey, 0xffff);
  }
  EXPECT_FALSE(first->p.bth.ack_req);
  EXPECT_FALSE(middle->p.bth.ack_req);
  EXPECT_TRUE(last->p.bth.ack_req);
  // 4 packets: FIRST, MIDDLE (the first of two), MIDDLE, LAST.
  EXPECT_EQ(first->p.bth.psn, 0x3759f4u);
  EXPECT_EQ(middle->p.bth.psn, first->p.bth.psn + 1);
  EXPECT_EQ(last->p.bth.psn, first->p.bth.psn + 3);
}

TEST(KnownAnswer, Cnp) {
  const auto cnp = parse_vector("cnp_cx4lx.hex");
  EXPECT_EQ(cnp->p.bth.opcode, 0x81);
  EXPECT_EQ(cnp->p.info->flags & kCnpFlag, kCnpFlag);
  EXPECT_EQ(cnp->p.bth.pkey, 0xffff);
  EXPECT_TRUE(cnp->p.bth.becn);
  EXPECT_FALSE(cnp->p.bth.fecn);
  EXPECT_EQ(cnp->p.bth.dest_qp, 0x000118u);
  EXPECT_EQ(cnp->p.payload.size(), 0u);
}

}  // namespace
}  // namespace uroce::wire
