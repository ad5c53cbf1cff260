// Tests of IpAddr (transport/wire/ip.h): the IPv4-mapped form, text both ways, order and hash.
#include "transport/wire/ip.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <unordered_set>
#include <vector>

namespace uroce::wire {
namespace {

TEST(IpAddr, Ipv4IsStoredMapped) {
  const IpAddr a(0x0a000102u);  // 10.0.1.2
  const std::array<uint8_t, 16> want = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 1, 2};
  EXPECT_EQ(a.bytes(), want);
  EXPECT_TRUE(a.is_v4());
  EXPECT_EQ(a.v4(), 0x0a000102u);
  EXPECT_EQ(a.to_string(), "10.0.1.2");
  // The same bytes from a GID make the same address.
  EXPECT_EQ(IpAddr::from_bytes(want.data()), a);
  EXPECT_EQ(IpAddr(std::span<const uint8_t, 16>(want)), a);
  EXPECT_TRUE(IpAddr(0u).is_v4());
  EXPECT_EQ(IpAddr(0u).to_string(), "0.0.0.0");
  EXPECT_EQ(IpAddr(0xffffffffu).to_string(), "255.255.255.255");
}

TEST(IpAddr, DefaultIsTheUnspecifiedIpv6Address) {
  const IpAddr a;
  EXPECT_FALSE(a.is_v4());
  EXPECT_EQ(a.to_string(), "::");
  EXPECT_NE(a, IpAddr(0u));
  EXPECT_EQ(IpAddr::parse("::"), a);
}

TEST(IpAddr, Ipv6Addresses) {
  const std::array<uint8_t, 16> b = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const IpAddr a(b);
  EXPECT_FALSE(a.is_v4());
  EXPECT_EQ(a.to_string(), "2001:db8::1");
  EXPECT_EQ(IpAddr::parse("2001:db8::1"), a);
  EXPECT_EQ(IpAddr::parse("2001:0DB8:0:0:0:0:0:1"), a);
  // Near misses of the mapped prefix are IPv6: ::ffff:0:0/96 exactly.
  for (int i = 0; i < 12; ++i) {
    std::array<uint8_t, 16> m = IpAddr(0x0a000001u).bytes();
    m[i] ^= 1;
    EXPECT_FALSE(IpAddr(m).is_v4()) << i;
  }
  // IPv4-compatible (::a.b.c.d, deprecated) is not IPv4-mapped.
  EXPECT_FALSE(IpAddr::parse("::10.0.0.1")->is_v4());
  // A link-local GID as rdma-core shows the default GID of a port.
  const auto ll = IpAddr::parse("fe80::5054:ff:fec0:2");
  ASSERT_TRUE(ll);
  EXPECT_EQ(ll->bytes()[0], 0xfe);
  EXPECT_EQ(ll->to_string(), "fe80::5054:ff:fec0:2");
}

TEST(IpAddr, ParseBothFamilies) {
  EXPECT_EQ(IpAddr::parse("192.0.2.1"), IpAddr(0xc0000201u));
  // The mapped text form is the same address as the dotted quad.
  EXPECT_EQ(IpAddr::parse("::ffff:192.0.2.1"), IpAddr(0xc0000201u));
  EXPECT_EQ(IpAddr::parse("::ffff:c000:201"), IpAddr(0xc0000201u));
  for (const char* s :
       {"", " 10.0.0.1", "10.0.0.1 ", "10.0.0", "10.1", "10.0.0.256", "0x0a.0.0.1", "10.0.0.1.",
        "1::2::3", "fe80::1%eth0", "[::1]", "::g", "localhost", "2001:db8:0:0:0:0:0:0:1"}) {
    EXPECT_FALSE(IpAddr::parse(s)) << '"' << s << '"';
  }
  // A NUL inside the view must not cut the text short.
  EXPECT_FALSE(IpAddr::parse(std::string_view("10.0.0.1\0x", 10)));
  // Longer than any address text: refused without reading past the view.
  EXPECT_FALSE(IpAddr::parse(std::string(100, '1')));
  // The longest IPv6 text there is.
  const auto longest = IpAddr::parse("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255");
  ASSERT_TRUE(longest);
  EXPECT_FALSE(longest->is_v4());
}

TEST(IpAddr, TextRoundTrips) {
  for (const char* s : {"10.0.0.1", "127.0.0.1", "::1", "fe80::1", "2001:db8::a:b", "ff02::1:2",
                        "fd00:1:2:3:4:5:6:7"}) {
    const auto a = IpAddr::parse(s);
    ASSERT_TRUE(a) << s;
    EXPECT_EQ(a->to_string(), s);
    EXPECT_EQ(IpAddr::parse(a->to_string()), a);
  }
}

TEST(IpAddr, OrderFollowsTheNetworkBytes) {
  // IPv4 addresses order as their host-order values.
  EXPECT_LT(IpAddr(0x0a000001u), IpAddr(0x0a000002u));
  EXPECT_LT(IpAddr(0x0a0000ffu), IpAddr(0x0a000100u));
  EXPECT_LT(IpAddr(0x7fffffffu), IpAddr(0x80000000u));
  // IPv4-mapped sorts after ::1 and before global IPv6 addresses.
  EXPECT_LT(*IpAddr::parse("::1"), IpAddr(0u));
  EXPECT_LT(IpAddr(0xffffffffu), *IpAddr::parse("2001:db8::1"));
  const std::set<IpAddr> s = {IpAddr(2u), IpAddr(1u), *IpAddr::parse("::1"), IpAddr(1u)};
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(*s.begin(), *IpAddr::parse("::1"));
}

TEST(IpAddr, HashSpreadsMappedAddresses) {
  std::unordered_set<IpAddr> set;
  std::unordered_set<size_t> hashes;
  for (uint32_t i = 0; i < 4096; ++i) {
    set.insert(IpAddr(0x0a000000u + i));
    hashes.insert(std::hash<IpAddr>{}(IpAddr(0x0a000000u + i)) & 0xffff);
  }
  EXPECT_EQ(set.size(), 4096u);
  EXPECT_TRUE(set.contains(IpAddr(0x0a000123u)));
  EXPECT_FALSE(set.contains(IpAddr(0x0b000123u)));
  // Low 16 bits of the hash: a table of 64 Ki buckets sees no clustering (about 120 collisions
  // are expected from 4096 random values; a weak mix gives thousands).
  EXPECT_GT(hashes.size(), 3800u);
  EXPECT_EQ(std::hash<IpAddr>{}(IpAddr(7u)), std::hash<IpAddr>{}(*IpAddr::parse("0.0.0.7")));
}

TEST(IpAddr, CopiesAsBytes) {
  // It travels in packet metadata: memcpy in and out must give the same address.
  const IpAddr a = *IpAddr::parse("2001:db8::42");
  uint8_t raw[16];
  std::memcpy(raw, &a, sizeof a);
  IpAddr b;
  std::memcpy(&b, raw, sizeof b);
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::memcmp(raw, a.data(), 16), 0);
  static_assert(IpAddr(0x01020304u).v4() == 0x01020304u);
  static_assert(IpAddr(0x01020304u).is_v4());
}

}  // namespace
}  // namespace uroce::wire
