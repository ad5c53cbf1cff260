// The RoCEv2 CNP (transport/wire cnp_packet, Annex A17.9.3) against the ConnectX-4 Lx frame in
// vectors/cnp_cx4lx.hex: the CNP uroce builds has that frame's layout byte for byte (BTH and the
// 16 reserved bytes), its ICRC in that framing is the frame's, and uroce's parser reads the
// frame as a CNP for DestQP 0x118.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "frame_util.h"
#include "transport/cc/constants.h"
#include "transport/wire/icrc.h"
#include "transport/wire/wire.h"

namespace uroce::wire {
namespace {

using testing::Frame;

constexpr uint32_t kVectorQp = 0x000118;

std::vector<uint8_t> build(uint32_t dest_qp) {
  std::vector<uint8_t> b(kCnpBytes, 0xee);  // poison: build_headers must write every byte
  EXPECT_EQ(build_headers(cnp_packet(dest_qp), b.data()), kCnpBytes);
  return b;
}

TEST(Cnp, BuildsTheConnectXLayout) {
  const Frame f = Frame::load("cnp_cx4lx.hex");
  const std::vector<uint8_t> ours = build(kVectorQp);
  ASSERT_EQ(f.ib().size(), ours.size());  // UDP payload 32 bytes: 28 + the 4-byte ICRC
  EXPECT_EQ(0, std::memcmp(ours.data(), f.ib().data(), ours.size()));
  // BTH as the notes spell it: 81 00 ff ff 40 | DestQP | 00 | PSN 0.
  const uint8_t bth[12] = {0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0, 0, 0, 0};
  EXPECT_EQ(0, std::memcmp(ours.data(), bth, sizeof bth));
  // In the frame's own IPv4/UDP framing, our bytes carry the frame's ICRC.
  EXPECT_EQ(icrc(f.framing(), ours), f.wire_icrc());
}

TEST(Cnp, FrameFraming) {
  // What the port around the CNP must match (the DSCP and lengths), read off the frame.
  const Frame f = Frame::load("cnp_cx4lx.hex");
  EXPECT_EQ(f.ip()[1] >> 2, transport::cc::kCnpDscp);  // DSCP 48
  EXPECT_EQ(testing::be16(f.udp() + 2), kRoceV2UdpPort);
  EXPECT_EQ(testing::be16(f.udp() + 4), 8 + kCnpBytes + kIcrcBytes);
  EXPECT_EQ(f.ip_len, 20 + 8 + kCnpBytes + kIcrcBytes);
  // The ConnectX-4 Lx marks its CNP ECT(0) (TOS 0xC2); uroce sends CNPs Not-ECT (TOS 0xC0) as
  // the congestion-control design asks (docs/congestion-control.md). The ICRC masks the TOS, so
  // the two differ in nothing a receiver checks.
  EXPECT_EQ(f.ip()[1] & 3, 2);
}

TEST(Cnp, ParsesTheConnectXFrame) {
  const Frame f = Frame::load("cnp_cx4lx.hex");
  Packet p;
  ASSERT_EQ(parse(f.ib(), p), ParseError::kOk);
  EXPECT_EQ(p.bth.opcode, uint8_t(Opcode::kCnp));
  EXPECT_EQ(service_of(p.bth.opcode), Service::kCnp);
  ASSERT_NE(p.info, nullptr);
  EXPECT_TRUE(p.info->flags & kCnpFlag);
  EXPECT_FALSE(p.info->flags & (kRequest | kResponse));
  EXPECT_TRUE(p.bth.becn);
  EXPECT_FALSE(p.bth.fecn);
  EXPECT_FALSE(p.bth.ack_req);
  EXPECT_FALSE(p.bth.migreq);
  EXPECT_EQ(p.bth.pkey, 0xffff);
  EXPECT_EQ(p.bth.dest_qp, kVectorQp);
  EXPECT_EQ(p.bth.psn, 0u);
  EXPECT_TRUE(p.payload.empty());
}

TEST(Cnp, RoundTripsAnyQpn) {
  for (uint32_t qpn : {0u, 1u, 0x123456u, 0xffffffu, 0x1abcdefu /* masked to 24 bits */}) {
    const std::vector<uint8_t> b = build(qpn);
    Packet p;
    ASSERT_EQ(parse(b, p), ParseError::kOk) << qpn;
    EXPECT_EQ(p.bth.dest_qp, qpn & kQpnMask);
    EXPECT_TRUE(p.bth.becn);
    // The reserved 16 bytes are zero.
    for (size_t i = kBthBytes; i < kCnpBytes; ++i) EXPECT_EQ(b[i], 0) << i;
  }
}

TEST(Cnp, MalformedCnpsAreRefused) {
  std::vector<uint8_t> b = build(7);
  Packet p;
  // Short of the 16 reserved bytes.
  EXPECT_EQ(parse({b.data(), kCnpBytes - 1}, p), ParseError::kTooShort);
  EXPECT_EQ(parse({b.data(), kBthBytes}, p), ParseError::kTooShort);
  // Trailing bytes: a CNP carries no payload.
  std::vector<uint8_t> longer = b;
  longer.resize(kCnpBytes + 4);
  EXPECT_EQ(parse(longer, p), ParseError::kBadLength);
  // A pad count on a CNP.
  std::vector<uint8_t> padded = b;
  padded[1] = 0x10;
  EXPECT_EQ(parse(padded, p), ParseError::kBadPad);
}

}  // namespace
}  // namespace uroce::wire
