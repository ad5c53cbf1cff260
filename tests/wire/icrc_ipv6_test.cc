// The RoCEv2 ICRC over UDP/IPv6 (transport/wire/icrc.cc; IBTA Annex A17.3.3 with the IPv6 header's
// Traffic Class, Flow Label and Hop Limit masked): known answers computed independently by
// icrc_vectors.py (whose CRC convention it proves on the captured IPv4 frames first), then which
// fields the ICRC covers and which it masks.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <zlib.h>

#include "frame_util.h"
#include "transport/wire/icrc.h"
#include "transport/wire/ip.h"
#include "transport/wire/wire.h"

namespace uroce::wire {
namespace {

using testing::Frame6;

const char* const kFrames6[] = {
    "roce_ipv6_rc_send_only.hex",   "roce_ipv6_rc_ack.hex",
    "roce_ipv6_rc_write_first.hex", "roce_ipv6_rc_send_only_marked.hex",
    "roce_ipv6_ud_send_only.hex",
};

TEST(IcrcIpv6, KnownAnswersFromThePacket) {
  for (const char* name : kFrames6) {
    SCOPED_TRACE(name);
    const Frame6 f = Frame6::load(name);
    EXPECT_EQ(icrc_ipv6(f.ip_without_icrc()), f.wire_icrc());
  }
}

TEST(IcrcIpv6, KnownAnswersFromTheFraming) {
  for (const char* name : kFrames6) {
    SCOPED_TRACE(name);
    const Frame6 f = Frame6::load(name);
    EXPECT_EQ(icrc(f.framing(), f.ib()), f.wire_icrc());
    // In two pieces, split after the BTH and anywhere else (the zero-copy send path).
    const std::span<const uint8_t> ib = f.ib();
    for (size_t cut : {kBthBytes, kBthBytes + 1, ib.size() / 2, ib.size()}) {
      EXPECT_EQ(icrc(f.framing(), ib.first(cut), ib.subspan(cut)), f.wire_icrc()) << cut;
    }
  }
}

TEST(IcrcIpv6, VectorsParseAsRoce) {
  // The vectors are well-formed RoCEv2 (so the known answers are about real packet shapes).
  for (const char* name : kFrames6) {
    SCOPED_TRACE(name);
    const Frame6 f = Frame6::load(name);
    EXPECT_EQ(f.framing().dst_port, kRoceV2UdpPort);
    Packet p;
    ASSERT_EQ(parse(f.ib(), p), ParseError::kOk);
    EXPECT_EQ(ib_length(p), f.ib().size());
  }
}

// The vector "as a network delivered it" differs from the plain SEND ONLY only in masked fields:
// Traffic Class (DSCP and ECN CE), Flow Label, Hop Limit, FECN, and the UDP checksum that follows.
TEST(IcrcIpv6, RouterChangedFieldsKeepTheIcrc) {
  const Frame6 plain = Frame6::load("roce_ipv6_rc_send_only.hex");
  const Frame6 marked = Frame6::load("roce_ipv6_rc_send_only_marked.hex");
  ASSERT_EQ(plain.bytes.size(), marked.bytes.size());
  EXPECT_NE(plain.bytes, marked.bytes);
  EXPECT_EQ(plain.wire_icrc(), marked.wire_icrc());
}

// Each masked field, changed in every bit, leaves the ICRC alone; every unmasked byte of the IPv6
// and UDP headers and of the IB packet changes it.
TEST(IcrcIpv6, MaskedAndCoveredFields) {
  for (const char* name : kFrames6) {
    SCOPED_TRACE(name);
    const Frame6 f = Frame6::load(name);
    const std::span<const uint8_t> orig = f.ip_without_icrc();
    const uint32_t want = f.wire_icrc();
    auto icrc_with = [&](size_t at, uint8_t xor_mask) {
      std::vector<uint8_t> pkt(orig.begin(), orig.end());
      pkt[at] ^= xor_mask;
      return icrc_ipv6(pkt);
    };
    // Traffic Class (the low nibble of byte 0 and high nibble of byte 1), Flow Label (the rest
    // of bytes 1-3), Hop Limit (byte 7), UDP checksum (bytes 46-47), BTH resv8a (byte 52).
    EXPECT_EQ(icrc_with(0, 0x0f), want);
    for (size_t at : {1, 2, 3, 7, 46, 47, 52}) {
      for (int bit = 0; bit < 8; ++bit) EXPECT_EQ(icrc_with(at, uint8_t(1 << bit)), want) << at;
    }
    // Everything else is covered: the Version nibble, Payload Length, Next Header, addresses,
    // ports, UDP length, and every byte of the IB packet.
    EXPECT_NE(icrc_with(0, 0x10), want);
    for (size_t at = 0; at < orig.size(); ++at) {
      if (at == 1 || at == 2 || at == 3 || at == 7 || at == 46 || at == 47 || at == 52) continue;
      EXPECT_NE(icrc_with(at, 0x80), want) << at;
    }
  }
}

TEST(IcrcIpv6, FramingFieldsAreCovered) {
  const Frame6 f = Frame6::load("roce_ipv6_rc_send_only.hex");
  const Ipv6UdpFraming base = f.framing();
  const uint32_t want = f.wire_icrc();
  ASSERT_EQ(icrc(base, f.ib()), want);
  Ipv6UdpFraming g = base;
  g.src = *IpAddr::parse("fd00:1::3");
  EXPECT_NE(icrc(g, f.ib()), want);
  g = base;
  g.dst = *IpAddr::parse("fd00:2::2");
  EXPECT_NE(icrc(g, f.ib()), want);
  g = base;
  std::swap(g.src, g.dst);
  EXPECT_NE(icrc(g, f.ib()), want);
  g = base;
  ++g.src_port;
  EXPECT_NE(icrc(g, f.ib()), want);
  g = base;
  g.dst_port = 4792;
  EXPECT_NE(icrc(g, f.ib()), want);
  // The payload, and its length (through the IPv6 Payload Length and the UDP length).
  std::vector<uint8_t> ib(f.ib().begin(), f.ib().end());
  ib.back() ^= 1;
  EXPECT_NE(icrc(base, ib), want);
  ib.back() ^= 1;
  ib.push_back(0);
  EXPECT_NE(icrc(base, ib), want);
  // BTH resv8a is masked here too.
  ib.pop_back();
  ib[4] ^= 0xc0;
  EXPECT_EQ(icrc(base, ib), want);
}

// An IPv4-mapped address is covered as its 16 bytes: not the IPv4 ICRC of the same packet.
TEST(IcrcIpv6, MappedAddressesAreNotIpv4Framing) {
  const Frame6 f = Frame6::load("roce_ipv6_rc_ack.hex");
  Ipv6UdpFraming g6 = f.framing();
  g6.src = IpAddr(0x0a000001u);
  g6.dst = IpAddr(0x0a000002u);
  Ipv4UdpFraming g4;
  g4.src_ip = 0x0a000001;
  g4.dst_ip = 0x0a000002;
  g4.ip_id = 0;
  g4.src_port = g6.src_port;
  EXPECT_NE(icrc(g6, f.ib()), icrc(g4, f.ib()));
}

// The ICRC the obvious way (zlib over the whole pseudo-packet), against the framing overload over
// every length across the one-call/two-call boundary (256 bytes) and at several alignments.
uint32_t reference_icrc6(const Ipv6UdpFraming& f, std::span<const uint8_t> ib) {
  std::vector<uint8_t> b(8, 0xff);
  const size_t udp_len = 8 + ib.size() + 4;
  const uint8_t v6[8] = {0x6f, 0xff, 0xff, 0xff, uint8_t(udp_len >> 8), uint8_t(udp_len), 17, 0xff};
  b.insert(b.end(), v6, v6 + 8);
  b.insert(b.end(), f.src.bytes().begin(), f.src.bytes().end());
  b.insert(b.end(), f.dst.bytes().begin(), f.dst.bytes().end());
  const uint8_t udp[8] = {uint8_t(f.src_port >> 8),
                          uint8_t(f.src_port),
                          uint8_t(f.dst_port >> 8),
                          uint8_t(f.dst_port),
                          uint8_t(udp_len >> 8),
                          uint8_t(udp_len),
                          0xff,
                          0xff};
  b.insert(b.end(), udp, udp + 8);
  b.insert(b.end(), ib.begin(), ib.end());
  if (ib.size() > 4) b[56 + 4] = 0xff;
  return static_cast<uint32_t>(crc32(0, b.data(), static_cast<uInt>(b.size())));
}

TEST(IcrcIpv6, EqualsTheZlibReferenceForEveryLength) {
  SCOPED_TRACE(icrc_implementation());
  std::mt19937 rng(6);
  std::vector<uint8_t> ib(4096 + 64);
  for (auto& x : ib) x = uint8_t(rng());
  Ipv6UdpFraming f;
  f.src = *IpAddr::parse("2001:db8::1");
  f.dst = *IpAddr::parse("2001:db8::2");
  f.src_port = 0xbeef;
  for (size_t at : {size_t{0}, size_t{1}, size_t{7}}) {
    for (size_t len = 0; len + at <= ib.size(); len += (len < 300 ? 1 : 127)) {
      SCOPED_TRACE(::testing::Message() << "offset " << at << " length " << len);
      ASSERT_EQ(icrc(f, {ib.data() + at, len}), reference_icrc6(f, {ib.data() + at, len}));
    }
  }
}

// Truncated or garbage packets never read outside the span (ASan/valgrind would tell) and give
// some value; an IPv6 packet too short for its UDP header cannot be a valid one.
TEST(IcrcIpv6, MalformedInputsStayInBounds) {
  const Frame6 f = Frame6::load("roce_ipv6_rc_write_first.hex");
  const std::span<const uint8_t> pkt = f.ip_without_icrc();
  for (size_t len = 0; len <= pkt.size(); ++len) {
    std::vector<uint8_t> copy(pkt.begin(), pkt.begin() + len);  // exact size: no slack to read
    const uint32_t v = icrc_ipv6(copy);
    if (len < pkt.size()) {
      EXPECT_NE(v, f.wire_icrc()) << len;
    }
  }
  EXPECT_EQ(icrc_ipv6(std::span<const uint8_t>()), icrc_ipv6(std::span<const uint8_t>()));
}

}  // namespace
}  // namespace uroce::wire
