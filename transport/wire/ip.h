// An IP address of either family, in the form RoCEv2 uses for a GID: 16 bytes in network order,
// an IPv4 address stored IPv4-mapped (::ffff:a.b.c.d, IBTA Annex A17.4.5.1; RFC 4291 2.5.5.2).
//
// It is the groundwork for the IPv6 underlay (issue 34): today the rest of uroce still carries
// IPv4 addresses as host-order uint32_t, and only the ICRC (icrc.h, Ipv6UdpFraming) takes this
// type. It is trivially copyable and has no padding, so it can live in packet metadata and be
// copied with memcpy; it never allocates (to_string() aside).
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace uroce::wire {

struct IpAddr {
  // The unspecified IPv6 address "::" (not an IPv4 one: IpAddr(0u) is ::ffff:0.0.0.0).
  constexpr IpAddr() = default;
  // An IPv4 address in host byte order, stored IPv4-mapped.
  constexpr explicit IpAddr(uint32_t v4_host) {
    b_[10] = b_[11] = 0xff;
    b_[12] = uint8_t(v4_host >> 24);
    b_[13] = uint8_t(v4_host >> 16);
    b_[14] = uint8_t(v4_host >> 8);
    b_[15] = uint8_t(v4_host);
  }
  // 16 bytes in network order: an IPv6 address, a GID, or an IPv4-mapped address as received.
  constexpr explicit IpAddr(std::span<const uint8_t, 16> network) {
    for (size_t i = 0; i < 16; ++i) b_[i] = network[i];
  }
  constexpr explicit IpAddr(const std::array<uint8_t, 16>& network) : b_(network) {}
  // The 16 bytes at `p` (a GID or an IPv6 header field inside a packet).
  static IpAddr from_bytes(const uint8_t* p) { return IpAddr(std::span<const uint8_t, 16>(p, 16)); }

  // IPv4-mapped (::ffff:0:0/96), i.e. an IPv4 address; v4() is then meaningful.
  constexpr bool is_v4() const {
    if (std::is_constant_evaluated()) {
      for (size_t i = 0; i < 10; ++i)
        if (b_[i]) return false;
      return b_[10] == 0xff && b_[11] == 0xff;
    }
    // Two loads and two compares: the engine asks this of every packet it sends and receives
    // (GCC turns the byte loop into twelve compare-and-branch pairs).
    // The bytes 00 00 ff ff whatever the host's byte order.
    const uint8_t mapped_mid[4] = {0, 0, 0xff, 0xff};
    uint64_t hi;
    uint32_t mid, want_mid;
    std::memcpy(&hi, b_.data(), 8);
    std::memcpy(&mid, b_.data() + 8, 4);
    std::memcpy(&want_mid, mapped_mid, 4);
    return hi == 0 && mid == want_mid;
  }
  // The IPv4 address in host byte order: the low 32 bits, whatever the family (check is_v4()).
  constexpr uint32_t v4() const {
    return uint32_t(b_[12]) << 24 | uint32_t(b_[13]) << 16 | uint32_t(b_[14]) << 8 | b_[15];
  }
  constexpr const std::array<uint8_t, 16>& bytes() const { return b_; }
  const uint8_t* data() const { return b_.data(); }

  // "10.0.0.1" for an IPv4-mapped address (not "::ffff:10.0.0.1"), RFC 5952 text otherwise
  // (inet_ntop's: "fe80::1", "2001:db8::a:b").
  std::string to_string() const;
  // Dotted-quad IPv4 ("10.0.0.1", exactly four decimal parts) or IPv6 text (any form inet_pton
  // takes, "::ffff:10.0.0.1" included, which is then is_v4()). No zone ("%eth0"), no brackets,
  // no surrounding space: nothing for anything else.
  static std::optional<IpAddr> parse(std::string_view s);

  // Byte order: the network-order bytes compared lexicographically, so IPv4 addresses sort as
  // their host-order values do, and all of them together (inside ::ffff:0:0/96).
  friend constexpr bool operator==(const IpAddr&, const IpAddr&) = default;
  friend constexpr auto operator<=>(const IpAddr&, const IpAddr&) = default;

 private:
  std::array<uint8_t, 16> b_{};
};

static_assert(sizeof(IpAddr) == 16 && alignof(IpAddr) == 1);
static_assert(std::is_trivially_copyable_v<IpAddr>);
static_assert(std::is_standard_layout_v<IpAddr>);

}  // namespace uroce::wire

// Inline: address tables (peers, routes) hash on lookups. The two halves mixed by a
// multiply-xorshift (splitmix64's finaliser), so IPv4-mapped addresses, which differ only in their
// low 4 bytes, still spread over every bit.
template <>
struct std::hash<uroce::wire::IpAddr> {
  size_t operator()(const uroce::wire::IpAddr& a) const noexcept {
    uint64_t hi, lo;
    std::memcpy(&hi, a.data(), 8);
    std::memcpy(&lo, a.data() + 8, 8);
    uint64_t x = hi * 0x9e3779b97f4a7c15ull ^ lo;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return size_t(x ^ (x >> 31));
  }
};
