// The RDMA IP CM Service (IBTA vol. 1 Annex A11): how an IP address and port become an IB CM
// connection. The service ID names the port space and the port (A11.2.1: 0x0000000001PPNNNN,
// PP the IP protocol, NNNN the port), and the first 36 bytes of a REQ's (and SIDR REQ's) private
// data carry the IP addresses and the source port (A11.2.2, table 337). This is what Linux's
// rdma_cm sends and checks, so a uroce process and a kernel CM (Linux rxe) understand each other.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "wire/ip.h"

namespace uroce::cm {

// Port spaces, as librdmacm's enum rdma_port_space numbers them (value = 0x0100 | IP protocol
// for TCP and UDP); the service ID is (port space << 16) | port.
inline constexpr uint16_t kPsTcp = 0x0106;
inline constexpr uint16_t kPsUdp = 0x0111;
inline constexpr uint16_t kPsIpoib = 0x0002;

inline constexpr uint64_t service_id(uint16_t port_space, uint16_t port) {
  return (uint64_t{port_space} << 16) | port;
}
inline constexpr uint16_t service_port(uint64_t sid) {
  return static_cast<uint16_t>(sid);
}
inline constexpr uint16_t service_port_space(uint64_t sid) {
  return static_cast<uint16_t>(sid >> 16);
}
// True for a service ID of the IP CM service (A11.2.1): bits 63..32 zero, bits 31..24 = 0x01.
inline constexpr bool is_ip_service_id(uint64_t sid) {
  return (sid >> 24) == 0x01;
}

// The private-data header (A11.2.2): version byte (major 0, minor 0), IP version in the high
// nibble of the second byte (4 or 6), the source port, then the source and destination addresses
// in 16 bytes each: an IPv6 address as it is, an IPv4 address in the last 4 of its 16 bytes with
// the first 12 zero (A11.2.2.1; not the IPv4-mapped form, ::ffff:a.b.c.d).
inline constexpr size_t kIpCmHeaderBytes = 36;
inline constexpr uint8_t kIpCmVersion = 0x00;

struct IpCmHeader {
  uint8_t ip_version = 4;  // 4: src and dst are IPv4 (is_v4()); 6: IPv6
  uint16_t src_port = 0;   // host order
  wire::IpAddr src{};
  wire::IpAddr dst{};
};

// The header followed by `user` (the consumer's private data). Returns nullopt when the result
// would not fit `field_len` bytes (92 for a REQ, 216 for a SIDR REQ), or when an address is not
// of the header's IP version (an IPv4 one in a version 6 header, or the reverse).
std::optional<std::vector<uint8_t>> make_ip_private_data(const IpCmHeader& h,
                                                         std::span<const uint8_t> user,
                                                         size_t field_len);
// Parses the header at the front of a REQ's or SIDR REQ's private data. nullopt when the
// version is not 0 or the IP version neither 4 nor 6. A version 6 header's addresses are taken
// as they are (an IPv4-mapped one then reads as IPv4: the kernel's CM sends none).
std::optional<IpCmHeader> parse_ip_private_data(std::span<const uint8_t> pd);

// "10.0.0.1:7471", "[fd00::1]:7471" (RFC 5952's form of an address with a port): for the log.
std::string format_ip_port(const wire::IpAddr& ip, uint16_t port);

}  // namespace uroce::cm
