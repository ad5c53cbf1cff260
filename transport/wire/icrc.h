// The RoCEv2 invariant CRC (IBTA Annex A17.3.3): a CRC-32 (the Ethernet polynomial) over 64 bits
// of ones standing in for the LRH, the IPv4 header with TOS, TTL and header checksum masked to
// ones, the UDP header with its checksum masked to ones, the BTH with its resv8a byte masked to
// ones, and everything up to the ICRC. It is transmitted least significant byte first. Over IPv6
// the IPv6 header takes the IPv4 header's place, with Traffic Class, Flow Label and Hop Limit
// masked to ones (Ipv6UdpFraming below).
//
// The port layers own it: only they know the IP and UDP headers the packet travels in.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "transport/wire/ip.h"

namespace uroce::wire {

// Everything of the IPv4/UDP framing that the ICRC covers and that is not masked.
struct Ipv4UdpFraming {
  uint32_t src_ip = 0;  // host byte order
  uint32_t dst_ip = 0;  // host byte order
  uint16_t ip_id = 0;
  bool dont_fragment = true;
  uint16_t src_port = 0;
  uint16_t dst_port = 4791;
};

// Everything of the IPv6/UDP framing that the ICRC covers and that is not masked. IPv6 has no
// Identification field, so unlike IPv4 a receiver knows every covered field and can check the ICRC
// exactly. The IPv6 Payload Length and the UDP length come from the IB packet's length; the Next
// Header is UDP (no extension headers).
struct Ipv6UdpFraming {
  IpAddr src;  // an IPv4-mapped address here is covered as those 16 bytes, as a GID would be
  IpAddr dst;
  uint16_t src_port = 0;
  uint16_t dst_port = 4791;
};

// Which CRC-32 routine the ICRC runs on this CPU (icrc.cc says why it is not always ISA-L's own
// choice); for diagnostics and benchmarks.
const char* icrc_implementation();

// The CRC-32 routines the ICRC can run on (UROCE_ICRC, docs/configuration.md). All compute the
// same value; they differ in speed, which depends on the host (docs/performance.md).
enum class IcrcRoutine : uint8_t {
  kAuto,    // kPclmul where it exists, else kIsal
  kPclmul,  // ISA-L's 128-bit PCLMULQDQ routine (by8_02 with AVX, else by8)
  kIsal,    // ISA-L's own dispatch: the widest routine the CPU has (AVX-512 where present)
  kZlib,    // zlib's crc32: the reference, a table-driven loop (several times slower)
};
// "auto" (or empty), "pclmul", "isal", "zlib"; nothing for any other text.
std::optional<IcrcRoutine> parse_icrc_routine(std::string_view s);
// Whether `r` can run on this CPU with this libisal (kPclmul needs both; the others always can).
bool icrc_routine_available(IcrcRoutine r);
// Makes every ICRC computed from now on, in every thread, use `r`. Returns false, changing
// nothing, when it is not available. Meant for start-up, before packets flow: a packet whose CRC
// is being computed meanwhile finishes on either routine (they agree).
bool select_icrc_routine(IcrcRoutine r);

// ICRC of one IB packet (`ib` = BTH..payload+pad, without the ICRC) in the given framing. The
// value is returned so that storing it little-endian (le32) reproduces the wire bytes. A packet
// in two pieces is `ib` (at least the BTH) followed by `more` (a payload sent from where it
// lies, transport::TxBuf::ext).
uint32_t icrc(const Ipv4UdpFraming& f, std::span<const uint8_t> ib, std::span<const uint8_t> more);
inline uint32_t icrc(const Ipv4UdpFraming& f, std::span<const uint8_t> ib) {
  return icrc(f, ib, {});
}

// The same over UDP/IPv6: the LRH stand-in, the 40-byte IPv6 header with Traffic Class, Flow
// Label and Hop Limit masked to ones, the UDP header with its checksum masked, then the IB packet
// as above.
uint32_t icrc(const Ipv6UdpFraming& f, std::span<const uint8_t> ib, std::span<const uint8_t> more);
inline uint32_t icrc(const Ipv6UdpFraming& f, std::span<const uint8_t> ib) {
  return icrc(f, ib, {});
}

// ICRC of a RoCE v1 packet (IBTA Annex A16: a GRH, no IP/UDP) whose GIDs are the IPv4-mapped
// ::ffff:src_ip and ::ffff:dst_ip: the LRH stand-in, the GRH with TClass, FlowLabel and HopLmt
// masked to ones (IBTA 7.8.1), then the IB packet as for RoCEv2.
uint32_t icrc_grh(uint32_t src_ip, uint32_t dst_ip, std::span<const uint8_t> ib,
                  std::span<const uint8_t> more);
inline uint32_t icrc_grh(uint32_t src_ip, uint32_t dst_ip, std::span<const uint8_t> ib) {
  return icrc_grh(src_ip, dst_ip, ib, {});
}

// ICRC over a complete IPv4 packet (IP header at ip[0], ICRC in the last 4 bytes not included in
// `ip`): used by the DPDK port and by the known-answer tests on captured frames.
uint32_t icrc_ipv4(std::span<const uint8_t> ip_packet_without_icrc);
// The same for a complete IPv6 packet (IPv6 header at ip[0], UDP right behind it: a packet with
// extension headers is not RoCEv2 as uroce speaks it and simply gets an ICRC that will not match).
// The Version nibble, Payload Length, Next Header and addresses are covered as they are in `ip`.
uint32_t icrc_ipv6(std::span<const uint8_t> ip_packet_without_icrc);

// Verification when the receiver cannot see the IP Identification field (a kernel UDP socket
// never shows it, and peers put arbitrary values there: rxe counts up, RNICs use others). The
// CRC is affine in the 16 ID bits, so this checks whether *some* ID makes `received` valid and
// returns that ID. A random corruption passes with probability 2^-16 instead of 2^-32; see
// docs/wire-format.md for the trade-off.
bool icrc_matches_some_ip_id(const Ipv4UdpFraming& f, std::span<const uint8_t> ib,
                             uint32_t received, uint16_t* ip_id_out);

inline uint32_t load_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline void store_le32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
  p[2] = uint8_t(v >> 16);
  p[3] = uint8_t(v >> 24);
}

}  // namespace uroce::wire
