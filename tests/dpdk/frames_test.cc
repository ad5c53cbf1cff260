#include "dpdk_port/frames.h"

#include <rte_ip.h>

#include "transport/env.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace uroce::dpdk {
namespace {

const Mac kA = {0x02, 0, 0, 0, 0, 0x0a};
const Mac kB = {0x02, 0, 0, 0, 0, 0x0b};
constexpr uint32_t kIpA = 0x0a4d0001, kIpB = 0x0a4d0002;

std::vector<uint8_t> roce_frame(bool vlan, size_t payload = 100, uint8_t tos = 26 << 2 | 2) {
  RoceV2Headers h;
  h.l2.dst = kB;
  h.l2.src = kA;
  h.l2.vlan = vlan ? 42 : 0;
  h.l2.pcp = 3;
  h.src_ip = wire::IpAddr(kIpA);
  h.dst_ip = wire::IpAddr(kIpB);
  h.tos = tos;
  h.ip_id = 0x1234;
  h.src_port = 0xc011;
  std::vector<uint8_t> f(roce_v2_header_bytes(vlan) + payload);
  write_roce_v2(f.data(), h, payload);
  for (size_t i = 0; i < payload; ++i) f[roce_v2_header_bytes(vlan) + i] = uint8_t(i);
  return f;
}

Identity b_identity(std::span<const uint32_t> groups = {}) {
  return Identity{kB, wire::IpAddr(kIpB), groups};
}

TEST(FramesTest, RoceV2HeadersClassifyBackToTheirFields) {
  for (bool vlan : {false, true}) {
    SCOPED_TRACE(vlan);
    auto f = roce_frame(vlan);
    Classified c = classify(f.data(), f.size(), b_identity());
    ASSERT_EQ(c.kind, Kind::kRoceV2);
    EXPECT_EQ(c.l2_bytes, vlan ? 18u : 14u);
    if (vlan) {
      EXPECT_EQ(c.vlan_tci, 3 << 13 | 42);
    }
    EXPECT_EQ(c.src_ip, wire::IpAddr(kIpA));
    EXPECT_EQ(c.dst_ip, wire::IpAddr(kIpB));
    EXPECT_EQ(c.ip_id, 0x1234);
    EXPECT_TRUE(c.dont_fragment);
    EXPECT_EQ(c.tos, 26 << 2 | 2);
    EXPECT_EQ(c.src_port, 0xc011);
    EXPECT_EQ(c.dst_port, kRoceV2Port);
    ASSERT_EQ(c.payload_len, 100u);
    EXPECT_EQ(c.payload[99], 99);
    // The IPv4 header checksum is valid.
    const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(f.data() + c.l2_bytes);
    EXPECT_EQ(rte_raw_cksum(ip, 20), 0xffff);
  }
}

TEST(FramesTest, WhatIsNotRoceForUsIsSortedByCause) {
  auto f = roce_frame(false);
  Identity other{kA, wire::IpAddr(kIpB), {}};
  EXPECT_EQ(classify(f.data(), f.size(), other).kind, Kind::kNotForUs);  // another MAC
  Identity other_ip{kB, wire::IpAddr(kIpA), {}};
  EXPECT_EQ(classify(f.data(), f.size(), other_ip).kind, Kind::kNotForUs);  // another address
  auto g = f;
  g[14 + 10] ^= 1;  // the checksum
  EXPECT_EQ(classify(g.data(), g.size(), b_identity()).kind, Kind::kBadIp);
  g = f;
  g[14 + 6] |= 0x20;  // MF: a fragment
  g[14 + 10] = g[14 + 11] = 0;
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(g.data() + 14);
  ip->hdr_checksum = rte_ipv4_cksum(ip);
  EXPECT_EQ(classify(g.data(), g.size(), b_identity()).kind, Kind::kBadIp);
  g = f;
  g[14 + 20 + 3] = 0x35;  // UDP destination 53 + low byte: not 4791
  EXPECT_EQ(classify(g.data(), g.size(), b_identity()).kind, Kind::kNonRoce);
  g = f;
  g[12] = 0x86;  // IPv6 EtherType
  g[13] = 0xdd;
  EXPECT_EQ(classify(g.data(), g.size(), b_identity()).kind, Kind::kNonRoce);
  // Cut short: the IP total length says more than there is.
  EXPECT_EQ(classify(f.data(), 60, b_identity()).kind, Kind::kTooShort);
}

TEST(FramesTest, MulticastGroupsJoinedAreForUs) {
  RoceV2Headers h;
  const uint32_t group = 0xe0010203;
  h.l2.dst = multicast_mac(group);
  EXPECT_EQ(h.l2.dst, (Mac{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}));
  h.l2.src = kA;
  h.src_ip = wire::IpAddr(kIpA);
  h.dst_ip = wire::IpAddr(group);
  std::vector<uint8_t> f(roce_v2_header_bytes(false) + 40);
  write_roce_v2(f.data(), h, 40);
  EXPECT_EQ(classify(f.data(), f.size(), b_identity()).kind, Kind::kNotForUs);
  const uint32_t groups[] = {group};
  Classified c = classify(f.data(), f.size(), b_identity(groups));
  EXPECT_EQ(c.kind, Kind::kRoceV2);
  EXPECT_EQ(c.dst_ip, wire::IpAddr(group));
}

TEST(FramesTest, PauseAndPfcFramesParse) {
  uint8_t f[64] = {};
  std::memcpy(f, kPauseMac.data(), 6);
  std::memcpy(f + 6, kA.data(), 6);
  f[12] = 0x88;
  f[13] = 0x08;
  // 802.3x PAUSE, 0x1000 quanta.
  f[14] = 0x00;
  f[15] = 0x01;
  f[16] = 0x10;
  f[17] = 0x00;
  Classified c = classify(f, sizeof f, b_identity());
  ASSERT_EQ(c.kind, Kind::kPause);
  EXPECT_EQ(c.pause_mask, 0xff);
  EXPECT_EQ(c.quanta[5], 0x1000);
  // PFC: priorities 3 and 6.
  f[15] = 0x01;
  f[14] = 0x01;
  f[16] = 0x00;
  f[17] = 0x48;
  for (int p = 0; p < 8; ++p) {
    f[18 + 2 * p] = 0;
    f[19 + 2 * p] = static_cast<uint8_t>(p + 1);
  }
  c = classify(f, sizeof f, b_identity());
  ASSERT_EQ(c.kind, Kind::kPause);
  EXPECT_EQ(c.pause_mask, 0x48);
  EXPECT_EQ(c.quanta[3], 4);
  EXPECT_EQ(c.quanta[6], 7);
  // A MAC Control frame to another address is no PAUSE for us.
  f[0] = 0x03;
  EXPECT_EQ(classify(f, sizeof f, b_identity()).kind, Kind::kNonRoce);
}

TEST(FramesTest, ArpRequestAndReplyRoundTrip) {
  uint8_t f[64];
  Arp req;
  req.op = 1;
  req.sha = kA;
  req.spa = kIpA;
  req.tpa = kIpB;
  L2 l2;
  l2.dst = kBroadcastMac;
  l2.src = kA;
  ASSERT_EQ(write_arp(f, l2, req), 60u);
  Classified c = classify(f, 60, b_identity());
  ASSERT_EQ(c.kind, Kind::kArp);
  Arp got;
  ASSERT_TRUE(parse_arp(f, 60, c, &got));
  EXPECT_EQ(got.op, 1);
  EXPECT_EQ(got.sha, kA);
  EXPECT_EQ(got.spa, kIpA);
  EXPECT_EQ(got.tpa, kIpB);
  // Truncated: no ARP.
  EXPECT_FALSE(parse_arp(f, 20, c, &got));
}

TEST(FramesTest, EchoReplyHasSwappedAddressesAndValidChecksums) {
  // An echo request from A to B, 32 bytes of data.
  std::vector<uint8_t> f(14 + 20 + 8 + 32);
  std::memcpy(f.data(), kB.data(), 6);
  std::memcpy(f.data() + 6, kA.data(), 6);
  f[12] = 0x08;
  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(f.data() + 14);
  ip->version_ihl = 0x45;
  ip->total_length = rte_cpu_to_be_16(20 + 8 + 32);
  ip->time_to_live = 7;
  ip->next_proto_id = IPPROTO_ICMP;
  ip->src_addr = rte_cpu_to_be_32(kIpA);
  ip->dst_addr = rte_cpu_to_be_32(kIpB);
  ip->hdr_checksum = rte_ipv4_cksum(ip);
  uint8_t* icmp = f.data() + 34;
  icmp[0] = 8;  // echo request
  icmp[4] = 0x12;
  icmp[6] = 0x34;
  for (int i = 0; i < 32; ++i) icmp[8 + i] = uint8_t(i * 7);
  Classified c = classify(f.data(), f.size(), b_identity());
  ASSERT_EQ(c.kind, Kind::kIcmpEcho);
  make_echo_reply(f.data(), f.size(), c, kB);
  EXPECT_EQ(std::memcmp(f.data(), kA.data(), 6), 0);
  EXPECT_EQ(std::memcmp(f.data() + 6, kB.data(), 6), 0);
  EXPECT_EQ(rte_be_to_cpu_32(ip->src_addr), kIpB);
  EXPECT_EQ(rte_be_to_cpu_32(ip->dst_addr), kIpA);
  EXPECT_EQ(rte_raw_cksum(ip, 20), 0xffff);
  EXPECT_EQ(icmp[0], 0);
  EXPECT_EQ(rte_raw_cksum(icmp, 40), 0xffff);
  EXPECT_EQ(icmp[4], 0x12);  // identifier and data kept
  EXPECT_EQ(icmp[8 + 31], uint8_t(31 * 7));
}

// --- IPv6 ---

const wire::IpAddr kIp6A = *wire::IpAddr::parse("fd00::a");
const wire::IpAddr kIp6B = *wire::IpAddr::parse("fd00::1:b");

Identity b6_identity() {
  return Identity{kB, kIp6B, {}};
}

// The Internet checksum over the IPv6 pseudo-header (RFC 8200 8.1) and the upper-layer packet
// at ip6 + 40, written here independently of DPDK's: all ones when the packet's checksum holds.
uint16_t ones_sum_ipv6(const uint8_t* ip6) {
  const size_t len = size_t(ip6[4]) << 8 | ip6[5];
  uint64_t sum = 0;
  for (size_t i = 8; i < 40; i += 2) sum += uint32_t(ip6[i]) << 8 | ip6[i + 1];
  sum += len + ip6[6];
  const uint8_t* l4 = ip6 + 40;
  for (size_t i = 0; i + 1 < len; i += 2) sum += uint32_t(l4[i]) << 8 | l4[i + 1];
  if (len & 1) sum += uint32_t(l4[len - 1]) << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(sum);
}

TEST(FramesTest, RoceV2OverIpv6ClassifiesBackToItsFields) {
  for (bool vlan : {false, true}) {
    SCOPED_TRACE(vlan);
    RoceV2Headers h;
    h.l2 = {kB, kA, uint16_t(vlan ? 42 : 0), 3};
    h.src_ip = kIp6A;
    h.dst_ip = kIp6B;
    h.tos = 26 << 2 | 3;
    h.flow_label = 0x1c011;
    h.src_port = 0xc011;
    const size_t hdr = roce_v2_header_bytes(vlan, true);
    EXPECT_EQ(hdr, 14u + (vlan ? 4 : 0) + 40 + 8);
    EXPECT_LE(hdr, transport::kTxHeadroom);
    std::vector<uint8_t> f(hdr + 100);
    write_roce_v2(f.data(), h, 100);
    const uint8_t* ip6 = f.data() + (vlan ? 18 : 14);
    EXPECT_EQ(f[vlan ? 16 : 12], 0x86);
    EXPECT_EQ(f[vlan ? 17 : 13], 0xdd);
    // Version 6, traffic class, flow label; payload length; next header UDP; hop limit 64.
    EXPECT_EQ(ip6[0], 0x60 | (26 << 2 | 3) >> 4);
    EXPECT_EQ(ip6[1], ((26 << 2 | 3) & 0xf) << 4 | 0x1);
    EXPECT_EQ(ip6[2], 0xc0);
    EXPECT_EQ(ip6[3], 0x11);
    EXPECT_EQ(size_t(ip6[4]) << 8 | ip6[5], 108u);
    EXPECT_EQ(ip6[6], 17);
    EXPECT_EQ(ip6[7], 64);
    EXPECT_EQ(ip6[40 + 6] | ip6[40 + 7], 0);  // UDP checksum 0, as rxe and RNICs send RoCE
    const Classified c = classify(f.data(), f.size(), b6_identity());
    ASSERT_EQ(c.kind, Kind::kRoceV2);
    EXPECT_TRUE(c.ipv6);
    EXPECT_EQ(c.src_ip, kIp6A);
    EXPECT_EQ(c.dst_ip, kIp6B);
    EXPECT_EQ(c.tos, 26 << 2 | 3);
    EXPECT_EQ(c.src_port, 0xc011);
    EXPECT_EQ(c.dst_port, kRoceV2Port);
    ASSERT_EQ(c.payload_len, 100u);
    EXPECT_EQ(c.payload, f.data() + hdr);
    // Not ours: another address; an IPv4 device; a length beyond the frame.
    EXPECT_EQ(classify(f.data(), f.size(), Identity{kB, kIp6A, {}}).kind, Kind::kNotForUs);
    EXPECT_EQ(classify(f.data(), f.size(), b_identity()).kind, Kind::kNonRoce);
    EXPECT_EQ(classify(f.data(), f.size() - 1, b6_identity()).kind, Kind::kTooShort);
    // An IPv4 frame to an IPv6 device is not its business either.
    const auto g = roce_frame(vlan);
    EXPECT_EQ(classify(g.data(), g.size(), b6_identity()).kind, Kind::kNotForUs);
  }
}

TEST(FramesTest, NeighbourSolicitationAndAdvertisementRoundTrip) {
  // A solicits B: to B's solicited-node group (ff02::1:ff01:b) at 33:33:ff:01:00:0b.
  uint8_t p[128];
  const size_t n = write_nd_solicit(p, L2{kBroadcastMac, kA, 0, 0}, kIp6A, kIp6B);
  EXPECT_EQ(n, 14u + 40 + 32);
  const Mac want = {0x33, 0x33, 0xff, 0x01, 0x00, 0x0b};
  EXPECT_EQ(std::memcmp(p, want.data(), 6), 0);
  EXPECT_EQ(solicited_node(kIp6B), *wire::IpAddr::parse("ff02::1:ff01:b"));
  EXPECT_EQ(p[14 + 7], 255);  // hop limit (RFC 4861 7.1.1)
  EXPECT_EQ(ones_sum_ipv6(p + 14), 0xffff);
  Classified c = classify(p, n, b6_identity());
  ASSERT_EQ(c.kind, Kind::kNd);
  Nd nd;
  ASSERT_TRUE(parse_nd(p, n, c, &nd));
  EXPECT_EQ(nd.type, kNdNeighbourSolicit);
  EXPECT_EQ(nd.target, kIp6B);
  ASSERT_TRUE(nd.has_lladdr);
  EXPECT_EQ(nd.lladdr, kA);
  // A's own identity hears its group only for its own address.
  EXPECT_EQ(classify(p, n, Identity{kA, kIp6A, {}}).kind, Kind::kNotForUs);

  // B answers A.
  const size_t m = write_nd_advert(p, L2{kA, kB, 0, 0}, kIp6B, kIp6A);
  EXPECT_EQ(ones_sum_ipv6(p + 14), 0xffff);
  c = classify(p, m, Identity{kA, kIp6A, {}});
  ASSERT_EQ(c.kind, Kind::kNd);
  ASSERT_TRUE(parse_nd(p, m, c, &nd));
  EXPECT_EQ(nd.type, kNdNeighbourAdvert);
  EXPECT_TRUE(nd.solicited);
  EXPECT_EQ(nd.target, kIp6B);
  ASSERT_TRUE(nd.has_lladdr);
  EXPECT_EQ(nd.lladdr, kB);

  // What RFC 4861 7.1 discards: a bad checksum, a hop limit that is not 255 (a router
  // forwarded it), an option of length 0.
  std::vector<uint8_t> bad(p, p + m);
  bad[14 + 40 + 10] ^= 1;
  c = classify(bad.data(), m, Identity{kA, kIp6A, {}});
  EXPECT_FALSE(parse_nd(bad.data(), m, c, &nd));
  bad.assign(p, p + m);
  bad[14 + 7] = 254;
  EXPECT_EQ(classify(bad.data(), m, Identity{kA, kIp6A, {}}).kind, Kind::kNonRoce);
  bad.assign(p, p + m);
  bad[14 + 40 + 25] = 0;
  c = classify(bad.data(), m, Identity{kA, kIp6A, {}});
  EXPECT_FALSE(parse_nd(bad.data(), m, c, &nd));
  // Cut anywhere: never parsed past the frame.
  for (size_t k = 0; k < m; ++k) {
    std::vector<uint8_t> cut(p, p + k);
    const Classified cc = classify(cut.data(), k, Identity{kA, kIp6A, {}});
    if (cc.kind == Kind::kNd) {
      EXPECT_FALSE(parse_nd(cut.data(), k, cc, &nd));
    }
  }
}

TEST(FramesTest, Icmpv6EchoReplyHasSwappedAddressesAndAValidChecksum) {
  // An echo request from A to B, 16 bytes of data, built from an advertisement's frame.
  uint8_t p[128];
  write_nd_advert(p, L2{kB, kA, 0, 0}, kIp6A, kIp6B);
  uint8_t* ip6 = p + 14;
  uint8_t* icmp = ip6 + 40;
  ip6[5] = 8 + 16;
  ip6[7] = 60;
  std::memset(icmp, 0, 24);
  icmp[0] = kIcmpv6EchoRequest;
  icmp[4] = 0x12;
  for (int i = 0; i < 16; ++i) icmp[8 + i] = uint8_t(i * 7);
  const size_t n = 14 + 40 + 24;
  // Its checksum, by the independent sum.
  const uint16_t ck = uint16_t(~ones_sum_ipv6(ip6));
  icmp[2] = uint8_t(ck >> 8);
  icmp[3] = uint8_t(ck);
  const Classified c = classify(p, n, b6_identity());
  ASSERT_EQ(c.kind, Kind::kIcmpEcho);
  make_echo_reply(p, n, c, kB);
  EXPECT_EQ(std::memcmp(p, kA.data(), 6), 0);
  EXPECT_EQ(std::memcmp(p + 6, kB.data(), 6), 0);
  EXPECT_EQ(wire::IpAddr::from_bytes(ip6 + 8), kIp6B);
  EXPECT_EQ(wire::IpAddr::from_bytes(ip6 + 24), kIp6A);
  EXPECT_EQ(icmp[0], kIcmpv6EchoReply);
  EXPECT_EQ(ones_sum_ipv6(ip6), 0xffff);
  EXPECT_EQ(icmp[4], 0x12);
  EXPECT_EQ(icmp[8 + 15], uint8_t(15 * 7));
}

TEST(FramesTest, RandomFramesNeverReadOutOfBounds) {
  // Every prefix of real frames and random bytes: classify and parse_arp stay inside the
  // buffer (ASan watches the heap copies).
  std::mt19937 rng(7);
  std::vector<std::vector<uint8_t>> seeds = {roce_frame(false), roce_frame(true)};
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> f = seeds[i % 2];
    f.resize(rng() % (f.size() + 1));
    for (size_t k = 0; k < f.size(); ++k)
      if (rng() % 16 == 0) f[k] = static_cast<uint8_t>(rng());
    std::vector<uint8_t> heap(f);  // exact size, so an over-read is caught
    Classified c = classify(heap.data(), heap.size(), b_identity());
    if (c.kind == Kind::kRoceV2) {
      EXPECT_LE(c.payload + c.payload_len, heap.data() + heap.size());
    }
    Arp a;
    if (c.kind == Kind::kArp) parse_arp(heap.data(), heap.size(), c, &a);
  }
}

}  // namespace
}  // namespace uroce::dpdk
